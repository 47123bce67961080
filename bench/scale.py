"""What jobyard costs as its store fills with finished jobs.

    python bench/scale.py --backend {sqlite,postgres,redis} [--first 20000 --backlog 300000]

Measured as a user would (the public API, ONE worker process ``-c 8``, no-op jobs), on one queue:

1. ``first``: enqueue N1 jobs and drain them (the store is empty);
2. ``backlog``: enqueue N2 more in the same queue and drain them;
3. ``after``: enqueue N1 again and drain them, with N1 + N2 finished jobs stored.

Each phase is enqueued while the queue is paused (``app.pause_queue``), then resumed, so the
worker drains a full queue; its rate is timed from the jobs' own records: from the earliest
``started_at`` among the phase's first jobs to the latest ``finished_at`` among its last jobs.

Printed (``name: value unit``): the drain of each phase and ``after / first``; idle
enqueue-to-start latency p50/p99 after phase 1 and after phase 3; ``app.stats()``, the newest 50
jobs (``app.jobs()``) and the newest 50 failed jobs (``app.jobs(status="failed")``), each the
median of a few calls with the store full (``stats`` right after the drain, when most jobs
completed within the last minute and are counted as such; ``stats idle`` a minute later); and
the store's size: PostgreSQL relation sizes and
dead tuples per partition, Redis memory per finished job, the SQLite file.

``--first`` / ``--backlog`` scale the run down (e.g. ``--first 5000 --backlog 50000``).
The store is made as in ``bench/throughput.py`` (PostgreSQL: a fresh schema in ``test``; Redis: a
private redis-server; SQLite: a temp file) and removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, log, percentile, psql, records_span
from bench.throughput import start_worker, stop_worker, store

BACKENDS = ("sqlite", "postgres", "redis")
EDGE = 40  # jobs at each end of a phase whose records time it


def enqueue(app: Any, noop: Any, n: int, batch: int = 1000) -> list[Any]:
    """N no-op jobs while the queue is paused; the handles of the first and last EDGE."""
    app.pause_queue("bench")
    handles: list[Any] = []
    done = 0
    calls = [((), {}) for _ in range(batch)]
    while done < n:
        size = min(batch, n - done)
        got = noop.enqueue_many(calls[:size])
        if done == 0:
            handles += got[:EDGE]
        done += size
        if done >= n:
            handles += got[-EDGE:]
    return handles


def drain(app: Any, noop: Any, n: int, timeout: float) -> float:
    """Enqueue n jobs, let the worker drain them; jobs/s from the jobs' records."""
    handles = enqueue(app, noop, n)
    first, last = handles[:EDGE], handles[EDGE:]
    app.pause_queue("bench", paused=False)
    deadline = time.monotonic() + timeout
    for h in last:
        h.result(timeout=max(deadline - time.monotonic(), 1.0), poll=0.05)
    # Jobs run in enqueue order (same priority and run_at order), c at a time: once the last
    # are done the phase is done; check that nothing is left behind anyway.
    while True:
        c = counts(app)
        if c.get("pending", 0) + c.get("running", 0) == 0:
            break
        if time.monotonic() > deadline:
            log("warning: jobs left pending or running")
            break
        time.sleep(0.1)
    return n / records_span(first, last)


def counts(app: Any) -> dict[str, int]:
    for s in app.stats(["bench"]):
        if s.queue == "bench":
            return dict(s.counts)
    return {}


def latency(stamp: Any, samples: int) -> list[float]:
    """Enqueue-to-start of one job at a time, the worker idle."""
    time.sleep(1.0)
    out: list[float] = []
    for _ in range(samples):
        time.sleep(random.uniform(0.01, 0.05))
        t0 = time.time()
        started = stamp.enqueue().result(timeout=30, poll=0.002)
        out.append((float(started) - t0) * 1000.0)
    return out


def median_ms(fn: Any, times: int = 7) -> float:
    fn()  # warm (prepared statements, script cache)
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(out)


