"""An in-process store for users' own tests (``memory://``).

It is the plainest reading of ``docs/backend-contract.md``: one lock, a dict of jobs, and linear
scans. It lives and dies with its process, so it suits tests and nothing else.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..clock import Clock
from ..errors import DuplicateJob, InvalidTransition, JobNotFound, QueueFull
from ._stored import limit_stats
from .base import (
    ACTIVE,
    CANCELLABLE,
    DEFAULT_FORGET_AFTER,
    DEFAULT_MAX_ATTEMPTS,
    QUEUED,
    REDRIVABLE,
    STATUSES,
    THROUGHPUT_KEEP,
    THROUGHPUT_STEP,
    Claimed,
    ClaimedJob,
    DeadGroups,
    DeadGroupsParams,
    Inserted,
    JobLimits,
    JobRecord,
    JobsAckParams,
    JobsCancelManyParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsInsertParams,
    JobsListParams,
    JobsPage,
    JobsPurgeParams,
    JobsResumeParams,
    JobsRetryManyParams,
    JobsSearchParams,
    JobsWaitParams,
    JobsWakeParams,
    Lapsed,
    LeasesLapsedParams,
    LeasesReapParams,
    LeasesRenewParams,
    LimitsStatsParams,
    LimitsSyncParams,
    LimitStats,
    NewJob,
    Purged,
    QueueConfig,
    QueueLimits,
    QueuesNamesParams,
    QueueStats,
    Rate,
    Reaped,
    Renewed,
    Schedule,
    SchedulesFireParams,
    SchedulesPauseParams,
    SchedulesSkipParams,
    SchedulesSyncParams,
    StatsParams,
    StoreInfo,
    ThroughputMinute,
    ThroughputParams,
    WorkerInfo,
    WorkersBeatParams,
    fair_round,
    group_dead,
    refuse_connection,
)


@dataclass(slots=True)
class _Row:
    rec: JobRecord
    backoff: str | None
    timeout: float | None
    lease: float
    token: str | None = None
    lease_expires_at: float | None = None
    waits: int = 0  # inputs of a waiting job not completed yet
    holds: int = 0  # dependents not completed (nor deleted) yet: while > 0 a completed job stays
    turn: int = 0  # a fair queue's turn of this job's key, from 1 (see _turn); 0: not fair


# A rate bucket: (queue, job name or None for the queue's own limits, key or None).
_Bucket = tuple[str, str | None, str | None]


class MemoryBackend:
    """The ``memory://`` store: the reference implementation of the contract."""

    claim_max: int | None = None  # no limit (see Backend.claim_max)

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self._lock = threading.Condition()
        self._rows: dict[str, _Row] = {}
        self._queues: dict[str, QueueConfig] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._forget_after: dict[str, float] = {}  # worker id -> its stated silence limit
        self._schedules: dict[str, Schedule] = {}
        self._ids = itertools.count(1)
        self._inserts = 0
        self._waiters: dict[str, int] = {}  # worker id -> _inserts when its last wait returned
        self._job_limits: dict[tuple[str, str], QueueLimits] = {}  # (queue, name) -> limits
        self._tats: dict[_Bucket, float] = {}  # rate buckets (base.Rate): bucket -> tat
        # Fair queues: queue -> key -> the last turn given to one of its jobs, and queue -> the
        # turn of the latest job claimed (the queue's current round).
        self._last_turn: dict[str, dict[str | None, int]] = {}
        self._round: dict[str, int] = {}
        # (queue, minute) -> [completed, failed]: the throughput history
        self._throughput: dict[tuple[str, float], list[int]] = {}

    def _now(self) -> float:
        now = self.clock.now()
        return time.time() if now is None else now

    def _tally(self, queue: str, status: str, now: float) -> None:
        """Count a job that ended completed or failed in its minute (under the lock)."""
        minute = float(int(now // THROUGHPUT_STEP) * THROUGHPUT_STEP)
        bucket = self._throughput.setdefault((queue, minute), [0, 0])
        bucket[0 if status == "completed" else 1] += 1

    # schema ---------------------------------------------------------------------------------

    def schema_migrate(self) -> list[str]:
        """Nothing to migrate."""
        return []

    def schema_check(self) -> None:
        """Always current."""

    # producer side ----------------------------------------------------------------------------

    def _holder(self, queue: str, key: str | None) -> str | None:
        if key is None:
            return None
        for row in self._rows.values():
            r = row.rec
            if r.queue == queue and r.idempotency_key == key and r.status in ACTIVE:
                return r.id
        return None

    def jobs_insert(self, params: JobsInsertParams) -> list[Inserted]:
        """Insert all or nothing, deduplicating by idempotency key."""
        refuse_connection(self, params)
        with self._lock:
            now = self._now()
            out: list[Inserted] = []
            fresh: list[_Row] = []
            at: list[_Row] = []  # the row of each batch position (workflow steps point here)
            batch_keys: dict[tuple[str, str], str] = {}
            # on_conflict="replace": the holder's new payload and run_at, applied once the
            # batch is sure to go in (all or nothing)
            replacing: dict[str, tuple[_Row, str, float | None]] = {}
            for job in params.jobs:
                key = job.idempotency_key
                held = self._holder(job.queue, key)
                if held is None and key is not None:
                    held = batch_keys.get((job.queue, key))
                if held is not None:
                    row = self._rows.get(held) or next(r for r in fresh if r.rec.id == held)
                    at.append(row)
                    replaced = job.on_conflict == "replace" and row.rec.status == "pending"
                    if replaced:
                        moved = job.run_at is not None or job.delay != 0
                        run_at = _run_at(job, now) if moved else None
                        replacing[held] = (row, job.payload, run_at)
                    out.append(Inserted(held, False, replaced))
                    continue
                row = self._new_row(job, now)
                if job.after:
                    self._wait_on(row, [at[i] for i in job.after])
                fresh.append(row)
                at.append(row)
                if key is not None:
                    batch_keys[(job.queue, key)] = row.rec.id
                out.append(Inserted(row.rec.id, True))
            for queue_name in {row.rec.queue for row in fresh}:
                cfg = self._queues.get(queue_name)
                if cfg is None or cfg.max_pending is None:
                    continue
                # Waiting steps count with the pending jobs: they will run there. A step
                # released later was counted here already, so its release is never refused.
                pending = sum(
                    1
                    for r in self._rows.values()
                    if r.rec.queue == queue_name and r.rec.status in QUEUED
                )
                adding = sum(1 for r in fresh if r.rec.queue == queue_name)
                if pending + adding > cfg.max_pending:
                    raise QueueFull(queue_name, cfg.max_pending)
            for row in fresh:
                self._rows[row.rec.id] = row
            for row, payload, run_at in replacing.values():
                row.rec = replace(row.rec, payload=payload)
                if run_at is not None:
                    row.rec = replace(row.rec, run_at=run_at)
            if fresh or replacing:
                self._inserts += 1
                self._lock.notify_all()
            return out

    def _new_row(self, job: NewJob, now: float) -> _Row:
        queue = self._queues.get(job.queue)
        rec = JobRecord(
            id=str(next(self._ids)),
            name=job.name,
            queue=job.queue,
            payload=job.payload,
            status="pending",
            priority=job.priority,
            attempts=0,
            max_attempts=job.max_attempts
            or (queue.max_attempts if queue and queue.max_attempts else None)
            or DEFAULT_MAX_ATTEMPTS,
            run_at=_run_at(job, now),
            created_at=now,
            started_at=None,
            finished_at=None,
            worker_id=None,
            result=None,
            error=None,
            parent_id=job.parent_id,
            idempotency_key=job.idempotency_key,
            delivery=job.delivery,
            workflow_id=job.workflow_id,
            key=job.key,
        )
        backoff = job.backoff or (queue.backoff if queue else None)
        turn = self._turn(job.queue, job.key) if queue is not None and queue.limits.fair else 0
        return _Row(rec, backoff, job.timeout, job.lease, turn=turn)

    def _turn(self, queue: str, key: str | None) -> int:
        """A new job's turn in a fair queue (start-time fair queueing): one after its key's
        last, but never before the queue's current round, so a key that was idle joins the
        round being served rather than jumping ahead of it or queueing behind its past."""
        last = self._last_turn.setdefault(queue, {})
        turn = max(last.get(key, 0) + 1, self._round.get(queue, 1))
        last[key] = turn
        return turn

    @staticmethod
    def _wait_on(row: _Row, inputs: list[_Row]) -> None:
        """Make ``row`` a workflow step ``waiting`` on ``inputs``."""
        row.rec = replace(row.rec, status="waiting", depends_on=tuple(r.rec.id for r in inputs))
        row.waits = len(inputs)
        for r in inputs:
            r.rec = replace(r.rec, dependents=(*r.rec.dependents, row.rec.id))
            r.holds += 1

    def _unhold(self, row: _Row) -> None:
        """``row`` completed, or is deleted unfinished: it no longer holds its inputs."""
        for input_id in row.rec.depends_on:
            held = self._rows.get(input_id)
            if held is not None:
                held.holds -= 1

    def _release(self, row: _Row, now: float) -> None:
        """``row`` completed: its dependents whose inputs have all completed become pending."""
        for dep_id in row.rec.dependents:
            dep = self._rows.get(dep_id)
            if dep is None or dep.rec.status != "waiting":
                continue
            dep.waits -= 1
            if dep.waits == 0:
                dep.rec = replace(dep.rec, status="pending", run_at=max(dep.rec.run_at, now))
                self._inserts += 1  # wakes the workers (notified by jobs_ack)

    def jobs_get(self, job_id: str) -> JobRecord | None:
        """One job, or None."""
        with self._lock:
            row = self._rows.get(job_id)
            return None if row is None else row.rec

    def jobs_list(self, params: JobsListParams) -> list[JobRecord]:
        """Newest first."""
        with self._lock:
            rows = (
                self._rows.values()
                if params.ids is None
                else [self._rows[i] for i in dict.fromkeys(params.ids) if i in self._rows]
            )
            recs = [
                r.rec
                for r in rows
                if (params.queue is None or r.rec.queue == params.queue)
                and (params.workflow_id is None or r.rec.workflow_id == params.workflow_id)
                and (params.status is None or r.rec.status == params.status)
                and (params.name is None or r.rec.name == params.name)
            ]
        recs.sort(key=lambda r: int(r.id), reverse=True)
        return recs[params.offset : params.offset + params.limit]

    def jobs_search(self, params: JobsSearchParams) -> JobsPage:
        """Newest first from the cursor (an id), at most ``scan`` jobs of the queue and
        status walked."""
        p = params
        if p.before is not None and not p.before.isdigit():
            raise ValueError(f"invalid cursor {p.before!r}")
        with self._lock:
            walk = sorted(
                (
                    r.rec
                    for r in self._rows.values()
                    if (p.queue is None or r.rec.queue == p.queue)
                    and (p.status is None or r.rec.status == p.status)
                    and (p.before is None or int(r.rec.id) < int(p.before))
                ),
                key=lambda rec: int(rec.id),
                reverse=True,
            )
        found: list[JobRecord] = []
        scanned = 0
        for rec in walk:
            scanned += 1
            if _search_matches(rec, p):
                found.append(rec)
                if len(found) == p.limit:
                    return JobsPage(found, rec.id if scanned < len(walk) else None, scanned)
            if scanned == p.scan:
                return JobsPage(found, rec.id if scanned < len(walk) else None, scanned)
        return JobsPage(found, None, scanned)

    def dead_groups(self, params: DeadGroupsParams) -> DeadGroups:
        """The newest ``scan`` failed jobs, grouped."""
        with self._lock:
            failed = sorted(
                (
                    r.rec
                    for r in self._rows.values()
                    if r.rec.status == "failed"
                    and (params.queue is None or r.rec.queue == params.queue)
                ),
                key=lambda rec: int(rec.id),
                reverse=True,
            )
        walked = failed[: params.scan]
        rows = [(r.queue, r.name, r.error, r.finished_at, r.id) for r in walked]
        return DeadGroups(group_dead(rows), len(walked), len(walked) == len(failed))

    def _row(self, job_id: str) -> _Row:
        row = self._rows.get(job_id)
        if row is None:
            raise JobNotFound(job_id)
        return row

    def jobs_cancel(self, params: JobsCancelParams) -> JobRecord:
        """Waiting or pending -> cancelled; running: a request recorded once."""
        return self._cancel(params)

    def _cancel(self, params: JobsCancelParams) -> JobRecord:
        with self._lock:
            row = self._row(params.id)
            now = self._now()
            rec = row.rec
            if rec.status in CANCELLABLE:
                row.rec = replace(
                    rec,
                    status="cancelled",
                    finished_at=now,
                    cancel_requested_at=now,
                    cancelled_by=params.by,
                )
            elif rec.status == "running" and not params.pending_only:
                if rec.cancel_requested_at is None:
                    row.rec = replace(rec, cancel_requested_at=now, cancelled_by=params.by)
            else:
                raise InvalidTransition.cannot_cancel(params.id, rec.status)
            return row.rec

    def jobs_cancel_many(self, params: JobsCancelManyParams) -> list[str]:
        """Each job as jobs_cancel, under one lock; the refused ones skipped."""
        changed: list[str] = []
        with self._lock:
            for job_id in params.ids:
                try:
                    self._cancel(JobsCancelParams(job_id, params.by, params.pending_only))
                except (JobNotFound, InvalidTransition):
                    continue
                changed.append(job_id)
        return changed

    def jobs_retry(self, job_id: str) -> JobRecord:
        """Failed or cancelled -> pending, attempts reset."""
        with self._lock:
            row = self._row(job_id)
            if row.rec.status not in REDRIVABLE:
                raise InvalidTransition.cannot_retry(job_id, row.rec.status)
            held = self._holder(row.rec.queue, row.rec.idempotency_key)
            if held is not None:
                raise DuplicateJob.key_held(job_id, held)
            row.rec = self._redriven(row.rec, "pending")
            self._inserts += 1
            self._lock.notify_all()
            return row.rec

    def _redriven(self, rec: JobRecord, status: str) -> JobRecord:
        """A failed or cancelled job run again (jobs_retry, jobs_resume): ``status``, attempts
        reset, due now, the last run's traces cleared (the error kept for history)."""
        return replace(
            rec,
            status=status,
            attempts=0,
            run_at=self._now(),
            finished_at=None,
            result=None,
            cancel_requested_at=None,
            cancelled_by=None,
            progress=None,
            progress_note=None,
        )

    def jobs_resume(self, params: JobsResumeParams) -> list[str]:
        """Each failed or cancelled job without a key: pending if its inputs all completed,
        else waiting on those not completed; under one lock, so no completion slips between
        the count and the move."""
        changed: list[str] = []
        with self._lock:
            for job_id in params.ids:
                row = self._rows.get(job_id)
                if row is None or row.rec.status not in REDRIVABLE or row.rec.idempotency_key:
                    continue
                waits = 0
                for input_id in row.rec.depends_on:
                    got = self._rows.get(input_id)
                    if got is None or got.rec.status != "completed":
                        waits += 1
                row.waits = waits
                row.rec = self._redriven(row.rec, "waiting" if waits else "pending")
                changed.append(job_id)
            if changed:
                self._inserts += 1
                self._lock.notify_all()
        return changed

    def jobs_retry_many(self, params: JobsRetryManyParams) -> list[str]:
        """jobs_retry for each job under one lock; the refused ones skipped."""
        done: list[str] = []
        with self._lock:
            for job_id in dict.fromkeys(params.ids):
                try:
                    self.jobs_retry(job_id)  # the lock is reentrant
                except (JobNotFound, InvalidTransition, DuplicateJob):
                    continue
                done.append(job_id)
        return done

    def jobs_purge(self, params: JobsPurgeParams) -> Purged:
        """Delete finished jobs older than the limit, but the held ones, and the waiting steps
        that wait on them; then the inputs this freed that match too."""
        with self._lock:
            limit = self._now() - params.older_than

            only = None if params.ids is None else set(params.ids)

            def matches(r: _Row) -> bool:
                return (
                    (only is None or r.rec.id in only)
                    and r.rec.status in params.statuses
                    and (params.queue is None or r.rec.queue == params.queue)
                    and r.rec.finished_at is not None
                    and r.rec.finished_at <= limit
                )

            def held(r: _Row) -> bool:
                return r.rec.status == "completed" and r.holds > 0

            doomed = {i: r for i, r in self._rows.items() if matches(r) and not held(r)}
            stack, waiting = list(doomed.values()), 0
            while stack:  # the steps that can never run, transitively
                for dep_id in stack.pop().rec.dependents:
                    dep = self._rows.get(dep_id)
                    if dep is not None and dep.rec.status == "waiting" and dep_id not in doomed:
                        doomed[dep_id] = dep
                        stack.append(dep)
                        waiting += 1
            for row in list(doomed.values()):
                if row.rec.status != "completed":
                    self._unhold(row)
                    for input_id in row.rec.depends_on:
                        freed = self._rows.get(input_id)
                        if freed is not None and matches(freed) and not held(freed):
                            doomed[input_id] = freed
            kept = sum(1 for i, r in self._rows.items() if matches(r) and i not in doomed)
            for job_id in doomed:
                del self._rows[job_id]
            return Purged(len(doomed), waiting, kept)

    # worker side ------------------------------------------------------------------------------

    def jobs_claim(self, params: JobsClaimParams) -> Claimed:
        """Claim due jobs in priority, run_at, id order within each queue's free concurrency;
        with ``wait``, after the push signal (:meth:`jobs_wait`)."""
        if params.wait > 0:
            with self._lock:
                # Inserts since this worker's previous waiting claim may have come after the
                # claim that preceded this one (made by another of its threads): look at once.
                seen = self._waiters.get(params.worker_id, self._inserts)
                if seen == self._inserts:
                    self._lock.wait_for(lambda: self._inserts != seen, timeout=params.wait)
                self._waiters[params.worker_id] = self._inserts
        with self._lock:
            now = self._now()
            rows, next_open = self._gate(params.queues, now, params.limit)
            claimed = Claimed(next_open=next_open)
            for row in rows:
                row.token = uuid.uuid4().hex
                row.lease_expires_at = now + row.lease
                row.rec = replace(
                    row.rec,
                    status="running",
                    attempts=row.rec.attempts + 1,
                    started_at=now,
                    worker_id=params.worker_id,
                )
                claimed.append(
                    ClaimedJob(
                        id=row.rec.id,
                        name=row.rec.name,
                        queue=row.rec.queue,
                        payload=row.rec.payload,
                        attempts=row.rec.attempts,
                        max_attempts=row.rec.max_attempts,
                        backoff=row.backoff,
                        timeout=row.timeout,
                        lease=row.lease,
                        token=row.token,
                        delivery=row.rec.delivery,
                        parent_id=row.rec.parent_id,
                        run_at=row.rec.run_at,
                    )
                )
            return claimed

    def _gate(
        self, queues: Sequence[str], now: float, limit: int, take: bool = True
    ) -> tuple[list[_Row], float | None]:
        """The store's one gate (lock held): the due jobs of ``queues`` a claim of ``limit`` may
        start now, in claim order, and when a rate that held one back opens (seconds from
        now). Paused queues, max_concurrency, and each QueueLimits of the queue and of the
        job's name, every start counted as it is chosen. With ``take``, the rate buckets and
        the fair rounds are moved on for the jobs chosen (the claim); without, nothing changes
        (a probe)."""
        open_queues = {
            name
            for name in queues
            if not ((cfg := self._queues.get(name)) is not None and cfg.paused)
        }
        running: dict[tuple[str, str | None, str | None], int] = {}
        for r in self._rows.values():
            if r.rec.status == "running" and r.rec.queue in open_queues:
                for scope in _scopes(r.rec.queue, r.rec.name, r.rec.key):
                    running[scope] = running.get(scope, 0) + 1
        due = [
            r
            for r in self._rows.values()
            if r.rec.status == "pending" and r.rec.queue in open_queues and r.rec.run_at <= now
        ]
        due.sort(key=_claim_order)
        tats: dict[_Bucket, float] = {}
        chosen: list[_Row] = []
        opens: float | None = None
        for row in due:
            if len(chosen) >= limit:
                break
            rec = row.rec
            cfg = self._queues.get(rec.queue) or QueueConfig(rec.queue)
            cap = cfg.max_concurrency
            if cap is not None and running.get((rec.queue, None, None), 0) >= cap:
                continue
            held = False
            buckets: list[tuple[_Bucket, Rate]] = []
            for job, limits in (
                (None, cfg.limits),
                (rec.name, self._job_limits.get((rec.queue, rec.name))),
            ):
                if not limits:
                    continue
                cap_key = limits.key_concurrency
                if rec.key is not None and cap_key is not None:
                    held = held or running.get((rec.queue, job, rec.key), 0) >= cap_key
                if limits.rate is not None:
                    buckets.append(((rec.queue, job, None), limits.rate))
                if rec.key is not None and limits.key_rate is not None:
                    buckets.append(((rec.queue, job, rec.key), limits.key_rate))
            for bucket, rate in buckets:
                tat = tats.get(bucket, self._tats.get(bucket))
                if rate.admits(tat, now) < 1:
                    held = True
                    wait = rate.opens_at(tat, now) - now
                    opens = wait if opens is None else min(opens, wait)
            if held:
                continue
            for bucket, rate in buckets:
                tats[bucket] = rate.taken(tats.get(bucket, self._tats.get(bucket)), now, 1)
            for scope in _scopes(rec.queue, rec.name, rec.key):
                running[scope] = running.get(scope, 0) + 1
            chosen.append(row)
        if take:
            # A bucket whose tat is past is the same as none: forget those (an idle key leaves
            # nothing behind), then store what this claim took.
            for bucket in [b for b, tat in self._tats.items() if tat <= now]:
                del self._tats[bucket]
            for queue, last in self._last_turn.items():
                current = self._round.get(queue, 1)
                for key in [k for k, turn in last.items() if turn < current]:
                    del last[key]
            self._tats.update(tats)
            for row in chosen:
                if row.turn > self._round.get(row.rec.queue, 0):
                    self._round[row.rec.queue] = row.turn
                last = self._last_turn.get(row.rec.queue, {})
                if row.rec.key in last and last[row.rec.key] == row.turn:
                    # The key's latest job is taken: no pending turn of its own is left to
                    # follow, so its next job joins the round being served (as on the SQL
                    # stores, which read the key's latest pending turn, and Redis).
                    del last[row.rec.key]
        return chosen, opens

    def jobs_ack(self, params: JobsAckParams) -> list[str]:
        """Apply each outcome whose token still matches; return the stale ids."""
        refuse_connection(self, params)
        stale: list[str] = []
        with self._lock:
            now = self._now()
            for out in params.outcomes:
                row = self._rows.get(out.id)
                if row is None or row.rec.status != "running" or row.token != out.token:
                    stale.append(out.id)
                    continue
                row.token = None
                row.lease_expires_at = None
                rec = row.rec
                if out.kind == "completed":
                    row.rec = replace(rec, status="completed", result=out.result, finished_at=now)
                    self._tally(rec.queue, "completed", now)
                    self._release(row, now)
                    self._unhold(row)
                elif out.kind == "failed":
                    row.rec = replace(rec, status="failed", error=out.error, finished_at=now)
                    self._tally(rec.queue, "failed", now)
                elif out.kind == "cancelled":
                    row.rec = replace(rec, status="cancelled", error=out.error, finished_at=now)
                elif out.kind == "retry":
                    row.rec = replace(
                        rec, status="pending", error=out.error, run_at=now + out.delay
                    )
                else:  # release
                    row.rec = replace(rec, status="pending", run_at=now, attempts=rec.attempts - 1)
            if len(stale) < len(params.outcomes):
                if any(self._limited(o.id) for o in params.outcomes):
                    self._inserts += 1  # a slot opened: a held back job may start (wake waiters)
                self._lock.notify_all()
        return stale

    def _limited(self, job_id: str) -> bool:
        """Whether the job's queue or name has a limit that counts running jobs (lock held)."""
        row = self._rows.get(job_id)
        if row is None:
            return False
        cfg = self._queues.get(row.rec.queue)
        if cfg is not None and (cfg.max_concurrency is not None or cfg.limits.keyed):
            return True
        named = self._job_limits.get((row.rec.queue, row.rec.name))
        return named is not None and named.key_concurrency is not None

    def jobs_wait(self, params: JobsWaitParams) -> bool:
        """Sleep on the condition until an insert or the timeout."""
        with self._lock:
            seen = self._inserts
            self._lock.wait_for(lambda: self._inserts != seen, timeout=params.timeout)
            return self._inserts != seen

    def jobs_wake(self, params: JobsWakeParams) -> None:
        """Wake every waiter, as an insert does; the worker's next waiting claim returns at
        once even if it was not waiting yet (its mark is one no count equals)."""
        with self._lock:
            self._waiters[params.worker_id] = -1
            self._inserts += 1
            self._lock.notify_all()

    def leases_renew(self, params: LeasesRenewParams) -> Renewed:
        """Push leases forward and store progress; the lost ones and the cancel requests."""
        out = Renewed()
        progress = {p.id: p for p in params.progress}
        with self._lock:
            now = self._now()
            for job_id, token in params.jobs:
                row = self._rows.get(job_id)
                if row is None or row.rec.status != "running" or row.token != token:
                    out.lost.append(job_id)
                    continue
                row.lease_expires_at = now + row.lease
                if (p := progress.get(job_id)) is not None:
                    row.rec = replace(row.rec, progress=p.fraction, progress_note=p.note)
                if row.rec.cancel_requested_at is not None:
                    out.cancel_requested.append(job_id)
        return out

    def leases_lapsed(self, params: LeasesLapsedParams) -> list[Lapsed]:
        """The running jobs whose lease lapsed, longest lapsed first."""
        with self._lock:
            now = self._now()
            rows = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row.rec.status == "running"
                    and row.token is not None
                    and row.lease_expires_at is not None
                    and row.lease_expires_at < now
                ),
                key=lambda row: (row.lease_expires_at or 0.0, row.rec.id),
            )[: max(params.limit, 0)]
            return [
                Lapsed(
                    row.rec.id,
                    row.token or "",
                    row.rec.name,
                    row.rec.queue,
                    row.rec.attempts,
                    row.rec.max_attempts,
                    row.backoff,
                    row.rec.delivery,
                    row.rec.cancel_requested_at is not None,
                )
                for row in rows
            ]

    def leases_reap(self, params: LeasesReapParams) -> list[Reaped]:
        """Apply the reaper's moves, each only if its lease is still the lapsed one."""
        reaped: list[Reaped] = []
        with self._lock:
            now = self._now()
            for move in params.moves:
                row = self._rows.get(move.id)
                if (
                    row is None
                    or row.rec.status != "running"
                    or row.token != move.token
                    or row.lease_expires_at is None
                    or row.lease_expires_at >= now
                    or (move.kind == "retry" and row.rec.cancel_requested_at is not None)
                ):
                    # Renewed, settled or reaped since the read: that one wins. A cancellation
                    # asked since then: the next read decides it.
                    continue
                rec = row.rec
                row.token = None
                row.lease_expires_at = None
                if move.kind == "retry":
                    row.rec = replace(
                        rec, status="pending", error=move.error, run_at=now + move.delay
                    )
                else:
                    row.rec = replace(rec, status=move.kind, error=move.error, finished_at=now)
                if move.kind == "failed":
                    self._tally(rec.queue, "failed", now)
                reaped.append(Reaped(rec.id, row.rec.status, rec.name, rec.queue))
            if reaped:
                self._inserts += 1
                self._lock.notify_all()
        return reaped

    def jobs_expire(self, params: JobsExpireParams) -> int:
        """No job expires by itself here: finished jobs stay until purged (``jobs_purge``, a
        worker's ``retention``). Throughput minutes past :data:`THROUGHPUT_KEEP` are dropped."""
        with self._lock:
            cutoff = self._now() - THROUGHPUT_KEEP
            for key in [k for k in self._throughput if k[1] < cutoff]:
                del self._throughput[key]
        return 0

    def throughput_get(self, params: ThroughputParams) -> list[ThroughputMinute]:
        """The kept minutes since ``now - since``, by queue then minute."""
        with self._lock:
            start = self._now() - params.since
            wanted = set(params.queues)
            return [
                ThroughputMinute(queue, minute, c, f)
                for (queue, minute), (c, f) in sorted(self._throughput.items())
                if minute > start - THROUGHPUT_STEP and (not wanted or queue in wanted)
            ]

    # queues, workers, stats -------------------------------------------------------------------

    def queues_configure(self, config: QueueConfig) -> None:
        """Upsert a queue's settings."""
        with self._lock:
            self._queues[config.name] = config

    def queues_list(self) -> list[QueueConfig]:
        """Every configured queue."""
        with self._lock:
            return sorted(self._queues.values(), key=lambda q: q.name)

    def workers_beat(self, params: WorkersBeatParams) -> None:
        """Register, refresh or remove a worker; forget the silent ones."""
        with self._lock:
            now = self._now()
            if params.stopping:
                self._workers.pop(params.worker.id, None)
                self._forget_after.pop(params.worker.id, None)
            else:
                self._workers[params.worker.id] = replace(params.worker, last_seen=now)
                self._forget_after[params.worker.id] = params.forget_after
            self._forget_workers(now)

    def _forget_workers(self, now: float) -> None:
        for wid, info in list(self._workers.items()):
            if info.last_seen < now - self._forget_after.get(wid, DEFAULT_FORGET_AFTER):
                del self._workers[wid]
                self._forget_after.pop(wid, None)

    def workers_list(self) -> list[WorkerInfo]:
        """Live workers; those silent past their own limit are forgotten."""
        with self._lock:
            self._forget_workers(self._now())
            return sorted(self._workers.values(), key=lambda w: w.started_at)

    def queues_names(self, params: QueuesNamesParams) -> list[str]:
        """The queues holding finished jobs of those statuses, by name."""
        with self._lock:
            wanted = set(params.statuses)
            return sorted({r.rec.queue for r in self._rows.values() if r.rec.status in wanted})

    def stats_get(self, params: StatsParams) -> list[QueueStats]:
        """Counts by status per queue; the head of each priority level's line is its first due
        job in claim order (see :class:`QueueStats`)."""
        with self._lock:
            now = self._now()
            names = {r.rec.queue for r in self._rows.values()} | set(self._queues)
            if params.queues:
                names &= set(params.queues)
            out = []
            heads: dict[tuple[str, int], _Row] = {}  # (queue, priority) -> its line's head
            for r in self._rows.values():
                if r.rec.status == "pending" and r.rec.run_at <= now:
                    level = (r.rec.queue, r.rec.priority)
                    head = heads.get(level)
                    if head is None or _claim_order(r) < _claim_order(head):
                        heads[level] = r
            oldest: dict[str, float] = {}
            for (queue, _), head in heads.items():
                oldest[queue] = min(oldest.get(queue, head.rec.run_at), head.rec.run_at)
            for name in sorted(names):
                counts = dict.fromkeys(STATUSES, 0)
                recent = 0
                for r in self._rows.values():
                    if r.rec.queue != name:
                        continue
                    counts[r.rec.status] += 1
                    fin = r.rec.finished_at
                    if r.rec.status == "completed" and fin is not None and fin >= now - 60:
                        recent += 1
                out.append(QueueStats(name, counts, recent, oldest.get(name)))
            return out

    # time and recurring jobs ------------------------------------------------------------------

    # flow control -----------------------------------------------------------------------------

    def limits_sync(self, params: LimitsSyncParams) -> None:
        """Store (or, empty, delete) each job name's limits."""
        with self._lock:
            for job in params.jobs:
                if job.limits:
                    self._job_limits[(job.queue, job.name)] = job.limits
                else:
                    self._job_limits.pop((job.queue, job.name), None)

    def limits_stats(self, params: LimitsStatsParams) -> list[LimitStats]:
        """Each limited scope of the queues asked (see :func:`_stored.limit_stats`): every
        running job, and the first ``params.walk`` pending jobs of each queue in claim order,
        as the other stores read them."""
        with self._lock:
            now = self._now()
            counts: dict[tuple[str, str, str | None], list[int]] = {}
            pending: dict[str, list[_Row]] = {}
            for r in self._rows.values():
                if r.rec.status == "running":
                    counts.setdefault((r.rec.queue, r.rec.name, r.rec.key), [0, 0, 0])[2] += 1
                elif r.rec.status == "pending":
                    pending.setdefault(r.rec.queue, []).append(r)
            for rows in pending.values():
                rows.sort(key=_claim_order)
                for r in rows[: params.walk]:
                    cell = counts.setdefault((r.rec.queue, r.rec.name, r.rec.key), [0, 0, 0])
                    cell[0] += 1
                    cell[1] += r.rec.run_at <= now
            buckets = {(q, job): (tat,) for (q, job, key), tat in self._tats.items() if key is None}
            named = [JobLimits(q, job, limits) for (q, job), limits in self._job_limits.items()]
            return limit_stats(
                params,
                now,
                list(self._queues.values()),
                sorted(named, key=lambda j: (j.queue, j.name)),
                [(*at, *c) for at, c in counts.items()],
                buckets,
            )

    def store_info(self) -> StoreInfo:
        """Finished jobs are kept until purged; no server to warn about."""
        return StoreInfo("memory")

    def clock_now(self) -> float:
        """The frozen clock's now, else the host's."""
        return self._now()

    def schedules_sync(self, params: SchedulesSyncParams) -> None:
        """Upsert the given schedules, keeping the next run of unchanged ones."""
        with self._lock:
            given = {s.name for s in params.schedules}
            for name, stored in self._schedules.items():
                if name not in given:
                    self._schedules[name] = replace(stored, active=False)
            for new in params.schedules:
                old = self._schedules.get(new.name)
                if old is not None and _same_ticks(old, new):
                    self._schedules[new.name] = replace(old, active=True, catch_up=new.catch_up)
                else:
                    paused = old is not None and old.paused
                    self._schedules[new.name] = replace(
                        new, active=True, last_run_at=None, paused=paused
                    )

    def schedules_list(self) -> list[Schedule]:
        """Every stored schedule."""
        with self._lock:
            return sorted(self._schedules.values(), key=lambda s: s.name)

    def schedules_fire(self, params: SchedulesFireParams) -> Inserted | None:
        """Compare-and-set the next run, and insert the tick's job."""
        with self._lock:
            sched = self._due(params.name, params.fire_at)
            if sched is None:
                return None
            job = sched.job
            job = replace(job, run_at=params.fire_at, idempotency_key=params.idempotency_key)
            (inserted,) = self.jobs_insert(JobsInsertParams([job]))  # raises QueueFull: no change
            self._schedules[sched.name] = replace(
                sched, next_run_at=params.next_at, last_run_at=params.fire_at
            )
            return inserted

    def schedules_skip(self, params: SchedulesSkipParams) -> bool:
        """Compare-and-set the next run, inserting nothing."""
        with self._lock:
            sched = self._due(params.name, params.fire_at)
            if sched is None:
                return False
            self._schedules[sched.name] = replace(sched, next_run_at=params.next_at)
            return True

    def schedules_pause(self, params: SchedulesPauseParams) -> bool:
        """Set the paused flag; a resume also restarts the next run."""
        with self._lock:
            sched = self._schedules.get(params.name)
            if sched is None:
                return False
            if params.paused:
                self._schedules[sched.name] = replace(sched, paused=True)
            elif sched.paused:
                self._schedules[sched.name] = replace(
                    sched, paused=False, next_run_at=params.next_run_at
                )
            return True

    def _due(self, name: str, fire_at: float) -> Schedule | None:
        """The schedule if it is active, not paused and waiting for ``fire_at`` (lock held)."""
        sched = self._schedules.get(name)
        if (
            sched is None
            or not sched.active
            or sched.paused
            or sched.next_run_at is None
            or abs(sched.next_run_at - fire_at) > 0.001
        ):
            return None
        return sched

    def close(self) -> None:
        """Nothing to release."""


