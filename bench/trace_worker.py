"""A drain with every store call of the worker timed: which round trip the time goes to.

    python bench/trace_worker.py --backend postgres --jobs 20000 [--concurrency 8]

Enqueues ``--jobs`` no-op jobs, then runs one worker IN THIS PROCESS (the same Worker class the
CLI runs) with its backend's methods wrapped to count and time every call, drains the queue and
prints, per method: calls, jobs per call, total seconds, and the median and p95 of one call; then
the share of the drain's wall time the producer spent claiming, waiting for a push signal, or
waiting for a free slot. The wrapping costs a few microseconds per call.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log, percentile
from bench.throughput import BACKENDS, counts, store

METHODS = (
    "jobs_claim",
    "jobs_ack",
    "jobs_wait",
    "leases_renew",
    "leases_lapsed",
    "leases_reap",
    "jobs_expire",
    "workers_beat",
)


class Trace:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = collections.defaultdict(list)
        self.sizes: dict[str, list[int]] = collections.defaultdict(list)
        self.events: list[tuple[str, float, float, int]] = []  # name, start, end, jobs (wall)

    def wrap(self, obj: Any, name: str, size: Callable[[Any, Any], int]) -> None:
        inner = getattr(obj, name)

        def timed(params: Any) -> Any:
            t0 = time.perf_counter()
            out = inner(params)
            dt = time.perf_counter() - t0
            with self.lock:
                self.times[name].append(dt)
                self.sizes[name].append(size(params, out))
                self.events.append((name, time.time() - dt, time.time(), size(params, out)))
            return out

        setattr(obj, name, timed)


def _size(name: str) -> Callable[[Any, Any], int]:
    if name == "jobs_claim":
        return lambda p, out: len(out)
    if name == "jobs_ack":
        return lambda p, out: len(p.outcomes)
    if name == "leases_renew":
        return lambda p, out: len(p.jobs)
    return lambda p, out: 0


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, noop

    app.migrate()
    n = args.jobs
    calls = [((), {}) for _ in range(1000)]
    for i in range(0, n, 1000):
        noop.enqueue_many(calls[: min(1000, n - i)])
    log(f"{args.backend}: {n} jobs pending; draining with a traced in-process worker")
    backend = app.backend
    trace = Trace()
    for name in METHODS:
        if hasattr(backend, name):
            trace.wrap(backend, name, _size(name))
    # the producer's wait for a free slot
    worker = app.worker(queues=["bench"], concurrency=args.concurrency, prefetch=args.prefetch)
    slot_waits: list[float] = []
    event = worker._slot_freed
    real_wait = event.wait

    def slot_wait(timeout: float | None = None) -> bool:
        t0 = time.perf_counter()
        ok = real_wait(timeout)
        if threading.current_thread().name == "jobyard-producer":
            slot_waits.append(time.perf_counter() - t0)
        return ok

    event.wait = slot_wait  # type: ignore[method-assign]
    t_start = time.perf_counter()
    worker.start()
    first = None
    while True:
        c = counts(app)
        now = time.perf_counter()
        if first is None and c.get("pending", n) < n:
            first = now
        if c.get("completed", 0) + c.get("failed", 0) >= n:
            break
        time.sleep(0.02)
    wall = now - (first or t_start)
    with trace.lock:  # the drain's figures, before the latency samples add theirs
        times = {k: list(v) for k, v in trace.times.items()}
        sizes = {k: list(v) for k, v in trace.sizes.items()}
    phases = latency_phases(args, trace) if args.latency else []
    worker.stop(grace=5)
    app.close()

    print(f"# jobyard {args.backend}: traced drain of {n} jobs, concurrency {args.concurrency}")
    print(f"drain: {n / wall:.0f} jobs/s  # in-process worker, {wall:.2f}s")
    for name in METHODS:
        t = times.get(name)
        if not t:
            continue
        per = f", {statistics.mean(sizes[name]):.1f} jobs/call" if any(sizes[name]) else ""
        print(
            f"{name}: {len(t)} calls{per}, total {sum(t):.2f}s "
            f"({100 * sum(t) / wall:.0f}% of the drain), "
            f"median {statistics.median(t) * 1e3:.2f} ms, p95 {percentile(t, 95) * 1e3:.2f} ms"
        )
    if slot_waits:
        print(
            f"producer waiting for a free slot: {len(slot_waits)} waits, total "
            f"{sum(slot_waits):.2f}s ({100 * sum(slot_waits) / wall:.0f}% of the drain)"
        )
    empty = sum(1 for s in sizes.get("jobs_claim", []) if s == 0)
    print(f"empty claims: {empty}")
    if phases:
        print(f"# idle latency, {len(phases)} samples: median (p95) ms of each step")
        for i, label in enumerate(LATENCY_STEPS):
            col = [p[i] * 1000 for p in phases]
            print(f"{label}: {statistics.median(col):.2f} ({percentile(col, 95):.2f})")


LATENCY_STEPS = (
    "enqueue call (insert + push signal)",
    "enqueue returned -> claim returned (wake-up and claim)",
    "claim returned -> handler started",
    "total enqueue -> handler started",
)


def latency_phases(args: argparse.Namespace, trace: Trace) -> list[tuple[float, ...]]:
    """Idle pick-up of one job at a time, cut into its steps by the traced store calls. An idle
    worker's claim waits for the push signal and claims in one call (``JobsClaimParams.wait``),
    so the wake-up is inside the claim. The producer runs in this process: for the steps with
    the worker in a process of its own, see ``latency_steps.py``."""
    import random

    from bench.apps import stamp

    time.sleep(1.0)
    out: list[tuple[float, ...]] = []
    for _ in range(args.latency):
        time.sleep(random.uniform(0.01, 0.05))
        with trace.lock:
            mark = len(trace.events)
        t0 = time.time()
        handle = stamp.enqueue()
        t1 = time.time()
        started = float(handle.result(timeout=30, poll=0.005))
        with trace.lock:
            events = trace.events[mark:]
        claim = next((e for e in events if e[0] == "jobs_claim" and e[3] > 0), None)
        if claim is None:
            continue
        out.append((t1 - t0, claim[2] - t1, started - claim[2], started - t0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--shared-redis", action="store_true")
    parser.add_argument("--latency", type=int, default=0, help="then N idle latency samples")
    args = parser.parse_args()
    with store(args.backend, args.shared_redis) as url:
        run(args, url)


if __name__ == "__main__":
    main()
