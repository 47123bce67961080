"""The producer side: Job, JobHandle, Status, JobFunction and its options. No I/O here: a
JobFunction hands every enqueue down to its enqueue step (``_enqueue.py``), which calls the
store; a handle reads its job back through the App, seen only as a :class:`JobReader`."""

from __future__ import annotations

import enum
import functools
import inspect
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from ._codec import CorruptPayload, decode_payload, decode_result, encode_payload
from ._enqueue import Enqueue
from .backends.base import (
    DEFAULT_LEASE,
    FINISHED,
    MAX_IDEMPOTENCY_KEY,
    Delivery,
    Inserted,
    JobLimits,
    JobRecord,
    NewJob,
    OnConflict,
    check_delay,
    check_on_conflict,
    check_priority,
    check_run_at,
)
from .clock import to_datetime
from .errors import ConfigurationError, JobCancelled, JobFailed
from .limits import check_key
from .retry import Backoff, as_backoff

P = ParamSpec("P")
R = TypeVar("R")

NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}\Z")
NAME_RULE = "1 to 100 characters of A-Z a-z 0-9 _ . : -"
DELIVERIES: tuple[str, ...] = ("at_least_once", "at_most_once")


def check_name(kind: str, value: str) -> str:
    """Validate a queue or job name so it can never break out of a key or an identifier."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ConfigurationError(f"invalid {kind} name {value!r}: use {NAME_RULE}")
    return value


class Status(enum.StrEnum):
    """Where a job is in its lifecycle."""

    WAITING = "waiting"  # a workflow step whose inputs have not all completed
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True for the states a job never leaves on its own."""
        return self.value in FINISHED


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored, with decoded arguments and result."""

    id: str
    name: str
    queue: str
    status: Status
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    result: Any
    error: str | None
    parent_id: str | None
    idempotency_key: str | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    delivery: str = "at_least_once"
    # When a cancellation was asked (at once for a pending job; a request the worker honours
    # for a running one) and by whom (``app.cancel(id, by=...)``).
    cancel_requested_at: datetime | None = None
    cancelled_by: str | None = None
    # The handler's latest ``current_job().progress(fraction, note)``.
    progress: float | None = None
    progress_note: str | None = None
    # Workflows (chains and groups): the workflow (``app.workflow(id)``), the jobs whose
    # results this one takes (its parents, in order) and the jobs that wait for it.
    workflow_id: str | None = None
    depends_on: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    key: str | None = None  # the limit key (``.options(key=...)``)

    @classmethod
    def from_record(cls, rec: JobRecord) -> Job:
        """Decode a store record; a corrupt payload or result is shown, never raised."""
        try:
            payload = decode_payload(rec.payload)
            args, kwargs = tuple(payload.args), payload.kwargs
        except CorruptPayload:
            args, kwargs = (), {"<corrupt payload>": rec.payload}
        try:
            result = decode_result(rec.result)
        except ValueError:
            result = rec.result
        created = to_datetime(rec.created_at)
        run_at = to_datetime(rec.run_at)
        assert created is not None and run_at is not None
        error = rec.error
        try:
            status = Status(rec.status)
        except ValueError:  # a record written by something else: shown as failed, with why
            status = Status.FAILED
            error = f"corrupt job record: status {rec.status!r}" + (f"\n{error}" if error else "")
        return cls(
            id=rec.id,
            name=rec.name,
            queue=rec.queue,
            status=status,
            priority=rec.priority,
            attempts=rec.attempts,
            max_attempts=rec.max_attempts,
            run_at=run_at,
            created_at=created,
            started_at=to_datetime(rec.started_at),
            finished_at=to_datetime(rec.finished_at),
            worker_id=rec.worker_id,
            result=result,
            error=error,
            parent_id=rec.parent_id or (rec.depends_on[0] if rec.depends_on else None),
            idempotency_key=rec.idempotency_key,
            args=args,
            kwargs=kwargs,
            delivery=rec.delivery,
            cancel_requested_at=to_datetime(rec.cancel_requested_at),
            cancelled_by=rec.cancelled_by,
            progress=rec.progress,
            progress_note=rec.progress_note,
            workflow_id=rec.workflow_id,
            depends_on=rec.depends_on,
            children=rec.dependents,
            key=rec.key,
        )


class JobReader(Protocol):
    """Where a handle reads its job from (the App)."""

    def get(self, job_id: str) -> Job:
        """The job with this id (``JobNotFound`` if there is none)."""
        ...


class JobHandle:
    """What enqueue returns: the job's id, and a way to wait for its outcome."""

    __slots__ = ("_jobs", "created", "id", "replaced")

    def __init__(
        self, jobs: JobReader, job_id: str, created: bool = True, replaced: bool = False
    ) -> None:
        self._jobs = jobs
        self.id = job_id
        self.created = created  # False: an idempotency key returned an existing job
        # True: that existing job was pending and took this call's arguments (on_conflict=
        # "replace"); False with created False: it was returned unchanged (running, or "keep")
        self.replaced = replaced

    def get(self) -> Job:
        """The job as stored now."""
        return self._jobs.get(self.id)

    def result(self, timeout: float | None = None, poll: float = 0.02) -> Any:
        """Wait for the job to finish and return its result.

        Raises :class:`JobFailed` or :class:`JobCancelled` for those outcomes, and
        ``TimeoutError`` if it has not finished within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            job = self._jobs.get(self.id)
            if job.status == Status.COMPLETED:
                return job.result
            if job.status == Status.FAILED:
                raise JobFailed(job.id, job.error)
            if job.status == Status.CANCELLED:
                raise JobCancelled(job.id)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {job.status} after {timeout}s")
            sleep = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
            time.sleep(sleep)
            delay = min(delay * 1.5, 0.5)

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Options of a job function; ``None`` means "the queue's setting, else the default"."""

    name: str
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | None = None
    lease: float = DEFAULT_LEASE
    delivery: Delivery = "at_least_once"
    # Flow control (jobyard.limits): the job name's own limits, and its key: a text, or a
    # function of the job's arguments returning it (``@app.job(key=...)``).
    limits: JobLimits | None = None
    key: str | Callable[..., str] | None = None
    # per-enqueue only (set through .options()):
    delay: float = 0.0
    run_at: float | None = None
    idempotency_key: str | None = None
    on_conflict: OnConflict = "keep"
    parent_id: str | None = None
    connection: Any = None

    def __post_init__(self) -> None:
        check_name("job", self.name)
        check_name("queue", self.queue)
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigurationError("timeout must be a positive number of seconds")
        if self.lease <= 0:
            raise ConfigurationError("lease must be a positive number of seconds")
        if self.delivery not in DELIVERIES:
            raise ConfigurationError(f"delivery must be one of {', '.join(DELIVERIES)}")
        check_priority(self.priority)
        check_delay(self.delay)
        check_run_at(self.run_at)
        if isinstance(self.key, str):
            check_key(self.key)
        elif self.key is not None and not callable(self.key):
            raise ConfigurationError(
                f"key must be text or a function of the job's arguments, got {self.key!r:.80}"
            )
        key = self.idempotency_key
        if key is not None and not _valid_key(key):
            raise ConfigurationError(
                f"idempotency_key must be a string of 1 to {MAX_IDEMPOTENCY_KEY} characters "
                "without NUL or lone surrogates"
            )
        if self.on_conflict != "keep":
            check_on_conflict(self.on_conflict)  # the key it needs is checked at enqueue

    @property
    def keyed(self) -> bool:
        """Whether this job carries a key by declaration (a ``key``, or limits about keys)."""
        return self.key is not None or (self.limits is not None and self.limits.limits.keyed)

    def limit_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The job's key for one call: the text given, or what the key function returns for
        these arguments (checked as any key)."""
        key = self.key
        if key is None or isinstance(key, str):
            return key
        try:
            made = key(*args, **kwargs)
        except Exception as exc:
            raise ConfigurationError(
                f"the key function of job {self.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return check_key(made)

    def new_job(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> NewJob:
        """The store-level job for one call, its arguments checked to be JSON."""
        return NewJob(
            name=self.name,
            queue=self.queue,
            payload=encode_payload(args, kwargs),
            priority=self.priority,
            delay=self.delay,
            run_at=self.run_at,
            max_attempts=self.max_attempts,
            backoff=None if self.backoff is None else self.backoff.to_json(),
            # Seconds as floats whatever the caller wrote (``timeout=30``): a store that keeps
            # values as given (memory://) would hand back an int, which the worker's record
            # check takes for a corrupt record.
            timeout=None if self.timeout is None else float(self.timeout),
            lease=float(self.lease),
            delivery=self.delivery,
            idempotency_key=self.idempotency_key,
            parent_id=self.parent_id,
            on_conflict=self.on_conflict,
            key=None if self.key is None else self.limit_key(args, kwargs),
        )


def _valid_key(key: object) -> bool:
    """1-200 characters every store can hold: UTF-8 encodable, no NUL (PostgreSQL text)."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_IDEMPOTENCY_KEY or "\x00" in key:
        return False
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@functools.lru_cache(maxsize=4096)  # .options() makes a JobFunction per call
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # a callable Python cannot describe: not checked
        return None


