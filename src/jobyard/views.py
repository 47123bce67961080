"""The read model: what ``jobyard status``, ``show``, ``jobs`` and ``cron`` print, and what the
dashboard and the metrics render, built once and only through the :class:`jobyard.App`.

Every view is a plain frozen dataclass of raw values: text exactly as the store holds it (a job's
error or argument may hold terminal escapes or HTML: escaping is the renderer's job,
:mod:`jobyard._printable` for a terminal, HTML escaping for a web page), times as the records
carry them (epoch seconds for queues, workers and schedules; datetimes on a :class:`Job`), and
nothing formatted. A renderer decides how a value reads; it never asks the store itself.

- :func:`status`: a :class:`StatusView` of the store (:class:`jobyard.backends.base.StoreInfo`),
  one :class:`QueueRow` per queue, one :class:`WorkerRow` per live worker, and each limited
  scope's state; :func:`held_back` is what each limit of a scope holds back now (the one rule
  under ``jobyard status``, the dashboard and the metrics' gauges).
- :func:`job_detail`: a :class:`JobDetail`, the job with its workflow (chain or group) and tree;
  :func:`job_fields` is every field of a job as JSON-ready values (``--json``).
- :func:`schedules`: one :class:`ScheduleRow` per stored or declared schedule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ._secrets import mask_url
from .app import App
from .backends.base import (
    STATUSES,
    LimitStats,
    QueueConfig,
    QueueLimits,
    QueueStats,
    Schedule,
    StatsParams,
    StoreInfo,
)
from .job import Job
from .retry import Backoff
from .workflow import Workflow

# The running jobs one status read lists to say what each worker runs now (``running=True``);
# past that many the workers' ``running`` is left unknown rather than read at length.
MAX_RUNNING_LISTED = 1000

ScheduleState = Literal["active", "paused", "inactive", "not stored yet"]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue: its jobs by status and its configuration.

    ``configured`` says whether the queue has stored settings (``app.configure_queue``); without
    them the limits are None and ``paused`` is False."""

    name: str
    counts: dict[str, int]  # every status of STATUSES, 0 where there is none
    completed_last_minute: int
    configured: bool
    max_concurrency: int | None
    max_pending: int | None
    max_attempts: int | None
    backoff: Backoff | None  # as the workers read it (a corrupt text reads as the default)
    paused: bool
    retention: float | None  # the queue's own: seconds a completed job is kept
    default_retention: float | None  # the store's, where the queue sets none (StoreInfo)
    # Seconds the queue's oldest due pending job has waited since it became due (its run_at:
    # ``QueueStats.oldest_pending_at``, an index probe in the store); None: none is due.
    oldest_pending_age: float | None = None

    @property
    def kept(self) -> float | None:
        """Seconds a completed job of this queue is kept: the queue's retention, else the
        store's; None: until purged."""
        return self.retention or self.default_retention


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One live worker (one process)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float  # epoch seconds
    last_seen: float  # epoch seconds: its last beat
    # The jobs it runs now (asked for with ``status(app, running=True)``); None: not read.
    running: tuple[Job, ...] | None = None


