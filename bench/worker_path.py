"""The worker's own Python per job, stage by stage, in one thread: no other thread competes for
the interpreter lock, so what is measured is the work itself, not the waits.

    python bench/worker_path.py --backend {sqlite,postgres,redis} [--jobs N] [--batch B]
        [--events]

A real store (made as ``throughput.py`` makes it) and the real worker, not started: this thread
plays each of its threads in turn, ``--batch`` jobs at a time, and times each stage on this
thread's CPU clock (``time.thread_time``: what the stage costs the process's cores, its system
calls included; the store server's own work is not counted):

- ``claim``: ``backend.jobs_claim`` of a batch (the round trip's client side: the driver, the
  reply read into ``ClaimedJob`` records);
- ``dispatch``: the producer's hand-off of the batch to the slots (the ledger, each job's
  context);
- ``run``: a handler thread's whole pipeline around a no-op handler, from taking the job to
  handing its outcome to the completer and freeing its slot;
- ``ack``: the completer's write of the batch's outcomes (``jobs_ack``' client side and the
  ledger's bookkeeping after it);
- ``renew``: one lease renewal of the batch, per job (the heartbeat renews a job every third of
  its lease: at 30 s leases, jobs shorter than 10 s are mostly never renewed).

``--events`` runs with a subscriber on the App's event bus (as ``app.metrics()`` or
``--metrics-port`` does), so each event is built and delivered.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log
from bench.throughput import store
from jobyard.backends.base import JobsClaimParams, LeasesRenewParams

STAGES = ("claim", "dispatch", "run", "ack", "renew")


def measure(app: Any, jobs: int, batch: int, rounds: int) -> dict[str, list[float]]:
    """Per stage, one figure per round: us of this thread's CPU per job."""
    from bench.apps import noop

    worker = app.worker(queues=["bench"], concurrency=batch)
    backend, completer = worker.backend, worker.completer
    out: dict[str, list[float]] = {s: [] for s in STAGES}
    clock = time.thread_time
    for _ in range(rounds):
        for i in range(0, jobs, 1000):
            noop.enqueue_many([((), {}) for _ in range(min(1000, jobs - i))])
        spent = dict.fromkeys(STAGES, 0.0)
        done = 0
        while True:
            t0 = clock()
            claimed = backend.jobs_claim(JobsClaimParams(worker.id, ("bench",), batch))
            t1 = clock()
            if not claimed:
                break
            worker._dispatch(claimed)
            t2 = clock()
            for _ in claimed:
                run = worker._tasks.get_nowait()
                assert not isinstance(run, type(None)) and hasattr(run, "job")
                worker._returned(worker._execute(run))  # type: ignore[arg-type]
            t3 = clock()
            outcomes = []
            while not completer._queue.empty():
                item = completer._queue.get_nowait()
                assert item is not None
                outcomes.append(item)
            pairs = [(o.id, o.token) for o in outcomes]
            t4 = clock()
            completer._write(outcomes)
            t5 = clock()
            # The renewal the heartbeat would send for these jobs, had they run long enough
            # (sent after the ack: the store refuses them all, as it would a lost lease's).
            backend.leases_renew(LeasesRenewParams(worker.id, pairs, []))
            t6 = clock()
            spent["claim"] += t1 - t0
            spent["dispatch"] += t2 - t1
            spent["run"] += t3 - t2
            spent["ack"] += t5 - t4
            spent["renew"] += t6 - t5
            done += len(claimed)
        for s in STAGES:
            out[s].append(1e6 * spent[s] / max(done, 1))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="redis")
    p.add_argument("--jobs", type=int, default=4000, help="jobs per round")
    p.add_argument("--batch", type=int, default=16, help="jobs per claim and per ack")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--events", action="store_true", help="a subscriber on the event bus")
    args = p.parse_args()
    with store(args.backend, shared_redis=False) as url:
        os.environ["JOBYARD_BENCH_URL"] = url
        from bench.apps import app

        app.migrate()
        if args.events:
            app.metrics()  # subscribes the tally: every event is built and delivered
        log(f"{args.backend}: {args.rounds} rounds of {args.jobs} no-op jobs, {args.batch} a batch")
        got = measure(app, args.jobs, args.batch, args.rounds)
        app.close()
    load = os.getloadavg()[0]
    print(
        f"# worker_path {args.backend}: batch {args.batch},"
        f" events {'on' if args.events else 'off'};"
        f" us of CPU per job, median (min-max) of {args.rounds} rounds; load {load:.1f}"
    )
    total = 0.0
    for s in STAGES:
        med = statistics.median(got[s])
        if s != "renew":
            total += med
        print(f"{s}: {med:.1f} us  # {min(got[s]):.1f}-{max(got[s]):.1f}")
    print(f"total: {total:.1f} us  # claim + dispatch + run + ack (renew apart)")


if __name__ == "__main__":
    main()