# (handler, job name, positional count, keyword names) -> why that call shape cannot bind, or
# None: whether a call binds depends on its shape only, so each shape is checked once.
_SHAPES: dict[tuple[Callable[..., Any], str, int, tuple[str, ...]], str | None] = {}


def _bind_problem(
    signature: inspect.Signature, label: str, nargs: int, names: tuple[str, ...]
) -> str | None:
    """Why the handler ``label`` cannot take ``nargs`` positional arguments and the keywords
    ``names`` (None if it can)."""
    try:
        signature.bind(*([None] * nargs), **dict.fromkeys(names))
    except TypeError as exc:
        plain = signature.replace(
            parameters=[
                p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
        return f"{label}{plain}: {exc}"
    return None


class JobFunction(Generic[P, R]):
    """A handler registered with ``@app.job``: call it directly, or enqueue it."""

    def __init__(
        self, func: Callable[P, R], opts: JobOptions, *, enqueue: Enqueue, jobs: JobReader
    ) -> None:
        self.func = func
        self.opts = opts
        self.is_async = inspect.iscoroutinefunction(func)
        self._enqueue = enqueue  # the way down to the store
        self._jobs = jobs  # where handles read their job back
        self.signature = _signature(func)
        functools.update_wrapper(self, func)

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """``TypeError`` now if the handler could not be called with these arguments, rather
        than on the worker, attempt after attempt."""
        if self.signature is None:
            return
        shape = (self.func, self.name, len(args), tuple(kwargs) if kwargs else ())
        try:
            problem = _SHAPES[shape]
        except KeyError:
            if len(_SHAPES) >= 4096:
                _SHAPES.clear()
            problem = _SHAPES[shape] = _bind_problem(self.signature, *shape[1:])
        if problem is not None:
            raise TypeError(problem)

    def _new_job(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> NewJob:
        self.check_call(args, kwargs)
        return self.opts.new_job(args, kwargs)

    @property
    def name(self) -> str:
        """The job name workers look the handler up by."""
        return self.opts.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature: this call, not enqueued yet, to compose with ``jobyard.chain`` and
        ``jobyard.group`` (in a chain, the previous result comes first, before ``args``)."""
        return Signature(self, args, kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = None,
        run_at: datetime | float | None = None,
        max_attempts: int | None = None,
        backoff: str | Backoff | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        delivery: Delivery | None = None,
        idempotency_key: str | None = None,
        on_conflict: OnConflict | None = None,
        parent_id: str | None = None,
        connection: Any = None,
        key: str | None = None,
    ) -> JobFunction[P, R]:
        """A copy with per-enqueue options. ``connection`` (PostgreSQL) enqueues inside the
        caller's transaction: the job exists if and only if that transaction commits. ``key``
        is the limit key (key_concurrency, key_rate_limit and fair turns count by it).

        ``on_conflict`` (with ``idempotency_key``): ``"keep"`` (the default) returns the
        pending or running job holding the key unchanged; ``"replace"`` gives a *pending*
        holder this call's arguments, and its run_at when this call sets ``delay`` or
        ``run_at`` (a debounce: a burst of calls leaves one job, with the last arguments). A
        running holder is returned unchanged either way (``handle.replaced`` is False)."""
        changes: dict[str, Any] = {
            k: v
            for k, v in {
                "queue": queue,
                "priority": priority,
                "delay": None if delay is None else float(delay),
                "max_attempts": max_attempts,
                "backoff": as_backoff(backoff),
                "timeout": timeout,
                "lease": lease,
                "delivery": delivery,
                "idempotency_key": idempotency_key,
                "on_conflict": on_conflict,
                "parent_id": parent_id,
                "connection": connection,
                "key": key,
            }.items()
            if v is not None
        }
        if run_at is not None:
            changes["run_at"] = run_at.timestamp() if isinstance(run_at, datetime) else run_at
        return JobFunction(
            self.func, replace(self.opts, **changes), enqueue=self._enqueue, jobs=self._jobs
        )

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Put one job on the queue; returns at once with its handle."""
        new = self._new_job(args, kwargs)
        return self._handles(self._enqueue.insert([new], self.opts.connection))[0]

    def enqueue_many(
        self, calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
    ) -> list[JobHandle]:
        """Enqueue many calls, each ``(args, kwargs)``, in one round trip (all or nothing)."""
        jobs: list[NewJob] = []
        add = jobs.append
        new_job = self.opts.new_job
        checked: object = None
        for args, kwargs in calls:
            # Whether a call fits the handler depends on its shape alone (count of arguments,
            # keyword names), and a batch's calls mostly share one: check each new shape.
            shape = (len(args), *kwargs) if kwargs else len(args)
            if shape != checked:
                self.check_call(args, kwargs)
                checked = shape
            add(new_job(args, kwargs))
        return self._handles(self._enqueue.insert(jobs, self.opts.connection))

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """``enqueue`` for async code: the store call runs on a thread. With an async
        ``connection`` (a psycopg ``AsyncConnection``) the job joins that connection's
        transaction."""
        new = self._new_job(args, kwargs)
        return self._handles(await self._enqueue.insert_async([new], self.opts.connection))[0]

    def _handles(self, inserted: list[Inserted]) -> list[JobHandle]:
        return [JobHandle(self._jobs, i.id, i.created, i.replaced) for i in inserted]

    def __repr__(self) -> str:
        return f"<JobFunction {self.name} queue={self.opts.queue}>"


@dataclass(frozen=True)
class Signature:
    """A job not yet enqueued: ``fn.s(*args, **kwargs)``, options via ``fn.options(...).s()``.
    ``jobyard.chain`` and ``jobyard.group`` compose signatures (``jobyard.workflow``, which
    depends on this module, never the other way round).

    In a chain it receives the previous node's result as an extra first argument."""

    fn: JobFunction[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def enqueue(self) -> JobHandle:
        """Enqueue it alone, as a plain job."""
        return self.fn.enqueue(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"{self.fn.name}.s(*{self.args!r}, **{self.kwargs!r})"
