"""The PostgreSQL backend: many worker hosts against one database.

- Jobs live in a table partitioned by status (seed 001): the pending partition holds only the
  jobs to claim, so the claim index stays small however many jobs have finished. Workflow steps
  wait for their inputs in a ``waiting`` partition; the completion of the last input moves
  the step to pending in the same statement (``jobs_ack``, 0006_workflows.sql).
- A claim is one statement: ``FOR UPDATE SKIP LOCKED`` in claim order, per queue, so claimers
  never block one another; only claimers of a queue with a ``max_concurrency`` take turns.
- Outcomes are settled in batches (arrays, ``unnest``), each fenced by its claim's token.
- Inserts NOTIFY; ``jobs_wait`` sleeps on a LISTEN connection (:mod:`.listener`).
- Time is the database's: ``coalesce(clock.now(), statement_timestamp())`` (see queries/README.md).
- A caller's own connection takes part in its transaction: enqueue (``connection=``) and
  completion (``connection_acquire``) commit or roll back with the caller's work.

Statements live in ``queries/*.sql`` (a file per noun) and run as server-side prepared statements.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from ..._secrets import mask_url
from ...clock import Clock
from ...errors import DuplicateJob, InvalidTransition, JobNotFound
from .._lean import Lean
from .._stored import (
    LIMIT_COLUMNS,
    limit_columns,
    limit_stats,
    limits_from,
    parse_numeric_id,
    readable,
    storable,
)
from ..base import (
    DEFAULT_MAX_ATTEMPTS,
    STATUSES,
    THROUGHPUT_KEEP,
    Claimed,
    ClaimedJob,
    DeadGroup,
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
    QueuesNamesParams,
    QueueStats,
    Reaped,
    Renewed,
    Schedule,
    SchedulesFireParams,
    SchedulesPauseParams,
    SchedulesSkipParams,
    SchedulesSyncParams,
    StatsParams,
    StoreInfo,
    StoreTidyParams,
    ThroughputMinute,
    ThroughputParams,
    WorkerInfo,
    WorkersBeatParams,
    bounded_delay,
    sort_groups,
)
from . import _behind, _caller, _migrate
from ._connect import Settings, is_dropped, open_pool, parse_url
from ._sql import Q
from .listener import Listener

T = TypeVar("T")
log = logging.getLogger("jobyard.postgres")
_rng = random.Random()  # jitter without touching the global random state
Conn = psycopg.Connection[Any]
Row = tuple[Any, ...]

RECONNECTS = 3  # retries of a statement whose connection was lost under it
# A user's key (or parent id) is stored exactly as given, but PostgreSQL text is UTF-8 and a
# Python string may hold a lone surrogate. Such a string (and, to keep the mapping one-to-one,
# one that starts with the mark) is stored as the mark followed by its ASCII-escaped JSON form.
_EXACT_MARK = "\ufdd0"  # a noncharacter: no real key starts with it


def exact_in(value: str | None) -> str | None:
    """``value`` in the form stored (see :data:`_EXACT_MARK`); equal values, equal forms."""
    if value is None or value.isascii():
        return value
    if not value.startswith(_EXACT_MARK):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            pass
    return _EXACT_MARK + json.dumps(value)


def exact_out(value: str | None) -> str | None:
    """The inverse of :func:`exact_in`."""
    if value is None or not value.startswith(_EXACT_MARK):
        return value
    decoded: str = json.loads(value[len(_EXACT_MARK) :])
    return decoded


def _ids(numbers: list[int] | None) -> tuple[str, ...]:
    """A stored array of job ids (NULL: none) as JobRecord holds them."""
    return () if numbers is None else tuple(map(str, numbers))


def _record(row: Row) -> JobRecord:
    # the last three columns: the workflow links (depends_on, dependents), the limit key
    values: list[Any] = [*row[1:-3], _ids(row[-3]), _ids(row[-2]), row[-1]]
    rec = JobRecord(str(row[0]), *values)
    if rec.idempotency_key is None and rec.parent_id is None:
        return rec
    return dataclasses.replace(
        rec, idempotency_key=exact_out(rec.idempotency_key), parent_id=exact_out(rec.parent_id)
    )


def _queue_config(r: Row) -> QueueConfig:
    """A row of ``queues_list``."""
    return QueueConfig(
        name=r[0],
        max_concurrency=r[1],
        max_attempts=r[2],
        backoff=r[3],
        max_pending=r[4],
        paused=r[5],
        retention=r[6],
        limits=limits_from(r[7:14], r[14]),
    )


def _claimed(r: Row) -> ClaimedJob:
    return ClaimedJob(
        id=str(r[0]),
        name=r[1],
        queue=r[2],
        payload=r[3],
        attempts=r[4],
        max_attempts=r[5],
        backoff=r[6],
        timeout=r[7],
        lease=r[8],
        token=r[9],
        delivery=r[10],
        parent_id=exact_out(r[11]),
        run_at=None if r[14] is None else float(r[14]),  # r[12], r[13]: priority, turn
    )


def _claimed_rows(rows: Sequence[Row]) -> Claimed:
    """A claim's answer: its jobs, then the summary row (id NULL) with next_open."""
    summary = rows[-1]
    opens = None if summary[-2] is None else max(float(summary[-2]), 0.0)
    return Claimed([_claimed(r) for r in rows if r[0] is not None], opens)


