"""Every read and move the dashboard makes, in one place, through the :class:`jobyard.App`.

Each page asks these functions only, never the App or the store directly, so that each can be
pointed at a better read when the store gains one, and so the number of store calls a page makes
can be read here: every function makes a fixed, small number of calls, never one per row.

Where the store has no read for a question yet, the answer here is a bounded scan of the newest
jobs (:data:`SCAN_MAX`), and says so (``scanned``), so the page can say what it looked at.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import _bulk, views
from .._secrets import mask_url
from ..app import App
from ..backends.base import (
    STATUSES,
    DeadGroupsParams,
    JobsSearchParams,
    LimitsStatsParams,
    LimitStats,
    QueueConfig,
    QueueStats,
    StatsParams,
    ThroughputParams,
    error_line,
)
from ..errors import ConfigurationError, DuplicateJob, InvalidTransition, JobNotFound
from ..job import Job, Status
from ..workflow import Workflow

T = TypeVar("T")

PAGE = 50  # jobs per page of a listing
SCAN_MAX = 5000  # jobs one page of a filtered listing may walk (jobs_search scan)
DEAD_SCAN = 10_000  # newest failed jobs the store groups for the dead letter page
LIVE_TTL = 1.0  # seconds a live read is shared between the tabs that poll it


# --- views ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bucket:
    """Jobs that ended in ``[start, start + step)``: completed, and failed into the dead
    letter."""

    start: float
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue on the overview."""

    name: str
    counts: dict[str, int]
    completed_last_minute: int
    failed_last_minute: int | None  # None: the store keeps no history yet
    oldest_pending_age: float | None  # seconds; None: none pending, or not known
    paused: bool
    max_concurrency: int | None
    config: QueueConfig | None
    history: tuple[Bucket, ...] = ()


@dataclass(frozen=True, slots=True)
class LimitView:
    """One limited scope on the overview, as ``jobyard status`` words it (see
    :class:`jobyard.backends.base.LimitStats`)."""

    queue: str
    job: str | None  # None: the queue's own limits
    rules: tuple[str, ...]  # ``max_concurrency=5``, ``rate=100/s``, ...
    running: int
    max_concurrency: int | None
    rate_used: float | None  # 0 to 1; None without a rate
    rate_full: bool  # the rate admits no start now
    key_concurrency: int | None
    keys_full: int
    keys_running: int
    top_keys: tuple[tuple[str, int], ...]  # (key, pending jobs), most first
    due: int = 0  # due pending jobs of the scope the store read (all of them when ``exact``)
    exact: bool = True
    held: tuple[tuple[str, int], ...] = ()  # (limit, due jobs it holds back now): views.held_back

    @classmethod
    def of(cls, s: LimitStats, backlog: int = 0) -> LimitView:
        """The view of one row of ``limits_stats`` (``backlog``: its queue's pending jobs)."""
        return cls(
            s.queue,
            s.job,
            tuple(views.limit_rules(s.limits, s.max_concurrency)),
            s.running,
            s.max_concurrency,
            s.rate_used,
            views.rate_full(s),
            s.limits.key_concurrency,
            s.keys_full,
            s.keys_running,
            tuple((k.key, k.pending) for k in s.top_keys),
            s.due,
            s.exact,
            tuple(views.held_back(s, backlog).items()),
        )


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview: every queue, the totals and the chart's history."""

    now: float
    queues: tuple[QueueView, ...]
    totals: dict[str, int]
    workers: int
    history: tuple[Bucket, ...]  # of the queue the chart shows (all when none is chosen)
    step: int  # seconds per bucket
    has_history: bool  # the store keeps a throughput history
    limits: tuple[LimitView, ...] = ()  # every limited scope (none: the table is not shown)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What the jobs page lists: every field optional."""

    queue: str | None = None
    status: str | None = None
    name: str | None = None
    arg_path: tuple[str, ...] = ()  # ("customer_id",) for args.customer_id; ("0",) positional
    arg_value: Any = None
    contains: str | None = None  # a substring of the arguments' JSON

    @property
    def scans(self) -> bool:
        """True when the store cannot answer the filter and the newest jobs are scanned."""
        return bool(self.arg_path) or bool(self.contains)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a listing, newest first, and the cursor of the next (older) page."""

    jobs: tuple[Job, ...]
    next_cursor: str | None
    scanned: int | None = None  # jobs looked through, when the filter was a scan


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """Failed jobs of one name whose errors end with the same line."""

    name: str
    queue: str
    error_line: str
    count: int
    newest: float  # finished_at of the newest, epoch seconds
    oldest: float
    sample_id: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """The dead letter, grouped, and the failed jobs matching the filter (newest first)."""

    groups: tuple[DeadGroup, ...]
    total_failed: int  # every failed job in the store (of the queue filter)
    scanned: int  # failed jobs looked through
    complete: bool  # every failed job was looked through
    newest: tuple[Job, ...] = ()  # the newest failed jobs a narrowing filter matches (a page)


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which failed jobs a dead-letter action or listing means."""

    queue: str | None = None
    name: str | None = None
    error_line: str | None = None  # the exact last line of the error
    contains: str | None = None  # a substring of the error


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the header says about the store."""

    url: str  # credentials masked
    kind: str


# --- a short cache for what many tabs poll ------------------------------------------------------


@dataclass
class LiveCache:
    """Reads shared for :data:`LIVE_TTL` seconds between the tabs polling the same page, so five
    open tabs cost the store about what one costs."""

    ttl: float = LIVE_TTL
    _items: dict[Any, tuple[float, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: Any, read: Callable[[], T]) -> T:
        """The value read for ``key`` less than ``ttl`` seconds ago, else ``read()``."""
        now = time.monotonic()
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]  # type: ignore[no-any-return]
        value = read()
        with self._lock:
            if len(self._items) > 256:
                self._items.clear()
            self._items[key] = (time.monotonic(), value)
        return value

    def clear(self) -> None:
        """Forget everything (after an action, so the next page shows its effect)."""
        with self._lock:
            self._items.clear()


# --- reads --------------------------------------------------------------------------------------


def store_view(app: App) -> StoreView:
    """The store's URL (masked) and kind; no store call."""
    url = mask_url(app.url)
    return StoreView(url, url.split("://", 1)[0].lower())


