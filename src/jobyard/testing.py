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

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .app import App
from .backends.base import JobsAckParams, JobsClaimParams, LeasesReapParams
from .clock import FrozenClock
from .errors import Retry
from .job import Job, Status
from .worker import executor

__all__ = ["FrozenClock", "assert_enqueued", "drain", "enqueued"]


def drain(
    app: App,
    queues: Sequence[str] | None = None,
    *,
    max_jobs: int = 100_000,
    raise_errors: bool = False,
) -> int:
    """Run due jobs of ``queues`` (default: every queue of the app's jobs) one by one in this
    thread until none is due; returns how many attempts ran. Jobs that fail with attempts left
    go back to pending with their backoff: with a frozen clock, advance it and drain again.

    With ``raise_errors=True`` the first exception a handler raises is raised again here, with
    its own traceback, once its job's outcome is recorded (retried or failed, as a worker would
    have done); draining stops there. ``jobyard.Retry`` is a request, not an error, and is not
    raised again; ``jobyard.Drop`` is."""
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
        raised: list[BaseException] = []
        left = pipeline.execute(jobs[0], _keeping(raised) if raise_errors else None)
        if left is not None:
            backend.jobs_ack(JobsAckParams([left]))
        ran += 1
        if raised:
            raise raised[0]
    return ran


def _keeping(raised: list[BaseException]) -> Callable[[executor.Call], executor.Call]:
    """A wrap for Pipeline.execute that keeps what the handler raised (a Retry excepted)."""

    def keep(exc: BaseException) -> None:
        # A Retry asks for another attempt; a CancelledError is the timeout's, not the handler's.
        if not isinstance(exc, Retry | asyncio.CancelledError):
            raised.append(exc)

    def wrap(call: executor.Call) -> executor.Call:
        func = call.func
        if call.is_async:

            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await func(*args, **kwargs)
                except BaseException as exc:
                    keep(exc)
                    raise

            return replace(call, func=run_async)

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except BaseException as exc:
                keep(exc)
                raise

        return replace(call, func=run)

    return wrap


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