def _workflow_args(jobs: Sequence[NewJob]) -> dict[str, list[str | None]] | None:
    """The arguments jobs_insert_workflow adds for a batch with workflow steps (see
    ``positions`` in queries/jobs.sql), or None for a plain batch (jobs_insert). Per job: its
    workflow, the 1-based positions it waits for (``NewJob.after``) and those waiting for it,
    as array literals (None: none)."""
    if all(j.workflow_id is None and not j.after for j in jobs):
        return None
    if any(j.idempotency_key is not None for j in jobs):
        raise ValueError("a batch of workflow steps cannot carry idempotency keys")
    nexts: list[list[int]] = [[] for _ in jobs]
    for n, job in enumerate(jobs, 1):
        for i in job.after:
            if not 0 <= i < n - 1:
                raise ValueError(f"job {n - 1} of the batch waits for position {i}, not before it")
            nexts[i].append(n)

    def literal(positions: Sequence[int]) -> str | None:
        return "{" + ",".join(map(str, positions)) + "}" if positions else None

    return {
        "workflows": [j.workflow_id for j in jobs],
        "afters": [literal([i + 1 for i in j.after]) for j in jobs],
        "nexts": [literal(n) for n in nexts],
    }


class PostgresBackend:
    """The ``postgresql://`` (or ``postgres://``) store. See the module docstring.

    URL parameters of jobyard's own: ``schema=NAME`` (every table in that schema; it is created
    by ``jobyard migrate``), ``pool_min_size`` and ``pool_max_size`` (default 1 and 20),
    ``worker_commit=async|sync`` (default async: see queries/README.md).
    """

    # No limit: a claim is one statement beside the others, and claims capped at 128 drained
    # async jobs slightly slower (bench/README.md).
    claim_max: int | None = None

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = mask_url(url)
        self.clock = clock
        self._settings: Settings = parse_url(url)
        self._pool: ConnectionPool[Conn] = open_pool(self._settings, f"jobyard {self.url}")
        self._listener = Listener(self._settings)
        # ("claim" | "insert", *queues) of the statements that go behind their lock statement
        self._limited: set[tuple[str, ...]] = set()
        self._limited_lock = threading.Lock()
        # the same keys, whose lean statement (jobs_insert_one, jobs_claim_open) handed over
        self._lean = Lean()
        self._lent: set[int] = set()  # id() of the connections connection_acquire lent
        self._lent_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresBackend({self.url!r})"

    # plumbing -----------------------------------------------------------------------------------

    def _checkout(self) -> Conn:
        """A pooled connection the server has not dropped (see :func:`is_dropped`)."""
        for _ in range(self._settings.pool_max + 1):
            conn = self._pool.getconn()
            if not is_dropped(conn):
                return conn
            conn.close()  # the pool forgets a closed connection and opens a new one
            self._pool.putconn(conn)
        return self._pool.getconn()  # a fresh one by now; a statement will tell

    def _run(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` on a pooled connection.

        A status change moves a row to another partition, and a concurrent statement that
        reaches the moved row fails with a serialization error even in READ COMMITTED (it
        cannot follow the row across partitions). Each statement here is atomic, so it is
        simply run again: its new snapshot sees the move.

        A connection lost under a statement (the server restarted, ``pg_terminate_backend``)
        means that statement did not commit (a terminated backend aborts its transaction; a
        commit that had happened would have been answered first), so it is retried on a fresh
        connection, up to :data:`RECONNECTS` times: when a whole pool is terminated, the next
        idle connection may be dead too before its socket says so. (The one ambiguity left is
        a server crash between a commit and its answer, as for any client: an idempotency key
        makes an enqueue safe to repeat even then.)
        """
        conflicts = 0
        reconnects = RECONNECTS
        while True:
            conn = self._checkout()
            try:
                return fn(conn)
            except _caller.CONFLICTS as exc:
                conflicts += 1
                if conflicts > _caller.MAX_CONFLICT_RETRIES:
                    raise
                log.debug("retrying after a conflict (%s): %s", type(exc).__name__, exc)
                time.sleep(_rng.uniform(0, 0.001 * conflicts))  # decorrelate the rivals
            except psycopg.OperationalError as exc:
                if not conn.broken or reconnects <= 0:
                    raise
                reconnects -= 1
                log.info("retrying on a new connection: %s", exc)
            finally:
                self._pool.putconn(conn)

    @staticmethod
    def _fetch(conn: Conn, query: str, params: dict[str, Any] | None = None) -> list[Row]:
        return conn.execute(query, params, prepare=True).fetchall()

    @staticmethod
    def _locked(conn: Conn, steps: Sequence[_caller.Step]) -> list[Row]:
        # A lock statement and the statement it guards go in one pipeline with no Sync between
        # them: one round trip, and one implicit transaction, so the transaction-scoped
        # advisory lock taken by the first is held through the second, while the second still
        # takes its own fresh snapshot (READ COMMITTED: one per statement) after the lock was
        # granted. Returns the rows of the last statement.
        with conn.pipeline():
            cursors = [conn.execute(query, params, prepare=True) for query, params in steps]
        return cursors[-1].fetchall()

    def _remember(self, key: tuple[str, ...], *, limited: bool) -> None:
        """Note whether statements for this set of queues need their lock statement first
        (queues with a limit), learned from the statements themselves."""
        with self._limited_lock:
            if limited:
                self._limited.add(key)
            else:
                self._limited.discard(key)

    @staticmethod
    def _locked_counted(conn: Conn, steps: Sequence[_caller.Step]) -> tuple[int, list[Row]]:
        """:meth:`_locked`, also telling how many rows the first (lock) statement returned."""
        with conn.pipeline():
            cursors = [conn.execute(query, params, prepare=True) for query, params in steps]
        return len(cursors[0].fetchall()), cursors[-1].fetchall()

    @staticmethod
    def _claim_locked(
        conn: Conn, lock: tuple[str, dict[str, Any]], claim: tuple[str, dict[str, Any]]
    ) -> tuple[int, list[Row]]:
        """The claim lock statement, then the claim it guards, in one round trip (see
        _behind.py: not a pipeline); the number of locks taken and the claim's rows."""
        return _behind.run(conn, lock, claim)

    def _caller_search_path(self, conn: Any) -> str | None:
        # Connections the pool made (lent by connection_acquire) have the schema already.
        with self._lent_lock:
            lent = id(conn) in self._lent
        return None if lent else self._settings.search_path

    # schema -------------------------------------------------------------------------------------

    def schema_migrate(self) -> list[str]:
        """Apply pending migrations (idempotent, safe when run concurrently); names applied."""
        with psycopg.connect(self._settings.conninfo, **self._settings.kwargs) as conn:
            return _migrate.apply(conn, self._settings.schema)

    def schema_check(self) -> None:
        """Raise :class:`jobyard.errors.SchemaError` naming ``jobyard migrate`` if behind."""
        where = self.url if self._settings.schema is None else f"schema {self._settings.schema}"
        self._run(lambda conn: _migrate.check(conn, where))

    # producer side ----------------------------------------------------------------------------

    def _insert_steps(self, jobs: Sequence[NewJob], locked: bool = True) -> list[_caller.Step]:
        """The lock statement and the insert; with ``locked`` false, the insert alone, which
        writes nothing for a batch that needs the lock (see ``go`` in queries/jobs.sql). A batch
        with workflow steps goes through jobs_insert_workflow."""
        args: dict[str, Any] = {
            "locked": locked,
            "now": self.clock.now(),
            "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
            "names": [j.name for j in jobs],
            "queues": [j.queue for j in jobs],
            "payloads": [j.payload for j in jobs],
            "priorities": [int(j.priority) for j in jobs],
            "delays": [float(j.delay) for j in jobs],
            "run_ats": [None if j.run_at is None else float(j.run_at) for j in jobs],
            "max_attempts": [j.max_attempts or None for j in jobs],
            "backoffs": [j.backoff or None for j in jobs],
            "timeouts": [None if j.timeout is None else float(j.timeout) for j in jobs],
            "leases": [float(j.lease) for j in jobs],
            "deliveries": [j.delivery for j in jobs],
            "parents": [exact_in(j.parent_id) for j in jobs],
            "limit_keys": [j.key for j in jobs],  # checked by the core: plain UTF-8, no NUL
        }
        workflow = _workflow_args(jobs)
        if workflow is None:
            query, args["keys"] = Q.jobs_insert, [exact_in(j.idempotency_key) for j in jobs]
        else:
            query = Q.jobs_insert_workflow
            args.update(workflow)
        if not locked:
            return [(query, args)]
        lock = {"queues": sorted({j.queue for j in jobs})}
        return [(Q.jobs_insert_lock, lock), (query, args)]

    @staticmethod
    def _inserted(rows: list[Row]) -> list[Inserted]:
        return [Inserted(str(row[1]), bool(row[2])) for row in rows]

    def jobs_insert(self, params: JobsInsertParams) -> list[Inserted]:
        """Insert jobs in one round trip; raise :class:`QueueFull` (writing nothing) past a
        queue's max_pending. With ``params.connection`` the jobs join the caller's
        transaction. A statement whose connection was lost is retried on a fresh one (an
        idempotency key makes that safe even in the rare case where this is ambiguous)."""
        if not params.jobs:
            return []
        conn = params.connection
        rows: list[Row] = []
        if conn is not None:
            steps = self._insert_steps(params.jobs)
            rows = _caller.run_sync(conn, steps, self._caller_search_path(conn))
            inserted = self._inserted(rows)
            replace = self._replace_step(params.jobs, inserted)
            if replace is None:
                return inserted
            done = _caller.run_sync(conn, [replace], self._caller_search_path(conn))
            return self._replaced(inserted, params.jobs, done)
        key = ("insert", *sorted({j.queue for j in params.jobs}))
        if (
            len(params.jobs) == 1
            and params.jobs[0].plain
            and key not in self._limited
            and self._lean.ok(key)
        ):
            got = self._insert_one(params.jobs[0])
            if got is not None:
                return [got]
            self._lean.handed_over(key)
        try:
            if key not in self._limited:
                # One statement, unless a queue of the batch has a max_pending: then it wrote
                # nothing, and the batch goes again behind that queue's lock (and these queues
                # go behind it at once from then on).
                (insert,) = self._insert_steps(params.jobs, locked=False)
                rows = self._run(lambda c: self._fetch(c, insert[0], dict(insert[1] or {})))
            if key in self._limited or (rows and rows[-1][3] is False):
                steps = self._insert_steps(params.jobs)
                taken, rows = self._run(lambda c: self._locked_counted(c, steps))
                self._remember(key, limited=taken > 0)
        except psycopg.Error as exc:
            full = _caller.queue_full(exc)
            if full is not None:
                raise full from None
            raise
        inserted = self._inserted(rows)
        replace = self._replace_step(params.jobs, inserted)
        if replace is None:
            return inserted
        query, args = replace
        done = self._run(lambda c: self._fetch(c, query, dict(args or {})))
        return self._replaced(inserted, params.jobs, done)

    def _insert_one(self, job: NewJob) -> Inserted | None:
        """One plain job through jobs_insert_one (scalar parameters, none of the batch
        machinery); None when its queue has a max_pending or is fair: nothing was written, and
        jobs_insert must insert it."""
        args = {
            "now": self.clock.now(),
            "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
            "queue": job.queue,
            "name": job.name,
            "payload": job.payload,
            "priority": int(job.priority),
            "delay": float(job.delay),
            "run_at": None if job.run_at is None else float(job.run_at),
            "max_attempts": job.max_attempts or None,
            "backoff": job.backoff or None,
            "timeout": None if job.timeout is None else float(job.timeout),
            "lease": float(job.lease),
            "delivery": job.delivery,
            "parent": exact_in(job.parent_id),
        }
        ((number, go),) = self._run(lambda c: self._fetch(c, Q.jobs_insert_one, args))
        return Inserted(str(number), True) if go else None

    def _replace_step(
        self, jobs: Sequence[NewJob], inserted: Sequence[Inserted]
    ) -> _caller.Step | None:
        """jobs_replace for the jobs with ``on_conflict="replace"`` that found their key held
        (None if there are none): the last such job of each holder gives it its payload."""
        last: dict[str, NewJob] = {}
        for job, got in zip(jobs, inserted, strict=True):
            if job.on_conflict == "replace" and not got.created:
                last.pop(got.id, None)
                last[got.id] = job
        if not last:
            return None
        return (
            Q.jobs_replace,
            {
                "now": self.clock.now(),
                "ids": [int(i) for i in last],
                "payloads": [j.payload for j in last.values()],
                "moved": [j.run_at is not None or j.delay != 0 for j in last.values()],
                "run_ats": [None if j.run_at is None else float(j.run_at) for j in last.values()],
                "delays": [float(j.delay) for j in last.values()],
            },
        )

    @staticmethod
    def _replaced(
        inserted: list[Inserted], jobs: Sequence[NewJob], rows: Sequence[Row]
    ) -> list[Inserted]:
        done = {str(r[0]) for r in rows}
        return [
            Inserted(i.id, False, True)
            if not i.created and j.on_conflict == "replace" and i.id in done
            else i
            for i, j in zip(inserted, jobs, strict=True)
        ]

    async def jobs_insert_async(self, params: JobsInsertParams) -> list[Inserted]:
        """:meth:`jobs_insert` on the caller's psycopg ``AsyncConnection`` (the same
        statements); without one (no connection, or a sync one) it runs :meth:`jobs_insert` on
        a thread."""
        conn = params.connection
        if not isinstance(conn, psycopg.AsyncConnection):
            return await asyncio.to_thread(self.jobs_insert, params)
        if not params.jobs:
            return []
        steps = self._insert_steps(params.jobs)
        rows = await _caller.run_async(conn, steps, self._caller_search_path(conn))
        inserted = self._inserted(rows)
        replace = self._replace_step(params.jobs, inserted)
        if replace is None:
            return inserted
        done = await _caller.run_async(conn, [replace], self._caller_search_path(conn))
        return self._replaced(inserted, params.jobs, done)

    def jobs_get(self, job_id: str) -> JobRecord | None:
        """One job, or ``None`` (also for an id that cannot be one)."""
        number = parse_numeric_id(job_id)
        if number is None:
            return None
        rows = self._run(lambda c: self._fetch(c, Q.jobs_get, {"id": number}))
        return _record(rows[0]) if rows else None

    def jobs_list(self, params: JobsListParams) -> list[JobRecord]:
        """Jobs matching the filter, newest first. Given ids or a workflow, an index lookup."""
        args: dict[str, Any] = {
            "queue": params.queue,
            "name": params.name,
            "status": params.status,
            "workflow_id": params.workflow_id,
            "limit": max(params.limit, 0),
            "offset": max(params.offset, 0),
        }
        if params.ids is not None:
            numbers = [n for i in params.ids if (n := parse_numeric_id(i)) is not None]
            if not numbers:
                return []
            query, args["ids"] = Q.jobs_list_ids, numbers
        elif params.workflow_id is not None:
            query = Q.jobs_list_workflow
        elif params.status is not None:
            query = Q.jobs_list_status
        else:
            query = Q.jobs_list
        return [_record(r) for r in self._run(lambda c: self._fetch(c, query, args))]

    def jobs_search(self, params: JobsSearchParams) -> JobsPage:
        """A page by cursor (an id): the newest ``scan`` jobs below it walked by primary key
        (one partition when a status is given; a key through jobs_key), filtered; then the
        hits read by id (two statements, one round trip each)."""
        p = params
        before = None if p.before is None else parse_numeric_id(p.before)
        if p.before is not None and before is None:
            raise ValueError(f"invalid cursor {p.before!r}")
        args = {
            "before": 2**63 - 1 if before is None else before,
            "queue": p.queue,
            "status": p.status,
            "name": p.name,
            "key": exact_in(p.idempotency_key),
            "contains": storable(p.contains),
            "error_contains": storable(p.error_contains),
            "limit": p.limit,
            "scan": p.scan,
        }
        if p.idempotency_key is not None:
            query, end = Q.jobs_search_key, Q.jobs_search_key_end
        elif p.status is not None:
            query, end = Q.jobs_search_status, Q.jobs_search_status_end
        else:
            query, end = Q.jobs_search, Q.jobs_search_end

        def search(conn: Conn) -> tuple[list[int], Row, list[Row]]:
            # Two round trips: the hits, then the walk's extent and the hits' records together.
            hits = [int(r[0]) for r in self._fetch(conn, query, args)]
            ends = {**args, "low": hits[-1] if len(hits) == p.limit else 0}
            listed: dict[str, Any] = {"ids": hits, "limit": len(hits), "offset": 0}
            listed.update(dict.fromkeys(("workflow_id", "queue", "status", "name")))
            with conn.pipeline():
                extent = conn.execute(end, ends, prepare=True)
                found = conn.execute(Q.jobs_list_ids, listed, prepare=True) if hits else None
            return hits, extent.fetchall()[0], [] if found is None else found.fetchall()

        hits, (scanned, low), rows = self._run(search)
        records = [_record(r) for r in rows]
        scanned = int(scanned)
        if len(hits) == p.limit:
            cursor: str | None = str(hits[-1])
        else:
            cursor = str(low) if scanned == p.scan else None
        return JobsPage(records, cursor, scanned)

    def dead_groups(self, params: DeadGroupsParams) -> DeadGroups:
        """The newest ``scan`` failed jobs grouped in one statement (the failed partition's
        primary key backwards; the line each stored as it failed, no error read)."""
        args = {"queue": params.queue, "scan": params.scan}
        rows = self._run(lambda c: self._fetch(c, Q.dead_groups, args))
        groups = [
            DeadGroup(
                r[0], r[1], r[2] or "", int(r[3]), float(r[4] or 0), float(r[5] or 0), str(r[6])
            )
            for r in rows
        ]
        walked = int(rows[0][7]) if rows else 0
        scanned = min(walked, params.scan)
        return DeadGroups(sort_groups(groups), scanned, walked <= params.scan)

    def jobs_cancel(self, params: JobsCancelParams) -> JobRecord:
        """Cancel a waiting or pending job, or record a request on a running one. Raise
        JobNotFound, or InvalidTransition if it is finished."""
        job_id = params.id
        number = parse_numeric_id(job_id)
        if number is None:
            raise JobNotFound(job_id)
        args = {
            "now": self.clock.now(),
            "id": number,
            "by": storable(params.by),
            "pending_only": params.pending_only,
        }
        rows = self._run(lambda c: self._fetch(c, Q.jobs_cancel, args))
        if not rows:
            raise JobNotFound(job_id)
        done, rec = rows[0][0], _record(rows[0][1:])
        if not done:
            raise InvalidTransition.cannot_cancel(job_id, rec.status)
        return rec

    def jobs_cancel_many(self, params: JobsCancelManyParams) -> list[str]:
        """jobs_cancel for many jobs in one statement; the refused ones skipped."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        args = {
            "now": self.clock.now(),
            "ids": list(keys),
            "by": storable(params.by),
            "pending_only": params.pending_only,
        }
        rows = self._run(lambda c: self._fetch(c, Q.jobs_cancel_many, args))
        changed = {int(r[0]) for r in rows}
        return [job_id for k, job_id in keys.items() if k in changed]

    def jobs_resume(self, params: JobsResumeParams) -> list[str]:
        """Failed or cancelled workflow jobs -> pending, or waiting on their inputs not
        completed: the inputs share-locked first (``jobs_resume_lock``), then one statement,
        in one pipeline and one transaction."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        ids = list(keys)
        steps: list[_caller.Step] = [
            (Q.jobs_resume_lock, {"ids": ids}),
            (Q.jobs_resume, {"now": self.clock.now(), "ids": ids}),
        ]
        rows = self._run(lambda c: self._locked(c, steps))
        changed = {int(r[0]) for r in rows}
        return [job_id for k, job_id in keys.items() if k in changed]

    def jobs_retry(self, job_id: str) -> JobRecord:
        """Re-drive a failed or cancelled job: pending now, attempts reset. Raise JobNotFound,
        InvalidTransition, or DuplicateJob if its idempotency key is held by another job."""
        number = parse_numeric_id(job_id)
        if number is None:
            raise JobNotFound(job_id)
        args = {"now": self.clock.now(), "id": number}
        rows = self._run(lambda c: self._fetch(c, Q.jobs_retry, args))
        if not rows:
            raise JobNotFound(job_id)
        verdict, holder, rec = rows[0][0], rows[0][1], _record(rows[0][2:])
        if verdict == "duplicate":
            raise DuplicateJob.key_held(job_id, str(holder))
        if verdict != "ok":
            raise InvalidTransition.cannot_retry(job_id, rec.status)
        return rec

    def jobs_retry_many(self, params: JobsRetryManyParams) -> list[str]:
        """jobs_retry for many jobs in one statement; the refused ones skipped."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        args = {"now": self.clock.now(), "ids": list(keys)}
        rows = self._run(lambda c: self._fetch(c, Q.jobs_retry_many, args))
        changed = {int(r[0]) for r in rows}
        return [job_id for k, job_id in keys.items() if k in changed]

    def jobs_purge(self, params: JobsPurgeParams) -> Purged:
        """Delete finished jobs but the held ones, with the waiting steps downstream, in one
        statement. Only the finished partitions are read, and the waiting one for the steps
        downstream of a failed or cancelled job."""
        if not params.statuses:
            return Purged()
        args: dict[str, Any] = {
            "now": self.clock.now(),
            "statuses": sorted(set(params.statuses)),
            "older_than": float(params.older_than),
            "queue": params.queue,
            "ids": None,
        }
        query = Q.jobs_purge
        if params.ids is not None:
            args["ids"] = [n for i in params.ids if (n := parse_numeric_id(i)) is not None]
            if not args["ids"]:
                return Purged()
            query = Q.jobs_purge_ids
        steps: list[_caller.Step] = [(Q.purge_fence, None), (query, args)]
        rows = self._run(lambda c: self._locked(c, steps))
        jobs, waiting, kept = rows[0]
        return Purged(int(jobs), int(waiting), int(kept))

    # worker side ------------------------------------------------------------------------------

    def jobs_claim(self, params: JobsClaimParams) -> Claimed:
        """Claim due jobs through the gate in one round trip (see :class:`JobsClaimParams` and
        ``jobs_claim`` in queries/leases.sql); with ``wait``, after the push signal
        (:meth:`jobs_wait`). A claim of queues with a limit goes behind their lock."""
        if params.wait > 0:
            self._listener.wait(params.queues, params.wait, waiter=params.worker_id)
        queues = list(dict.fromkeys(params.queues))
        if params.limit <= 0 or not queues:
            return Claimed()
        key = ("claim", *queues)
        args = {
            "now": self.clock.now(),
            "queues": queues,
            "limit": params.limit,
            "worker_id": params.worker_id,
            "async_commit": self._settings.async_commit,
            "locked": False,
        }
        rows: list[Row] = []
        if key not in self._limited and self._lean.ok(key):
            # The queues' gates are open (the common case): the lean statement claims what
            # jobs_claim would; else it claims nothing, says so, and jobs_claim goes next.
            rows = self._run(lambda c: self._fetch(c, Q.jobs_claim_open, args))
            if not rows[-1][-1]:
                return _claimed_rows(rows)
            self._lean.handed_over(key)
            rows = []
        if key not in self._limited:
            # One statement; it claims nothing, and says so, if a queue has a limit.
            rows = self._run(lambda c: self._fetch(c, Q.jobs_claim, args))
        if key in self._limited or rows[-1][-1]:
            locked = {**args, "locked": True}
            # Behind the lock, the leanest claim that serves the queues' limits: capped as a
            # whole only (max_concurrency, their own rate), jobs_claim_whole; also by a key's
            # count, jobs_claim_capped; else jobs_claim. Each lean one hands over otherwise.
            lock = (Q.jobs_claim_lock, {"queues": queues})
            for query, lean in (
                (Q.jobs_claim_whole, ("whole", *queues)),
                (Q.jobs_claim_capped, ("capped", *queues)),
                (Q.jobs_claim, None),
            ):
                if lean is not None and not self._lean.ok(lean):
                    continue
                taken, rows = self._run(
                    partial(self._claim_locked, lock=lock, claim=(query, locked))
                )
                self._remember(key, limited=taken > 0)
                if not rows[-1][-1] or lean is None:
                    break
                self._lean.handed_over(lean)
        return _claimed_rows(rows)

    def jobs_ack(self, params: JobsAckParams) -> list[str]:
        """Apply outcomes in one statement; return the ids whose token no longer matched.
        Completions release their waiting dependents in that statement. With
        ``params.connection`` the settlement (and the releases) join that transaction (not
        committed)."""
        outcomes = list(params.outcomes)
        valid = [(o, n) for o in outcomes if (n := parse_numeric_id(o.id)) is not None]
        if not valid:
            return [o.id for o in outcomes]
        # bounded_delay: JSON carries no NaN or infinity (the worker never sends either).
        by_key = {
            f"{n}:{o.token}": [
                o.kind,
                storable(o.result),
                storable(o.error),
                bounded_delay(o.delay),
            ]
            for o, n in valid
        }
        args = {
            "now": self.clock.now(),
            "outcomes": json.dumps(by_key, ensure_ascii=False),
            # On the caller's connection the handler's writes commit too: always durable.
            "async_commit": params.connection is None and self._settings.async_commit,
        }
        conn = params.connection
        if conn is not None:
            steps: list[_caller.Step] = [(Q.jobs_ack, args)]
            rows = _caller.run_sync(conn, steps, self._caller_search_path(conn))
        else:
            rows = self._run(lambda c: self._fetch(c, Q.jobs_ack, args))
        settled = {str(r[0]) for r in rows}
        return [o.id for o in outcomes if o.id not in settled]

    def jobs_wait(self, params: JobsWaitParams) -> bool:
        """Sleep until a NOTIFY for one of the queues, or timeout; True if woken."""
        return self._listener.wait(params.queues, params.timeout)

    def jobs_wake(self, params: JobsWakeParams) -> None:
        """Wake this process's waiters on those queues (the waiting claim waits on the
        listener, in-process): no NOTIFY, no round trip."""
        self._listener.poke(params.queues, params.worker_id)

    def leases_renew(self, params: LeasesRenewParams) -> Renewed:
        """Renew leases and store progress; the lost ones and the cancel requests."""
        pairs = list(params.jobs)
        numbers = {jid: parse_numeric_id(jid) for jid, _ in pairs}  # parsed once per renewal
        valid = [(n, token) for jid, token in pairs if (n := numbers[jid]) is not None]
        if not valid:
            return Renewed(lost=[jid for jid, _ in pairs])
        progress = {p.id: p for p in params.progress}
        sent = [progress.get(jid) for jid, _ in pairs if numbers[jid] is not None]
        args = {
            "now": self.clock.now(),
            "ids": [n for n, _ in valid],
            "tokens": [t for _, t in valid],
            "has_progress": [p is not None for p in sent],
            "progress": [None if p is None else p.fraction for p in sent],
            "notes": [None if p is None else storable(p.note) for p in sent],
            "async_commit": self._settings.async_commit,
        }
        rows = self._run(lambda c: self._fetch(c, Q.leases_renew, args))
        lost = {str(r[0]) for r in rows if r[1] == "lost"}
        asked = {str(r[0]) for r in rows if r[1] == "cancel"}
        return Renewed(
            lost=[jid for jid, _ in pairs if jid in lost or numbers[jid] is None],
            cancel_requested=[jid for jid, _ in pairs if jid in asked],
        )

    def leases_lapsed(self, params: LeasesLapsedParams) -> list[Lapsed]:
        """The running jobs whose lease lapsed, in one read of the running partition."""
        if params.limit <= 0:
            return []
        args = {"now": self.clock.now(), "limit": params.limit}
        rows = self._run(lambda c: self._fetch(c, Q.leases_lapsed, args))
        return [
            Lapsed(str(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows
        ]

    def leases_reap(self, params: LeasesReapParams) -> list[Reaped]:
        """Apply the reaper's moves in one fenced statement, with the counts, the throughput
        history and the freed idempotency keys in the same transaction."""
        moves = [(key, m) for m in params.moves if (key := parse_numeric_id(m.id)) is not None]
        if not moves:
            return []
        args = {
            "now": self.clock.now(),
            "ids": [key for key, _ in moves],
            "tokens": [m.token for _, m in moves],
            "kinds": [m.kind for _, m in moves],
            "errors": [m.error for _, m in moves],
            "delays": [m.delay for _, m in moves],
            "async_commit": self._settings.async_commit,
        }
        rows = self._run(lambda c: self._fetch(c, Q.leases_reap, args))
        return [Reaped(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def jobs_expire(self, params: JobsExpireParams) -> int:
        """No job expires by itself here: finished jobs stay until purged (``jobs_purge``, a
        worker's ``retention``). Throughput minutes past :data:`THROUGHPUT_KEEP` are dropped."""
        args = {"now": self.clock.now(), "keep": float(THROUGHPUT_KEEP)}
        self._run(lambda c: c.execute(Q.throughput_prune, args, prepare=True))
        return 0

    # transactional completion -----------------------------------------------------------------

    def connection_acquire(self) -> Conn:
        """A pooled connection with a transaction open, for a handler
        (``jobyard.current_job().connection``); its writes commit with the job's completion
        (``jobs_ack`` with ``connection=``, then ``commit()``). Give it back with
        :meth:`connection_release`."""
        for attempt in range(2):
            conn = self._checkout()
            try:
                conn.autocommit = False
                conn.execute(Q.lend)
            except psycopg.OperationalError:
                self.connection_release(conn)  # broken: closed, and the pool drops it
                if attempt:
                    raise
                continue
            except BaseException:
                self.connection_release(conn)  # back in autocommit, as the pool's users expect
                raise
            with self._lent_lock:
                self._lent.add(id(conn))
            return conn
        raise AssertionError("unreachable")

    def connection_release(self, conn: Conn) -> None:
        """Return a connection from :meth:`connection_acquire` to the pool (an open
        transaction is rolled back)."""
        with self._lent_lock:
            self._lent.discard(id(conn))
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.rollback()
            conn.autocommit = True
            # The handler had the connection to itself: undo what it may have changed, on the
            # client side and then in the session (one round trip, several statements).
            conn.row_factory = tuple_row
            conn.isolation_level = conn.read_only = conn.deferrable = None
            conn.execute(Q.lent_reset.encode(), prepare=False)
        except psycopg.Error:
            conn.close()  # broken, or in a state it cannot leave: the pool replaces it
        self._pool.putconn(conn)

    # queues, workers, stats -------------------------------------------------------------------

    def queues_configure(self, config: QueueConfig) -> None:
        """Create or replace a queue's settings."""
        args = {
            "name": config.name,
            "max_concurrency": config.max_concurrency,
            "max_attempts": config.max_attempts,
            "backoff": config.backoff,
            "max_pending": config.max_pending,
            "paused": bool(config.paused),
            "retention": config.retention,
            **limit_columns(config.limits),
            "fair": config.limits.fair,
        }
        self._run(lambda c: c.execute(Q.queues_configure, args, prepare=True))

    def queues_list(self) -> list[QueueConfig]:
        """Every configured queue, by name."""
        rows = self._run(lambda c: self._fetch(c, Q.queues_list))
        return [_queue_config(r) for r in rows]

    def limits_sync(self, params: LimitsSyncParams) -> None:
        """Store (or, empty, delete) each job name's limits, in one statement."""
        if not params.jobs:
            return
        cols = [limit_columns(j.limits) for j in params.jobs]
        args = {
            "queues": [j.queue for j in params.jobs],
            "names": [j.name for j in params.jobs],
            **{f"{name}s": [c[name] for c in cols] for name in LIMIT_COLUMNS},
        }
        args["key_concurrencies"] = args.pop("key_concurrencys")
        self._run(lambda c: c.execute(Q.job_limits_sync, args, prepare=True))

    def limits_stats(self, params: LimitsStatsParams) -> list[LimitStats]:
        """Each limited scope (see :func:`_stored.limit_stats`), from a few reads: every running
        job, and the first ``params.walk`` pending jobs of each queue in claim order."""

        def read(conn: Conn) -> list[LimitStats]:
            (now,) = conn.execute(Q.clock_now, {"now": self.clock.now()}).fetchall()[0]
            queues = [_queue_config(r) for r in conn.execute(Q.queues_list).fetchall()]
            named = [
                JobLimits(r[0], r[1], limits_from(r[2:9]))
                for r in conn.execute(Q.job_limits_list).fetchall()
            ]
            args = {"queues": list(params.queues), "walk": params.walk, "now": float(now)}
            counts = conn.execute(Q.limits_walk, args).fetchall()
            buckets = {(r[0], r[1] or None): r[2:] for r in conn.execute(Q.limit_buckets_list)}
            return limit_stats(params, float(now), queues, named, counts, buckets)

        return self._run(read)

    def workers_beat(self, params: WorkersBeatParams) -> None:
        """Register or refresh (or remove, when stopping) a worker; forget silent ones."""
        w = params.worker
        args = {
            "now": self.clock.now(),
            "id": w.id,
            "host": w.host,
            "pid": w.pid,
            "queues": list(w.queues),
            "concurrency": w.concurrency,
            "started_at": float(w.started_at),
            "forget_after": float(params.forget_after),
            "stopping": bool(params.stopping),
        }
        self._run(lambda c: c.execute(Q.workers_beat, args, prepare=True))

    def workers_list(self) -> list[WorkerInfo]:
        """Registered workers, oldest first."""
        args = {"now": self.clock.now()}
        rows = self._run(lambda c: self._fetch(c, Q.workers_list, args))
        return [WorkerInfo(r[0], r[1], r[2], tuple(r[3]), r[4], r[5], r[6]) for r in rows]

    def queues_names(self, params: QueuesNamesParams) -> list[str]:
        """The queues holding finished jobs of those statuses: job_counts' few rows, never the
        partitions."""
        args = {"statuses": list(params.statuses)}
        rows = self._run(lambda c: self._fetch(c, Q.queues_names, args))
        return [str(r[0]) for r in rows]

    def stats_get(self, params: StatsParams) -> list[QueueStats]:
        """Per queue: counts by status and completions in the last minute."""
        args = {"now": self.clock.now(), "queues": list(params.queues), "recent": params.recent}
        rows = self._run(lambda c: self._fetch(c, Q.stats_get, args))
        counts: dict[str, dict[str, int]] = {}
        recent: dict[str, int] = {}
        oldest: dict[str, float] = {}
        for queue, kind, n in rows:
            if kind == "oldest":  # a run_at in microseconds (the column is a count)
                oldest[queue] = int(n) / 1_000_000
                continue
            per = counts.setdefault(queue, dict.fromkeys(STATUSES, 0))
            if kind == "recent":
                recent[queue] = int(n)
            elif kind in per:
                per[kind] = int(n)
        return [QueueStats(q, counts[q], recent.get(q, 0), oldest.get(q)) for q in sorted(counts)]

    def throughput_get(self, params: ThroughputParams) -> list[ThroughputMinute]:
        """The kept minutes since ``now - since`` (one range of the primary key)."""
        args = {
            "now": self.clock.now(),
            "since": float(params.since),
            "queues": list(params.queues),
        }
        rows = self._run(lambda c: self._fetch(c, Q.throughput_get, args))
        return [ThroughputMinute(r[0], float(r[1]), int(r[2]), int(r[3])) for r in rows]

    def store_info(self) -> StoreInfo:
        """Finished jobs are kept until purged; a warning when the server's autovacuum is off
        (one read of the setting)."""
        rows = self._run(lambda c: self._fetch(c, Q.autovacuum_setting))
        if rows and rows[0][0] == "off":
            warning = (
                "the server's autovacuum is off: jobyard's workers vacuum its busiest tables"
                " themselves, but nothing else is vacuumed or analyzed"
            )
            return StoreInfo("postgres", warnings=(warning,))
        return StoreInfo("postgres")

    def store_tidy(self, params: StoreTidyParams) -> list[str]:
        """Vacuum the tables that churn once they pass the threshold (see
        ``vacuum_jobs_pending`` in queries/maintenance.sql); one worker at a time, on an
        autocommit pooled connection (VACUUM cannot run in a transaction). A vacuum takes no
        lock that blocks the moves of jobs. Returns a line per table vacuumed."""
        key = {"key": f"jobyard:tidy:{self._settings.lock_scope}"}

        def tidy(conn: Conn) -> list[str]:
            # pooled connections are in autocommit mode (_connect.py), as VACUUM needs
            row = conn.execute(Q.tidy_lock, key).fetchone()
            if not row or not row[0]:
                return []  # another worker is at it
            done: list[str] = []
            try:
                conn.execute(Q.limit_buckets_forget, {"now": self.clock.now()})
                for name, dead, live, grown in conn.execute(Q.tidy_dead).fetchall():
                    threshold = params.min_dead + params.dead_fraction * live
                    if dead < threshold and grown < threshold:
                        continue
                    t0 = time.perf_counter()
                    conn.execute(getattr(Q, f"vacuum_{name}"))
                    ms = (time.perf_counter() - t0) * 1000.0
                    done.append(
                        f"vacuumed {name} ({dead} dead rows, {live} live, {grown} inserted"
                        f" since its last vacuum) in {ms:.0f} ms"
                    )
            finally:
                if not conn.broken:
                    conn.execute(Q.tidy_unlock, key)
            return done

        return self._run(tidy)

    # time and recurring jobs --------------------------------------------------------------------

    def clock_now(self) -> float:
        """The database's "now" (or the frozen clock's), in epoch seconds."""
        frozen = self.clock.now()
        if frozen is not None:
            return frozen
        rows = self._run(lambda c: self._fetch(c, Q.clock_now, {"now": None}))
        return float(rows[0][0])

    def schedules_sync(self, params: SchedulesSyncParams) -> None:
        """Store the app's schedules (see :class:`SchedulesSyncParams`) in one statement."""
        given = {s.name: s for s in params.schedules}  # one row per name: the last one wins
        args = {
            "names": list(given),
            "crons": [s.cron or "" for s in given.values()],  # "": an interval schedule
            "jobs": [s.job.to_json() for s in given.values()],
            "next_run_ats": [s.next_run_at for s in given.values()],
            "everys": [s.every for s in given.values()],
            "timezones": [s.timezone for s in given.values()],
            "catch_ups": [s.catch_up for s in given.values()],
        }
        self._run(lambda c: c.execute(Q.schedules_sync, args, prepare=True))

    def schedules_list(self) -> list[Schedule]:
        """Every stored schedule, by name."""
        rows = self._run(lambda c: self._fetch(c, Q.schedules_list))
        return readable(rows, _schedule_of, "schedule")

    def schedules_fire(self, params: SchedulesFireParams) -> Inserted | None:
        """Fire a due tick: move the schedule on and insert its job in one transaction; None
        if another worker fired it (or it is not due at ``fire_at``)."""
        advance = {"name": params.name, "fire_at": params.fire_at, "next_at": params.next_at}

        def fire(conn: Conn) -> Inserted | None:
            # A tick fires rarely: a plain transaction of a few round trips is clear and cheap.
            with conn.transaction():
                rows = conn.execute(Q.schedules_advance, advance).fetchall()
                if not rows:
                    return None
                job = NewJob.from_json(rows[0][0])
                job = dataclasses.replace(
                    job, run_at=params.fire_at, idempotency_key=params.idempotency_key
                )
                (lock, lock_args), (insert, insert_args) = self._insert_steps([job])
                conn.execute(lock, lock_args)
                return self._inserted(conn.execute(insert, insert_args).fetchall())[0]

        try:
            return self._run(fire)
        except psycopg.Error as exc:
            full = _caller.queue_full(exc)
            if full is not None:
                raise full from None
            raise

    def schedules_skip(self, params: SchedulesSkipParams) -> bool:
        """Move the schedule past ``fire_at`` without a job; False if it was not waiting for
        that tick (another worker moved it, or it is inactive or paused)."""
        args = {"name": params.name, "fire_at": params.fire_at, "next_at": params.next_at}
        return bool(self._run(lambda c: c.execute(Q.schedules_skip, args).rowcount == 1))

    def schedules_pause(self, params: SchedulesPauseParams) -> bool:
        """Pause or resume a schedule; False if there is no such schedule."""
        args = {"name": params.name, "paused": params.paused, "next_run_at": params.next_run_at}
        return bool(self._run(lambda c: c.execute(Q.schedules_pause, args).rowcount == 1))

    def close(self) -> None:
        """Stop listening and close every connection; safe to call twice."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._listener.stop()
        self._pool.close()


def _schedule_of(r: Row) -> Schedule:
    """A row of ``schedules_list``."""
    return Schedule(
        r[0],
        r[1] or None,  # empty: an interval schedule
        NewJob.from_json(r[2]),
        bool(r[3]),
        r[4],
        r[5],
        every=r[6],
        timezone=r[7],
        catch_up=r[8],
        paused=bool(r[9]),
    )