def queue_names(app: App, stats: Sequence[QueueStats] | None = None) -> list[str]:
    """Every queue with jobs, settings, or a job of the app using it (two store calls)."""
    if stats is None:  # the counts only: no count of the last minute's jobs
        stats = app.backend.stats_get(StatsParams(recent=False))
    names = {s.queue for s in stats}
    names |= {c.name for c in app.queues()} | {jf.opts.queue for jf in app.registry.values()}
    return sorted(names)


def history(
    app: App, since: float, step: int, now: float
) -> tuple[dict[str | None, tuple[Bucket, ...]], dict[str, tuple[int, int]]]:
    """Completed and failed jobs per ``step`` seconds over the last ``since`` seconds, per queue
    and (key None) in all, oldest first, every bucket present (zero where nothing ended); and
    per queue the jobs completed and failed in the last 60 seconds (the minute under way, and
    the share of the one before still in them). One store call: the store's throughput
    history, kept per minute, summed here."""
    minutes = app.backend.throughput_get(ThroughputParams(since=max(since, 120.0)))
    last = int(now // step) * step
    starts = [float(last - i * step) for i in range(max(int(since // step), 1) - 1, -1, -1)]
    first = starts[0]
    sums: dict[str | None, dict[float, list[int]]] = {None: {}}
    recent: dict[str, list[float]] = {}
    for m in minutes:
        # the last 60 s: the minute under way, and the share of the one before still in them
        share = min(max((m.minute + 60 - (now - 60)) / 60, 0.0), 1.0)
        if share:
            per = recent.setdefault(m.queue, [0.0, 0.0])
            per[0] += m.completed * share
            per[1] += m.failed * share
        if m.minute < first:
            continue
        start = float(int(m.minute // step) * step)
        for key in (m.queue, None):
            cell = sums.setdefault(key, {}).setdefault(start, [0, 0])
            cell[0] += m.completed
            cell[1] += m.failed
    series = {
        key: tuple(Bucket(t, *per.get(t, (0, 0))) for t in starts) for key, per in sums.items()
    }
    return series, {q: (round(c), round(f)) for q, (c, f) in recent.items()}


def oldest_pending(stats: Sequence[QueueStats], now: float) -> dict[str, float]:
    """Seconds each queue's oldest due pending job has waited (from ``stats_get``, where the
    store probes its index for it)."""
    return {
        s.queue: max(now - s.oldest_pending_at, 0.0)
        for s in stats
        if s.oldest_pending_at is not None
    }


def overview(app: App, chart_queue: str | None, since: float, step: int) -> Overview:
    """The overview's data: six store calls (stats, queue settings, workers, clock, history,
    the limits' state: ``limits_stats``, which may count the limited queues' jobs). The last
    minute's completions come from the history, not from a count of the minute's jobs (which
    grows with the rate: 300,000 rows at 5,000 jobs/s)."""
    stats = app.backend.stats_get(StatsParams(recent=False))
    configs = {c.name: c for c in app.queues()}
    by_queue = {s.queue: s for s in stats}
    names = sorted(set(by_queue) | set(configs) | {f.opts.queue for f in app.registry.values()})
    workers = len(app.workers())
    now = app.backend.clock_now()
    hist, last_minute = history(app, since, step, now)
    ages = oldest_pending(stats, now)
    limits = tuple(
        LimitView.of(s, by_queue[s.queue].counts.get("pending", 0) if s.queue in by_queue else 0)
        for s in app.backend.limits_stats(LimitsStatsParams())
    )
    rows = []
    totals = dict.fromkeys(STATUSES, 0)
    for name in names:
        st = by_queue.get(name)
        counts = {s: (st.counts.get(s, 0) if st else 0) for s in STATUSES}
        for s, n in counts.items():
            totals[s] += n
        cfg = configs.get(name)
        series = hist.get(name) or tuple(Bucket(b.start, 0, 0) for b in hist[None])
        done_last, failed_last = last_minute.get(name, (0, 0))
        rows.append(
            QueueView(
                name=name,
                counts=counts,
                completed_last_minute=done_last,
                failed_last_minute=failed_last,
                oldest_pending_age=ages.get(name),
                paused=cfg is not None and cfg.paused,
                max_concurrency=None if cfg is None else cfg.max_concurrency,
                config=cfg,
                history=series,
            )
        )
    chart = hist.get(chart_queue, ())
    if not chart:  # a queue with no history yet: an empty chart of the range
        chart = tuple(Bucket(b.start, 0, 0) for b in hist[None])
    return Overview(now, tuple(rows), totals, workers, chart, step, True, limits)


def find_job(app: App, text: str) -> Job | None:
    """The job whose id is ``text``, else None (one store call)."""
    text = text.strip()
    if not text:
        return None
    try:
        return app.get(text)
    except JobNotFound:
        return None


def find_by_key(app: App, key: str) -> list[Job]:
    """Jobs holding idempotency key ``key``, newest first, whatever their status (one store
    call: the key's own index on SQLite and PostgreSQL)."""
    page = app.backend.jobs_search(JobsSearchParams(idempotency_key=key, limit=PAGE))
    return [Job.from_record(r) for r in page.jobs]


def _needle(flt: JobFilter) -> str | None:
    """A substring every payload the filter matches holds (the store finds it in the JSON text
    and this module checks the match exactly): the argument's name and value as the codec
    writes them (``"customer_id":42``), or the value alone for a position or a nested path."""
    if flt.contains:
        return flt.contains
    if not flt.arg_path:
        return None
    try:
        value = json.dumps(flt.arg_value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    if len(flt.arg_path) == 1 and not flt.arg_path[0].isdigit():
        return json.dumps(flt.arg_path[0], ensure_ascii=False) + ":" + value
    return value


def list_jobs(app: App, flt: JobFilter, cursor: str | None, limit: int = PAGE) -> JobPage:
    """A page of jobs matching ``flt``, newest first, by the store's cursor (one store call,
    walking at most :data:`SCAN_MAX` jobs: a page of a rare argument may hold fewer jobs, and
    says how many it looked through)."""
    params = JobsSearchParams(
        queue=flt.queue,
        status=flt.status,
        name=flt.name,
        contains=_needle(flt),
        before=cursor or None,
        limit=limit,
        scan=SCAN_MAX,
    )
    try:
        page = app.backend.jobs_search(params)
    except ValueError:
        raise ConfigurationError(f"invalid cursor {cursor!r}") from None
    jobs = [Job.from_record(r) for r in page.jobs]
    if flt.scans:
        jobs = [j for j in jobs if _arg_matches(j, flt)]
    return JobPage(tuple(jobs), page.next, page.scanned if flt.scans else None)


def _arg_matches(job: Job, flt: JobFilter) -> bool:
    if flt.contains:
        text = json.dumps({"args": list(job.args), "kwargs": job.kwargs}, ensure_ascii=False)
        if flt.contains not in text:
            return False
    if flt.arg_path:
        value: Any = {**dict(enumerate(job.args)), **job.kwargs}
        for part in flt.arg_path:
            if isinstance(value, dict):
                key: Any = part
                if key not in value and part.isdigit():
                    key = int(part)
                if key not in value:
                    return False
                value = value[key]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return False
        return bool(value == flt.arg_value and type(value) is type(flt.arg_value)) or (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and isinstance(flt.arg_value, int | float)
            and not isinstance(flt.arg_value, bool)
            and value == flt.arg_value
        )
    return True


def job_detail(app: App, job_id: str) -> tuple[Job, Workflow | None]:
    """A job and its workflow (two store calls at most); JobNotFound if there is none."""
    job = app.get(job_id)
    flow = app.workflow(job.workflow_id) if job.workflow_id else None
    return job, flow


def last_line(error: str | None) -> str:
    """The line the dead letter groups an error by: :func:`jobyard.backends.base.error_line`,
    as every store groups them."""
    return error_line(error)


def _bulk_filter(flt: DeadFilter) -> _bulk.DeadFilter:
    return _bulk.DeadFilter(flt.queue, flt.name, flt.error_line, flt.contains)


def dead_letter(app: App, flt: DeadFilter) -> DeadLetter:
    """The failed jobs grouped by name and last error line, biggest group first, and, when the
    filter narrows the dead letter (a name, a line or a substring), the newest failed jobs it
    matches (three store calls: the counts, the store's grouping of up to :data:`DEAD_SCAN`
    failed jobs, one page of the filter's jobs; the whole dead letter lists no job)."""
    queues = (flt.queue,) if flt.queue else ()
    stats = app.backend.stats_get(StatsParams(queues, recent=False))
    total = sum(s.counts.get("failed", 0) for s in stats)
    grouped = app.backend.dead_groups(DeadGroupsParams(queue=flt.queue, scan=DEAD_SCAN))
    groups = tuple(
        DeadGroup(g.name, g.queue, g.error_line, g.count, g.newest, g.oldest, g.sample_id)
        for g in grouped.groups
        if (flt.name is None or g.name == flt.name)
        and (flt.error_line is None or g.error_line == flt.error_line)
    )
    narrowed = flt.name is not None or flt.error_line is not None or flt.contains is not None
    matching = tuple(dead_jobs(app, flt)) if narrowed else ()
    return DeadLetter(groups, total, grouped.scanned, grouped.complete, matching)


def dead_jobs(app: App, flt: DeadFilter, limit: int = PAGE) -> list[Job]:
    """The newest failed jobs matching ``flt`` (one store call: a page of a bounded walk)."""
    page = app.backend.jobs_search(
        JobsSearchParams(
            queue=flt.queue,
            status="failed",
            name=flt.name,
            error_contains=flt.contains or flt.error_line or None,
            limit=limit,
            scan=SCAN_MAX,
        )
    )
    wanted = _bulk_filter(flt)
    return [Job.from_record(r) for r in page.jobs if wanted.matches(r)]


def dead_count(app: App, flt: DeadFilter) -> _bulk.Count:
    """How many failed jobs ``flt`` matches (what a bulk action would touch): exact from the
    store's counts or groups, else a bounded walk ("at least")."""
    return _bulk.count(app, _bulk_filter(flt))


def workers(app: App) -> tuple[views.WorkerRow, ...]:
    """Live workers with the jobs each runs now (the read model's: workers, counts, one listing
    of the running jobs; ``running`` None past :data:`jobyard.views.MAX_RUNNING_LISTED`)."""
    return views.worker_rows(app, running=True)


def schedules(app: App) -> tuple[views.ScheduleRow, ...]:
    """Stored schedules, then the declared ones not stored yet (the read model's)."""
    return views.schedules(app)


# --- moves -------------------------------------------------------------------------------------


def retry_jobs(app: App, ids: Sequence[str]) -> tuple[int, list[str]]:
    """Retry each job; (how many were re-driven, why the others were not)."""
    done, problems = 0, []
    for job_id in ids:
        try:
            app.retry(job_id)
            done += 1
        except (InvalidTransition, JobNotFound, DuplicateJob, ConfigurationError) as exc:
            problems.append(str(exc))  # said, and the rest go on
    return done, problems


def retry_dead(app: App, flt: DeadFilter) -> tuple[int, list[str]]:
    """Retry every failed job ``flt`` matches, a batch at a time (the core's bulk move)."""
    done = _bulk.retry(app, _bulk_filter(flt))
    return done.done, done.problems


def purge_dead(app: App, flt: DeadFilter) -> int:
    """Delete every failed job ``flt`` matches: a whole queue (or every queue) in one purge,
    a filter by name or error a batch of ids at a time."""
    return _bulk.purge(app, _bulk_filter(flt))


def cancel(app: App, job_id: str, by: str) -> Job:
    """Cancel a job (a running one gets a request)."""
    return app.cancel(job_id, by=by)


def cancel_workflow(app: App, workflow_id: str, by: str) -> Workflow:
    """Cancel what has not run yet of a workflow; ask its running jobs to stop."""
    return app.cancel_workflow(workflow_id, by=by)


def resume_workflow(app: App, workflow_id: str) -> Workflow:
    """Run a failed or cancelled workflow's failed and cancelled jobs again (one store move)."""
    return app.resume_workflow(workflow_id)


def pause_queue(app: App, name: str, paused: bool) -> None:
    """Pause or resume a queue, keeping its other settings."""
    app.pause_queue(name, paused)


def set_max_concurrency(app: App, name: str, value: int | None) -> None:
    """Change a queue's ``max_concurrency`` (None: unlimited), keeping its other settings."""
    _bulk.set_max_concurrency(app, name, value)


def pause_schedule(app: App, name: str, paused: bool) -> None:
    """Pause or resume a stored schedule."""
    if paused:
        app.pause_schedule(name)
    else:
        app.resume_schedule(name)


def run_schedule_now(app: App, name: str) -> str:
    """Enqueue a stored schedule's job now, outside its ticks; the new job's id. A job with its
    own idempotency key held by a pending job returns that job instead."""
    stored = {s.name: s for s in app.stored_schedules()}.get(name)
    if stored is None:
        raise ConfigurationError(f"no stored schedule named {name!r}")
    new = dataclasses.replace(stored.job, delay=0.0, run_at=None)
    inserted = app._enqueue.insert([new])  # the App's one way down (hooks included)
    return inserted[0].id


def job_names(app: App) -> list[str]:
    """The jobs this app registers, by name."""
    return sorted(app.registry)


def enqueue(
    app: App,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    options: dict[str, Any],
) -> tuple[str, bool]:
    """Enqueue job ``name`` checked against its handler's signature as ``jobyard enqueue`` does;
    (its id, whether it was created). ``ConfigurationError`` names what does not fit."""
    fn = app.registry.get(name)
    if fn is None:
        known = ", ".join(sorted(app.registry)) or "none"
        raise ConfigurationError(f"this app has no job named {name!r} (its jobs: {known})")
    queue = options.get("queue")
    if queue is not None:
        queues = {f.opts.queue for f in app.registry.values()}
        if queue not in queues:
            used = ", ".join(sorted(queues))
            raise ConfigurationError(
                f"no job of this app uses queue {queue!r} (its queues: {used})"
            )
    try:
        fn.check_call(args, kwargs)
    except TypeError as exc:
        raise ConfigurationError(f"the arguments do not fit {exc}") from None
    try:
        handle = fn.options(**options).enqueue(*args, **kwargs)
    except TypeError as exc:  # an argument that is not JSON
        raise ConfigurationError(str(exc)) from None
    return handle.id, handle.created


def status_of(value: str | None) -> str | None:
    """A status filter, checked (ConfigurationError names the choices)."""
    if not value:
        return None
    try:
        return Status(value).value
    except ValueError:
        raise ConfigurationError(
            f"unknown status {value!r}: one of {', '.join(STATUSES)}"
        ) from None
