"""Bulk moves on the dead letter, and a queue's steering, written once for the CLI
(``jobyard retry --all``, ``jobyard queue``) and the dashboard.

Every move walks the failed jobs a filter matches through ``jobs_search`` (the store's cursor,
a page at a time), so memory holds one batch, never the dead letter: a retry re-drives a batch
in one move (``jobs_retry_many``; a workflow step, and a job the move skipped, through
``app.retry``, which checks a step's inputs and says why a job cannot be retried), a purge
deletes a batch by ids (``jobs_purge`` with ``ids``). A count says what a move would
touch before it runs: exact from the store's counts or groups where they answer it, else by a
bounded walk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .app import App
from .backends.base import (
    DeadGroupsParams,
    JobRecord,
    JobsPurgeParams,
    JobsRetryManyParams,
    JobsSearchParams,
    QueueConfig,
    StatsParams,
    in_group,
)
from .errors import ConfigurationError, DuplicateJob, InvalidTransition, JobNotFound
from .job import check_name

BATCH = 200  # failed jobs per page of a bulk move
COUNT_WALK = 100_000  # failed jobs a count may walk before it says "at least"


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which failed jobs a bulk move means: every field optional."""

    queue: str | None = None
    name: str | None = None
    error_line: str | None = None  # a dead-letter group's line (base.error_line)
    contains: str | None = None  # a substring of the error

    def matches(self, rec: JobRecord) -> bool:
        """Whether a failed job walked by :func:`batches` is one of the filter's."""
        if self.error_line is not None and not in_group(rec.error, self.error_line):
            return False
        return not self.contains or self.contains in (rec.error or "")

    @property
    def everything(self) -> bool:
        """True when the filter names no job in particular (every failed job of a queue)."""
        return self.name is None and self.error_line is None and not self.contains


@dataclass(frozen=True, slots=True)
class Count:
    """How many failed jobs a filter matches; ``exact`` False: at least that many (the walk
    stopped at :data:`COUNT_WALK`)."""

    n: int
    exact: bool = True

    def __str__(self) -> str:
        return str(self.n) if self.exact else f"at least {self.n}"


@dataclass
class BulkResult:
    """What a bulk move did: jobs moved, and why the others were not (one line each)."""

    done: int = 0
    problems: list[str] = field(default_factory=list)


def batches(app: App, flt: DeadFilter, size: int | None = None) -> Iterator[list[JobRecord]]:
    """The failed jobs ``flt`` matches, newest first, a batch (at most ``size``) at a time,
    until none is left: a walk by the store's cursor, so jobs moved meanwhile are not met
    again and memory holds one batch."""
    before: str | None = None
    substring = flt.contains or flt.error_line or None
    while True:
        page = app.backend.jobs_search(
            JobsSearchParams(
                queue=flt.queue,
                status="failed",
                name=flt.name,
                error_contains=substring,
                before=before,
                limit=size or BATCH,
            )
        )
        found = [r for r in page.jobs if r.status == "failed" and flt.matches(r)]
        if found:
            yield found
        if page.next is None:
            return
        before = page.next


def count(app: App, flt: DeadFilter) -> Count:
    """How many failed jobs ``flt`` matches (what a bulk move would touch): the store's count
    for a whole queue, its dead-letter groups when they cover every failed job, else a walk of
    at most :data:`COUNT_WALK` jobs."""
    if flt.everything:
        queues = (flt.queue,) if flt.queue else ()
        stats = app.backend.stats_get(StatsParams(queues, recent=False))
        return Count(sum(s.counts.get("failed", 0) for s in stats))
    if not flt.contains:
        grouped = app.backend.dead_groups(DeadGroupsParams(queue=flt.queue))
        if grouped.complete:
            return Count(
                sum(
                    g.count
                    for g in grouped.groups
                    if (flt.name is None or g.name == flt.name)
                    and (flt.error_line is None or g.error_line == flt.error_line)
                )
            )
    n, walked = 0, 0
    for batch in batches(app, flt, size=1000):
        n += len(batch)
        walked += len(batch)
        if walked >= COUNT_WALK:
            return Count(n, exact=False)
    return Count(n)


def retry(
    app: App,
    flt: DeadFilter,
    *,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> BulkResult:
    """Re-drive every failed job ``flt`` matches, a batch at a time (``dry_run``: count them
    the same way, moving nothing). ``on_batch(done so far)`` after each batch."""
    out = BulkResult()
    for batch in batches(app, flt):
        if dry_run:
            out.done += len(batch)
        else:
            # One store move for the batch; a workflow step goes through app.retry, which
            # checks its inputs first.
            plain = [r.id for r in batch if not r.depends_on]
            moved = set(app.backend.jobs_retry_many(JobsRetryManyParams(plain))) if plain else set()
            out.done += len(moved)
            for rec in batch:
                if rec.id in moved:
                    continue
                # A step, or a job the move skipped: app.retry says why (or, if the job
                # became failed again meanwhile, re-drives it).
                try:
                    app.retry(rec.id)
                    out.done += 1
                except (InvalidTransition, JobNotFound, DuplicateJob, ConfigurationError) as exc:
                    out.problems.append(str(exc))  # said, and the rest go on
        if on_batch is not None:
            on_batch(out.done)
    return out


def purge(app: App, flt: DeadFilter) -> int:
    """Delete every failed job ``flt`` matches, a batch of ids at a time (a whole queue, or
    every queue, in one purge); how many were deleted."""
    if flt.everything:
        return int(app.purge(("failed",), queue=flt.queue))
    total = 0
    for batch in batches(app, flt):
        params = JobsPurgeParams(("failed",), queue=flt.queue, ids=[r.id for r in batch])
        total += int(app.backend.jobs_purge(params))
    return total


def set_max_concurrency(app: App, name: str, value: int | None) -> QueueConfig:
    """Change a queue's ``max_concurrency`` (None: unlimited), keeping its other settings;
    the queue's settings after it."""
    check_name("queue", name)
    if value is not None and value < 1:
        raise ConfigurationError(f"max_concurrency must be at least 1, got {value}")
    stored = {q.name: q for q in app.queues()}.get(name, QueueConfig(name))
    changed = dataclasses.replace(stored, max_concurrency=value)
    app.backend.queues_configure(changed)
    return changed
