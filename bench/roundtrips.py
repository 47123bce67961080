"""Where a worker's time goes: each hot-path store call timed on its own, from this process.

    python bench/roundtrips.py --backend {sqlite,postgres,redis,redis_cluster,memory}

With ``--jobs`` no-op jobs pending (a backlog like the drain's), it times, through the Backend
protocol the worker uses: ``jobs_insert`` of one job and of a batch, ``jobs_claim`` of ``--claim``
jobs (what one producer round trip takes: concurrency + prefetch), and ``jobs_ack`` of a batch of
the same size. ``drain bound`` is ``claim`` jobs / (claim + ack time): what one worker process
could reach if the producer and completer never overlapped and Python cost nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log, percentile
from bench.throughput import BACKENDS, store


def _ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.2f} ms, "
        f"p95 {percentile(values, 95) * 1000:.2f} ms (n={len(values)})"
    )


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, noop
    from jobyard.backends.base import JobsAckParams, JobsClaimParams, JobsInsertParams, Outcome

    app.migrate()
    backend = app.backend
    one = noop.opts.new_job((), {})
    many = [one] * args.batch

    log(f"{args.backend}: {args.jobs} jobs pending")
    for i in range(0, args.jobs, args.batch):
        backend.jobs_insert(JobsInsertParams(many[: min(args.batch, args.jobs - i)]))

    ins1: list[float] = []
    for _ in range(args.samples):
        t0 = time.perf_counter()
        backend.jobs_insert(JobsInsertParams([one]))
        ins1.append(time.perf_counter() - t0)
    insn: list[float] = []
    for _ in range(max(args.samples // 10, 5)):
        t0 = time.perf_counter()
        backend.jobs_insert(JobsInsertParams(many))
        insn.append(time.perf_counter() - t0)

    claims: list[float] = []
    acks: list[float] = []
    for _ in range(args.samples):
        t0 = time.perf_counter()
        jobs = backend.jobs_claim(JobsClaimParams("roundtrips", ["bench"], args.claim))
        t1 = time.perf_counter()
        outcomes = [Outcome(j.id, j.token, "completed", result="null") for j in jobs]
        backend.jobs_ack(JobsAckParams(outcomes))
        t2 = time.perf_counter()
        claims.append(t1 - t0)
        acks.append(t2 - t1)

    print(f"# jobyard {args.backend}: round trips with {args.jobs} jobs pending")
    print(f"insert 1: {_ms(ins1)}")
    print(f"insert {args.batch}: {_ms(insn)}")
    print(f"claim {args.claim}: {_ms(claims)}")
    print(f"ack {args.claim}: {_ms(acks)}")
    bound = args.claim / (statistics.median(claims) + statistics.median(acks))
    print(f"drain bound: {bound:.0f} jobs/s  # claim {args.claim} + ack {args.claim}, serial")
    app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--claim", type=int, default=16, help="jobs per claim (c + prefetch)")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--shared-redis", action="store_true")
    args = parser.parse_args()
    with store(args.backend, args.shared_redis) as url:
        run(args, url)


if __name__ == "__main__":
    main()
