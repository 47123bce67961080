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
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from .app import App
from .backends.base import JobsAckParams, JobsClaimParams
from .clock import Clock, FrozenClock
from .errors import Retry
from .job import Job, Status
from .worker import executor
from .worker.executor import JobTimeout
from .worker.reaper import reap

__all__ = [
    "FrozenClock",
    "JobTimeout",
    "assert_enqueued",
    "clear",
    "drain",
    "enqueued",
    "store_swapped",
]


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

    A handler's ``timeout`` ends its attempt as a worker would: an async handler is cancelled
    at the deadline; a sync one runs to its end (a thread cannot be killed, here or in a
    worker), and if that was past the deadline the attempt fails with the worker's timeout
    error, whatever it returned.

    With ``raise_errors=True`` the first exception a handler raises is raised again here, with
    its own traceback, once its job's outcome is recorded (retried or failed, as a worker would
    have done); draining stops there. ``jobyard.Retry`` is a request, not an error, and is not
    raised again; ``jobyard.Drop`` is. An attempt jobyard failed without the handler raising is
    raised too, naming the job: :class:`JobTimeout` (a ``TimeoutError``) for a timeout, chained
    to whatever a late sync handler raised; a ``TypeError`` for a result JSON cannot hold; a
    ``JobyardError`` for a job that could not run (no handler registered, a corrupt record)."""
    names = list(queues) if queues else sorted({jf.opts.queue for jf in app.registry.values()})
    names = names or ["default"]
    backend = app.backend
    reap(backend)
    pipeline = executor.Pipeline(backend, app.registry, app.hooks, "testing")
    ran = 0
    while ran < max_jobs:
        jobs = backend.jobs_claim(JobsClaimParams("testing", names, 1))
        if not jobs:
            return ran
        raised: list[BaseException] = []
        done = pipeline.execute(jobs[0], _keeping(raised) if raise_errors else None)
        if done.left is not None:
            backend.jobs_ack(JobsAckParams([done.left]))
        ran += 1
        if not raise_errors:
            continue
        if done.failure is not None:
            # Chained to what the handler raised, but for the cancellation that stopped an
            # async one at its deadline (the timeout's own doing, not the handler's).
            late = raised[0] if raised else None
            raise done.failure from (None if isinstance(late, asyncio.CancelledError) else late)
        if raised:
            raise raised[0]
    return ran


def _keeping(raised: list[BaseException]) -> Callable[[executor.Call], executor.Call]:
    """A wrap for Pipeline.execute that keeps what the handler raised (a Retry excepted)."""

    def keep(exc: BaseException) -> None:
        if not isinstance(exc, Retry):  # a Retry asks for another attempt: not an error
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


@contextlib.contextmanager
def store_swapped(app: App, url: str, clock: Clock | None = None) -> Iterator[App]:
    """``app`` (the project's own, with its jobs registered) on another store and clock until
    the block ends, then on its own again: what the pytest plugin's ``jobyard_app`` does with
    the App its ``jobyard_app`` ini setting names."""
    saved = (app.url, app.clock)
    app.close()
    app.url, app.clock = url, clock or app.clock
    try:
        yield app
    finally:
        app.close()
        app.url, app.clock = saved


def clear(app: App) -> None:
    """Cancel every pending job of every queue and purge what has finished: an emptied store,
    for a test that shares one with the tests before it."""
    for queue in app.stats():
        app.cancel_pending(queue=queue.queue)
    app.purge()