def _run_at(job: NewJob, now: float) -> float:
    return job.run_at if job.run_at is not None else now + job.delay


def _scopes(
    queue: str, name: str, key: str | None
) -> tuple[tuple[str, str | None, str | None], ...]:
    """What a running job counts against: its queue, and with a key, the key in the queue's
    limits and in its name's."""
    if key is None:
        return ((queue, None, None),)
    return ((queue, None, None), (queue, None, key), (queue, name, key))


def _claim_order(r: _Row) -> tuple[int, int, float, int]:
    """Where a pending job stands in its queue's claim order: priority (higher first), fair
    round, run_at, then enqueue order."""
    return (-r.rec.priority, fair_round(r.turn), r.rec.run_at, int(r.rec.id))


def _search_matches(rec: JobRecord, p: JobsSearchParams) -> bool:
    """Whether a walked job passes the filters that are checked on each job."""
    return (
        (p.name is None or rec.name == p.name)
        and (p.idempotency_key is None or rec.idempotency_key == p.idempotency_key)
        and (p.contains is None or p.contains in rec.payload)
        and (p.error_contains is None or p.error_contains in (rec.error or ""))
    )


def _same_ticks(old: Schedule, new: Schedule) -> bool:
    """Whether a stored schedule keeps its progress when synced as ``new``."""
    ticks = (old.cron, old.every, old.timezone, old.job)
    return ticks == (new.cron, new.every, new.timezone, new.job)
