"""App: the registry of job functions, queue configuration, and the backend and clock wiring."""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from ._enqueue import Enqueue
from ._printable import guard_logs
from ._secrets import check_url, remember
from ._tally import Metrics, Tally
from .backends import mask_url, open_backend, probe_store
from .backends.base import (
    DEFAULT_LEASE,
    FINISHED,
    QUEUED,
    Backend,
    CatchUp,
    Consumer,
    Delivery,
    JobLimits,
    JobsCancelManyParams,
    JobsCancelParams,
    JobsListParams,
    JobsPurgeParams,
    JobsResumeParams,
    LimitsStatsParams,
    LimitStats,
    Purged,
    QueueConfig,
    QueueStats,
    Rate,
    Schedule,
    SchedulesPauseParams,
    StatsParams,
    StoreInfo,
    WorkerInfo,
    as_foreign_queues,
    attach_events,
)
from .clock import Clock, SystemClock
from .errors import ConfigurationError, InvalidTransition, JobNotFound
from .events import Events
from .hooks import EnqueueEvent, Hooks, JobEvent
from .job import Job, JobFunction, JobHandle, JobOptions, Status, check_name
from .limits import check_fair, job_limits, queue_limits
from .retry import Backoff, as_backoff
from .workflow import MAX_WORKFLOW, Workflow, build_workflow, place_of, purge_plan

if TYPE_CHECKING:
    from .worker.worker import Worker

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_URL = "sqlite:///jobyard.db"


