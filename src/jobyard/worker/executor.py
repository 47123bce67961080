"""One job: resolve the handler, decode the payload, call it under its timeout, and classify
what happened into an :class:`Outcome`. Nothing here touches the store except a handler's own
transactional connection (PostgreSQL), which the worker settles."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Backend, ClaimedJob, Outcome
from ..errors import ConfigurationError, Drop, Retry
from ..job import JobFunction, encode_result
from ..retry import Backoff

log = logging.getLogger("jobyard.worker")

_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("jobyard_job")


class JobTimeout(Exception):
    """The handler ran past its job's timeout."""


@dataclass(slots=True)
class JobContext:
    """What a running handler can learn about its job: ``jobyard.current_job()``."""

    job: ClaimedJob
    worker_id: str
    backend: Backend
    _connection: Any = field(default=None, repr=False)

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.job.attempts

    @property
    def connection(self) -> Any:
        """A store connection inside an open transaction (PostgreSQL). The handler's writes on
        it commit together with the job's completion, or roll back with its failure or with a
        lost lease: exactly-once effects for work in the same database."""
        if self._connection is None:
            acquire = getattr(self.backend, "connection_acquire", None)
            if acquire is None:
                raise ConfigurationError("current_job().connection needs the PostgreSQL backend")
            self._connection = acquire()
        return self._connection


def current_job() -> JobContext:
    """The job the calling handler is running (LookupError outside a handler)."""
    return _current.get()


@dataclass(frozen=True, slots=True)
class Call:
    """A resolved job, ready to call."""

    func: Callable[..., Any]
    is_async: bool
    args: list[Any]
    kwargs: dict[str, Any]


def resolve(job: ClaimedJob, registry: dict[str, JobFunction[Any, Any]]) -> Call | Outcome:
    """Find the handler and decode the payload; an Outcome if either is impossible."""
    jf = registry.get(job.name)
    if jf is None:
        return classify(job, LookupError(f"no handler registered for {job.name!r}"), "")
    try:
        data = json.loads(job.payload)
        args, kwargs = data["args"], data["kwargs"]
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("args must be a list and kwargs an object")
    except (ValueError, KeyError, TypeError) as exc:
        # Retrying cannot mend a corrupt row: fail it now, with the reason.
        return Outcome(job.id, job.token, "failed", error=f"corrupt payload: {exc}")
    return Call(jf.func, jf.is_async, args, kwargs)


def succeed(job: ClaimedJob, value: Any) -> Outcome:
    """The outcome of a handler that returned ``value``."""
    try:
        return Outcome(job.id, job.token, "completed", result=encode_result(value))
    except TypeError as exc:
        return classify(job, exc, f"TypeError: {exc}")


def classify(job: ClaimedJob, exc: BaseException, tb: str | None = None) -> Outcome:
    """The outcome of a handler that raised ``exc``."""
    if tb is None:
        tb = "".join(traceback.format_exception(exc))
    if isinstance(exc, Drop):
        return Outcome(job.id, job.token, "failed", error=f"dropped: {exc.reason}")
    error = tb or f"{type(exc).__name__}: {exc}"
    if job.delivery == "at_most_once":
        return Outcome(job.id, job.token, "failed", error=error)
    if job.attempts >= job.max_attempts:
        if isinstance(exc, Retry):
            error = f"retry requested after the last attempt ({job.max_attempts}): {exc.reason}"
        return Outcome(job.id, job.token, "failed", error=error)
    if isinstance(exc, Retry) and exc.delay is not None:
        delay = max(float(exc.delay), 0.0)
    else:
        delay = Backoff.from_json(job.backoff).delay(job.attempts)
    return Outcome(job.id, job.token, "retry", error=error, delay=delay)


def timed_out(job: ClaimedJob) -> Outcome:
    """The outcome of a handler that overran its timeout."""
    return classify(
        job, JobTimeout(f"timed out after {job.timeout}s"), f"timed out after {job.timeout}s"
    )


def run_sync(ctx: JobContext, call: Call) -> Outcome:
    """Call a synchronous handler on this thread (the worker watches its timeout)."""
    token = _current.set(ctx)
    try:
        value = call.func(*call.args, **call.kwargs)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return classify(ctx.job, exc)
    finally:
        _current.reset(token)
    return succeed(ctx.job, value)


async def run_async(ctx: JobContext, call: Call) -> Outcome:
    """Await an async handler under its timeout; an overrun cancels it."""
    token = _current.set(ctx)
    try:
        coro = call.func(*call.args, **call.kwargs)
        value = await asyncio.wait_for(coro, ctx.job.timeout)
    except TimeoutError:
        return timed_out(ctx.job)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of user code is an outcome
        return classify(ctx.job, exc)
    finally:
        _current.reset(token)
    return succeed(ctx.job, value)
