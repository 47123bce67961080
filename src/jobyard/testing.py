"""Helpers for users' own tests.

Run the queue to empty inside the test's own process, with no threads, so a test sees every
effect of its jobs before it asserts::

    app = jobyard.App("memory://", clock=jobyard.FrozenClock())
    send_email.enqueue("a@example.com")
    assert jobyard.testing.drain(app) == 1

A :class:`jobyard.FrozenClock` makes time stand still: delays, backoff and leases wait for the test
to call ``clock.advance(seconds)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .app import App
from .backends.base import JobsAckParams, JobsClaimParams, LeasesReapParams
from .clock import FrozenClock
from .job import Job, Status
from .worker import executor

__all__ = ["FrozenClock", "assert_enqueued", "drain", "enqueued"]


def drain(app: App, queues: Sequence[str] | None = None, *, max_jobs: int = 100_000) -> int:
    """Run due jobs of ``queues`` (default: every queue of the app's jobs) one by one in this
    thread until none is due; returns how many attempts ran. Jobs that fail with attempts left
    go back to pending with their backoff: with a frozen clock, advance it and drain again."""
    names = list(queues) if queues else sorted({jf.opts.queue for jf in app.registry.values()})
    names = names or ["default"]
    backend = app.backend
    backend.leases_reap(LeasesReapParams())
    pipeline = executor.Pipeline(backend, app.registry, app.hooks, "testing")
    ran = 0
    while ran < max_jobs:
        jobs = backend.jobs_claim(JobsClaimParams("testing", names, 1))
        if not jobs:
            return ran
        left = pipeline.execute(jobs[0])
        if left is not None:
            backend.jobs_ack(JobsAckParams([left]))
        ran += 1
    return ran


def enqueued(
    app: App, name: str | None = None, *, queue: str | None = None, limit: int = 1000
) -> list[Job]:
    """Pending jobs, oldest first, optionally of one job name or queue."""
    jobs = app.jobs(queue=queue, status=Status.PENDING, name=name, limit=limit)
    return list(reversed(jobs))


def assert_enqueued(app: App, name: str, *args: Any, **kwargs: Any) -> Job:
    """Assert a pending job ``name`` with exactly these arguments exists, and return it."""
    for job in enqueued(app, name):
        if job.args == args and job.kwargs == kwargs:
            return job
    found = [(j.args, j.kwargs) for j in enqueued(app, name)]
    raise AssertionError(f"no pending {name}{args!r} {kwargs!r}; pending {name} calls: {found!r}")
