"""One job: resolve the handler, decode the payload, call it under its timeout, and classify
what happened into an :class:`Outcome`. Nothing here touches the store except a handler's own
transactional connection (PostgreSQL), which the worker settles."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .._codec import CorruptPayload, decode_payload, decode_result, encode_result
from ..backends.base import (
    Backend,
    ClaimedJob,
    EntryVerdict,
    JobsAckParams,
    JobsListParams,
    Outcome,
    Progress,
    as_transactional,
    bounded_delay,
)
from ..errors import Drop, JobyardError, Retry
from ..events import Events, Finished, Started
from ..hooks import Hooks, JobEvent, JobOutcome
from ..job import DELIVERIES, JobFunction
from ..retry import Backoff
from ..workflow import feed_value
from ._progress import fit_progress

log = logging.getLogger("jobyard.worker")

_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("jobyard_job")


class JobTimeout(TimeoutError):
    """The handler ran past its job's timeout (``testing.drain(raise_errors=True)`` raises it;
    a ``TimeoutError``, so ``except TimeoutError`` catches it too)."""


class CancelRequested(Exception):
    """Raised by :meth:`JobContext.raise_if_cancelled`: the handler stops on a cancellation."""


@dataclass(slots=True)
class JobContext:
    """What a running handler can learn about its job: ``jobyard.current_job()``."""

    job: ClaimedJob
    worker_id: str
    backend: Backend
    _connection: Any = field(default=None, repr=False)
    # Set by the worker's heartbeat thread, read by the handler: a plain bool is enough (one
    # writer, and a late read only delays the handler's stop until its next look).
    _cancel_requested: bool = field(default=False, repr=False)
    # Written by the handler only; the heartbeat sends it when it is not the one it last sent
    # (compared by identity, so the two threads never write the same field).
    _progress: Progress | None = field(default=None, repr=False)
    _progress_sent: Progress | None = field(default=None, repr=False)
    # What this attempt's progress reports were warned about (each once, not once per call).
    _warned: set[str] = field(default_factory=set, repr=False)
    # Why jobyard (not the handler) failed this attempt: a timeout, a result JSON cannot hold.
    # ``testing.drain(raise_errors=True)`` raises it.
    _failure: BaseException | None = field(default=None, repr=False)
    # What the handler raised, if it did (a span records it).
    _raised: BaseException | None = field(default=None, repr=False)

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
            store = as_transactional(self.backend, "current_job().connection")
            self._connection = store.connection_acquire()
        return self._connection

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel this job (``app.cancel``) and the worker learned
        it (at its next heartbeat). A sync handler that stops then by raising (for instance
        through :meth:`raise_if_cancelled`) ends its job ``cancelled``; one that returns a
        value anyway completes, and that outcome stands."""
        return self._cancel_requested

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CancelRequested` if :attr:`cancel_requested`."""
        if self._cancel_requested:
            raise CancelRequested(f"job {self.job.id}: cancellation requested")

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Record how far the job has got: ``fraction`` from 0 to 1 and a short ``note`` (at
        most 200 characters). Only the latest value is kept, in memory: the worker sends it
        with its next lease renewal (at most a second later), so calling this in a tight loop
        costs no round trip. ``app.get(id).progress`` reads it.

        A report never fails the job: a fraction outside 0..1 is clamped into it, one that is
        not a number (or is NaN) is ignored (the previous report stands), a note that is not
        text is stored as its ``str()``, and a longer one is cut; each with one warning on the
        ``jobyard.worker`` logger per attempt, however often it is repeated."""
        value, text, problems = fit_progress(fraction, note)
        for kind, message in problems:
            if kind not in self._warned:
                self._warned.add(kind)
                log.warning("job %s: %s", self.job.id, message)
        if value is not None:
            self._progress = Progress(self.job.id, value, text)


def current_job() -> JobContext:
    """The job the calling handler is running (LookupError outside a handler)."""
    return _current.get()


@dataclass(slots=True)
class Call:
    """A resolved job, ready to call (not frozen: one is made for every job run, and a frozen
    dataclass costs three times as much to make)."""

    func: Callable[..., Any]
    is_async: bool
    args: list[Any]
    kwargs: dict[str, Any]
    # A workflow step's feed (``jobyard.workflow``): its first argument is still to be read
    # from its inputs' results (``Pipeline.fill``).
    feed: Any = None
    # The producer's trace context the job carries (``jobyard._otel``), else None.
    trace: Any = None
    # The workflow the job is a step of, else None.
    workflow: str | None = None


class Span(Protocol):
    """One attempt's span (``jobyard._otel``): entered before the handler, ended after."""

    def __enter__(self) -> object: ...

    def ended(self, ctx: JobContext, outcome: Outcome) -> None:
        """Record the outcome (the exception the handler raised) and end the span."""
        ...


class Tracing(Protocol):
    """Makes each attempt's span, the child of the trace context its job carries."""

    def attempt(self, job: ClaimedJob, carrier: Any) -> Span | None: ...


Finish = Callable[[Outcome, "float | None"], None]


def record_fault(job: ClaimedJob) -> str | None:
    """Why a claimed job's record cannot be run as stored (a store written by something other
    than jobyard: a NaN lease, a negative max_attempts, an unknown delivery), else ``None``."""
    timeout = job.timeout
    if (  # every record jobyard wrote: one pass, no list to build (it runs for every job)
        type(job.attempts) is int
        and job.attempts >= 1
        and type(job.max_attempts) is int
        and job.max_attempts >= 1
        and type(job.lease) is float
        and 0 < job.lease < math.inf
        and (timeout is None or (type(timeout) is float and 0 < timeout < math.inf))
        and job.delivery in DELIVERIES
    ):
        return None
    checks: list[tuple[str, object, bool]] = [
        ("attempts", job.attempts, isinstance(job.attempts, int) and job.attempts >= 1),
        (
            "max_attempts",
            job.max_attempts,
            isinstance(job.max_attempts, int) and job.max_attempts >= 1,
        ),
        ("lease", job.lease, isinstance(job.lease, float) and 0 < job.lease < math.inf),
        (
            "timeout",
            job.timeout,
            job.timeout is None or (isinstance(job.timeout, float) and 0 < job.timeout < math.inf),
        ),
        ("delivery", job.delivery, job.delivery in DELIVERIES),
    ]
    for field_name, value, ok in checks:
        if not ok:
            return f"field {field_name} out of range: {value!r}"
    return None


def resolve(job: ClaimedJob, registry: dict[str, JobFunction[Any, Any]]) -> Call | Outcome:
    """Check the record, find the handler and decode the payload; an Outcome if any of them is
    impossible. Retrying cannot mend a corrupt record: it fails now, with the reason."""
    fault = record_fault(job)
    if fault is not None:
        return Outcome(job.id, job.token, "failed", error=f"corrupt job record: {fault}")
    jf = registry.get(job.name)
    if jf is None:
        return classify(job, LookupError(f"no handler registered for {job.name!r}"), "")
    try:
        payload = decode_payload(job.payload)
    except CorruptPayload as exc:
        # Retrying cannot mend a corrupt row: fail it now, with the reason.
        return Outcome(job.id, job.token, "failed", error=f"corrupt payload: {exc}")
    return Call(
        jf.func,
        jf.is_async,
        payload.args,
        payload.kwargs,
        payload.feed,
        payload.trace,
        payload.workflow,
    )


def succeed(ctx: JobContext, value: Any) -> Outcome:
    """The outcome of a handler that returned ``value`` (a failure if JSON cannot hold it)."""
    job = ctx.job
    try:
        return Outcome(job.id, job.token, "completed", result=encode_result(value))
    except TypeError as exc:
        ctx._failure = TypeError(f"job {job.id} ({job.name}): {exc}")
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
        delay = bounded_delay(exc.delay)
    else:
        delay = Backoff.from_json(job.backoff).delay(job.attempts)
    return Outcome(job.id, job.token, "retry", error=error, delay=delay)


def cancelled(job: ClaimedJob, how: str) -> Outcome:
    """The outcome of a job that stopped on a cancellation request."""
    return Outcome(job.id, job.token, "cancelled", error=f"cancelled on request: {how}")


def stopped(ctx: JobContext, exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc``: cancelled if a cancellation was asked
    (the handler stopped on it), else what :func:`classify` decides."""
    if ctx._cancel_requested:
        return cancelled(ctx.job, f"{type(exc).__name__}: {exc}".rstrip(": "))
    return classify(ctx.job, exc)


def timed_out(job: ClaimedJob) -> Outcome:
    """The outcome of a handler that overran its timeout."""
    return classify(
        job, JobTimeout(f"timed out after {job.timeout}s"), f"timed out after {job.timeout}s"
    )


def timeout_error(job: ClaimedJob) -> JobTimeout:
    """The error of a job whose handler overran its timeout, naming the job."""
    return JobTimeout(f"job {job.id} ({job.name}): timed out after {job.timeout}s")


def run_sync(ctx: JobContext, call: Call) -> Outcome:
    """Call a synchronous handler on this thread (the worker watches its timeout). Whatever it
    raises, SystemExit and KeyboardInterrupt included, is its job's outcome: a handler cannot
    stop the worker or leave its job unsettled."""
    token = _current.set(ctx)
    try:
        value = call.func(*call.args, **call.kwargs)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is an outcome
        ctx._raised = exc
        return stopped(ctx, exc)
    finally:
        _current.reset(token)
    return succeed(ctx, value)


async def run_async(ctx: JobContext, call: Call) -> Outcome:
    """Await an async handler under its timeout; an overrun cancels it. A cancellation the
    worker made for a cancel request ends the job ``cancelled``; one it made for another reason
    (shutdown) propagates; any other exception is the job's outcome."""
    token = _current.set(ctx)
    deadline: asyncio.Timeout | None = None
    try:
        if ctx.job.timeout is None:
            # No deadline to keep: no Timeout to make, enter and leave (with short handlers it
            # was a sixth of the event loop's time).
            value = await call.func(*call.args, **call.kwargs)
        else:
            async with asyncio.timeout(ctx.job.timeout) as deadline:
                value = await call.func(*call.args, **call.kwargs)
    except TimeoutError as exc:
        ctx._raised = exc
        if deadline is not None and deadline.expired():
            ctx._failure = timeout_error(ctx.job)
            return timed_out(ctx.job)
        return classify(ctx.job, exc)  # the handler's own TimeoutError
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            if ctx._cancel_requested:
                task.uncancel()  # handled here: the job's outcome, not the task's end
                return cancelled(ctx.job, "the async handler was cancelled")
            raise  # the worker cancelled it
        ctx._raised = exc
        return stopped(ctx, exc)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is an outcome
        ctx._raised = exc
        return stopped(ctx, exc)
    finally:
        _current.reset(token)
    return succeed(ctx, value)


def settle_transaction(
    backend: Backend, job: ClaimedJob, outcome: Outcome, conn: Any
) -> Outcome | None:
    """The handler wrote through its job's connection (PostgreSQL): commit those writes with the
    completion, or roll them back with any other outcome or a lost lease. Runs on the handler's
    own thread only, since a connection is never used by two threads. Returns None once the
    outcome is recorded, else the outcome the caller must still acknowledge the ordinary way."""
    # Only a TransactionalBackend lends the connections these two functions settle.
    release = as_transactional(backend, "a handler's connection").connection_release
    try:
        if outcome.kind == "completed":
            stale = backend.jobs_ack(JobsAckParams([outcome], connection=conn))
            if stale:
                conn.rollback()
                log.warning("job %s: lease lost; its transaction was rolled back", job.id)
            else:
                conn.commit()
            return None
        conn.rollback()
        return outcome
    except Exception as exc:  # noqa: BLE001 - the commit failed: its writes are not there
        log.warning("job %s: transactional completion failed: %s", job.id, exc)
        with contextlib.suppress(Exception):
            conn.rollback()
        return outcome if outcome.kind != "completed" else classify(job, exc)
    finally:
        release(conn)


def discard_transaction(backend: Backend, job: ClaimedJob, conn: Any) -> None:
    """Roll back and return the connection of a handler whose outcome was settled without it
    (it timed out, or was released at shutdown): its late writes never commit."""
    # Only a TransactionalBackend lends the connections these two functions settle.
    release = as_transactional(backend, "a handler's connection").connection_release
    try:
        with contextlib.suppress(Exception):
            conn.rollback()
    finally:
        release(conn)
    log.warning("job %s: late handler's transaction rolled back", job.id)


# the pipeline ----------------------------------------------------------------------------------

jobs_log = logging.getLogger("jobyard.jobs")


def outcome_name(job: ClaimedJob, outcome: Outcome) -> JobOutcome:
    """What an outcome means for the job's lifecycle (the hooks' and the log's word for it)."""
    if outcome.kind == "failed":
        return "dead" if job.attempts >= job.max_attempts else "failed"
    if outcome.kind == "release":
        return "released"
    return outcome.kind


def _summary(error: str | None) -> str:
    """The last line of a traceback (the exception itself), short enough for one log line."""
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    text = lines[-1].strip() if lines else ""
    return text if len(text) <= 200 else text[:197] + "..."


def _workflow_of(job: ClaimedJob) -> str | None:
    """The workflow id a step's payload names (read only for a step: most jobs are none)."""
    if '"wf":' not in job.payload:
        return None
    try:
        return decode_payload(job.payload).workflow
    except CorruptPayload:
        return None


def job_fields(
    job: ClaimedJob,
    worker_id: str,
    outcome: str | None,
    seconds: float | None,
    error: str | None,
    workflow: str | None = None,
) -> dict[str, Any]:
    """A job line's fields for structured logs (``extra={"jobyard": ...}`` on the record;
    ``jobyard._logjson`` writes them), built only when the line is logged."""
    return {
        "jobyard": {
            "id": job.id,
            "name": job.name,
            "queue": job.queue,
            "attempt": job.attempts,
            "max_attempts": job.max_attempts,
            "outcome": outcome,
            "duration": None if seconds is None else round(seconds, 6),
            "error": _summary(error) if error else None,
            "worker_id": worker_id,
            "workflow_id": workflow,
        }
    }


@dataclass(frozen=True, slots=True)
class Executed:
    """What :meth:`Pipeline.execute` did with one job: the ``outcome`` decided, what is ``left``
    to acknowledge (None: the handler's transaction recorded it), and the ``failure`` jobyard
    failed the attempt with when the handler raised nothing that explains it (a timeout, a
    result JSON cannot hold, no handler to run)."""

    outcome: Outcome
    left: Outcome | None
    failure: BaseException | None


class Pipeline:
    """The steps of one job, the same in the worker and in ``jobyard.testing.drain``:

    ``prepare`` (find the handler, decode the payload, run ``before_job`` hooks) →
    ``perform_sync`` or ``perform_async`` (call it under its timeout, classify what happened) →
    ``settle`` (commit or roll back the handler's transaction with the outcome) → the caller
    acknowledges what is left → ``record`` (one log line, the ``Finished`` event, ``after_job``
    and ``on_dead`` hooks).

    Two runners chain them, the only places that order is written: :meth:`run_sync` on the
    calling thread and :meth:`run_async` on an event loop. Each hands the outcome it reached to
    a ``finish(outcome, seconds)`` of its caller's: the worker's marks the attempt settled and
    queues it for the completer (it acknowledges in batches and decides timeouts off the
    handler's thread); :meth:`execute`'s settles and records it at once.
    """

    def __init__(
        self,
        backend: Backend,
        registry: dict[str, JobFunction[Any, Any]],
        hooks: Hooks,
        worker_id: str,
        events: Events | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.backend = backend
        self.registry = registry
        self.hooks = hooks
        self.worker_id = worker_id
        self.events = events if events is not None else Events()
        # The OpenTelemetry seam (``jobyard._otel``): None unless the extra is installed and
        # the App turned it on, and then each attempt runs in a span.
        self.tracing = tracing

    def context(self, job: ClaimedJob) -> JobContext:
        """What the handler sees as ``current_job()``."""
        return JobContext(job, self.worker_id, self.backend)

    def prepare(self, ctx: JobContext) -> Call | Outcome:
        """The call to make, or the outcome when there is none (no handler, corrupt payload)."""
        resolved = resolve(ctx.job, self.registry)
        if isinstance(resolved, Call) and self.hooks.wants("before_job"):
            self.hooks.run("before_job", self._event(ctx.job))
        return resolved

    def fill(self, ctx: JobContext, call: Call) -> Call | Outcome:
        """A workflow step's call with its first argument, built from its inputs' results (two
        reads of the store; blocking). An input that is gone (purged by retention before the
        step ran) or corrupt fails the step, saying which; a store error retries it."""
        job = ctx.job
        try:
            rec = self.backend.jobs_get(job.id)
            ids = () if rec is None else rec.depends_on
            listed = self.backend.jobs_list(JobsListParams(ids=ids, limit=max(len(ids), 1)))
        except Exception as exc:  # noqa: BLE001 - a store that failed: try the job again later
            return classify(job, exc)
        by_id = {r.id: r for r in listed}
        results = []
        for input_id in ids:
            got = by_id.get(input_id)
            if got is None or got.status != "completed":
                state = "gone (purged?)" if got is None else got.status
                return Outcome(job.id, job.token, "failed", error=f"input {input_id} is {state}")
            try:
                results.append(decode_result(got.result))
            except ValueError:
                return Outcome(job.id, job.token, "failed", error=f"input {input_id}: bad result")
        try:
            value = feed_value(call.feed, results)
        except (ValueError, IndexError, TypeError) as exc:
            return Outcome(job.id, job.token, "failed", error=f"corrupt payload: feed: {exc}")
        return replace(call, args=[value, *call.args], feed=None)

    def prepare_here(self, ctx: JobContext) -> Call | Outcome:
        """``prepare`` and, for a workflow step, ``fill``, on this thread."""
        prepared = self.prepare(ctx)
        if isinstance(prepared, Call) and prepared.feed is not None:
            return self.fill(ctx, prepared)
        return prepared

    def perform_sync(self, ctx: JobContext, call: Call) -> Outcome:
        """Call a sync handler on this thread."""
        return run_sync(ctx, call)

    async def perform_async(self, ctx: JobContext, call: Call) -> Outcome:
        """Await an async handler; a cancellation the caller asked for propagates."""
        return await run_async(ctx, call)

    def run_sync(
        self,
        ctx: JobContext,
        finish: Finish,
        begin: Callable[[], bool] | None = None,
        wrap: Callable[[Call], Call] | None = None,
        inline_async: bool = True,
    ) -> float | None:
        """The sync runner: unless ``begin()`` says the job may no longer start, prepare it
        (and fill a workflow step), call the handler on this thread and hand the outcome to
        ``finish(outcome, seconds)``; returns the seconds the handler ran (None: it did not).
        An async handler runs here in a fresh event loop (``testing.drain``: a worker sends
        those to :meth:`run_async`, and with ``inline_async`` False one that comes here is a
        RuntimeError). ``wrap`` may replace the call about to be made."""
        if begin is not None and not begin():
            return None
        prepared = self.prepare_here(ctx)
        if isinstance(prepared, Outcome):
            finish(prepared, None)
            return None
        if prepared.is_async and not inline_async:
            raise RuntimeError("an async handler was registered after the worker started")
        if wrap is not None:
            prepared = wrap(prepared)
        if self.events.active:
            self._started(ctx.job)
        span = None if self.tracing is None else self.tracing.attempt(ctx.job, prepared.trace)
        t0 = time.monotonic()
        if span is not None:
            span.__enter__()
        try:
            if prepared.is_async:
                outcome = asyncio.run(self.perform_async(ctx, prepared))
            else:
                outcome = self.perform_sync(ctx, prepared)
        finally:
            seconds = time.monotonic() - t0
        if span is not None:
            span.ended(ctx, outcome)
        finish(outcome, seconds)
        return seconds

    async def run_async(
        self, ctx: JobContext, finish: Finish, begin: Callable[[], bool] | None = None
    ) -> float | None:
        """The async runner, on the event loop: :meth:`run_sync`'s steps, the workflow step's
        reads and a handler's transaction settled on a thread (never blocking the loop). A
        cancellation at shutdown or a worker bug inside the handler's await is its outcome."""
        if begin is not None and not begin():
            return None
        prepared = self.prepare(ctx)
        if isinstance(prepared, Call) and prepared.feed is not None:
            prepared = await asyncio.to_thread(self.fill, ctx, prepared)
        seconds = None
        if isinstance(prepared, Outcome):
            outcome = prepared
        else:
            if self.events.active:
                self._started(ctx.job)
            span = None if self.tracing is None else self.tracing.attempt(ctx.job, prepared.trace)
            if span is not None:
                span.__enter__()
            t0 = time.monotonic()
            try:
                outcome = await self.perform_async(ctx, prepared)
            except BaseException as exc:  # noqa: BLE001 - cancelled at shutdown, or a bug
                ctx._raised = exc
                outcome = classify(ctx.job, exc)
            seconds = time.monotonic() - t0
            if span is not None:
                span.ended(ctx, outcome)
        if ctx._connection is not None:  # its transaction is settled off the loop
            await asyncio.to_thread(finish, outcome, seconds)
        else:
            finish(outcome, seconds)
        return seconds

    def settle(self, ctx: JobContext, outcome: Outcome) -> Outcome | None:
        """Settle the handler's transaction, if it opened one; the outcome still to acknowledge
        the ordinary way, or None when the transaction recorded it. On the handler's thread."""
        if ctx._connection is None:
            return outcome
        return settle_transaction(self.backend, ctx.job, outcome, ctx._connection)

    def record(self, job: ClaimedJob, outcome: Outcome, seconds: float | None) -> None:
        """One log line for the outcome (INFO for failures, DEBUG otherwise), the ``Finished``
        event, then the hooks."""
        if (
            outcome.kind == "completed"
            and not self.events.active
            and not self.hooks
            and not jobs_log.isEnabledFor(logging.DEBUG)
        ):
            return  # nothing to tell (most jobs of a worker that logs at INFO)
        word = outcome_name(job, outcome)
        level = logging.DEBUG if word in ("completed", "released") else logging.INFO
        if jobs_log.isEnabledFor(level):
            took = "" if seconds is None else f" in {seconds:.3f}s"
            why = f": {_summary(outcome.error)}" if outcome.error else ""
            jobs_log.log(
                level,
                "job %s %s queue=%s attempt=%d/%d %s%s%s",
                job.id,
                job.name,
                job.queue,
                job.attempts,
                job.max_attempts,
                word,
                took,
                why,
                extra=job_fields(
                    job, self.worker_id, word, seconds, outcome.error, _workflow_of(job)
                ),
            )
        if self.events.active:
            self.events.emit(
                Finished(
                    job.id,
                    job.name,
                    job.queue,
                    job.attempts,
                    job.max_attempts,
                    self.worker_id,
                    word,
                    seconds,
                    outcome.error,
                )
            )
        if not self.hooks:
            return
        dead = word in ("failed", "dead")
        if self.hooks.wants("after_job") or (dead and self.hooks.wants("on_dead")):
            event = self._event(job, word, seconds, outcome)
            self.hooks.run("after_job", event)
            if dead:
                self.hooks.run("on_dead", event)

    def execute(self, job: ClaimedJob, wrap: Callable[[Call], Call] | None = None) -> Executed:
        """Every step but the acknowledgement, in this thread (:meth:`run_sync`; an async
        handler runs in a fresh event loop); returns what is left to acknowledge. ``wrap`` may
        replace the call about to be made (``testing.drain`` uses it to keep the handler's
        exception).

        A sync handler's timeout is applied when it returns: no thread watches it here, and a
        thread cannot be killed (the worker cannot stop one either: it fails the attempt at
        the deadline and discards what the handler returns later). An overrun ends as the
        worker ends it, the attempt failed with the worker's timeout error, whatever the
        handler returned or raised; a transaction it opened is rolled back."""
        ctx = self.context(job)
        done: list[Executed] = []

        def finish(outcome: Outcome, seconds: float | None) -> None:
            if seconds is None:
                if outcome.kind != "completed":  # no handler, a corrupt record, an input gone
                    reason = _summary(outcome.error)
                    ctx._failure = JobyardError(f"job {job.id} ({job.name}) did not run: {reason}")
            elif job.timeout is not None and seconds > job.timeout and not self._is_async(job):
                log.warning("job %s: timed out after %ss", job.id, job.timeout)
                ctx._failure = timeout_error(job)
                outcome = timed_out(job)
            left = self.settle(ctx, outcome)
            self.record(job, outcome, seconds)
            done.append(Executed(outcome, left, ctx._failure))

        self.run_sync(ctx, finish, wrap=wrap)
        return done[0]

    def _is_async(self, job: ClaimedJob) -> bool:
        jf = self.registry.get(job.name)
        return jf is not None and jf.is_async

    def _started(self, job: ClaimedJob) -> None:
        # An observation for the wait histogram, not a decision the store must agree with: this
        # host's wall clock against the store's run_at (asking the store's clock would cost a
        # round trip per job). Hosts whose clocks drift see the figures shifted by the drift.
        waited = None if job.run_at is None else max(time.time() - job.run_at, 0.0)
        self.events.emit(Started(job.id, job.name, job.queue, job.attempts, self.worker_id, waited))

    def _event(
        self,
        job: ClaimedJob,
        word: JobOutcome | None = None,
        seconds: float | None = None,
        outcome: Outcome | None = None,
    ) -> JobEvent:
        result = None
        if outcome is not None and outcome.result is not None:
            with contextlib.suppress(ValueError):
                result = decode_result(outcome.result)
        return JobEvent(
            id=job.id,
            name=job.name,
            queue=job.queue,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            worker_id=self.worker_id,
            outcome=word,
            duration=seconds,
            error=None if outcome is None else outcome.error,
            result=result,
        )


# entries of foreign lists and streams ----------------------------------------------------------


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class EntryRunner:
    """How the consumers of foreign Redis lists and streams run an entry (a
    ``backends.base.EntryRunner``): the handler called (an async one to completion on this
    thread), its return or exception classified as a job's would be (return: ack; ``Retry``
    or any other exception: delivered again; ``Drop`` or an entry that cannot be read: dead),
    and the entry's ``Started`` and ``Finished`` events emitted (``source`` "list" or
    "stream", its queue the list's or stream's key, its name the handler's)."""

    def __init__(self, events: Events, worker_id: str = "consumer") -> None:
        self.events = events
        self.worker_id = worker_id

    def __call__(
        self,
        source: str,
        key: str,
        entry_id: str,
        handler: Callable[[Any], Any],
        decode: Callable[[], Any],
    ) -> EntryVerdict:
        name = getattr(handler, "__name__", None) or type(handler).__name__
        try:
            value = decode()
        except (ValueError, KeyError) as exc:
            reason = f"undecodable entry: {type(exc).__name__}: {exc}"
            self._finished(source, key, entry_id, name, "failed", None, reason)
            return EntryVerdict("drop", reason=reason)
        if self.events.active:
            self.events.emit(Started(entry_id, name, key, 1, self.worker_id))
        t0 = time.monotonic()
        try:
            result = handler(value)
            if inspect.isawaitable(result):  # an async handler: run it to completion here
                result = asyncio.run(_awaited(result))
        except Drop as d:
            verdict = EntryVerdict("drop", reason=d.reason)
            word, error = "failed", f"dropped: {d.reason}"
        except Retry as r:
            verdict = EntryVerdict("retry", delay=r.delay, reason=f"Retry({r.delay!r})")
            word, error = "retry", f"retry requested: {r.reason}"
        except Exception as exc:
            on = f" on entry {entry_id}" if entry_id else ""
            log.exception("%s %s: handler failed%s; delivered again", source, key, on)
            verdict = EntryVerdict("retry", reason=f"{type(exc).__name__}: {exc}")
            word, error = "retry", "".join(traceback.format_exception(exc))
        else:
            verdict = EntryVerdict("ack", result=result)
            word, error = "completed", ""
        self._finished(source, key, entry_id, name, word, time.monotonic() - t0, error or None)
        return verdict

    def _finished(
        self,
        source: str,
        key: str,
        entry_id: str,
        name: str,
        word: str,
        seconds: float | None,
        error: str | None,
    ) -> None:
        if self.events.active:
            self.events.emit(
                Finished(entry_id, name, key, 1, 1, self.worker_id, word, seconds, error, source)
            )
