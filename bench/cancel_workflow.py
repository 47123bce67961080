"""The cost of cancelling a large group: one ``jobs_cancel`` per job (before) against one
``jobs_cancel_many`` move (``app.cancel_workflow`` now), side by side on one store.

    python bench/cancel_workflow.py --backend {sqlite,postgres,redis,redis_cluster,memory}
        [--size N] [--shared-redis]

Three groups of N members (and their join) are enqueued; the first is cancelled job by job, as
``cancel_workflow`` did before issue 18, the second by one ``jobs_cancel_many``, the third by
``app.cancel_workflow`` (the move and its two reads of the workflow), which
``app.resume_workflow`` then resumes. Prints, each on a line of its own: ``per_job`` and
``batched`` (the group's cancel moves), ``speedup``, ``cancel_workflow`` and
``resume_workflow`` (the whole calls, reads included).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobyard
from bench._common import emit, log
from bench.throughput import BACKENDS, store
from jobyard.backends.base import JobsCancelManyParams, JobsCancelParams


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--shared-redis", action="store_true")
    args = parser.parse_args(argv)

    with store(args.backend, args.shared_redis) as url:
        app = jobyard.App(url)
        app.migrate()

        @app.job(queue="bench")
        def member(n: int) -> int:
            return n

        @app.job(queue="bench")
        def total(ns: list[int]) -> int:
            return sum(ns)

        flows = [
            jobyard.group(*[member.s(i) for i in range(args.size)]).then(total.s()).enqueue()
            for _ in range(3)
        ]
        log(f"{args.backend}: two groups of {args.size} members enqueued")

        # before: what cancel_workflow did, one store call per job (later steps first)
        flow = app.workflow(flows[0].id)
        t0 = time.perf_counter()
        for job in reversed(flow.jobs):
            app.backend.jobs_cancel(JobsCancelParams(job.id))
        per_job = time.perf_counter() - t0

        ids = [job.id for job in reversed(app.workflow(flows[1].id).jobs)]
        t0 = time.perf_counter()
        app.backend.jobs_cancel_many(JobsCancelManyParams(ids))
        batched = time.perf_counter() - t0

        t0 = time.perf_counter()
        done = app.cancel_workflow(flows[2].id)
        whole = time.perf_counter() - t0
        for flow_id in (flows[0].id, flows[1].id):
            assert {j.status.value for j in app.workflow(flow_id).jobs} == {"cancelled"}
        assert {j.status.value for j in done.jobs} == {"cancelled"}

        # and back: the cancelled group resumed in one call (members due, the join waiting)
        t0 = time.perf_counter()
        resumed = app.resume_workflow(flows[2].id)
        resume = time.perf_counter() - t0
        assert [j.status.value for j in resumed.jobs].count("pending") == args.size
        assert resumed.jobs[-1].status.value == "waiting"
        app.close()

    print(f"# jobyard {args.backend}: cancel a group of {args.size} (+ its join)")
    emit("per_job", per_job * 1000, "ms", "one jobs_cancel per job, as before")
    emit("batched", batched * 1000, "ms", "one jobs_cancel_many")
    emit("speedup", per_job / batched, "x")
    emit("cancel_workflow", whole * 1000, "ms", "the whole call: the move and two workflow reads")
    emit("resume_workflow", resume * 1000, "ms", "the whole call: one jobs_resume and two reads")


if __name__ == "__main__":
    main()