@dataclass(frozen=True, slots=True)
class StatusView:
    """The store, its queues and its live workers (``jobyard status``, the overview page)."""

    store: str  # the store's URL, credentials masked
    info: StoreInfo
    queues: tuple[QueueRow, ...]  # by name
    workers: tuple[WorkerRow, ...]  # by id
    # Each limited queue and job name, how full it is and the keys with the most pending jobs
    # (queue rows first, then its job names'; see LimitStats).
    limits: tuple[LimitStats, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        """What an operator should know about the store's server."""
        return self.info.warnings

    def held_back(self, limit: LimitStats) -> dict[str, int]:
        """What each limit of one of :attr:`limits` holds back now (see :func:`held_back`),
        with its queue's pending count from :attr:`queues`."""
        row = next((q for q in self.queues if q.name == limit.queue), None)
        return held_back(limit, 0 if row is None else row.counts.get("pending", 0))


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job, every field (``Job``: arguments decoded, a corrupt payload shown as
    ``{"<corrupt payload>": text}``), and the workflow it belongs to, with its tree."""

    job: Job
    workflow: Workflow | None = None  # its chain or group (``Workflow.tree``), if it has one


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One schedule: stored (with its state and runs), declared by this App, or both."""

    name: str
    cron: str | None
    every: float | None  # seconds, when cron is None
    timezone: str
    catch_up: str
    job: str  # the job's name
    queue: str
    active: bool
    paused: bool
    next_run_at: float | None  # epoch seconds
    last_run_at: float | None
    stored: bool  # in the store (synced by a worker or `jobyard cron --sync`)
    declared: bool  # declared by this App

    @property
    def state(self) -> ScheduleState:
        """``not stored yet`` (declared only), ``inactive`` (no longer declared by the app
        that synced last), ``paused`` or ``active``."""
        if not self.stored:
            return "not stored yet"
        if not self.active:
            return "inactive"
        return "paused" if self.paused else "active"


# --- building the views --------------------------------------------------------------------------


def status(app: App, *, running: bool = False) -> StatusView:
    """The store, every queue (that has jobs, settings, or a job of ``app`` using it) and every
    live worker; with ``running``, the jobs each worker runs now, in one more listing (up to
    :data:`MAX_RUNNING_LISTED` running jobs)."""
    info = app.store_info()
    stats = {s.queue: s for s in app.stats()}
    rows = queue_rows(app, stats, info)
    workers = worker_rows(app, stats, running=running)
    return StatusView(mask_url(app.url), info, rows, workers, tuple(app.limits()))


def rate_full(limit: LimitStats) -> bool:
    """Whether the scope's rate stops the next start now: its bucket admits none (the burst's
    last slot is taken once ``rate_used`` passes ``(burst - 1) / burst``; see
    :class:`jobyard.backends.base.Rate`)."""
    rate, used = limit.limits.rate, limit.rate_used
    if rate is None or used is None:
        return False
    return used * rate.burst > rate.burst - 1 + 1e-9


def held_back(limit: LimitStats, backlog: int = 0) -> dict[str, int]:
    """What each limit of the scope holds back now, by limit (``max_concurrency``, ``rate``,
    ``key_concurrency``, those the scope has; ``key_rate`` is not counted): a max_concurrency
    at its cap or a rate that admits no start holds back the scope's due pending jobs
    (:attr:`LimitStats.due`; a job name's: that name's), key_concurrency those whose key is at
    its cap (``due_keys_full``). A job stopped by two limits counts under each.

    Counted from the pending jobs ``limits_stats`` read: lower bounds when it did not read them
    all (``exact`` False). For a queue's own max_concurrency and rate the queue's ``backlog``
    (its pending jobs, due or not, as the store counts them) is then taken when larger, so a
    backlog past the walk is counted whole, as it was before the walk."""
    due = limit.due
    if limit.job is None and not limit.exact and due:
        due = max(due, backlog)
    out: dict[str, int] = {}
    if limit.max_concurrency is not None:
        out["max_concurrency"] = due if limit.running >= limit.max_concurrency else 0
    if limit.limits.rate is not None:
        out["rate"] = due if rate_full(limit) else 0
    if limit.limits.key_concurrency is not None:
        out["key_concurrency"] = limit.due_keys_full
    return out


def limit_rules(limits: QueueLimits, max_concurrency: int | None = None) -> list[str]:
    """A scope's limits as status words them: ``max_concurrency=5``, ``rate=100/s``,
    ``key_concurrency=1``, ``key_rate=5/s``, ``fair``."""
    rules = [] if max_concurrency is None else [f"max_concurrency={max_concurrency}"]
    if limits.rate is not None:
        rules.append(f"rate={limits.rate.text()}")
    if limits.key_concurrency is not None:
        rules.append(f"key_concurrency={limits.key_concurrency}")
    if limits.key_rate is not None:
        rules.append(f"key_rate={limits.key_rate.text()}")
    if limits.fair:
        rules.append("fair")
    return rules


def queue_rows(
    app: App, stats: dict[str, QueueStats] | None = None, info: StoreInfo | None = None
) -> tuple[QueueRow, ...]:
    """One row per queue that has jobs, settings, or a job of ``app`` using it, by name."""
    stats = {s.queue: s for s in app.stats()} if stats is None else stats
    info = app.store_info() if info is None else info
    configs = {c.name: c for c in app.queues()}
    names = set(stats) | set(configs) | {jf.opts.queue for jf in app.registry.values()}
    # The store's "now" (one more call) only when some queue has a due pending job to age.
    due = any(s.oldest_pending_at is not None for s in stats.values())
    now = app.backend.clock_now() if due else 0.0
    return tuple(_queue_row(q, stats.get(q), configs.get(q), info, now) for q in sorted(names))


def _queue_row(
    name: str, st: QueueStats | None, cfg: QueueConfig | None, info: StoreInfo, now: float
) -> QueueRow:
    counts = st.counts if st is not None else {}
    oldest = None if st is None else st.oldest_pending_at
    return QueueRow(
        name=name,
        counts={s: counts.get(s, 0) for s in STATUSES},
        completed_last_minute=st.completed_last_minute if st is not None else 0,
        configured=cfg is not None,
        max_concurrency=None if cfg is None else cfg.max_concurrency,
        max_pending=None if cfg is None else cfg.max_pending,
        max_attempts=None if cfg is None else cfg.max_attempts,
        backoff=None if cfg is None or cfg.backoff is None else Backoff.from_json(cfg.backoff),
        paused=cfg is not None and cfg.paused,
        retention=None if cfg is None else cfg.retention,
        default_retention=info.retention,
        oldest_pending_age=None if oldest is None else max(now - oldest, 0.0),
    )


def worker_rows(
    app: App, stats: dict[str, QueueStats] | None = None, *, running: bool = False
) -> tuple[WorkerRow, ...]:
    """Every live worker, by id; with ``running``, the jobs each runs now (``stats`` saves the
    count of running jobs a read)."""
    workers = sorted(app.workers(), key=lambda w: w.id)
    by_worker: dict[str, list[Job]] | None = None
    if running and workers:
        by_worker = _running_by_worker(app, stats)
    rows = []
    for w in workers:
        jobs = None if by_worker is None else tuple(by_worker.get(w.id, ()))
        rows.append(
            WorkerRow(
                w.id, w.host, w.pid, tuple(w.queues), w.concurrency, w.started_at, w.last_seen, jobs
            )
        )
    return tuple(rows)


def _running_by_worker(
    app: App, stats: dict[str, QueueStats] | None
) -> dict[str, list[Job]] | None:
    """The running jobs by worker id; None past :data:`MAX_RUNNING_LISTED` of them."""
    if stats is None:  # the counts only (no count of the last minute's completions)
        stats = {s.queue: s for s in app.backend.stats_get(StatsParams(recent=False))}
    total = sum(s.counts.get("running", 0) for s in stats.values())
    if total > MAX_RUNNING_LISTED:
        return None
    out: dict[str, list[Job]] = {}
    if total == 0:
        return out
    # As many as counted: a listing that finds them all stops there (a store may walk its jobs
    # newest first until it has found the limit).
    for job in app.jobs(status="running", limit=total):
        if job.worker_id is not None:
            out.setdefault(job.worker_id, []).append(job)
    return out


def job_detail(app: App, job_id: str) -> JobDetail:
    """Job ``job_id`` (``JobNotFound`` if there is none) with its workflow, if it has one."""
    job = app.get(job_id)
    flow = app.workflow(job.workflow_id) if job.workflow_id else None
    return JobDetail(job, flow)


def job_fields(job: Job) -> dict[str, Any]:
    """Every field of a job in declaration order, JSON-ready: datetimes as ISO 8601 text,
    tuples as lists, the status as its name; text values as stored (``show --json``,
    ``jobs --json``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(job):
        name = f.name
        value = getattr(job, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        elif name == "status":
            value = str(value)
        out[name] = value
    return out


def schedules(app: App) -> tuple[ScheduleRow, ...]:
    """The stored schedules in the store's order (by name), then those ``app`` declares that
    are not stored yet, by name."""
    declared = app.declared_schedules
    stored = app.stored_schedules()
    rows = [_schedule_row(s, stored=True, declared=s.name in declared) for s in stored]
    known = {s.name for s in stored}
    rows += [
        _schedule_row(declared[name], stored=False, declared=True)
        for name in sorted(set(declared) - known)
    ]
    return tuple(rows)


def _schedule_row(sched: Schedule, *, stored: bool, declared: bool) -> ScheduleRow:
    return ScheduleRow(
        name=sched.name,
        cron=sched.cron,
        every=sched.every,
        timezone=sched.timezone,
        catch_up=sched.catch_up,
        job=sched.job.name,
        queue=sched.job.queue,
        active=sched.active,
        paused=sched.paused,
        next_run_at=sched.next_run_at if stored else None,
        last_run_at=sched.last_run_at if stored else None,
        stored=stored,
        declared=declared,
    )
