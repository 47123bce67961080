"""The SQLite backend: one database file in WAL mode, shared by workers on one host.

Concurrency model. SQLite has one writer at a time per file. Every state change runs inside
``BEGIN IMMEDIATE`` (see ``_connection.write``), which takes that write lock before reading
anything, so a read-decide-write sequence (a claim counting running jobs, an insert checking
max_pending, a re-drive checking an idempotency key) is atomic across every thread and process.
Readers use WAL snapshots and never wait. Each thread has its own connection, and the threads
of one process queue for the write lock on a lock of their own first (``_shared``).

Push signal. An insert commits, then wakes waiters in the same process through a condition
variable (``_shared``) and those of other processes through a named pipe beside the file
(``_doorbell``); a woken waiter, and every waiter every few milliseconds in any case, looks at
``PRAGMA data_version``, which changes when another connection (another process) commits, and
then checks cheaply whether one of its queues has a due job.

All SQL is in ``queries.sql`` and ``migrations/``; this module only binds parameters and maps
rows to the records of :mod:`jobyard.backends.base`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Sequence

from ...clock import Clock
from ...errors import (
    DuplicateJob,
    InvalidTransition,
    JobNotFound,
    JobyardError,
    QueueFull,
    SchemaError,
)
from .._stored import limit_columns, limit_stats, limits_from, parse_numeric_id, readable, storable
from ..base import (
    DEFAULT_MAX_ATTEMPTS,
    FINISHED,
    REDRIVABLE,
    STATUSES,
    THROUGHPUT_KEEP,
    Claimed,
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
    group_line,
    refuse_connection,
    sort_groups,
)
from . import _rows
from ._connection import Connections, parse_url, read, write
from ._doorbell import Listener
from ._shared import Shared, shared_for
from ._sql import migrations, queries

DEAD = frozenset({"failed", "cancelled"})  # listed through the partial index jobs_dead
_ACK_QUERIES = {
    "completed": "jobs_ack_completed",
    "retry": "jobs_ack_retry",
    "failed": "jobs_ack_failed",
    "release": "jobs_ack_release",
    "cancelled": "jobs_ack_cancelled",
}


# WAL frames (pages) past which store_tidy restarts the WAL: about 40 MB at 4 KiB pages.
WAL_RESTART_FRAMES = 10_000
# What a wait has seen: the in-process change counters of its queues, and PRAGMA data_version.
_Marks = tuple[tuple[int, ...], int]


class SQLiteBackend:
    """The ``sqlite:///path.db`` store, jobyard's default.

    Opening it creates the file if needed and applies pending migrations. Safe to share between
    threads; any number of processes on the host may open the same file.
    """

    # No limit: claims capped at 128 drained async jobs no faster here (bench/README.md).
    claim_max: int | None = None

    #: How often an idle ``jobs_wait`` looks for commits made by other processes, in seconds.
    poll_interval: float = 0.005

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self.path = parse_url(url)
        self._q = queries()
        self._conns = Connections(self.path)
        self._pid = os.getpid()
        self._state = shared_for(self.path)
        self._doorbell = Listener(self.path)  # opened by the first wait
        # Per worker and queues, where its last waiting claim's wait left off (see jobs_claim).
        self._waiters: dict[tuple[str, ...], _Marks] = {}
        self.schema_migrate()

    @property
    def _shared(self) -> Shared:
        # Re-fetched in a forked child: the parent's copy may hold a lock no thread will release.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._state = shared_for(self.path)
        return self._state

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection inside a write transaction (see ``_connection.write``)."""
        with write(self._conns.get(), self._shared.writer) as conn:
            yield conn

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.url!r})"

    def _now(self, conn: sqlite3.Connection) -> float:
        """Resolve "now" once for a transaction of several statements."""
        now: float = conn.execute(self._q["clock_now"], {"now": self.clock.now()}).fetchone()[0]
        return now

    # schema -----------------------------------------------------------------------------------

    def _missing(self, conn: sqlite3.Connection) -> list[str]:
        exists = conn.execute(self._q["migrations_table"]).fetchone()
        done = (
            set() if exists is None else {r[0] for r in conn.execute(self._q["migrations_applied"])}
        )
        return [m.name for m in migrations() if m.version not in done]

    def schema_migrate(self) -> list[str]:
        """Apply the migrations this file lacks, oldest first; their names.

        The check runs again under the write lock, so processes opening a new file together
        apply each migration exactly once; the first read spares them that lock when up to date.
        """
        if not self._missing(self._conns.get()):
            return []
        applied: list[str] = []
        with self._writing() as conn:
            conn.execute(self._q["migrations_init"])
            done = {r[0] for r in conn.execute(self._q["migrations_applied"])}
            for migration in migrations():
                if migration.version in done:
                    continue
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    self._q["migrations_record"],
                    {"version": migration.version, "name": migration.name, "now": None},
                )
                applied.append(migration.name)
        return applied

    def schema_check(self) -> None:
        """Raise :class:`SchemaError` if this file lacks a migration."""
        missing = self._missing(self._conns.get())
        if missing:
            raise SchemaError(
                f"the SQLite store {self.path} lacks migrations {', '.join(missing)}: "
                "run `jobyard migrate APP`"
            )

    # producer side ----------------------------------------------------------------------------

    def jobs_insert(self, params: JobsInsertParams) -> list[Inserted]:
        """Insert a batch in one write transaction; all or nothing."""
        refuse_connection(self, params)
        if not params.jobs:
            return []
        with self._writing() as conn:
            out, touched = self._insert(conn, self._now(conn), params.jobs)
        # After COMMIT: a woken worker must find the jobs there.
        if touched:
            self._shared.notify(touched)
        return out

    def _insert(
        self, conn: sqlite3.Connection, now: float, jobs: Sequence[NewJob]
    ) -> tuple[list[Inserted], set[str]]:
        """Insert ``jobs`` inside the caller's write transaction; the outcomes and the queues
        that got new due jobs (pending, not waiting). Raises QueueFull, which must roll the
        transaction back: a queue's waiting and pending jobs count against its max_pending.

        Each job is one execution of a cached statement, whose RETURNING tells a new job from
        one refused by the idempotency index. The statement is compiled once and the batch
        commits once, which is what costs time in SQLite, not the executions.
        """
        q = self._q
        out: list[Inserted] = []
        touched: set[str] = set()
        counted: set[str] = set()  # queues that got new jobs, waiting or pending (max_pending)
        fanout = _fanout(jobs)
        for position, job in enumerate(jobs):
            row = conn.execute(
                q["jobs_insert"],
                {
                    "queue": job.queue,
                    "name": job.name,
                    "priority": job.priority,
                    "max_attempts": job.max_attempts,
                    "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
                    "backoff": job.backoff,
                    "timeout": job.timeout,
                    "lease": job.lease,
                    "delivery": job.delivery,
                    "run_at": job.run_at,
                    "delay": job.delay,
                    "now": now,
                    "idempotency_key": job.idempotency_key,
                    "parent_id": job.parent_id,
                    "workflow_id": job.workflow_id,
                    "fanin": len(job.after),
                    "fanout": fanout[position],
                    "key": job.key,
                    "payload": job.payload,
                },
            ).fetchone()
            if row is not None:
                out.append(Inserted(str(row[0]), True))
                counted.add(job.queue)
                if job.after:
                    # A workflow step: inserted waiting (not due, no wake; it counts against
                    # max_pending), its links one more statement.
                    inputs = json.dumps([int(out[i].id) for i in job.after])
                    conn.execute(q["job_links_insert"], {"job_id": row[0], "inputs": inputs})
                else:
                    touched.add(job.queue)
                continue
            # Nothing inserted: only the idempotency index refuses a row, and its holder is
            # pending or running in this very transaction (possibly earlier in the batch).
            holder = conn.execute(
                q["jobs_holder"], {"queue": job.queue, "idempotency_key": job.idempotency_key}
            ).fetchone()
            if holder is None:  # pragma: no cover - would mean the index is missing
                raise JobyardError(f"insert of a {job.name!r} job was refused for no reason")
            replaced = job.on_conflict == "replace" and self._replace(conn, now, holder[0], job)
            if replaced:
                touched.add(job.queue)  # its run_at may have moved closer
            out.append(Inserted(str(holder[0]), False, replaced))
        # Counted under the write lock after the batch, so concurrent producers cannot both
        # squeeze in under max_pending.
        for queue in sorted(counted):
            full = conn.execute(q["queues_over_max_pending"], {"queue": queue}).fetchone()
            if full is not None:
                raise QueueFull(queue, full[0])
        return out, touched

    def _replace(self, conn: sqlite3.Connection, now: float, job_id: int, job: NewJob) -> bool:
        """Give the pending job ``job_id`` the payload of ``job`` (and its run_at, when it sets
        one), inside the insert's write transaction; False if that job is running."""
        moved = job.run_at is not None or job.delay != 0
        args = {
            "id": job_id,
            "payload": job.payload,
            "moved": moved,
            "run_at": job.run_at,
            "delay": job.delay,
            "now": now,
        }
        return conn.execute(self._q["jobs_replace"], args).fetchone() is not None

    def jobs_get(self, job_id: str) -> JobRecord | None:
        """One job, or ``None`` (also for an id that is not a number)."""
        key = parse_numeric_id(job_id)
        if key is None:
            return None
        row = self._conns.get().execute(self._q["jobs_get"], {"id": key}).fetchone()
        return None if row is None else _rows.record(row)

    def jobs_list(self, params: JobsListParams) -> list[JobRecord]:
        """Jobs matching the filter, newest first, each read through the index of its most
        selective filter: ids, a workflow, a dead status."""
        args: dict[str, object] = {
            "queue": params.queue,
            "status": params.status,
            "name": params.name,
            "workflow_id": params.workflow_id,
            "limit": params.limit,
            "offset": params.offset,
        }
        if params.ids is not None:
            keys = {k for k in map(parse_numeric_id, params.ids) if k is not None}
            if not keys:
                return []
            args["ids"] = json.dumps(sorted(keys))
            name = "jobs_list_ids"
        elif params.workflow_id is not None:
            name = "jobs_list_workflow"
        else:
            name = "jobs_list_dead" if params.status in DEAD else "jobs_list"
        rows = self._conns.get().execute(self._q[name], args).fetchall()
        return [_rows.record(row) for row in rows]

    def jobs_search(self, params: JobsSearchParams) -> JobsPage:
        """A page by cursor (an id): the newest ``scan`` jobs below it walked by primary key
        (failed or cancelled ones through jobs_dead, a key through jobs_key), filtered, then
        the hits read by id; one read snapshot."""
        p = params
        before = None if p.before is None else parse_numeric_id(p.before)
        if p.before is not None and before is None:
            raise ValueError(f"invalid cursor {p.before!r}")
        args = {
            "before": 2**63 - 1 if before is None else before,  # a range, never "IS NULL OR"
            "queue": p.queue,
            "status": p.status,
            "name": p.name,
            "key": p.idempotency_key,
            "contains": p.contains,
            "error_contains": p.error_contains,
            "limit": p.limit,
            "scan": p.scan,
        }
        if p.idempotency_key is not None:
            name = "jobs_search_key"
        elif p.status in DEAD:
            name = "jobs_search_dead"
        else:
            name = "jobs_search"
        conn = self._conns.get()
        with read(conn):  # one snapshot: the hits, the extent of the walk, the records
            hits = sorted((r[0] for r in conn.execute(self._q[name], args)), reverse=True)
            full = len(hits) == p.limit
            ends = {**args, "low": hits[-1] if full else 0}
            scanned, low = conn.execute(self._q[name + "_end"], ends).fetchone()
            records: list[JobRecord] = []
            if hits:
                listed = {"ids": json.dumps(hits), "limit": len(hits), "offset": 0}
                listed.update(dict.fromkeys(("workflow_id", "queue", "status", "name")))
                found = conn.execute(self._q["jobs_list_ids"], listed).fetchall()
                records = [_rows.record(r) for r in found]
        if full:
            cursor: str | None = str(hits[-1])
        else:
            cursor = str(low) if scanned == p.scan else None
        return JobsPage(records, cursor, scanned)

    def dead_groups(self, params: DeadGroupsParams) -> DeadGroups:
        """The newest ``scan`` failed jobs through jobs_dead, grouped in one statement by the
        line each stored when it failed."""
        args = {"queue": params.queue, "scan": params.scan}
        rows = self._conns.get().execute(self._q["dead_groups"], args).fetchall()
        groups = [
            DeadGroup(r[0], r[1], r[2], int(r[3]), float(r[4] or 0), float(r[5] or 0), str(r[6]))
            for r in rows
        ]
        walked = int(rows[0][7]) if rows else 0
        return DeadGroups(sort_groups(groups), min(walked, params.scan), walked <= params.scan)

    def jobs_cancel(self, params: JobsCancelParams) -> JobRecord:
        """Pending -> cancelled; running: a request recorded; JobNotFound or
        InvalidTransition otherwise."""
        job_id = params.id
        key = parse_numeric_id(job_id)
        if key is None:
            raise JobNotFound(job_id)
        args = {
            "id": key,
            "now": self.clock.now(),
            "by": storable(params.by),
            "pending_only": params.pending_only,
        }
        with self._writing() as conn:
            row = conn.execute(self._q["jobs_cancel"], args).fetchone()
            if row is None:
                status = conn.execute(self._q["jobs_status"], {"id": key}).fetchone()
                if status is None:
                    raise JobNotFound(job_id)
                raise InvalidTransition.cannot_cancel(job_id, status[0])
            rec = _rows.record(row)
            # A waiting or pending job was cancelled; a running one only got a request.
            if rec.status == "cancelled":
                self._count(conn, Counter({(rec.queue, "cancelled"): 1}))
        return rec

    def jobs_cancel_many(self, params: JobsCancelManyParams) -> list[str]:
        """jobs_cancel for many jobs in one statement and one write; refused ones skipped."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        args = {
            "ids": json.dumps(list(keys)),
            "now": self.clock.now(),
            "by": storable(params.by),
            "pending_only": params.pending_only,
        }
        with self._writing() as conn:
            rows = conn.execute(self._q["jobs_cancel_many"], args).fetchall()
            self._count(conn, Counter((queue, st) for _, queue, st in rows if st == "cancelled"))
        changed = {int(r[0]) for r in rows}
        return [job_id for k, job_id in keys.items() if k in changed]

    def jobs_resume(self, params: JobsResumeParams) -> list[str]:
        """Failed or cancelled workflow jobs -> pending, or waiting on their inputs not
        completed; counted and moved in one write transaction, which no completion enters."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        q = self._q
        with self._writing() as conn:
            rows = conn.execute(
                q["jobs_resume_targets"], {"ids": json.dumps(list(keys))}
            ).fetchall()
            if not rows:
                return []
            moved = json.dumps([r[0] for r in rows])
            conn.execute(q["jobs_resume"], {"ids": moved, "now": self.clock.now()})
            gone: Counter[tuple[str, str]] = Counter()
            for r in rows:
                gone[(r[1], r[2])] -= 1  # out of the finished counts
            self._count(conn, gone)
        self._shared.notify(tuple({r[1] for r in rows if r[3] == 0}))
        changed = {int(r[0]) for r in rows}
        return [job_id for k, job_id in keys.items() if k in changed]

    def jobs_retry(self, job_id: str) -> JobRecord:
        """Failed or cancelled -> pending with attempts reset; the error is kept. The move of
        jobs_retry_many for one job, then, if it did not move, why not (same transaction)."""
        key = parse_numeric_id(job_id)
        if key is None:
            raise JobNotFound(job_id)
        q = self._q
        with self._writing() as conn:
            moved = self._retry(conn, [key])
            row = conn.execute(q["jobs_get"], {"id": key}).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            rec = _rows.record(row)
            if not moved:
                if rec.status not in REDRIVABLE:
                    raise InvalidTransition.cannot_retry(job_id, rec.status)
                holder = conn.execute(
                    q["jobs_holder"], {"queue": rec.queue, "idempotency_key": rec.idempotency_key}
                ).fetchone()
                raise DuplicateJob.key_held(job_id, str(holder[0]) if holder else "?")
        self._shared.notify((rec.queue,))
        return rec

    def jobs_retry_many(self, params: JobsRetryManyParams) -> list[str]:
        """jobs_retry for many jobs in one statement and one write; refused ones skipped."""
        keys = {k: job_id for job_id in params.ids if (k := parse_numeric_id(job_id)) is not None}
        if not keys:
            return []
        with self._writing() as conn:
            moved = self._retry(conn, list(keys))
        if moved:
            self._shared.notify(tuple(sorted(set(moved.values()))))
        return [job_id for k, job_id in keys.items() if k in moved]

    def _retry(self, conn: sqlite3.Connection, keys: list[int]) -> dict[int, str]:
        """The re-drive of jobs_retry and jobs_retry_many, inside the caller's write
        transaction, with its counts; {id: queue} of the jobs it moved."""
        args = {"ids": json.dumps(keys), "now": self.clock.now()}
        was = dict(conn.execute(self._q["jobs_retry_was"], args).fetchall())
        moved = {int(r[0]): str(r[1]) for r in conn.execute(self._q["jobs_retry"], args)}
        gone: Counter[tuple[str, str]] = Counter()
        for k, queue in moved.items():
            gone[(queue, was[k])] -= 1
        self._count(conn, gone)
        return moved

    def jobs_purge(self, params: JobsPurgeParams) -> Purged:
        """Delete finished jobs older than ``older_than`` seconds, but the held ones, with the
        waiting steps that wait on them, then the inputs that freed; one write transaction."""
        statuses = list(params.statuses)
        if not statuses:
            return Purged()
        q = self._q
        with self._writing() as conn:
            only = None
            if params.ids is not None:
                only = json.dumps(sorted({k for k in map(parse_numeric_id, params.ids) if k}))
            args = {
                "statuses": json.dumps(statuses),
                "older_than": params.older_than,
                "queue": params.queue,
                "now": self._now(conn),
                "only": only,
            }
            rows = []
            if only is not None:
                rows = conn.execute(q["jobs_purge_ids"], args).fetchall()
            else:
                queues = (
                    [params.queue]
                    if params.queue is not None
                    else [r[0] for r in conn.execute(q["jobs_purge_queues"], args)]
                )
                for queue in queues:  # one index range per queue and status (see jobs_purge)
                    rows += conn.execute(q["jobs_purge"], {**args, "queue": queue}).fetchall()
            # Workflows: the steps that can never run now go too, and every job deleted before
            # it completed no longer holds its inputs; those it freed go if they match.
            inputs = [r[2] for r in rows if r[1] != "completed" and r[4] > 0]
            waiting: list[tuple[str, str, int, int, int]] = []
            if inputs:
                down = conn.execute(q["jobs_downstream"], {"ids": json.dumps(inputs)}).fetchall()
                if down:
                    ids = json.dumps([r[0] for r in down])
                    waiting = conn.execute(q["jobs_purge_waiting"], {"ids": ids}).fetchall()
            steps = [r[2] for r in (*rows, *waiting) if r[1] != "completed" and r[3] > 0]
            if steps:
                freed = conn.execute(q["jobs_unhold"], {"ids": json.dumps(steps)}).fetchall()
                freed_ids = [r[0] for r in freed if r[0] is not None]
                if freed_ids and "completed" in statuses:
                    more = {**args, "ids": json.dumps(freed_ids)}
                    rows += conn.execute(q["jobs_purge_freed"], more).fetchall()
            kept = 0
            if "completed" in statuses:
                kept = conn.execute(q["jobs_held_count"], args).fetchone()[0]
            gone: Counter[tuple[str, str]] = Counter()
            for queue, status, *_ in rows:
                gone[(queue, status)] -= 1
            self._count(conn, gone)
            linked = [r[2] for r in (*rows, *waiting) if r[3] > 0]
            if linked:
                conn.execute(q["job_links_delete"], {"ids": json.dumps(linked)})
            return Purged(len(rows) + len(waiting), len(waiting), kept)

    # worker side ------------------------------------------------------------------------------

    def jobs_claim(self, params: JobsClaimParams) -> Claimed:
        """Claim due jobs in one statement under the write lock, through the gate (see
        ``jobs_claim`` and its fragments in SQL); with ``wait``, after the push signal
        (:meth:`jobs_wait`). In the same transaction the rate buckets and the fair rounds of
        what was claimed move on; a claim that came back short reads when a rate opens."""
        if params.wait > 0:
            # From where this worker's previous wait left off: a change since then may have
            # come after the claim that preceded this one (made by another of its threads).
            queues = list(dict.fromkeys(params.queues))
            since = self._waiters.get((params.worker_id, *queues))
            marks = self._wait(queues, params.wait, since)[1]
            self._waiters[(params.worker_id, *queues)] = marks
        if params.limit <= 0 or not params.queues:
            return Claimed()
        q = self._q
        names = json.dumps(list(params.queues))
        next_open = None
        with self._writing() as conn:
            now = self._now(conn)
            rows = conn.execute(
                q["jobs_claim"],
                {"now": now, "queues": names, "limit": params.limit, "worker_id": params.worker_id},
            ).fetchall()
            if rows:
                ids = json.dumps([r[0] for r in rows])
                conn.execute(q["limit_buckets_take"], {"now": now, "ids": ids})
                turns: dict[str, int] = {}
                for r in rows:
                    if r[14] > turns.get(r[2], 0):
                        turns[r[2]] = r[14]
                if turns:
                    conn.execute(q["queues_turn_round"], {"turns": json.dumps(turns)})
            if len(rows) < params.limit:
                next_open = conn.execute(
                    q["limits_next_open"], {"now": now, "queues": names}
                ).fetchone()[0]
        # RETURNING yields rows in no promised order; hand them out in claim order.
        rows.sort(key=_rows.claim_order)
        return Claimed([_rows.claimed(r) for r in rows], next_open)

    def jobs_ack(self, params: JobsAckParams) -> list[str]:
        """Apply a batch of outcomes in one transaction; the ids whose token was stale."""
        refuse_connection(self, params)
        for outcome in params.outcomes:
            if outcome.kind not in _ACK_QUERIES:
                raise ValueError(f"unknown outcome kind {outcome.kind!r} for job {outcome.id}")
        if not params.outcomes:
            return []
        q = self._q
        stale: list[str] = []
        moved: Counter[tuple[str, str]] = Counter()
        inputs: list[int] = []  # completed jobs that other jobs wait for
        steps: list[int] = []  # completed jobs that waited for others (they held their inputs)
        with self._writing() as conn:
            now = self._now(conn)
            # One execution per outcome, not executemany: the per-row rowcount is what tells an
            # applied outcome from a stale one, and all of them still commit once.
            for outcome in params.outcomes:
                key = parse_numeric_id(outcome.id)
                if key is None:
                    stale.append(outcome.id)
                    continue
                args = {
                    "id": key,
                    "token": outcome.token,
                    "now": now,
                    "result": outcome.result,
                    "error": outcome.error,
                    "delay": outcome.delay,
                    # the dead letter's line, stored beside the error (0012_dead_lines.sql)
                    "line": group_line(outcome.error) if outcome.kind == "failed" else None,
                }
                sql = q[_ACK_QUERIES[outcome.kind]]
                try:
                    cursor = conn.execute(sql, args)
                except UnicodeEncodeError:
                    # A traceback or result holding lone surrogates cannot be stored as UTF-8;
                    # store it escaped rather than lose the outcome.
                    args["result"] = storable(outcome.result)
                    args["error"] = storable(outcome.error)
                    if outcome.kind == "failed":
                        args["line"] = group_line(storable(outcome.error))
                    cursor = conn.execute(sql, args)
                if outcome.kind in FINISHED:
                    # completed, failed and cancelled return the job's queue (RETURNING), or
                    # nothing; completed also how many jobs wait for it
                    rows = cursor.fetchall()
                    if not rows:
                        stale.append(outcome.id)
                        continue
                    moved[(rows[0][0], outcome.kind)] += 1
                    if outcome.kind == "completed" and rows[0][1]:
                        inputs.append(key)
                    if outcome.kind == "completed" and rows[0][2]:
                        steps.append(key)
                elif cursor.rowcount != 1:
                    stale.append(outcome.id)
            self._count(conn, moved)
            self._tally(conn, now, moved)
            if inputs:
                # Same transaction as the completions: SQLite's single writer makes the
                # release of a join exactly once, however its inputs' acks race.
                conn.execute(self._q["jobs_release"], {"ids": json.dumps(inputs), "now": now})
            if steps:
                # A completed step no longer holds its inputs: retention may take them now.
                conn.execute(self._q["jobs_unhold"], {"ids": json.dumps(steps)})
        if len(stale) < len(params.outcomes):
            # A retry or release makes a job due again, a completion may have made a workflow
            # step pending, and any settled job frees a slot of its queue's max_concurrency:
            # idle workers should look.
            self._shared.notify()
        return stale

    def _count(self, conn: sqlite3.Connection, deltas: Counter[tuple[str, str]]) -> None:
        """Adjust the finished-job counts (0005_counts.sql) inside the caller's write."""
        rows = [
            {"queue": queue, "status": status, "n": n}
            for (queue, status), n in sorted(deltas.items())
            if n
        ]
        if rows:
            conn.executemany(self._q["counts_add"], rows)

    def _tally(
        self, conn: sqlite3.Connection, now: float | None, moved: Counter[tuple[str, str]]
    ) -> None:
        """Add the completed and failed jobs of an ack or reap to the throughput history
        (0010_throughput.sql) inside the caller's write: one row per queue."""
        per: dict[str, list[int]] = {}
        for (queue, status), n in moved.items():
            if n and status in ("completed", "failed"):
                per.setdefault(queue, [0, 0])[status == "failed"] += n
        rows = [
            {"queue": q, "now": now, "completed": c, "failed": f}
            for q, (c, f) in sorted(per.items())
        ]
        if rows:
            conn.executemany(self._q["throughput_add"], rows)

    def jobs_wait(self, params: JobsWaitParams) -> bool:
        """Block until a job may have become due in ``queues``, or ``timeout`` passes."""
        return self._wait(list(dict.fromkeys(params.queues)), params.timeout)[0]

    def _wait(
        self, queues: list[str], timeout: float, since: _Marks | None = None
    ) -> tuple[bool, _Marks]:
        """``jobs_wait``; ``since``: the marks a previous wait returned, to count what changed
        after it too. Returns whether woken, and the marks to pass next time."""
        deadline = time.monotonic() + max(timeout, 0.0)
        conn = self._conns.get()
        q = self._q
        version = conn.execute(q["data_version"]).fetchone()[0]
        signal = self._shared
        bell = self._doorbell.open()  # rung by commits of every process, this one's too
        with signal.cond:
            seen = signal.snapshot(queues)
        if since is not None:
            # What changed since then counts, as it would have then. (That wait may have run
            # on another thread's connection, whose data_version is not this one's: a
            # difference costs one jobs_due look.)
            seen, version = since
        while True:
            with signal.cond:
                if (now_seen := signal.snapshot(queues)) != seen:
                    return True, (now_seen, version)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False, (seen, version)
                if since is None and not bell:
                    signal.cond.wait(min(remaining, self.poll_interval))
            if since is None and bell:
                self._doorbell.wait(min(remaining, self.poll_interval))
            with signal.cond:
                if (now_seen := signal.snapshot(queues)) != seen:
                    return True, (now_seen, version)
            since = None
            # Another connection committed something. Most commits are other workers' claims
            # and acks: wake only if a claim would find a job (jobs_due), so that idle workers
            # do not all rush for the write lock after every commit.
            current = conn.execute(q["data_version"]).fetchone()[0]
            if current != version:
                version = current
                due = conn.execute(
                    q["jobs_due"],
                    {"queues": json.dumps(queues), "now": self.clock.now(), "limit": 1},
                ).fetchone()[0]
                if due:
                    return True, (seen, version)

    def jobs_wake(self, params: JobsWakeParams) -> None:
        """Wake the waiters of those queues, as an insert does (in-process, and the doorbell
        that the waiters of other processes check against the file's data_version). The
        worker's next waiting claim returns at once even if it was not waiting yet: its mark
        is set to one no snapshot equals."""
        queues = list(dict.fromkeys(params.queues))
        self._waiters[(params.worker_id, *queues)] = ((-1,), -1)
        self._shared.notify(queues)

    def leases_renew(self, params: LeasesRenewParams) -> Renewed:
        """Extend each lease still held, with its progress; the lost ones and the cancel
        requests."""
        out = Renewed()
        if not params.jobs:
            return out
        sql = self._q["leases_renew"]
        progress = {p.id: p for p in params.progress}
        with self._writing() as conn:
            now = self._now(conn)
            for job_id, token in params.jobs:
                key = parse_numeric_id(job_id)
                p = progress.get(job_id)
                row = (
                    None
                    if key is None
                    else conn.execute(
                        sql,
                        {
                            "id": key,
                            "token": token,
                            "now": now,
                            "has_progress": p is not None,
                            "progress": None if p is None else p.fraction,
                            "progress_note": None if p is None else storable(p.note),
                        },
                    ).fetchone()
                )
                if row is None:
                    out.lost.append(job_id)
                elif row[0]:
                    out.cancel_requested.append(job_id)
        return out

    def leases_lapsed(self, params: LeasesLapsedParams) -> list[Lapsed]:
        """The running jobs whose lease lapsed, in one read."""
        if params.limit <= 0:
            return []
        rows = (
            self._conns.get()
            .execute(self._q["leases_lapsed"], {"now": self.clock.now(), "limit": params.limit})
            .fetchall()
        )
        return [
            Lapsed(str(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows
        ]

    def leases_reap(self, params: LeasesReapParams) -> list[Reaped]:
        """Apply the reaper's moves in one fenced statement, with the counts and the
        throughput history in the same write."""
        moves = [
            [key, m.token, m.kind, m.error, m.delay, group_line(m.error)]
            for m in params.moves
            if (key := parse_numeric_id(m.id)) is not None
        ]
        if not moves:
            return []
        with self._writing() as conn:
            now = self._now(conn)
            rows = conn.execute(
                self._q["leases_reap"], {"now": now, "moves": json.dumps(moves)}
            ).fetchall()
            finished = Counter((r[2], r[1]) for r in rows if r[1] != "pending")
            self._count(conn, finished)
            self._tally(conn, now, finished)
        rows.sort(key=lambda r: r[0])
        if any(r[1] == "pending" for r in rows):
            self._shared.notify()
        return [Reaped(str(r[0]), r[1], r[3], r[2]) for r in rows]

    def jobs_expire(self, params: JobsExpireParams) -> int:
        """No job expires by itself here: finished jobs stay until purged (``jobs_purge``, a
        worker's ``retention``). Throughput minutes past :data:`THROUGHPUT_KEEP` are dropped."""
        with self._writing() as conn:
            conn.execute(
                self._q["throughput_prune"], {"now": self.clock.now(), "keep": THROUGHPUT_KEEP}
            )
        return 0

    def throughput_get(self, params: ThroughputParams) -> list[ThroughputMinute]:
        """The kept minutes since ``now - since`` (one range of the primary key)."""
        args = {
            "now": self.clock.now(),
            "since": float(params.since),
            "queues": json.dumps(list(params.queues)),
        }
        rows = self._conns.get().execute(self._q["throughput_get"], args).fetchall()
        return [ThroughputMinute(r[0], float(r[1]), int(r[2]), int(r[3])) for r in rows]

    # queues, workers, stats -------------------------------------------------------------------

    def queues_configure(self, config: QueueConfig) -> None:
        """Create or replace a queue's settings; a queue that stops being fair gives its
        pending jobs the plain order back."""
        q = self._q
        with self._writing() as conn:
            was = {r.name: r for r in map(_rows.queue_config, conn.execute(q["queues_list"]))}
            conn.execute(
                q["queues_configure"],
                {
                    "name": config.name,
                    "max_concurrency": config.max_concurrency,
                    "max_attempts": config.max_attempts,
                    "backoff": config.backoff,
                    "max_pending": config.max_pending,
                    "paused": int(config.paused),
                    "retention": config.retention,
                    **limit_columns(config.limits),
                    "fair": int(config.limits.fair),
                },
            )
            old = was.get(config.name)
            if old is not None and old.limits.fair and not config.limits.fair:
                conn.execute(q["queues_unfair"], {"name": config.name})
        # Resuming a queue or raising its max_concurrency can make waiting jobs claimable.
        self._shared.notify((config.name,))

    def queues_list(self) -> list[QueueConfig]:
        """Every configured queue, by name."""
        rows = self._conns.get().execute(self._q["queues_list"]).fetchall()
        return [_rows.queue_config(r) for r in rows]

    def workers_beat(self, params: WorkersBeatParams) -> None:
        """Register, refresh or remove a worker, and forget the silent ones."""
        q = self._q
        worker = params.worker
        with self._writing() as conn:
            now = self._now(conn)
            if params.stopping:
                conn.execute(q["workers_delete"], {"id": worker.id})
            else:
                conn.execute(
                    q["workers_upsert"],
                    {
                        "id": worker.id,
                        "host": worker.host,
                        "pid": worker.pid,
                        "queues": json.dumps(list(worker.queues)),
                        "concurrency": worker.concurrency,
                        "started_at": worker.started_at,
                        "now": now,
                        "forget_after": float(params.forget_after),
                    },
                )
            conn.execute(q["workers_forget"], {"now": now})

    def workers_list(self) -> list[WorkerInfo]:
        """Live workers, oldest first; those silent past their own limit are forgotten."""
        with self._writing() as conn:
            conn.execute(self._q["workers_forget"], {"now": self._now(conn)})
            rows = conn.execute(self._q["workers_list"]).fetchall()
        return [_rows.worker(r) for r in rows]

    def limits_sync(self, params: LimitsSyncParams) -> None:
        """Store (or, empty, delete) each job name's limits, in one transaction."""
        q = self._q
        with self._writing() as conn:
            for job in params.jobs:
                where = {"queue": job.queue, "name": job.name}
                if job.limits:
                    conn.execute(q["job_limits_upsert"], {**where, **limit_columns(job.limits)})
                else:
                    conn.execute(q["job_limits_delete"], where)
        self._shared.notify(tuple({job.queue for job in params.jobs}))

    def limits_stats(self, params: LimitsStatsParams) -> list[LimitStats]:
        """Each limited scope, from one read snapshot (see :func:`limit_stats`): every running
        job, and the first ``params.walk`` pending jobs of each queue in claim order."""
        q = self._q
        conn = self._conns.get()
        with read(conn):
            now = self._now(conn)
            queues = [_rows.queue_config(r) for r in conn.execute(q["queues_list"])]
            named = [
                JobLimits(r[0], r[1], limits_from(r[2:9]))
                for r in conn.execute(q["job_limits_list"])
            ]
            asked = json.dumps(list(params.queues))
            counts = conn.execute(q["limits_running"], {"queues": asked}).fetchall()
            walked = params.queues or [r[0] for r in conn.execute(q["limits_pending_queues"])]
            for queue in walked:
                args = {"queue": queue, "walk": params.walk, "now": now}
                counts += [(queue, *r) for r in conn.execute(q["limits_pending_walk"], args)]
            buckets = {(r[0], r[1] or None): r[2:] for r in conn.execute(q["limit_buckets_list"])}
        return limit_stats(params, now, queues, named, counts, buckets)

    def queues_names(self, params: QueuesNamesParams) -> list[str]:
        """The queues holding finished jobs of those statuses: job_counts' rows, never a count."""
        args = {"statuses": json.dumps(list(params.statuses))}
        rows = self._conns.get().execute(self._q["jobs_purge_queues"], args).fetchall()
        return sorted(r[0] for r in rows)

    def stats_get(self, params: StatsParams) -> list[QueueStats]:
        """Counts by status per queue that has jobs or a configuration, by name."""
        q = self._q
        wanted = json.dumps(list(params.queues))
        conn = self._conns.get()
        # One read snapshot, so the counts and the recent completions agree.
        with read(conn):
            counts: dict[str, dict[str, int]] = {}
            for queue, status, n in conn.execute(q["stats_counts"], {"queues": wanted}):
                counts.setdefault(queue, dict.fromkeys(STATUSES, 0))[status] = n
            for (name,) in conn.execute(q["stats_configured"], {"queues": wanted}):
                counts.setdefault(name, dict.fromkeys(STATUSES, 0))
            names = sorted(counts)
            at = {"names": json.dumps(names), "now": self.clock.now()}
            recent = dict(conn.execute(q["stats_recent"], at).fetchall()) if params.recent else {}
            oldest = dict(conn.execute(q["stats_oldest"], at).fetchall())
        return [
            QueueStats(name, counts[name], recent.get(name, 0), oldest.get(name)) for name in names
        ]

    # time and recurring jobs ------------------------------------------------------------------

    def store_tidy(self, params: StoreTidyParams) -> list[str]:
        """Checkpoint the WAL here, off the hot path: while this runs (every worker's
        maintenance, about once a second, on a thread of its own) the store's connections in
        this process do not checkpoint inside their commits (``Connections.checkpointing``).
        A PASSIVE checkpoint waits for no one; a WAL that readers kept from being reused and
        that grew past :data:`WAL_RESTART_FRAMES` is checkpointed with RESTART, which waits
        for them (writers too) at most 100 ms. One line for a restart, none otherwise.

        First, the rate buckets whose tat is past are forgotten (an idle key leaves no row),
        in a write transaction only when a read found some."""
        conn = self._conns.get()
        now = self._now(conn)
        if conn.execute(self._q["limit_buckets_lapsed"], {"now": now}).fetchone()[0]:
            with self._writing() as writer:
                writer.execute(self._q["limit_buckets_forget"], {"now": now})
        self._conns.checkpointing()
        _, frames, _ = conn.execute(self._q["wal_checkpoint"]).fetchone()
        if frames < WAL_RESTART_FRAMES:
            return []
        conn.execute(self._q["busy_timeout_short"])
        try:
            busy, frames, done = conn.execute(self._q["wal_restart"]).fetchone()
        except sqlite3.OperationalError:  # busy past 100 ms: next time
            return []
        finally:
            conn.execute(self._q["busy_timeout_default"])
        if busy:
            return []
        return [f"checkpointed the WAL ({done} of {frames} frames) and restarted it"]

    def store_info(self) -> StoreInfo:
        """Finished jobs are kept until purged; nothing about the file to warn of."""
        return StoreInfo("sqlite")

    def clock_now(self) -> float:
        """The frozen clock's instant, else SQLite's clock, in epoch seconds."""
        return self._now(self._conns.get())

    def schedules_sync(self, params: SchedulesSyncParams) -> None:
        """Store the app's schedules in one transaction; the others are deactivated."""
        q = self._q
        with self._writing() as conn:
            names = json.dumps([s.name for s in params.schedules])
            conn.execute(q["schedules_deactivate"], {"names": names})
            for sched in params.schedules:
                conn.execute(
                    q["schedules_upsert"],
                    {
                        "name": sched.name,
                        "cron": sched.cron or "",  # an interval schedule keeps an empty cron
                        "job": sched.job.to_json(),
                        "next_run_at": sched.next_run_at,
                        "every": sched.every,
                        "timezone": sched.timezone,
                        "catch_up": sched.catch_up,
                    },
                )

    def schedules_list(self) -> list[Schedule]:
        """Every stored schedule, by name."""
        rows = self._conns.get().execute(self._q["schedules_list"]).fetchall()
        return readable(rows, _rows.schedule, "schedule")

    def schedules_fire(self, params: SchedulesFireParams) -> Inserted | None:
        """Move the schedule past ``fire_at`` and insert its job, atomically; None if the tick
        was fired already (by another worker) or the schedule is gone or inactive."""
        with self._writing() as conn:
            row = conn.execute(
                self._q["schedules_advance"],
                {"name": params.name, "fire_at": params.fire_at, "next_at": params.next_at},
            ).fetchone()
            if row is None:
                return None
            job = NewJob.from_json(row[0])
            job = dataclasses.replace(
                job, run_at=params.fire_at, idempotency_key=params.idempotency_key
            )
            # QueueFull propagates and rolls back the advance with the insert: the tick stays
            # due and fires once the queue has room.
            (inserted,), touched = self._insert(conn, self._now(conn), [job])
        if touched:
            self._shared.notify(touched)
        return inserted

    def schedules_skip(self, params: SchedulesSkipParams) -> bool:
        """Move the schedule past ``fire_at`` without a job; False if it was not waiting for
        that tick (another worker moved it, or it is inactive or paused)."""
        args = {"name": params.name, "fire_at": params.fire_at, "next_at": params.next_at}
        with self._writing() as conn:
            return conn.execute(self._q["schedules_skip"], args).rowcount == 1

    def schedules_pause(self, params: SchedulesPauseParams) -> bool:
        """Pause or resume a schedule; False if there is no such schedule."""
        args = {
            "name": params.name,
            "paused": int(params.paused),
            "next_run_at": params.next_run_at,
        }
        with self._writing() as conn:
            return conn.execute(self._q["schedules_pause"], args).rowcount == 1

    def close(self) -> None:
        """Close every connection of this backend; safe to call twice."""
        self._doorbell.close()
        self._conns.close()


def _fanout(jobs: Sequence[NewJob]) -> list[int]:
    """How many jobs of the batch run after each position (``NewJob.after``); each position
    must be an earlier one of the batch."""
    fanout = [0] * len(jobs)
    for position, job in enumerate(jobs):
        for i in job.after:
            if not 0 <= i < position:
                raise ValueError(
                    f"job {position} of the batch runs after position {i}, "
                    "which is not an earlier job of the batch"
                )
            fanout[i] += 1
    return fanout