class App:
    """A jobyard application: where jobs are registered, enqueued, inspected and run.

    ``url`` names the store: ``sqlite:///path.db`` (the default, or ``$JOBYARD_URL``),
    ``postgresql://...``, ``redis://...``, ``redis+cluster://host:port`` or ``memory://``.
    The store is opened on first use, so importing a module that builds an App costs nothing.
    """

    def __init__(self, url: str | None = None, *, clock: Clock | None = None) -> None:
        self.url = url or os.environ.get("JOBYARD_URL") or DEFAULT_URL
        self.clock: Clock = clock or SystemClock()
        self.registry: dict[str, JobFunction[Any, Any]] = {}
        self.consumers: list[Consumer] = []  # list and stream consumers started by workers
        # Declared with schedule() or @app.cron, by name; stored_schedules() reads the store's.
        self.declared_schedules: dict[str, Schedule] = {}
        self.hooks = Hooks()
        # What the worker's parts, the enqueue step and the consumers did (jobyard.events):
        # nobody listens until metrics() or a subscriber asks, and then it costs nothing more.
        self.events = Events()
        self._tally: Tally | None = None
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        # job functions' way down
        self._enqueue = Enqueue(lambda: self.backend, self.hooks, self.events)
        self._tracing: Any = None  # jobyard._otel.Tracing once tracing is on, False when off
        self._enqueue.inject = self._first_inject  # decides on tracing at the first enqueue
        check_url(self.url)  # before anything can quote a piece of a mangled password
        remember(self.url)
        guard_logs()  # a job's values reach the library's log lines escaped, whoever wrote them
        scheme = self.url.split("://", 1)[0] if "://" in self.url else ""
        from .backends import SCHEMES

        if scheme.lower() not in SCHEMES:  # fail at construction: a typo should not wait
            open_backend(self.url, self.clock)

    def __repr__(self) -> str:
        return f"App({mask_url(self.url)!r})"

    # the store ---------------------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The store, opened (and, where it applies, schema-checked) on first use."""
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    backend = open_backend(self.url, self.clock)
                    try:
                        backend.schema_check()
                    except BaseException:
                        backend.close()  # its pool would linger, retrying in the background
                        raise
                    attach_events(backend, self.events)
                    self._backend = backend
        return self._backend

    def check_store(self, timeout: float = 5.0) -> None:
        """Connect to the store once, without retries, and raise
        :class:`jobyard.errors.StoreUnavailable` naming the cause if that fails within
        ``timeout`` seconds. One-shot commands call it first; a worker instead waits out an
        outage."""
        if self._backend is None:
            probe_store(self.url, timeout)

    def migrate(self) -> list[str]:
        """Create or upgrade the store's schema (``jobyard migrate``); names of what ran."""
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = open_backend(self.url, self.clock)
        return self._backend.schema_migrate()

    def close(self) -> None:
        """Close the store's connections; the App reopens them if used again."""
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    # registration ------------------------------------------------------------------------------

    @overload
    def job(self, func: Callable[P, R], /) -> JobFunction[P, R]: ...

    @overload
    def job(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        backoff: str | Backoff | None = None,
        timeout: float | None = None,
        lease: float = DEFAULT_LEASE,
        delivery: Delivery = "at_least_once",
        rate_limit: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate_limit: str | Rate | None = None,
        key: str | Callable[..., str] | None = None,
    ) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...

    def job(
        self,
        func: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        backoff: str | Backoff | None = None,
        timeout: float | None = None,
        lease: float = DEFAULT_LEASE,
        delivery: Delivery = "at_least_once",
        rate_limit: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate_limit: str | Rate | None = None,
        key: str | Callable[..., str] | None = None,
    ) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
        """Register a handler. ``max_attempts`` and ``backoff`` left unset take the queue's
        settings (``configure_queue``), else 4 attempts with exponential backoff.

        Flow control (held by the store's claim across every worker; see :mod:`jobyard.limits`):
        ``rate_limit`` ("100/s", "600/m") caps this job's starts in its queue, smoothed;
        ``key_concurrency`` caps its running jobs per key and ``key_rate_limit`` their starts
        per key. ``key`` is the job's key, text or a function of its arguments (e.g.
        ``key=lambda customer, **_: f"customer:{customer}"``); ``.options(key=...)`` sets it
        per enqueue. Bad values are refused here, naming them."""
        job_name = name

        def register(f: Callable[P, R]) -> JobFunction[P, R]:
            label = job_name or f.__name__
            check_name("job", label)
            check_name("queue", queue)
            limits = job_limits(queue, label, rate_limit, key_concurrency, key_rate_limit)
            opts = JobOptions(
                name=label,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                backoff=as_backoff(backoff),
                timeout=timeout,
                lease=lease,
                delivery=delivery,
                limits=limits if limits.limits else None,
                key=key,
            )
            if opts.name in self.registry:
                raise ConfigurationError(f"a job named {opts.name!r} is registered already")
            jf: JobFunction[P, R] = JobFunction(f, opts, enqueue=self._enqueue, jobs=self)
            self.registry[opts.name] = jf
            return jf

        return register(func) if func is not None else register

    def by_name(self, name: str, **options: Any) -> JobFunction[..., Any]:
        """A job function for ``name`` whether or not its handler is registered here, so a
        producer can enqueue work whose code lives only on the workers."""
        if name in self.registry:
            known = self.registry[name]
            return known.options(**options) if options else known

        def no_local_handler(*args: Any, **kwargs: Any) -> Any:
            raise ConfigurationError(f"no handler registered for {name!r} in this process")

        stub: JobFunction[..., Any] = JobFunction(
            no_local_handler, JobOptions(name=name), enqueue=self._enqueue, jobs=self
        )
        return stub.options(**options) if options else stub

    # producer side -----------------------------------------------------------------------------

    def enqueue(self, name: str, /, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a job by name; the handler need not be registered in this process."""
        return self.by_name(name).enqueue(*args, **kwargs)

    # hooks -------------------------------------------------------------------------------------

    def on_enqueue(self, fn: Callable[[EnqueueEvent], object]) -> Callable[[EnqueueEvent], object]:
        """Call ``fn(EnqueueEvent)`` after each job this process enqueues is stored."""
        self.hooks.add("on_enqueue", fn)
        return fn

    def before_job(self, fn: Callable[[JobEvent], object]) -> Callable[[JobEvent], object]:
        """Call ``fn(JobEvent)`` in the worker just before each handler runs."""
        self.hooks.add("before_job", fn)
        return fn

    def after_job(self, fn: Callable[[JobEvent], object]) -> Callable[[JobEvent], object]:
        """Call ``fn(JobEvent)`` in the worker after each attempt, with its outcome: completed,
        retry, failed, dead, released or cancelled (see :mod:`jobyard.hooks`)."""
        self.hooks.add("after_job", fn)
        return fn

    def on_dead(self, fn: Callable[[JobEvent], object]) -> Callable[[JobEvent], object]:
        """Call ``fn(JobEvent)`` in the worker when a job enters the dead letter (``failed``)."""
        self.hooks.add("on_dead", fn)
        return fn

    # metrics and tracing ---------------------------------------------------------------------

    def metrics(self) -> Metrics:
        """The counters ``/metrics`` exposes, as plain data: jobs enqueued by this process,
        attempts its workers finished (completed, retried, failed into the dead letter,
        cancelled, released), lapsed leases its reapers found, each by (queue, job name); the
        run time and due-to-start wait histograms; the worker's other events (``notes``).

        Counting starts at the first call (``jobyard worker --metrics-port`` and the
        dashboard's ``/metrics`` make it at start): until then no event is built at all. For
        pushing to StatsD or another system, call it once at start, then read it on a timer."""
        tally = self._tally
        if tally is None:
            with self._lock:
                if self._tally is None:
                    self._tally = Tally()
                    self.events.subscribe(self._tally)
                tally = self._tally
        return tally.snapshot()

    def tracing(self) -> Any:
        """The OpenTelemetry seam (``jobyard[otel]``), or None: on when ``opentelemetry``
        can be imported and ``JOBYARD_TRACING`` is not ``off``. Then each enqueue carries the
        caller's trace context in its jobs, and each attempt runs in a span, its child.
        Without the extra nothing is imported."""
        if self._tracing is None:
            from . import _otel

            made = _otel.make()
            if made is None:
                self._tracing = False
            else:
                self._tracing = made
                self._enqueue.inject = made.inject
        return self._tracing or None

    def _first_inject(self) -> dict[str, str]:
        tracing = self.tracing()
        if tracing is None:
            self._enqueue.inject = None
            return {}
        carrier: dict[str, str] = tracing.inject()
        return carrier

    def get(self, job_id: str) -> Job:
        """The job with this id (``JobNotFound`` if there is none)."""
        rec = self.backend.jobs_get(str(job_id))
        if rec is None:
            raise JobNotFound(str(job_id), self._id_hint(str(job_id)))
        return Job.from_record(rec)

    def _id_hint(self, job_id: str) -> str:
        """Ids are the store's own: on Redis they name their queue (``emails:12``), so a bare
        number, right on SQLite and PostgreSQL, is a likely slip there."""
        if self.url.lower().startswith("redis") and job_id.strip().isdigit():
            return f"job ids on Redis name their queue, e.g. 'emails:{job_id.strip()}'"
        return ""

    def _with_hint(self, exc: JobNotFound) -> JobNotFound:
        return JobNotFound(str(exc.args[0]), exc.hint or self._id_hint(str(exc.args[0])))

    def jobs(
        self,
        *,
        queue: str | None = None,
        status: str | Status | None = None,
        name: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Job]:
        """Jobs matching the filter, newest first."""
        params = JobsListParams(
            queue=queue,
            status=None if status is None else Status(status).value,
            name=name,
            limit=limit,
            offset=offset,
        )
        return [Job.from_record(r) for r in self.backend.jobs_list(params)]

    def cancel(self, job_id: str, *, by: str | None = None) -> Job:
        """Cancel a job. A pending job is cancelled at once. A running one gets a cancellation
        request, which its worker learns at its next lease renewal: an async handler is
        cancelled, a sync handler sees ``current_job().cancel_requested`` and may stop, and
        the job ends ``cancelled``. A handler that ignores the request finishes, and its
        outcome stands. ``by`` (free text) is recorded with the time as who asked; a repeated
        request keeps the first. A finished job raises InvalidTransition."""
        params = JobsCancelParams(str(job_id), by)
        try:
            return Job.from_record(self.backend.jobs_cancel(params))
        except JobNotFound as exc:
            raise self._with_hint(exc) from None

    def workflow(self, workflow_id: str) -> Workflow:
        """A chain or group as stored: its jobs in order, their statuses and its tree
        (``app.get(id).workflow_id`` names the workflow of any of its jobs)."""
        recs = self.backend.jobs_list(JobsListParams(workflow_id=workflow_id, limit=MAX_WORKFLOW))
        if not recs:
            raise JobNotFound(f"workflow {workflow_id}")
        places = {r.id: at for r in recs if (at := place_of(r.payload)) is not None}
        return build_workflow(workflow_id, [Job.from_record(r) for r in recs], places)

    def results(self, ids: Sequence[str]) -> dict[str, Job]:
        """The jobs with these ids (one read; missing ones left out)."""
        recs = self.backend.jobs_list(JobsListParams(ids=list(ids), limit=max(len(ids), 1)))
        return {r.id: Job.from_record(r) for r in recs}

    def cancel_workflow(self, workflow_id: str, *, by: str | None = None) -> Workflow:
        """Cancel a chain or group: what has not run yet is cancelled, the running jobs are asked
        to stop (as :meth:`cancel`), the finished ones are left as they are. One store call for
        the whole workflow (``jobs_cancel_many``), not one per job."""
        flow = self.workflow(workflow_id)
        # Later steps first, so none is released by an input's completion meanwhile and run
        # (a store that splits the call keeps this order between its parts).
        ids = [job.id for job in reversed(flow.jobs) if not job.status.finished]
        if ids:
            self.backend.jobs_cancel_many(JobsCancelManyParams(ids, by))
        return self.workflow(workflow_id)

    def resume_workflow(self, workflow_id: str) -> Workflow:
        """Resume a failed or cancelled chain or group, so that it completes: every job of it
        that ended failed or cancelled runs again (attempts reset, as :meth:`retry`), at once
        if its inputs have all completed, else once they have (it waits for them again, as
        when it was enqueued); completed jobs keep their results and are not run again. One
        store call for the whole workflow (``jobs_resume``), and safe to call again: a job
        still running with a cancellation request that then stops cancelled is resumed by the
        next call. Raises JobNotFound if a job it would run needs one that was purged."""
        flow = self.workflow(workflow_id)
        present = {job.id for job in flow.jobs}
        stopped = [job for job in flow.jobs if job.status in (Status.FAILED, Status.CANCELLED)]
        for job in stopped:
            gone = next((i for i in job.depends_on if i not in present), None)
            if gone is not None:
                raise JobNotFound(
                    gone,
                    f"purged, and step {job.id} of workflow {workflow_id} takes its result: "
                    "the workflow cannot be resumed",
                )
        if stopped:
            # Later steps first, as cancel_workflow: a step waits again before its inputs run.
            ids = [job.id for job in reversed(stopped)]
            self.backend.jobs_resume(JobsResumeParams(ids))
        return self.workflow(workflow_id)

    def cancel_pending(
        self, *, queue: str | None = None, name: str | None = None, dry_run: bool = False
    ) -> list[str]:
        """Cancel every job of ``queue`` and/or job ``name`` (at least one is required) that
        has not started: the pending ones and the workflow steps still waiting for their
        inputs (they would otherwise run there later, once their inputs complete); the ids
        cancelled (with ``dry_run``, those that would be, nothing changed).

        Each job is cancelled by the same atomic step as :meth:`cancel`, a page of them per
        store call, so a job a worker claims meanwhile runs and is skipped, never
        half-cancelled; jobs enqueued while this runs are cancelled too. A cancelled job can be
        re-driven with :meth:`retry`."""
        if queue is None and name is None:
            raise ConfigurationError("cancel_pending needs a queue or a job name (or both)")
        page = 500
        if dry_run:
            found: list[str] = []
            for status in QUEUED:
                offset = 0
                while batch := self.jobs(
                    queue=queue, name=name, status=status, limit=page, offset=offset
                ):
                    offset += len(batch)
                    found.extend(j.id for j in batch)
            return found
        done: list[str] = []
        tried: set[str] = set()
        while True:
            # Always the first page: what was cancelled or claimed has left it.
            ids = [
                j.id
                for status in QUEUED
                for j in self.jobs(queue=queue, name=name, status=status, limit=page)
                if j.id not in tried
            ]
            if not ids:
                return done
            tried.update(ids)
            done += self.backend.jobs_cancel_many(JobsCancelManyParams(ids, pending_only=True))

    def purge_preview(
        self,
        statuses: Sequence[str] = FINISHED,
        older_than: float = 0.0,
        queue: str | None = None,
    ) -> dict[str, int]:
        """How many jobs :meth:`purge` with these arguments would delete now, per status
        (``jobyard purge --dry-run``), then, when there are any, ``"waiting"``: the workflow
        steps downstream it would delete with them, and ``"kept"``: the completed jobs it
        would keep because a step that has not completed needs them (not deleted). It reads
        every finished job that matches: cheap for a dead letter, slow for millions of
        completed jobs."""
        cutoff = self.backend.clock_now() - older_than
        matched: list[Job] = []
        page = 1000
        for status in dict.fromkeys(statuses):
            offset = 0
            while batch := self.jobs(queue=queue, status=status, limit=page, offset=offset):
                offset += len(batch)
                matched += [
                    j
                    for j in batch
                    if j.finished_at is not None and j.finished_at.timestamp() <= cutoff
                ]
        going, waiting, kept = purge_plan(matched, self.results)
        counts = dict.fromkeys(dict.fromkeys(statuses), 0)
        for job in going:
            counts[job.status.value] += 1
        extra = {"waiting": waiting, "kept": kept}
        return {**counts, **{k: n for k, n in extra.items() if n}}

    def retry(self, job_id: str) -> Job:
        """Re-drive a failed or cancelled job: pending again, with its attempts reset. A workflow
        step resumes its workflow from there; one whose inputs have not all completed (a
        cancelled workflow) is refused, as it would run without its argument:
        :meth:`resume_workflow` runs such a workflow again as a whole."""
        rec = self.backend.jobs_get(str(job_id))
        if rec is not None and rec.depends_on:
            inputs = self.results(rec.depends_on)
            for input_id in rec.depends_on:
                got = inputs.get(input_id)
                if got is None or got.status != Status.COMPLETED:
                    state = "gone" if got is None else got.status.value
                    raise InvalidTransition.input_not_completed(rec.id, input_id, state)
        try:
            return Job.from_record(self.backend.jobs_retry(str(job_id)))
        except JobNotFound as exc:
            raise self._with_hint(exc) from None

    def purge(
        self,
        statuses: Sequence[str] = FINISHED,
        older_than: float = 0.0,
        queue: str | None = None,
    ) -> Purged:
        """Delete finished jobs finished at least ``older_than`` seconds ago, but the completed
        ones a workflow step that has not completed still needs (counted in ``.kept``), with
        the waiting workflow steps that wait on a deleted job, which could never run
        (``.waiting``, within the total). The result is the number of jobs deleted."""
        return self.backend.jobs_purge(JobsPurgeParams(tuple(statuses), older_than, queue))

    def stats(self, queues: Sequence[str] = ()) -> list[QueueStats]:
        """Counts by status for each queue."""
        return self.backend.stats_get(StatsParams(tuple(queues)))

    def store_info(self) -> StoreInfo:
        """What the store tells about itself: its kind, how long it keeps finished jobs whose
        queue sets no retention, and its server's warnings."""
        return self.backend.store_info()

    def job_limits(self) -> list[JobLimits]:
        """The limits of every registered job, empty ones included (a worker stores them all, so
        a limit removed from the code is removed from the store)."""
        return [
            jf.opts.limits or JobLimits(jf.opts.queue, jf.name) for jf in self.registry.values()
        ]

    def limits(self, queues: Sequence[str] = (), top_keys: int = 5) -> list[LimitStats]:
        """Each limited queue and job name as it stands (how full), with the keys of each queue
        that hold the most pending jobs (see :class:`jobyard.backends.base.LimitStats`)."""
        return self.backend.limits_stats(LimitsStatsParams(tuple(queues), top_keys))

    def workers(self) -> list[WorkerInfo]:
        """Live workers."""
        return self.backend.workers_list()

    def queues(self) -> list[QueueConfig]:
        """The queue configurations stored (see :meth:`configure_queue`)."""
        return self.backend.queues_list()

    def configure_queue(
        self,
        name: str,
        *,
        max_concurrency: int | None = None,
        max_attempts: int | None = None,
        backoff: str | Backoff | None = None,
        max_pending: int | None = None,
        paused: bool = False,
        retention: float | None = None,
        rate_limit: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate_limit: str | Rate | None = None,
        fair: bool = False,
    ) -> QueueConfig:
        """Store a queue's whole configuration (settings left out are cleared); they apply to
        jobs enqueued afterwards that set none. ``max_concurrency`` holds across every worker of
        every host. ``retention``: seconds a completed job of the queue is kept after it
        finished (None: the store's default: a day on Redis, until purged elsewhere); workers
        apply it. To pause or resume without touching the rest, see :meth:`pause_queue`.

        Flow control, held by the claim across every worker (see :mod:`jobyard.limits`):
        ``rate_limit`` ("600/m") caps the queue's starts, smoothed; ``key_concurrency`` and
        ``key_rate_limit`` cap the running jobs and the starts of each key
        (``.options(key=...)``); ``fair=True`` takes the queue's jobs in turns between keys,
        up to four of a key's per round (refused for a queue whose registered jobs declare no
        key). Bad values are refused
        here, naming them."""
        check_name("queue", name)
        limits = queue_limits(rate_limit, key_concurrency, key_rate_limit, fair)
        check_fair(
            name,
            limits.fair,
            (jf.opts.keyed for jf in self.registry.values() if jf.opts.queue == name),
        )
        for label, value in (
            ("max_concurrency", max_concurrency),
            ("max_attempts", max_attempts),
            ("max_pending", max_pending),
        ):
            if value is not None and value < (0 if label == "max_pending" else 1):
                raise ConfigurationError(f"{label} must be positive, got {value}")
        if retention is not None and not retention > 0:
            raise ConfigurationError(
                f"retention must be a positive number of seconds, got {retention}"
            )
        policy = as_backoff(backoff)
        config = QueueConfig(
            name=name,
            max_concurrency=max_concurrency,
            max_attempts=max_attempts,
            backoff=None if policy is None else policy.to_json(),
            max_pending=max_pending,
            paused=paused,
            retention=None if retention is None else float(retention),
            limits=limits,
        )
        self.backend.queues_configure(config)
        return config

    def pause_queue(self, name: str, paused: bool = True) -> QueueConfig:
        """Stop (or with ``paused=False`` resume) claims from a queue, keeping its settings."""
        check_name("queue", name)
        stored = {q.name: q for q in self.queues()}.get(name, QueueConfig(name))
        config = dataclasses.replace(stored, paused=paused)
        self.backend.queues_configure(config)
        return config

    # recurring jobs ----------------------------------------------------------------------------

    def schedule(
        self,
        cron: str | None = None,
        job: JobFunction[..., Any] | str | None = None,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        every: float | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp = "latest",
    ) -> Schedule:
        """Declare a schedule (kept in :attr:`declared_schedules`; workers and
        :meth:`sync_schedules` store it): enqueue ``job(*args, **kwargs)`` at every tick of the
        cron expression ``cron``
        (5 fields, or 6 with seconds first), read in ``timezone`` (an IANA name), or every
        ``every`` seconds: exactly one of the two. Workers fire each tick exactly once;
        ``catch_up`` ("latest", "all" or "none") says what ticks missed while no worker ran
        become (see :mod:`jobyard.cron`). The job's arguments travel as ``args`` and ``kwargs`` so
        none can collide with ``name`` (the schedule's name, by default the job's); options go
        through ``job.options()``. A bad expression, interval or timezone raises
        :class:`ConfigurationError` here."""
        from .cron import check_rule

        cron, every, timezone, catch_up = check_rule(cron, every, timezone, catch_up)
        if job is None:
            raise TypeError("schedule() needs the job to enqueue")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"args must be a list or tuple of the job's arguments, not {args!r}")
        fn = self.by_name(job) if isinstance(job, str) else job
        sched_name = check_name("schedule", name or fn.name)
        if sched_name in self.declared_schedules:
            raise ConfigurationError(f"a schedule named {sched_name!r} exists already")
        fn.check_call(args, kwargs or {})
        sched = Schedule(
            sched_name,
            cron,
            fn.opts.new_job(args, kwargs or {}),
            every=every,
            timezone=timezone,
            catch_up=catch_up,
        )
        self.declared_schedules[sched_name] = sched
        return sched

    def cron(
        self,
        expression: str | None = None,
        *,
        every: float | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp = "latest",
        name: str | None = None,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Callable[[JobFunction[P, R]], JobFunction[P, R]]:
        """Stacked above ``@app.job``: schedule the job (see :meth:`schedule`) and return it
        unchanged. The expression is checked at once, so a bad one fails at import."""
        from .cron import check_rule

        check_rule(expression, every, timezone, catch_up)

        def declare(fn: JobFunction[P, R]) -> JobFunction[P, R]:
            if not isinstance(fn, JobFunction):
                raise TypeError("@app.cron goes above @app.job, which makes the job it schedules")
            self.schedule(
                expression,
                fn,
                args,
                kwargs,
                name=name,
                every=every,
                timezone=timezone,
                catch_up=catch_up,
            )
            return fn

        return declare

    def pause_schedule(self, name: str) -> None:
        """Stop firing a stored schedule until :meth:`resume_schedule`. The pause is kept in the
        store: restarts and deploys (which sync schedules) leave it paused."""
        if not self.backend.schedules_pause(SchedulesPauseParams(name, paused=True)):
            raise ConfigurationError(self._not_stored(name))

    def resume_schedule(self, name: str) -> None:
        """Fire a paused schedule again, from its first tick after now: the ticks it missed
        while paused are dropped, whatever its ``catch_up``."""
        from .cron import next_run

        stored = {s.name: s for s in self.backend.schedules_list()}.get(name)
        if stored is None:
            raise ConfigurationError(self._not_stored(name))
        next_at = next_run(stored, self.backend.clock_now())
        if not self.backend.schedules_pause(SchedulesPauseParams(name, False, next_at)):
            raise ConfigurationError(self._not_stored(name))

    def _not_stored(self, name: str) -> str:
        hint = " (declared here: a worker or `jobyard cron APP --sync` stores it)"
        return f"no stored schedule named {name!r}" + (
            hint if name in self.declared_schedules else ""
        )

    def sync_schedules(self) -> None:
        """Store this app's declared schedules, deactivating stored ones it no longer has."""
        from .worker import recurring

        recurring.sync(self.backend, self.declared_schedules.values())

    def stored_schedules(self) -> list[Schedule]:
        """The schedules in the store (of every app version that synced), with their state and
        next and last runs."""
        return self.backend.schedules_list()

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Deprecated name of :attr:`declared_schedules`."""
        warnings.warn(
            "App.schedules is now App.declared_schedules", DeprecationWarning, stacklevel=2
        )
        return self.declared_schedules

    def scheduled(self) -> list[Schedule]:
        """Deprecated name of :meth:`stored_schedules`."""
        warnings.warn(
            "App.scheduled() is now App.stored_schedules()", DeprecationWarning, stacklevel=2
        )
        return self.stored_schedules()

    # consumers of foreign Redis lists and streams ------------------------------------------------

    def consume_list(self, key: str, handler: Callable[[Any], Any], **options: Any) -> Consumer:
        """Consume JSON entries that any Redis client pushed onto list ``key`` (Redis only).
        Workers started by :meth:`run_worker` run it. See ``ListConsumer`` for the options."""
        store = as_foreign_queues(self.backend, "consume_list")
        consumer = store.consumer_list(key, handler, runner=self._entry_runner(), **options)
        self.consumers.append(consumer)
        return consumer

    def consume_stream(
        self, stream: str, handler: Callable[[Any], Any], **options: Any
    ) -> Consumer:
        """Consume a Redis stream with a consumer group (Redis only); ``reply=job_function``
        turns each handler result into a job. See ``StreamConsumer`` for the options."""
        store = as_foreign_queues(self.backend, "consume_stream")
        consumer = store.consumer_stream(
            stream, handler, runner=self._entry_runner(), enqueue=self._enqueue.insert, **options
        )
        self.consumers.append(consumer)
        return consumer

    def _entry_runner(self) -> Any:
        from .worker.executor import EntryRunner

        return EntryRunner(self.events)

    # workers -----------------------------------------------------------------------------------

    def worker(
        self,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        **options: Any,
    ) -> Worker:
        """A worker for these queues (default: every queue a registered job uses), not started.
        ``concurrency`` defaults to 8, or 100 when every handler is async."""
        from .worker.worker import Worker

        return Worker(
            self.backend,
            self.registry,
            queues,
            concurrency,
            hooks=self.hooks,
            schedules=list(self.declared_schedules.values()),
            consumers=self.consumers,
            events=self.events,
            tracing=self.tracing(),
            **options,
        )

    def run_worker(
        self,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        **options: Any,
    ) -> None:
        """Run a worker in this process until SIGINT or SIGTERM (a second one stops at once)."""
        self.worker(queues, concurrency, **options).run()


def import_from_working_directory() -> None:
    """Make modules of the working directory importable, as ``python -m`` does: the rule by
    which the ``jobyard`` command finds APP (the console script's own directory is on
    ``sys.path``, the working directory is not). Loading APP and ``--reload``'s search for
    what to watch both follow it."""
    import sys

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def load_app(ref: str) -> App:
    """Import ``module:attribute`` (as uvicorn and celery take it) and return the App there."""
    import importlib

    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"APP must look like 'module:attribute', got {ref!r}")
    import_from_working_directory()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the user's module itself failed while importing
        raise ConfigurationError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise ConfigurationError(f"{ref!r} is a {type(obj).__name__}, not a jobyard.App")
    return obj
