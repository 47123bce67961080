"""What the limits' state and the queues' stats cost a reader (``limits_stats`` and
``stats_get``: ``jobyard status``, the dashboard's overview, a ``/metrics`` scrape) when a
limited queue holds a large backlog (issue 20).

    python bench/limits_stats.py --backend {sqlite,postgres,redis,redis_cluster}
        [--pending 200000] [--samples 30] [--rounds 3] [--tidy] [--fair] [--compare SRC ...]

1. A fresh store per code tree (``--compare``: each a ``src`` directory, e.g. main's and a
   branch's; default this tree's), made as ``bench/throughput.py`` makes them (a temp file, a
   schema of database ``test``, a private redis-server) and filled by that tree's code:
   one queue, ``bulk``, with limits of its own (``max_concurrency=64``,
   ``rate_limit="1000/s"``, ``key_concurrency=2``) holding ``--pending`` pending jobs: half of
   them ``sms`` (job limits ``rate_limit="100/s"``, ``key_concurrency=1``,
   ``key_rate_limit="5/s"``) over 1,000 keys, a quarter ``mail`` (``rate_limit="10/s"``, no
   key), a quarter ``report`` (no limit, no key); then claims until the gate lets no more
   start (some keys and both job rates at their limit). With ``--fair`` the queue is fair
   too (its jobs take turns between keys: 1,001 keys, the keyless jobs one of them). With
   ``--tidy``, then the store's own
   housekeeping once (``store_tidy``, which every worker's maintenance runs: on PostgreSQL a
   vacuum of the partitions that grew, after which the counts read no heap page; without it,
   what a reader pays before any worker has tidied, e.g. a backlog enqueued while none runs).
2. In a process of its own per tree, on its store, the trees alternately, ``--rounds`` times:
   time ``--samples`` calls each of ``limits_stats`` and ``stats_get`` alone, the store reads
   of a ``/metrics`` scrape (``web.metrics.read_store``) and of the dashboard's overview
   (``web._data.overview``).

Prints ``name: value unit`` lines per tree: the median over the rounds of each round's p50 and
p95 (ms). Only the ratios between trees of one run mean something on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH = 2000
KEYS = 1000


def fill(url: str, pending: int, tidy: bool, fair: bool) -> None:
    """The backlog of step 1 (this tree's code)."""
    import jobyard
    from jobyard.backends.base import (
        JobLimits,
        JobsClaimParams,
        JobsInsertParams,
        LimitsSyncParams,
        NewJob,
        QueueLimits,
        Rate,
        StoreTidyParams,
    )

    app = jobyard.App(url)
    if url.startswith("postgres"):
        app.migrate()
    app.configure_queue(
        "bulk", max_concurrency=64, rate_limit="1000/s", key_concurrency=2, fair=fair
    )
    sms = QueueLimits(rate=Rate(100), key_concurrency=1, key_rate=Rate(5))
    mail = QueueLimits(rate=Rate(10))
    backend = app.backend
    backend.limits_sync(
        LimitsSyncParams([JobLimits("bulk", "sms", sms), JobLimits("bulk", "mail", mail)])
    )
    payload = '{"args":[],"kwargs":{}}'
    t0 = time.monotonic()
    rows: list[NewJob] = []
    for i in range(pending):
        if i % 2 == 0:
            rows.append(NewJob("sms", "bulk", payload, key=f"customer:{i // 2 % KEYS}"))
        else:
            rows.append(NewJob("mail" if i % 4 == 1 else "report", "bulk", payload))
        if len(rows) == BATCH or i == pending - 1:
            backend.jobs_insert(JobsInsertParams(rows))
            rows = []
    started = 0
    while claimed := backend.jobs_claim(JobsClaimParams("bench", ("bulk",), 64)):
        started += len(claimed)
        if started >= 64:
            break
    log(f"filled {pending:,} pending, {started} running, in {time.monotonic() - t0:.0f} s")
    if tidy:
        for line in backend.store_tidy(StoreTidyParams()):
            log(f"tidied: {line}")
    app.close()


def time_reads(url: str, samples: int) -> None:
    """Step 2 in this process: p50 and p95 of each read, as ``name: value ms`` lines."""
    import jobyard
    from jobyard.backends.base import LimitsStatsParams, StatsParams
    from jobyard.web import _data, metrics

    app = jobyard.App(url)
    reads = {
        "limits_stats": lambda: app.backend.limits_stats(LimitsStatsParams()),
        "stats_get": lambda: app.backend.stats_get(StatsParams()),  # as app.stats() asks
        "metrics_store": lambda: metrics.read_store(app),
        "overview_store": lambda: _data.overview(app, None, 3600.0, 60),
    }
    for fn in reads.values():  # warm: connections, prepared statements, scripts
        fn()
    for name, fn in reads.items():
        took = []
        for _ in range(samples):
            t0 = time.perf_counter()
            fn()
            took.append((time.perf_counter() - t0) * 1000)
        took.sort()
        print(f"{name}_p50: {statistics.median(took):.2f} ms", flush=True)
        print(f"{name}_p95: {took[int(0.95 * (len(took) - 1))]:.2f} ms", flush=True)
    app.close()


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite")
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tidy", action="store_true", help="store_tidy once after the fill")
    parser.add_argument("--fair", action="store_true", help="a fair queue")
    parser.add_argument("--compare", nargs="*", default=[str(ROOT / "src")])
    parser.add_argument("--fill", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--time", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        fill(args.fill, args.pending, args.tidy, args.fair)
        return
    if args.time:
        time_reads(args.time, args.samples)
        return
    from bench.throughput import store

    def child(src: str, *argv: str) -> str:
        env = {**os.environ, "PYTHONPATH": src}
        cmd = [sys.executable, __file__, *argv]
        return subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout

    with contextlib.ExitStack() as stack:
        # A store per tree, filled by that tree's code: each migrates its own schema. Redis:
        # a server of the run's own, so the old full read does not load the shared one.
        urls = {src: stack.enter_context(store(args.backend, False)) for src in args.compare}
        for src, url in urls.items():
            flags = ["--tidy"] * args.tidy + ["--fair"] * args.fair
            child(src, "--fill", url, "--pending", str(args.pending), *flags)
        figures: dict[str, dict[str, list[float]]] = {src: {} for src in args.compare}
        for r in range(args.rounds):
            order = args.compare[r % len(args.compare) :] + args.compare[: r % len(args.compare)]
            for src in order:
                out = child(src, "--time", urls[src], "--samples", str(args.samples))
                for line in out.splitlines():
                    name, value = line.split(":", 1)
                    figures[src].setdefault(name, []).append(float(value.split()[0]))
            log(f"round {r + 1} of {args.rounds}: load {os.getloadavg()[0]:.1f}")
        for src, by_name in figures.items():
            print(f"# {src}", flush=True)
            for name, values in by_name.items():
                runs = ", ".join(f"{v:.1f}" for v in values)
                print(f"{name}: {statistics.median(values):.2f} ms  # {runs}", flush=True)


if __name__ == "__main__":
    main()
