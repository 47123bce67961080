"""What ``jobyard retry --all`` costs: re-driving a dead letter of ``--failed`` jobs, one
store move per batch (``jobs_retry_many``, as the CLI and the dashboard do) against one
``app.retry`` per job (as they did before), side by side.

    python bench/retry_all.py --backend {sqlite,postgres,redis} [--failed 5000] [--rounds 3]

Each round fills the dead letter of a fresh queue (``--failed`` jobs enqueued, claimed and
failed through the store, no worker), then re-drives it one way; the two ways alternate, so
both see the same machine. The last run is the ``jobyard retry --all`` command itself, timed
from its start to its exit (the interpreter's start included). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import jobyard
from bench._common import log
from bench.throughput import store
from jobyard import _bulk
from jobyard.backends.base import JobsAckParams, JobsClaimParams, Outcome

app = jobyard.App(os.environ.get("JOBYARD_BENCH_URL", "memory://"))


@app.job(queue="billing", max_attempts=1)
def charge(order_id: int) -> None:
    """Fails (the dead letter is filled without running it)."""
    raise RuntimeError("card declined")


def fill(queue: str, n: int) -> None:
    """``n`` failed jobs in ``queue``: enqueued, claimed and failed through the store."""
    fn = charge.options(queue=queue)
    for start in range(0, n, 5000):
        fn.enqueue_many([((i,), {}) for i in range(start, min(n, start + 5000))])
    left = n
    while left:
        claimed = app.backend.jobs_claim(JobsClaimParams("bench", [queue], min(1000, left)))
        outcomes = [Outcome(c.id, c.token, "failed", error="ValueError: declined") for c in claimed]
        app.backend.jobs_ack(JobsAckParams(outcomes))
        left -= len(claimed)


def one_by_one(flt: _bulk.DeadFilter) -> int:
    """The retry as it was: the same walk, one ``app.retry`` per job."""
    done = 0
    for batch in _bulk.batches(app, flt):
        for rec in batch:
            app.retry(rec.id)
            done += 1
    return done


def batched(flt: _bulk.DeadFilter) -> int:
    """The retry as it is: one ``jobs_retry_many`` per batch."""
    return _bulk.retry(app, flt).done


def cli(url: str, queue: str) -> float:
    """Seconds of ``jobyard retry bench.retry_all:app --all --queue Q``, start to exit."""
    env = {**os.environ, "JOBYARD_BENCH_URL": url, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "jobyard", "retry", "bench.retry_all:app", "--all",
            "--queue", queue]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="sqlite")
    parser.add_argument("--failed", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    ways = {"one app.retry per job (before)": one_by_one, "jobs_retry_many per batch": batched}
    times: dict[str, list[float]] = {w: [] for w in ways}
    with store(args.backend, shared_redis=False) as url:
        global app
        app.close()
        app.url = url
        if args.backend == "postgres":
            app.migrate()
        for r in range(args.rounds):
            for way, run in ways.items():
                queue = f"dead{len(times[way])}{'ab'[list(ways).index(way)]}"
                fill(queue, args.failed)
                t0 = time.perf_counter()
                done = run(_bulk.DeadFilter(queue=queue))
                times[way].append(time.perf_counter() - t0)
                assert done == args.failed, (way, done)
                log(f"round {r + 1}: {way}: {times[way][-1]:.2f} s")
        fill("dead-cli", args.failed)
        whole = cli(url, "dead-cli")
        left = sum(s.counts.get("failed", 0) for s in app.stats(["dead-cli"]))
        assert left == 0, left
    print(f"\n{args.backend}: re-driving {args.failed:,} failed jobs, median of {args.rounds}:\n")
    print("| way | s | jobs/s | runs (s) |")
    print("|---|---:|---:|---|")
    for way, ts in times.items():
        m = statistics.median(ts)
        print(f"| {way} | {m:.2f} | {args.failed / m:,.0f} | {', '.join(f'{t:.2f}' for t in ts)} |")
    print(f"\n`jobyard retry --all --queue Q`, start to exit: {whole:.2f} s")


if __name__ == "__main__":
    main()