def store_size(backend: str, url: str, app: Any, finished: int, baseline: int) -> None:
    if backend == "postgres":
        schema = url.split("schema=")[1]
        rows = psql(
            "SELECT c.relname, pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0),"
            " coalesce(s.n_dead_tup, 0) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
            f" WHERE n.nspname = '{schema}' AND c.relname LIKE 'jobs\\_%' AND c.relkind = 'r'"
            " ORDER BY 1",
            database="test",
        )
        for line in rows.split():
            name, size, live, dead = line.split("|")
            emit(
                f"size {name}",
                int(size) / 1e6,
                "MB",
                f"{int(live)} live, {int(dead)} dead tuples",
            )
    elif backend == "redis":
        used = app.backend.client.info("memory")["used_memory"]
        emit("redis used_memory", used / 1e6, "MB")
        emit("redis bytes per finished job", (used - baseline) / max(finished, 1), "B")
    elif backend == "sqlite":
        path = url.split("sqlite:///")[1]
        emit("sqlite file", os.path.getsize(path) / 1e6, "MB")


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, noop, stamp

    app.migrate()
    app.stats(["bench"])
    baseline = 0
    if args.backend == "redis":
        baseline = app.backend.client.info("memory")["used_memory"]
    log_path = Path(tempfile.mkstemp(prefix="jobyard-scale-worker-", suffix=".log")[1])
    worker = start_worker(args, url, log_path)
    try:
        log(f"{args.backend}: phase 1, {args.first} jobs on an empty store")
        first = drain(app, noop, args.first, args.drain_timeout)
        emit("drain first", first, "jobs/s", f"{args.first} jobs, empty store")
        lat = latency(stamp, args.latency_samples)
        emit("latency before p50", percentile(lat, 50), "ms")
        emit("latency before p99", percentile(lat, 99), "ms")

        log(f"{args.backend}: phase 2, {args.backlog} more jobs")
        rate = drain(app, noop, args.backlog, args.drain_timeout)
        emit("drain backlog", rate, "jobs/s", f"{args.backlog} jobs")

        stored = args.first + args.backlog + args.latency_samples
        log(f"{args.backend}: phase 3, {args.first} jobs with {stored} finished stored")
        after = drain(app, noop, args.first, args.drain_timeout)
        emit("drain after", after, "jobs/s", f"{args.first} jobs, {stored} finished stored")
        emit("drain after / first", after / first * 100.0, "%")
        lat = latency(stamp, args.latency_samples)
        emit("latency after p50", percentile(lat, 50), "ms")
        emit("latency after p99", percentile(lat, 99), "ms")

        finished = stored + args.first + args.latency_samples
        recent = sum(s.completed_last_minute for s in app.stats())
        emit(
            "stats", median_ms(lambda: app.stats()), "ms", f"{recent} completed in the last minute"
        )
        emit("list newest 50", median_ms(lambda: app.jobs(limit=50)), "ms")
        emit("list failed 50", median_ms(lambda: app.jobs(status="failed", limit=50)), "ms")
        if args.idle_stats:
            # app.stats() also counts the completions of the last minute, which right after a
            # drain are most of the store: measured again once they are older than a minute.
            log(f"{args.backend}: waiting 61 s for the last minute's completions to age")
            time.sleep(61)
            emit("stats idle", median_ms(lambda: app.stats()), "ms", f"{finished} finished stored")
        store_size(args.backend, url, app, finished, baseline)
    finally:
        stop_worker(worker)
        app.close()
        log_path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite")
    parser.add_argument("--first", type=int, default=20_000, help="jobs of phases 1 and 3")
    parser.add_argument("--backlog", type=int, default=300_000, help="jobs of phase 2")
    parser.add_argument("--concurrency", "-c", type=int, default=8)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    parser.add_argument("--url", default=None, help="use this store as is (not cleaned up)")
    parser.add_argument(
        "--no-idle-stats",
        dest="idle_stats",
        action="store_false",
        help="skip the second app.stats() timing after a minute's pause",
    )
    args = parser.parse_args(argv)
    # what bench.throughput.start_worker reads: one plain worker process of no-op jobs
    args.prefetch, args.worker_wrapper, args.shared_redis, args.pin = None, "", False, False
    args.processes, args.work_ms, args.use_async = 1, 0.0, False
    print(
        f"# jobyard {args.backend}: first={args.first} backlog={args.backlog}"
        f" concurrency={args.concurrency}",
        flush=True,
    )
    if args.url:
        run(args, args.url)
        return
    with store(args.backend, False) as url:
        run(args, url)


if __name__ == "__main__":
    main()
