"""Does SQLite's WAL auto-checkpoint land on the worker's hot path? A drain with every
``jobs_claim`` and ``jobs_ack`` timed, alternating two modes run after run on the same machine:

    python bench/sqlite_checkpoints.py [--jobs 20000] [--runs 3] [--concurrency 8]

- ``auto``: SQLite's default, as jobyard ran before issue 18 (the worker's store_tidy turned
  off here): the connection whose commit pushes the WAL past 1,000 pages checkpoints it inside
  that commit (a claim or an ack of the worker, an fsync included);
- ``maint``: jobyard now: the worker's maintenance checkpoints the WAL (``store_tidy``, PASSIVE,
  about once a second on its own thread) and the store's connections do not.

Per run and mode: the drain (jobs/s, from the jobs' own records), the p50/p99/max of one claim
and one ack (ms), how many of those calls took over 20 ms, and the WAL file's size at the end.
The worker runs in this process (the same Worker class as the CLI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log, percentile

SLOW = 0.020  # seconds: a call this long is a stall the slots feel


def drain(path: str, mode: str, jobs: int, concurrency: int) -> dict[str, Any]:
    import jobyard

    checkpoints: list[float] = []
    app = jobyard.App(f"sqlite:///{path}")

    @app.job(queue="bench")
    def noop() -> None:
        return None

    for i in range(0, jobs, 1000):
        noop.enqueue_many([((), {})] * min(1000, jobs - i))
    backend = app.backend
    times: dict[str, list[float]] = {"jobs_claim": [], "jobs_ack": []}
    # In WAL mode only a checkpoint writes the database file itself: a call during which its
    # mtime moved ran one (auto mode: inside that call's commit; maint mode: maybe beside it).
    during: list[float] = []
    for name, out in times.items():
        inner = getattr(backend, name)

        def timed(params: Any, _inner: Any = inner, _out: list[float] = out) -> Any:
            before = os.stat(path).st_mtime_ns
            t0 = time.perf_counter()
            try:
                return _inner(params)
            finally:
                took = time.perf_counter() - t0
                _out.append(took)
                if os.stat(path).st_mtime_ns != before:
                    during.append(took)

        setattr(backend, name, timed)
    if hasattr(backend, "store_tidy"):
        tidy = backend.store_tidy

        def timed_tidy(params: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return tidy(params)
            finally:
                checkpoints.append(time.perf_counter() - t0)

        backend.store_tidy = timed_tidy
    worker = app.worker(queues=["bench"], concurrency=concurrency)
    if mode == "auto":
        worker.maintenance.tidy_params = None  # no store_tidy: the commits checkpoint
    worker.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        stats = {s.queue: s.counts for s in app.stats()}
        if stats.get("bench", {}).get("completed", 0) >= jobs:
            break
        time.sleep(0.05)
    worker.stop(grace=5)
    done = app.jobs(queue="bench", status="completed", limit=1)
    first = min(
        (j.started_at for j in app.jobs(queue="bench", status="completed", limit=jobs)),
        default=None,
    )
    last = done[0].finished_at if done else None
    wall = (last - first).total_seconds() if first and last else float("nan")
    wal = os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
    app.close()
    calls = times["jobs_claim"] + times["jobs_ack"]
    return {
        "rate": jobs / wall,
        "claim": times["jobs_claim"],
        "ack": times["jobs_ack"],
        "slow": sum(1 for t in calls if t > SLOW),
        "during": during,
        "wal_mb": wal / 1e6,
        "checkpoint_ms": statistics.median(checkpoints) * 1000 if checkpoints else None,
    }


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.2f}" if values else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", "-c", type=int, default=8)
    args = parser.parse_args(argv)
    print(
        f"# sqlite: drain of {args.jobs} no-op jobs, -c {args.concurrency}, in-process worker; "
        "claim/ack ms p50 p99 max"
    )
    print(
        "mode   run  jobs/s   claim p50/p99/max        ack p50/p99/max   >20ms  wal MB  "
        "tidy ms  calls with a checkpoint: n, median ms, their share of the >20ms calls"
    )
    for run in range(args.runs):
        for mode in ("auto", "maint"):
            with tempfile.TemporaryDirectory(prefix="jobyard-ckpt-") as tmp:
                log(f"run {run + 1} {mode}")
                r = drain(f"{tmp}/bench.db", mode, args.jobs, args.concurrency)
            claim, ack = r["claim"], r["ack"]
            ckpt = "-" if r["checkpoint_ms"] is None else f"{r['checkpoint_ms']:.1f}"
            during = r["during"]
            slow_during = sum(1 for t in during if t > SLOW)
            print(
                f"{mode:6} {run + 1:3} {r['rate']:7.0f}   "
                f"{ms(claim, 50)}/{ms(claim, 99)}/{max(claim) * 1000:.1f}   "
                f"{ms(ack, 50)}/{ms(ack, 99)}/{max(ack) * 1000:.1f}   "
                f"{r['slow']:5}  {r['wal_mb']:6.1f}  {ckpt:>7}  "
                f"{len(during)}, {ms(during, 50)}, {slow_during}/{r['slow']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
