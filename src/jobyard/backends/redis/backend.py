"""The Redis backend: ``redis://``, ``rediss://`` and ``redis+cluster://``.

Every state change is one Lua script (``scripts/*.lua``, loaded once, run with EVALSHA) over the
keys of ``keys.py``. All keys of a queue share the hash tag ``{prefix:queue}``, so on Redis Cluster
a queue lives on one slot and its scripts run on one node. On a single node a call covers every
queue it names in one round trip; on Cluster it becomes one script per queue, and the global keys
(job sequence, queue registry, wake lists, workers) are reached in calls of their own.

Delivery. A claim moves each job out of its queue's ready set into the claims set scored by lease
expiry, with a fresh fencing token, in one script; an acknowledgement checks the token and removes
the claim; a heartbeat pushes the score forward; the watchdog reads the claims whose lease lapsed
(:meth:`RedisBackend.leases_lapsed`) and, as the core decided, returns each to the queue, the
attempt counted, or finishes it (:meth:`RedisBackend.leases_reap`, fenced by the token and the
score). That is seed 003's
reliable queue (BLMOVE to a processing list, a recovery zset, min_idle = the lease), with the
processing list and the recovery set folded into one sorted set.

``delivery="at_most_once"`` jobs are claimed the same way, so they leave the queue before their
handler runs (seed 003's simple queue). The trade-off: a worker that dies mid-handler loses the job.
The watchdog never runs it again; it marks it failed with ``AT_MOST_ONCE_LOST_ERROR`` so the loss
is visible rather than silent. Choose it for work where a repeat costs more than a miss (a cache
warm-up, a notification that must not arrive twice).

Inserts. A batch is one script while that is short (up to 500 jobs, 250 workflow steps); a
larger one, and on Cluster one that spans queues, is written in slices and hidden from every
reader until it is published whole (``_insert.py``), so no insert blocks Redis for long and none
is seen half-way.

Workflows (chains and groups). A step with inputs is inserted ``waiting`` with its links, in the
insert script; a completion counts itself as an input of each dependent in the ack script, and the
last one moves the step to ``pending`` (one O(1) counter per step, apart from its id list). On one
node that script reaches a dependent in any queue. On Cluster a dependent in another queue lives
in another slot: the ack script records the release as owed in the completing job's queue, then
``jobs_ack`` pays it (``jobs_release.lua``, idempotent: a set of counted inputs per waiting step)
and clears the entry; ``leases_reap`` pays what a caller that died in between left owed.

Time is Redis's ``TIME`` unless the App's clock is frozen, in which case the frozen instant travels
into each script as ``ARGV[1]``.

Retention: completed jobs (and results) expire ``result_ttl`` seconds after they finish (URL
``?result_ttl=``, default a day: a completed job holds about 0.64 KB of Redis memory, so a
million jobs a day keep about 0.64 GB; a week would be 4.5 GB); failed and cancelled jobs are
kept until purged unless ``?failed_ttl=`` is set. A completed job a workflow step that has not
completed still needs is held instead: no TTL, in a set of its own that retention never walks,
until the move that takes its last hold off (``_flows.lua``). Other URL options: ``prefix``
(key prefix, default ``jobyard``), ``retry_for`` (seconds to keep retrying while Redis is
unreachable, default 20) and ``socket_timeout`` (default 30); anything else goes to redis-py.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from redis.exceptions import NoScriptError

from ..._secrets import mask_url
from ...clock import Clock
from ...errors import ConfigurationError, DuplicateJob, InvalidTransition, JobNotFound
from ...events import Events
from ..base import (
    DEFAULT_MAX_ATTEMPTS,
    ERROR_TAIL,
    STATUSES,
    Claimed,
    ClaimedJob,
    DeadGroup,
    DeadGroups,
    DeadGroupsParams,
    Delivery,
    Inserted,
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
    ThroughputMinute,
    ThroughputParams,
    WorkerInfo,
    WorkersBeatParams,
    refuse_connection,
    sort_groups,
)
from . import _admin, _insert, _schedules, consumers
from ._connection import TRANSIENT
from ._core import Core, dumps
from .keys import QUEUE_RE, parse_job_id
from .keys import job_id as make_id

PURGE_BATCH = 1000
CANCEL_CHUNK = 500  # jobs one jobs_cancel_many script cancels (a longer script stalls every client)
OWED_BATCH = 1000  # owed releases the reaper pays per queue and call (Cluster)


def _ttl(seconds: float) -> str:
    """A retention for EXPIRE: whole seconds, at least 1; "0" keeps forever."""
    return "0" if seconds <= 0 else str(max(1, round(seconds)))


def _opt_float(value: str | None) -> float | None:
    return None if value is None or value == "" else float(value)


def _lenient_int(value: str | None, default: int) -> int:
    """A number field of a job hash as shown: a corrupt value shows as ``default``."""
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _lenient_float(value: str | None) -> float | None:
    """A time field of a job hash as shown: a corrupt value shows as unknown (``None``)."""
    try:
        return None if value is None or value == "" else float(value)
    except ValueError:
        return None


def _record(queue: str, number: str, h: dict[str, str]) -> JobRecord:
    """A job hash as listed or shown: never raises, whatever was written into the hash (the
    scripts fail a corrupt job when they meet it; listing must show it meanwhile)."""
    return JobRecord(
        id=make_id(queue, number),
        name=h.get("name", ""),
        queue=queue,
        payload=h.get("payload", ""),
        status=h.get("status", ""),
        priority=_lenient_int(h.get("priority"), 0),
        attempts=_lenient_int(h.get("attempts"), 0),
        max_attempts=_lenient_int(h.get("max_attempts"), DEFAULT_MAX_ATTEMPTS),
        # a completed job's run_at is dropped when it equals created_at (jobs_ack.lua)
        run_at=_lenient_float(h.get("run_at") or h.get("created_at")) or 0.0,
        created_at=_lenient_float(h.get("created_at")) or 0.0,
        started_at=_lenient_float(h.get("started_at")),
        finished_at=_lenient_float(h.get("finished_at")),
        worker_id=h.get("worker_id"),
        result=h.get("result"),
        error=h.get("error"),
        parent_id=h.get("parent_id"),
        idempotency_key=h.get("idempotency_key"),
        delivery=cast(Delivery, h.get("delivery", "at_least_once")),
        cancel_requested_at=_lenient_float(h.get("cancel_requested_at")),
        cancelled_by=h.get("cancelled_by"),
        progress=_lenient_float(h.get("progress")),
        progress_note=h.get("progress_note"),
        workflow_id=h.get("workflow_id"),
        depends_on=_ids(h.get("depends_on")),
        dependents=_ids(h.get("dependents")),
        key=h.get("key"),
    )


def _merge_ranked(
    candidates: list[tuple[int, int, float, int, str]], limit: int
) -> list[tuple[int, int, float, int, str]]:
    """The best ``limit`` of several queues' probed candidates, (negated priority, rank in its
    queue, run_at, number, queue) each: merged by the heads of each queue's list, in the
    order its own claim gave them (a fair queue's turns are not run_at order), priority first,
    then run_at, then number."""
    lists: dict[str, list[tuple[int, int, float, int, str]]] = {}
    for c in sorted(candidates, key=lambda c: (c[4], c[1])):
        lists.setdefault(c[4], []).append(c)
    heads = {q: 0 for q in lists}
    out: list[tuple[int, int, float, int, str]] = []
    while len(out) < limit:
        live = [(lst[heads[q]], q) for q, lst in lists.items() if heads[q] < len(lst)]
        if not live:
            break
        best, q = min(live, key=lambda hq: (hq[0][0], hq[0][2], hq[0][3]))
        out.append(best)
        heads[q] += 1
    return out


def _ids(value: str | None) -> tuple[str, ...]:
    """A comma-separated id list of a job hash (ids never hold a comma)."""
    return tuple(value.split(",")) if value else ()


@dataclass
class _Paid:
    """What paying owed entries did beyond releases (Cluster): waiting jobs deleted, and the
    queues where a completed job was freed."""

    waiting: int = 0
    freed: set[str] = field(default_factory=set)


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    return dict(zip(flat[0::2], flat[1::2], strict=True))


DEAD_CALL = 1000  # failed jobs one dead_groups script walks (a few ms of the server's time)
# The lean claim of one queue with an open gate (single node), and its answer when it hands the
# claim to jobs_claim.lua, having written nothing.
CLAIM_ONE = "jobs_claim_one"
GENERAL = ["general"]


class RedisBackend:
    """The Backend protocol on Redis or Redis Cluster (see the module docstring). Every call
    goes through :attr:`core` (``_core.py``), which decides which calls may be retried."""

    # A claim is one Lua script, and Redis serves no other client while it runs: the worker's
    # own acknowledgements wait behind it, and so does every enqueue. An async worker of 100
    # slots asked for up to 900 jobs at once (scripts of 20-40 ms); at most 128 a claim, its
    # drain of 1 ms handlers went from 12,051-15,853 to 17,018-18,562 jobs/s.
    claim_max: int | None = 128

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = mask_url(url)
        self.core = Core(url, clock)
        # The core's parts, for readers of this backend (tests look at keys through them).
        self.clock = clock
        self.settings = self.core.settings
        self.cluster = self.core.cluster
        self.keys = self.core.keys
        self.client: Any = self.core.client
        self.scripts = self.core.scripts

    # schema -----------------------------------------------------------------------------------

    def schema_migrate(self) -> list[str]:
        """Redis has no schema: nothing to apply, once the server answers (a dead port or
        wrong credentials fail here rather than pass for "up to date")."""
        self.core.call(self.client.ping)
        return []

    def schema_check(self) -> None:
        """Redis has no schema: always current."""

    # producer side ----------------------------------------------------------------------------

    def jobs_insert(
        self, params: JobsInsertParams, *, queue_ttl: float | None = None
    ) -> list[Inserted]:
        """Insert all or nothing: one script for a small batch, else staged (written in
        slices, visible only once complete; on Cluster any batch spanning queues): see
        ``_insert.py``.

        ``queue_ttl`` (seconds; not part of the protocol) re-arms an expiry on each queue named:
        a queue nobody pushes to for that long lapses with the pending jobs it holds (seed 003's
        ``list::Publish`` ttl). Stream consumers use it for their reply queue.

        A one-script batch whose every job has an idempotency key is retried through a lost
        connection (a repeat returns the jobs it inserted); any other is sent once (see
        ``_core.py``). A staged batch that fails before it is complete is deleted: nothing
        of it is ever visible.

        Workflow steps (``NewJob.after``) are stored ``waiting`` with their links in the same
        script: in one script the batch positions are resolved to ids by the script itself;
        when the numbers are reserved first (Cluster, a staged batch), the ids of both ends of
        every link are known here.
        """
        refuse_connection(self, params)
        jobs = list(params.jobs)
        if not jobs:
            return []
        queues = list(dict.fromkeys(j.queue for j in jobs))
        for q in queues:
            if not QUEUE_RE.match(q):
                raise ConfigurationError(f"invalid queue name {q!r}")
        ttl_ms = "" if queue_ttl is None else str(max(int(queue_ttl * 1000), 1))
        once = not all(j.idempotency_key for j in jobs)
        return _insert.insert(self.core, jobs, queues, ttl_ms, once)

    def jobs_get(self, job_id: str) -> JobRecord | None:
        """One job (an id that is not ours: ``None``)."""
        parsed = parse_job_id(job_id)
        if parsed is None:
            return None
        queue, n = parsed

        def fetch() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.keys.job(queue, n))
            pipe.hvals(self.keys.stages(queue))  # a batch still staged hides its jobs
            return cast(list[Any], pipe.execute())

        h, staged = self.core.call(fetch)
        return _record(queue, n, h) if h and not _insert.hidden(staged, n) else None

    def jobs_list(self, params: JobsListParams) -> list[JobRecord]:
        """Newest first (by job number, which is enqueue order across every queue).

        ``workflow_id`` reads each queue's index of that workflow; ``ids`` reads those jobs'
        hashes (in one pipeline) and filters them here."""
        if params.status is not None and params.status not in STATUSES:
            raise ValueError(f"unknown status {params.status!r}: use one of {', '.join(STATUSES)}")
        if params.ids is not None:
            return self._list_ids(params)
        if params.queue is not None:
            queues = [params.queue] if QUEUE_RE.match(params.queue) else []
        else:
            queues = self.core.known_queues()
        found: list[JobRecord] = []
        for names in self.core.slices(queues):
            one_call = len(names) == len(queues)
            offset, limit = (
                (params.offset, params.limit) if one_call else (0, params.offset + params.limit)
            )
            args = [
                str(len(names)),
                params.status or "",
                params.name or "",
                str(offset),
                str(limit),
                params.workflow_id or "",
            ]
            for row in self.core.run("jobs_list", self.core.group_keys(names), args):
                found.append(_record(names[int(row[0]) - 1], row[1], _pairs(row[2:])))
            if one_call:
                return found
        found.sort(key=lambda r: int(r.id.rsplit(":", 1)[1]), reverse=True)
        return found[params.offset : params.offset + params.limit]

    def _list_ids(self, params: JobsListParams) -> list[JobRecord]:
        """``jobs_list`` of the jobs named by ``params.ids`` (unknown ones left out)."""
        wanted = [p for p in map(parse_job_id, dict.fromkeys(params.ids or ())) if p is not None]
        if params.queue is not None:
            wanted = [p for p in wanted if p[0] == params.queue]
        if not wanted:
            return []

        queues = list(dict.fromkeys(q for q, _ in wanted))

        def fetch() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for q, n in wanted:
                pipe.hgetall(self.keys.job(q, n))
            for q in queues:
                pipe.hvals(self.keys.stages(q))  # a batch still staged hides its jobs
            return cast(list[Any], pipe.execute())

        reply = self.core.call(fetch)
        staged = dict(zip(queues, reply[len(wanted) :], strict=True))
        found = [
            rec
            for (q, n), h in zip(wanted, reply, strict=False)
            if h
            and not _insert.hidden(staged[q], n)
            and (rec := _record(q, n, h))
            and (params.status is None or rec.status == params.status)
            and (params.name is None or rec.name == params.name)
            and (params.workflow_id is None or rec.workflow_id == params.workflow_id)
        ]
        found.sort(key=lambda r: int(r.id.rsplit(":", 1)[1]), reverse=True)
        return found[params.offset : params.offset + params.limit]

    def jobs_search(self, params: JobsSearchParams) -> JobsPage:
        """A page by cursor (a job number: the one sequence orders every queue). Each queue's
        state index (or each of them) is walked from the cursor by a script, at most ``scan``
        entries per walk; the walks are merged here: the next page starts at the highest number
        where a walk stopped early, so every job above it was walked by every walk. Then the
        hits' hashes are read in one pipeline (as ``jobs_list`` by ids)."""
        p = params
        if p.before is not None and not (p.before.isdigit() and len(p.before) <= 18):
            raise ValueError(f"invalid cursor {p.before!r}")
        if p.queue is not None:
            queues = [p.queue] if QUEUE_RE.match(p.queue) else []
        else:
            queues = self.core.known_queues()
        hits: list[tuple[int, str]] = []  # (number, queue)
        stops: list[int] = []
        scanned = 0
        # One budget for the whole page, shared by every index walked (a queue's, or each of its
        # six states'), so a page never holds the server for more than ``scan`` reads.
        walks = max(len(queues) * (1 if p.status else len(STATUSES)), 1)
        each = max(p.scan // walks, 1)
        for names in self.core.slices(queues):
            args = [
                str(len(names)),
                p.status or "",
                p.name or "",
                p.idempotency_key or "",
                p.contains or "",
                p.error_contains or "",
                p.before or "",
                str(p.limit),
                str(each),
            ]
            for row in self.core.run("jobs_search", self.core.group_keys(names), args):
                queue = names[int(row[0]) - 1]
                if row[1]:
                    stops.append(int(row[1]))
                scanned += int(row[2])
                hits.extend((int(n), queue) for n in row[3:])
        floor = max(stops, default=0)
        kept = sorted((h for h in hits if h[0] >= floor), reverse=True)
        if len(kept) > p.limit:
            kept = kept[: p.limit]
            cursor: str | None = str(kept[-1][0])
        else:
            cursor = str(floor) if stops else None
        ids = [make_id(q, str(n)) for n, q in kept]
        records = self._list_ids(JobsListParams(ids=ids, limit=len(ids))) if ids else []
        return JobsPage(records, cursor, scanned)

    def dead_groups(self, params: DeadGroupsParams) -> DeadGroups:
        """Each queue's newest ``scan`` failed jobs (a budget per queue), walked by a script in
        calls of :data:`DEAD_CALL` jobs and grouped by it; the calls' groups merged here."""
        if params.queue is not None:
            queues = [params.queue] if QUEUE_RE.match(params.queue) else []
        else:
            queues = self.core.known_queues()
        merged: dict[tuple[str, str, str], list[Any]] = {}
        scanned, complete = 0, True
        for queue in queues:
            cursor, left = "", params.scan
            while left > 0:
                args = [cursor, str(min(DEAD_CALL, left)), str(ERROR_TAIL)]
                reply = self.core.run("dead_groups", self.keys.queue(queue), args)
                stop, walked = reply[0], int(reply[1])
                scanned += walked
                left -= walked
                for i in range(2, len(reply), 6):
                    name, line, count, newest, oldest, n = reply[i : i + 6]
                    at, first = float(newest), float(oldest)
                    g = merged.get(key := (queue, name, line))
                    if g is None:  # the calls walk newest first: the first call's sample stays
                        merged[key] = [int(count), at, first, make_id(queue, n)]
                    else:
                        g[0] += int(count)
                        g[1] = max(g[1], at)
                        g[2] = min(g[2], first)
                if not stop:
                    break
                cursor = stop
            else:
                complete = False
        groups = [DeadGroup(*k, *v) for k, v in merged.items()]
        return DeadGroups(sort_groups(groups), scanned, complete)

    def _locate(self, job_id: str) -> tuple[str, str]:
        parsed = parse_job_id(job_id)
        if parsed is None:
            raise JobNotFound(job_id)
        return parsed

    def jobs_cancel(self, params: JobsCancelParams) -> JobRecord:
        """Pending -> cancelled; running: a request recorded."""
        job_id = params.id
        queue, n = self._locate(job_id)
        args = [
            self.core.now(),
            n,
            _ttl(self.settings.failed_ttl),
            params.by or "",
            "1" if params.pending_only else "",
        ]
        reply = self.core.run_once("jobs_cancel", self.keys.queue(queue), args)
        if reply[0] == "missing":
            raise JobNotFound(job_id)
        if reply[0] == "status":
            raise InvalidTransition.cannot_cancel(job_id, reply[1])
        return _record(queue, n, _pairs(reply[1:]))

    def _in_chunks(
        self, ids: Sequence[str], send: Callable[[list[tuple[str, list[str]]]], set[str]]
    ) -> set[str]:
        """The jobs ``ids`` grouped by queue and sent in chunks of at most :data:`CANCEL_CHUNK`
        jobs, each chunk's queues in one slot (Cluster: one queue a script), so no call holds
        Redis long; what ``send`` says each chunk changed, together."""
        by_queue: dict[str, list[str]] = {}
        for job_id in dict.fromkeys(ids):
            parsed = parse_job_id(job_id)
            if parsed is not None:
                by_queue.setdefault(parsed[0], []).append(parsed[1])
        changed: set[str] = set()
        for names in self.core.slices(list(by_queue)):
            chunk: list[tuple[str, list[str]]] = []
            size = 0
            for queue in names:
                numbers = by_queue[queue]
                for i in range(0, len(numbers), CANCEL_CHUNK):
                    part = numbers[i : i + CANCEL_CHUNK]
                    if size + len(part) > CANCEL_CHUNK and chunk:
                        changed |= send(chunk)
                        chunk, size = [], 0
                    chunk.append((queue, part))
                    size += len(part)
            if chunk:
                changed |= send(chunk)
        return changed

    def jobs_cancel_many(self, params: JobsCancelManyParams) -> list[str]:
        """jobs_cancel for many jobs: one script per :data:`CANCEL_CHUNK` jobs (per queue on
        Cluster), so no call holds Redis long; the refused ones skipped."""
        head = [
            self.core.now(),
            "",
            _ttl(self.settings.failed_ttl),
            params.by or "",
            "1" if params.pending_only else "",
        ]
        changed = self._in_chunks(params.ids, lambda chunk: self._cancel_chunk(head, chunk))
        return [job_id for job_id in params.ids if job_id in changed]

    def _cancel_chunk(self, head: list[str], chunk: list[tuple[str, list[str]]]) -> set[str]:
        keys = [key for queue, _ in chunk for key in self.keys.queue(queue)]
        args = [*head[:1], str(len(chunk)), *head[2:], *(",".join(ns) for _, ns in chunk)]
        reply = self.core.run_once("jobs_cancel_many", keys, args)
        return {make_id(chunk[int(reply[i]) - 1][0], reply[i + 1]) for i in range(0, len(reply), 2)}

    def jobs_resume(self, params: JobsResumeParams) -> list[str]:
        """Failed or cancelled workflow jobs -> pending, or waiting on their inputs not
        completed (``jobs_resume.lua``): one script per :data:`CANCEL_CHUNK` jobs, per queue on
        Cluster, where the inputs in other queues are then checked and those completed counted
        off (owed as ``w<n>`` until then, so the reaper checks them if this caller dies)."""
        changed = self._in_chunks(params.ids, self._resume_chunk)
        return [job_id for job_id in params.ids if job_id in changed]

    def _resume_chunk(self, chunk: list[tuple[str, list[str]]]) -> set[str]:
        keys = [key for queue, _ in chunk for key in self.keys.queue(queue)]
        if not self.cluster:
            keys += [self.keys.wake(queue) for queue, _ in chunk]
        args = [self.core.now(), str(len(chunk)), self.keys.prefix, "" if self.cluster else "1"]
        args += [",".join(ns) for _, ns in chunk]
        reply = self.core.run_once("jobs_resume", keys, args)
        flat = [e for e in reply if not isinstance(e, list)]
        notes = [(chunk[int(e[1]) - 1][0], e) for e in reply if isinstance(e, list)]
        if notes:
            self._settle(notes)
        return {make_id(chunk[int(flat[i]) - 1][0], flat[i + 1]) for i in range(0, len(flat), 2)}

    def jobs_retry(self, job_id: str) -> JobRecord:
        """Failed or cancelled -> pending, attempts reset."""
        queue, n = self._locate(job_id)
        keys = self.keys.queue(queue)
        if not self.cluster:
            keys.append(self.keys.wake(queue))
        args = [self.core.now(), n, "" if self.cluster else "1"]
        reply = self.core.run_once("jobs_retry", keys, args)
        if reply[0] == "missing":
            raise JobNotFound(job_id)
        if reply[0] == "status":
            raise InvalidTransition.cannot_retry(job_id, reply[1])
        if reply[0] == "corrupt":
            raise InvalidTransition(
                f"job {job_id} cannot be retried: corrupt job record: {reply[1]}"
            )
        if reply[0] == "dup":
            raise DuplicateJob.key_held(job_id, make_id(queue, reply[1]))
        if self.cluster:
            self.core.wake_after({queue: 1})
        return _record(queue, n, _pairs(reply[1:]))

    def jobs_retry_many(self, params: JobsRetryManyParams) -> list[str]:
        """jobs_retry for many jobs: one script per :data:`CANCEL_CHUNK` jobs (per queue on
        Cluster), so no call holds Redis long; the refused ones skipped."""
        changed = self._in_chunks(params.ids, self._retry_chunk)
        return [job_id for job_id in dict.fromkeys(params.ids) if job_id in changed]

    def _retry_chunk(self, chunk: list[tuple[str, list[str]]]) -> set[str]:
        keys = [key for queue, _ in chunk for key in self.keys.queue(queue)]
        if not self.cluster:
            keys += [self.keys.wake(queue) for queue, _ in chunk]
        args = [
            self.core.now(),
            "" if self.cluster else "1",
            str(len(chunk)),
            *(",".join(ns) for _, ns in chunk),
        ]
        reply = self.core.run_once("jobs_retry_many", keys, args)
        done = [(chunk[int(reply[i]) - 1][0], reply[i + 1]) for i in range(0, len(reply), 2)]
        if self.cluster:
            counts: dict[str, int] = {}
            for queue, _ in done:
                counts[queue] = counts.get(queue, 0) + 1
            self.core.wake_after(counts)
        return {make_id(queue, n) for queue, n in done}

    def jobs_purge(self, params: JobsPurgeParams) -> Purged:
        """Delete finished jobs whose finished_at <= now - older_than, but the completed ones a
        workflow step still needs, with the waiting steps downstream (``jobs_purge.lua``; on
        Cluster what another queue owes is paid here, and a queue where that freed completed
        jobs is purged once more)."""
        if not params.statuses:
            return Purged()
        if params.queue is not None:
            queues = [params.queue] if QUEUE_RE.match(params.queue) else []
        else:
            queues = self.core.known_queues()
        only: dict[str, list[str]] | None = None
        if params.ids is not None:  # only these jobs: the queues their ids name
            only = {}
            for q, n in filter(None, map(parse_job_id, params.ids)):
                if q in queues or params.queue is None:
                    only.setdefault(q, []).append(n)
            queues = sorted(only)
        now = self.core.now()  # one cutoff for every batch and queue
        head = [repr(float(params.older_than)), str(PURGE_BATCH), _ttl(self.settings.result_ttl)]
        head += [self.keys.prefix, "" if self.cluster else "1"]
        kept: dict[str, int] = {}  # held jobs kept, by the first queue of each call's slice
        deleted, waiting = 0, 0
        freed: set[str] = set()
        slices = self.core.slices(queues)
        while slices:
            for names in slices:
                keys = self.core.group_keys(names)
                numbers = "" if only is None else json.dumps([only.get(q, []) for q in names])
                args = [now, str(len(names)), *head, numbers, *params.statuses]
                while True:
                    reply = self.core.run("jobs_purge", keys, args)
                    deleted += int(reply[0])
                    waiting += int(reply[1])
                    kept[names[0]] = int(reply[2])
                    notes = [(names[int(e[1]) - 1], e) for e in reply[4:]]
                    if notes:
                        paid = self._settle(notes)
                        deleted += paid.waiting
                        waiting += paid.waiting
                        freed |= paid.freed
                    if int(reply[3]) != 1:
                        break
            # Cluster: completed jobs freed in another queue by this purge go with it too.
            slices = self.core.slices([q for q in queues if q in freed])
            freed = set()
        return Purged(deleted, waiting, sum(kept.values()))

    # worker side ------------------------------------------------------------------------------

    def jobs_claim(self, params: JobsClaimParams) -> Claimed:
        """Claim due jobs in priority, (fair queues: turn,) run_at, enqueue order, through the
        gate of ``_gate.lua`` (one script on one node; one queue whose gate is open, the lean
        ``jobs_claim_one.lua``, which hands any other case to ``jobs_claim.lua``).

        On Cluster with several queues each queue is a script of its own, so the claim first
        peeks at every queue's best candidates, then takes from each its share of the best
        ``limit``: the order holds across queues, though not atomically across them.

        A claim is sent once: repeated after its reply was lost, it would take the next batch and
        leave the first running unseen until its leases lapse. It raises instead, and the worker
        claims again after its backoff (see ``_core.py``); the peek is a read, retried.
        """
        queues = list(dict.fromkeys(params.queues))
        if params.wait > 0 and queues and params.limit > 0 and not self.cluster:
            return self._claim_woken(queues, params.worker_id, params.limit, params.wait)
        if params.wait > 0:
            self._block(self._wake_keys(queues, params.worker_id), params.wait)
        if not queues or params.limit <= 0:
            return Claimed()
        if not self.cluster or len(queues) == 1:
            return self._claim(queues, params.worker_id, params.limit)
        # The probe: each queue's best candidates, through the same gate (peek claims nothing).
        candidates: list[tuple[int, int, float, int, str]] = []
        opens: list[float] = []
        for q in queues:
            reply = self._claim_call([q], params.worker_id, params.limit, peek=True)
            if reply[0]:
                opens.append(float(reply[0]))
            for order, i in enumerate(range(1, len(reply), 4)):
                prio, run_at, n = -int(reply[i + 1]), float(reply[i + 2]), int(reply[i + 3])
                candidates.append((prio, order, run_at, n, q))
        # Merged by priority, then run_at, each queue's own order kept (a fair queue's turns).
        best = _merge_ranked(candidates, params.limit)
        share = Counter(q for *_, q in best)
        rank = {(q, n): i for i, (_, _, _, n, q) in enumerate(best)}
        claimed = Claimed(next_open=min(opens) if opens else None)
        for q in queues:
            if share[q]:
                got = self._claim([q], params.worker_id, share[q])
                claimed += got
                if got.next_open is not None:
                    claimed.next_open = min(got.next_open, claimed.next_open or got.next_open)
        claimed.sort(key=lambda c: rank.get((c.queue, int(c.id.rsplit(":", 1)[1])), len(rank)))
        return claimed

    def _claim_args(self, queues: list[str], worker: str, limit: int, peek: bool) -> list[str]:
        return [
            self.core.now(),
            str(len(queues)),
            str(limit),
            worker,
            secrets.token_hex(8),
            "1" if peek else "",
            _ttl(self.settings.failed_ttl),
        ]

    def _claim_one(self, queues: list[str]) -> bool:
        """Whether a claim of ``queues`` tries the lean script (one queue, a single node, and
        not handed to the general script lately: see ``jobs_claim_one.lua``)."""
        return len(queues) == 1 and self.core.lean(CLAIM_ONE, queues[0])

    def _claim_one_call(self, queue: str, worker: str, limit: int) -> tuple[list[str], list[str]]:
        """The keys and arguments of ``jobs_claim_one``."""
        args = [self.core.now(), str(limit), worker, secrets.token_hex(8)]
        return [self.keys.config(queue)], args

    def _claim_call(self, queues: list[str], worker: str, limit: int, peek: bool) -> Any:
        if not peek and self._claim_one(queues):
            keys, args = self._claim_one_call(queues[0], worker, limit)
            reply = self.core.run_once(CLAIM_ONE, keys, args)
            if reply != GENERAL:
                return reply
            self.core.not_lean(CLAIM_ONE, queues[0])
        args = self._claim_args(queues, worker, limit, peek)
        run = self.core.run if peek else self.core.run_once
        return run("jobs_claim", self.core.group_keys(queues), args)

    def _claim_woken(self, queues: list[str], worker: str, limit: int, wait: float) -> Claimed:
        """The blocking read of the wake lists and the claim, sent together in one pipeline:
        Redis runs the claim the moment the read returns (a token pushed, or the timeout), so
        the job reaches the worker in the read's own round trip. Single node only (on Cluster
        the wake lists and the queue may sit on different nodes). Sent once, like any claim:
        if the connection fails while it blocks, Redis drops the queued claim with it."""
        wake = self._wake_keys(queues, worker)
        block = min(wait, max(self.settings.socket_timeout - 1.0, 0.1))
        lean = self._claim_one(queues)
        name = CLAIM_ONE if lean else "jobs_claim"
        script = self.core.scripts[name]
        if lean:
            keys, args = self._claim_one_call(queues[0], worker, limit)
        else:
            keys = self.core.group_keys(queues)
            args = self._claim_args(queues, worker, limit, peek=False)

        def send(client: Any) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            pipe.blpop(wake, timeout=block)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            return cast(list[Any], pipe.execute(raise_on_error=False))

        woke, reply = self.core.call_once(name, send)
        if isinstance(reply, NoScriptError):  # a restarted server: Script loads it again
            return self._claim(queues, worker, limit)
        for item in (woke, reply):
            if isinstance(item, Exception):
                raise item
        if lean and reply == GENERAL:  # written nothing: the general script claims
            self.core.not_lean(CLAIM_ONE, queues[0])
            return self._claim(queues, worker, limit)
        return self._claimed(queues, reply)

    def _claim(self, queues: list[str], worker: str, limit: int) -> Claimed:
        return self._claimed(queues, self._claim_call(queues, worker, limit, peek=False))

    def _claimed(self, queues: list[str], r: Any) -> Claimed:
        """The claim script's reply: next_open first, then 13 strings per claimed job."""
        out = Claimed(next_open=float(r[0]) if r[0] else None)
        append = out.append
        fields = iter(r)
        next(fields)
        # One pass over the reply, 13 fields at a time (it runs for every job claimed).
        for (
            g,
            n,
            name,
            payload,
            tries,
            most,
            backoff,
            timeout,
            lease,
            token,
            delivery,
            parent,
            at,
        ) in zip(*(fields,) * 13, strict=False):
            queue = queues[int(g) - 1]
            append(
                ClaimedJob(
                    id=make_id(queue, n),
                    name=name,
                    queue=queue,
                    payload=payload,
                    attempts=int(tries),
                    max_attempts=int(most),
                    backoff=backoff or None,
                    timeout=float(timeout) if timeout else None,
                    lease=float(lease),
                    token=token,
                    delivery=delivery,
                    parent_id=parent or None,
                    run_at=float(at) if at else None,
                )
            )
        return out

    def _fenced(
        self,
        script: str,
        ids: Sequence[str],
        item: Callable[[int, str, int], list[Any]],
        *head: str,
    ) -> tuple[list[str], list[str], list[tuple[str, list[Any]]]]:
        """Run a token-fenced batch script (ack, renew) and return the ids it refused, those it
        flagged (a negative position: a renewed job with a cancellation request), and the notes
        it appended (arrays ``[tag, group, ...]``: the ack's owed releases and wake counts on
        Cluster), each with its group's queue name in place of the group.

        ``item(g, number, position)`` builds the JSON entry of one job; ids that are not ours are
        refused without a call.
        """
        refused: set[int] = set()
        flagged: set[int] = set()
        notes: list[tuple[str, list[Any]]] = []
        by_queue: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for pos, jid in enumerate(ids):
            parsed = parse_job_id(jid)
            if parsed is None:
                refused.add(pos)
            else:
                by_queue[parsed[0]].append((pos, parsed[1]))
        for names in self.core.slices(list(by_queue)):
            order: list[int] = []
            items = []
            for g, q in enumerate(names, 1):
                for pos, n in by_queue[q]:
                    order.append(pos)
                    items.append(item(g, n, pos))
            reply = self.core.run(
                script, self.core.group_keys(names), [self.core.now(), *head, dumps(items)]
            )
            for entry in reply:
                if isinstance(entry, list):
                    notes.append((names[int(entry[1]) - 1], entry))
                elif int(entry) > 0:
                    refused.add(order[int(entry) - 1])
                else:
                    flagged.add(order[-int(entry) - 1])
        return (
            [ids[pos] for pos in sorted(refused)],
            [ids[pos] for pos in sorted(flagged)],
            notes,
        )

    def jobs_ack(self, params: JobsAckParams) -> list[str]:
        """Apply outcomes whose token still matches; return the refused (stale) ids.

        A completion releases its dependents in the same script; on Cluster a dependent in
        another queue is owed by that script and paid here before returning (if this caller
        dies first, :meth:`leases_reap` pays it)."""
        refused, notes = self._ack(params)
        if notes:
            self._settle(notes)
        return refused

    def _ack(self, params: JobsAckParams) -> tuple[list[str], list[tuple[str, list[Any]]]]:
        """The ack script alone: the refused ids and the notes left to settle (Cluster)."""
        refuse_connection(self, params)
        outcomes = list(params.outcomes)
        if not outcomes:
            return [], []

        def item(g: int, n: str, pos: int) -> list[Any]:
            o = outcomes[pos]
            return [g, n, o.token, o.kind, o.result, o.error, float(o.delay)]

        head = (
            _ttl(self.settings.result_ttl),
            _ttl(self.settings.failed_ttl),
            self.keys.prefix,
            "" if self.cluster else "1",
        )
        refused, _, notes = self._fenced("jobs_ack", [o.id for o in outcomes], item, *head)
        return refused, notes

    def _settle(self, notes: list[tuple[str, list[Any]]]) -> _Paid:
        """Cluster: wake the queues whose waiting jobs an ack or reap released, and pay what a
        script left owed to jobs of other queues (entries ``[tag, group, field, ids]``): the
        releases of dependents (a job number as field, :meth:`pay_owed`), the holds of inputs
        (``f<n>``) and the drops of waiting dependents (``d<n>``, which may owe more in turn;
        paid until nothing is owed). See ``_flows.lua``."""
        woke: Counter[str] = Counter()
        paid = _Paid()
        while notes:
            releases: list[tuple[str, str, str]] = []
            holds: list[tuple[str, str, str]] = []
            drops: list[tuple[str, str, str]] = []
            waits: list[tuple[str, str, str]] = []
            for queue, entry in notes:
                if entry[0] == "woke":
                    woke[queue] += int(entry[2])
                    continue
                name = str(entry[2])
                kind = {"f": holds, "d": drops, "w": waits}.get(name[:1], releases)
                kind.append((queue, name, entry[3]))
            notes = []
            if releases:
                woke.update(self.pay_owed(releases))
            if waits:
                woke.update(self._pay_waits(waits))
            if holds:
                paid.freed |= self._pay_holds(holds)
            if drops:
                notes = self._pay_drops(drops, paid)
        self.core.wake_after(dict(woke))
        return paid

    def _clear_owed(self, queue: str, fields: list[str]) -> None:
        key = self.keys.owed(queue)
        self.core.call(lambda: self.client.hdel(key, *fields))

    def _clear_all(self, owed: Sequence[tuple[str, str, str]]) -> None:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for queue, name, _ in owed:
            by_queue[queue].append(name)
        for queue, fields in by_queue.items():
            self._clear_owed(queue, fields)

    def pay_owed(self, owed: Sequence[tuple[str, str, str]]) -> Counter[str]:
        """Cluster: pay releases owed by completed jobs ``(queue, number, dependents)`` to their
        dependents in other queues (``jobs_release.lua``, one call per dependents' queue), then
        clear the owed entries. Safe to repeat, and to race with another payer: an input is
        counted once per dependent. Returns how many jobs became pending, by queue."""
        pay: dict[str, list[list[str]]] = defaultdict(list)
        for queue, n, deps in owed:
            for dep in _ids(deps):
                parsed = parse_job_id(dep)
                if parsed is not None and parsed[0] != queue:
                    pay[parsed[0]].append([parsed[1], make_id(queue, n)])
        released: Counter[str] = Counter()
        for dep_queue, pairs in pay.items():
            keys = self.keys.queue(dep_queue)
            released[dep_queue] += int(
                self.core.run("jobs_release", keys, [self.core.now(), dumps(pairs)])
            )
        self._clear_all(owed)
        return released

    def _pay_waits(self, owed: Sequence[tuple[str, str, str]]) -> Counter[str]:
        """Cluster: a resumed job ``(queue, "w<n>", inputs)`` waits again on inputs in other
        queues that ``jobs_resume.lua`` could not read: count off those that have completed
        (``jobs_release.lua``: once per input, however often this is paid, and a completion
        that races it pays its own release), then clear the entries. Returns how many jobs
        became pending, by queue."""
        wanted = sorted({i for _, _, inputs in owed for i in _ids(inputs)})
        done: set[str] = set()
        for start in range(0, len(wanted), 1000):
            part = wanted[start : start + 1000]
            recs = self._list_ids(JobsListParams(ids=part, limit=len(part)))
            done |= {r.id for r in recs if r.status == "completed"}
        pay: dict[str, list[list[str]]] = defaultdict(list)
        for queue, name, inputs in owed:
            pay[queue] += [[name[1:], i] for i in _ids(inputs) if i in done]
        released: Counter[str] = Counter()
        for queue, pairs in pay.items():
            if pairs:
                args = [self.core.now(), dumps(pairs)]
                released[queue] += int(self.core.run("jobs_release", self.keys.queue(queue), args))
        self._clear_all(owed)
        return released

    def _pay_holds(self, owed: Sequence[tuple[str, str, str]]) -> set[str]:
        """Cluster: take the holds owed by jobs ``(queue, "f<n>", inputs)`` (completed, or
        deleted before they completed) off their inputs in other queues (``jobs_unhold.lua``,
        idempotent), then clear the entries. Returns the queues where that freed a job."""
        pay: dict[str, list[list[str]]] = defaultdict(list)
        for queue, name, inputs in owed:
            for input_id in _ids(inputs):
                parsed = parse_job_id(input_id)
                if parsed is not None:
                    pay[parsed[0]].append([parsed[1], make_id(queue, name[1:])])
        ttl = _ttl(self.settings.result_ttl)
        freed = set()
        for queue, pairs in pay.items():
            args = [self.core.now(), ttl, dumps(pairs)]
            if int(self.core.run("jobs_unhold", self.keys.queue(queue), args)):
                freed.add(queue)
        self._clear_all(owed)
        return freed

    def _pay_drops(
        self, owed: Sequence[tuple[str, str, str]], paid: _Paid
    ) -> list[tuple[str, list[Any]]]:
        """Cluster: delete the waiting dependents in other queues of deleted jobs ``(queue,
        "d<n>", dependents)`` (``jobs_drop.lua``: only those still waiting), counting them in
        ``paid``, then clear the entries. Returns what those deletions owe in turn."""
        pay: dict[str, list[list[str]]] = defaultdict(list)
        for queue, name, deps in owed:
            for dep in _ids(deps):
                parsed = parse_job_id(dep)
                if parsed is not None:
                    pay[parsed[0]].append([parsed[1], make_id(queue, name[1:])])
        head = [_ttl(self.settings.result_ttl), self.keys.prefix]
        notes: list[tuple[str, list[Any]]] = []
        for queue, pairs in pay.items():
            args = [self.core.now(), *head, dumps(pairs)]
            reply = self.core.run("jobs_drop", self.keys.queue(queue), args)
            paid.waiting += int(reply[0])
            if int(reply[1]):
                paid.freed.add(queue)
            notes += [(queue, entry) for entry in reply[2:]]
        self._clear_all(owed)
        return notes

    def jobs_wait(self, params: JobsWaitParams) -> bool:
        """Block on the queues' wake lists (BLPOP) until an insert pushes a token or the timeout.

        All wake lists sit on the ``{prefix}`` tag, so one BLPOP covers every queue even on
        Cluster. Waits longer than the socket timeout end early (False), which is allowed.
        """
        return self._block(
            [self.keys.wake(q) for q in dict.fromkeys(params.queues)], params.timeout
        )

    def _wake_keys(self, queues: Sequence[str], worker_id: str) -> list[str]:
        """What a worker's waiting claim reads: its queues' wake lists and its own."""
        return [*(self.keys.wake(q) for q in queues), self.keys.worker_wake(worker_id)]

    def jobs_wake(self, params: JobsWakeParams) -> None:
        """Push a token on the worker's own wake list, which its waiting claim reads (one
        token, kept a minute: a worker that was not waiting finds it at its next wait)."""
        key = self.keys.worker_wake(params.worker_id)

        def push() -> list[Any]:  # a fresh pipeline per attempt: a failed one is emptied
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(key, "1")
            pipe.ltrim(key, 0, 0)
            pipe.expire(key, 60)
            return cast(list[Any], pipe.execute())

        self.core.call(push)

    def _block(self, keys: list[str], timeout: float) -> bool:
        if not keys:
            return False
        if timeout <= 0:
            return any(self.client.lpop(k) is not None for k in keys)
        block = min(timeout, max(self.settings.socket_timeout - 1.0, 0.1))
        try:
            return self.client.blpop(keys, timeout=block) is not None
        except TRANSIENT:
            if self.core.closed:
                return False
            raise

    def leases_renew(self, params: LeasesRenewParams) -> Renewed:
        """Push leases forward and store progress; the lost ones and the cancel requests."""
        jobs = list(params.jobs)
        if not jobs:
            return Renewed()
        progress = {p.id: p for p in params.progress}

        def item(g: int, n: str, pos: int) -> list[Any]:
            job_id, token = jobs[pos]
            p = progress.get(job_id)
            if p is None:
                return [g, n, token]
            return [g, n, token, repr(p.fraction), p.note]

        ttl = _ttl(self.settings.failed_ttl)
        lost, asked, _ = self._fenced("leases_renew", [j for j, _ in jobs], item, ttl)
        return Renewed(lost=lost, cancel_requested=asked)

    def leases_lapsed(self, params: LeasesLapsedParams) -> list[Lapsed]:
        """The running jobs whose lease lapsed, read from every queue's claims set (one call
        on a single node, one per queue on Cluster)."""
        out: list[Lapsed] = []
        for names in self.core.slices(self.core.known_queues()):
            left = params.limit - len(out)
            if left <= 0:
                break
            args = [self.core.now(), str(len(names)), str(left)]
            flat = self.core.run("leases_lapsed", self.core.group_keys(names), args)
            for i in range(0, len(flat), 9):
                g, n, token, name, attempts, most, backoff, delivery, asked = flat[i : i + 9]
                queue = names[int(g) - 1]
                out.append(
                    Lapsed(
                        make_id(queue, n),
                        token,
                        name,
                        queue,
                        int(attempts),
                        int(most),
                        backoff or None,
                        "at_most_once" if delivery == "at_most_once" else "at_least_once",
                        asked == "1",
                    )
                )
        return out

    def leases_reap(self, params: LeasesReapParams) -> list[Reaped]:
        """Apply the reaper's moves, fenced (see ``leases_reap.lua``); on Cluster also pay the
        releases a completion left owed when its caller died before paying them (see
        ``jobs_ack``), in every queue. First it takes over the staged batches whose producer
        stopped (``_insert.reap``)."""
        _insert.reap(self.core)
        by_queue: dict[str, list[list[Any]]] = defaultdict(list)
        for m in params.moves:
            parsed = parse_job_id(m.id)
            if parsed is not None:
                by_queue[parsed[0]].append([parsed[1], m.token, m.kind, m.error, m.delay])
        # On Cluster every queue is visited for its owed releases; on one node only the moved.
        queues = self.core.known_queues() if self.cluster else list(by_queue)
        out: list[Reaped] = []
        for names in self.core.slices(queues):
            moves = [[g, *move] for g, q in enumerate(names, 1) for move in by_queue.get(q, ())]
            keys = self.core.group_keys(names)
            if not self.cluster:
                keys += [self.keys.wake(q) for q in names]
            args = [
                self.core.now(),
                str(len(names)),
                _ttl(self.settings.failed_ttl),
                "" if self.cluster else "1",
                str(OWED_BATCH),
                dumps(moves),
            ]
            reply = self.core.run("leases_reap", keys, args)
            notes = [(names[int(e[1]) - 1], e) for e in reply if isinstance(e, list)]
            flat = [e for e in reply if not isinstance(e, list)]
            requeued: Counter[str] = Counter()
            for i in range(0, len(flat), 4):
                queue = names[int(flat[i]) - 1]
                out.append(Reaped(make_id(queue, flat[i + 1]), flat[i + 2], flat[i + 3], queue))
                requeued[queue] += flat[i + 2] == "pending"
            if self.cluster:
                for queue, count in requeued.items():
                    notes.append((queue, ["woke", 0, count]))
                self._settle(notes)
        return out

    def jobs_expire(self, params: JobsExpireParams) -> int:
        """Retention: drop completed jobs older than ``result_ttl``, failed and cancelled ones
        older than ``failed_ttl`` (when set), and the pending jobs of a lapsed queue (ttl).
        The hashes expired by themselves (but those of failed or cancelled workflow jobs and
        the held ones: see ``_flows.lua``); this clears their index entries, and deletes the
        waiting steps downstream of a failed or cancelled one (on Cluster, paid here)."""
        if params.limit <= 0:
            return 0
        dropped = 0
        for names in self.core.slices(self.core.known_queues()):
            args = [
                self.core.now(),
                str(len(names)),
                _ttl(self.settings.result_ttl),
                _ttl(self.settings.failed_ttl),
                str(params.limit),
                self.keys.prefix,
                "" if self.cluster else "1",
            ]
            reply = self.core.run("jobs_expire", self.core.group_keys(names), args)
            dropped += int(reply[0])
            notes = [(names[int(e[1]) - 1], e) for e in reply[1:]]
            if notes:
                dropped += self._settle(notes).waiting
        return dropped

    # queues, workers, stats -------------------------------------------------------------------

    def queues_configure(self, config: QueueConfig) -> None:
        """Create or replace a queue's settings."""
        _admin.queues_configure(self.core, config)

    def queues_list(self) -> list[QueueConfig]:
        """Every configured queue, by name."""
        return _admin.queues_list(self.core)

    def workers_beat(self, params: WorkersBeatParams) -> None:
        """Register, refresh or remove a worker; forget the silent ones."""
        _admin.workers_beat(self.core, params)

    def workers_list(self) -> list[WorkerInfo]:
        """Registered workers, oldest first."""
        return _admin.workers_list(self.core)

    def limits_sync(self, params: LimitsSyncParams) -> None:
        """Store job names' limits, each in its queue's ``joblimits`` hash (its hash slot)."""
        _admin.limits_sync(self.core, params)

    def limits_stats(self, params: LimitsStatsParams) -> list[LimitStats]:
        """Every limited scope of the queues asked (counts read from the jobs' hashes)."""
        return _admin.limits_stats(self.core, params)

    def queues_names(self, params: QueuesNamesParams) -> list[str]:
        """Every queue ever written to or configured (one set read): a superset, which the
        contract allows, rather than a script per queue."""
        return self.core.known_queues()

    def stats_get(self, params: StatsParams) -> list[QueueStats]:
        """Counts by status for each queue that has jobs or a configuration."""
        return _admin.stats_get(self.core, params)

    def throughput_get(self, params: ThroughputParams) -> list[ThroughputMinute]:
        """The kept minutes (hashes per queue and hour that expire by themselves)."""
        return _admin.throughput_get(self.core, params)

    def store_info(self) -> StoreInfo:
        """Node or Cluster, and the retention of the URL's ``result_ttl`` and ``failed_ttl``."""
        return _admin.store_info(self.core)

    # time and recurring jobs --------------------------------------------------------------------

    def clock_now(self) -> float:
        """The frozen clock's now, else Redis's ``TIME``."""
        return self.core.clock_now()

    def schedules_sync(self, params: SchedulesSyncParams) -> None:
        """Store the app's schedules, keeping the next run of unchanged ones."""
        _schedules.sync(self.core, params)

    def schedules_list(self) -> list[Schedule]:
        """Every stored schedule, by name."""
        return _schedules.list_all(self.core)

    def schedules_fire(self, params: SchedulesFireParams) -> Inserted | None:
        """Move the schedule on and insert its job in one script, if the tick is still due."""
        return _schedules.fire(self.core, params)

    def schedules_skip(self, params: SchedulesSkipParams) -> bool:
        """Drop ticks in one script, if the schedule still waits for ``fire_at``."""
        return _schedules.skip(self.core, params)

    def schedules_pause(self, params: SchedulesPauseParams) -> bool:
        """Pause or resume a schedule in one script."""
        return _schedules.pause(self.core, params)

    # foreign lists and streams (ForeignQueueBackend)

    def consumer_list(
        self, key: str, handler: Callable[[Any], Any], **options: Any
    ) -> consumers.ListConsumer:
        """A :class:`~.consumers.ListConsumer` of list ``key``, not started."""
        return consumers.ListConsumer(self.core, key, handler, **options)

    def consumer_stream(
        self, stream: str, handler: Callable[[Any], Any], **options: Any
    ) -> consumers.StreamConsumer:
        """A :class:`~.consumers.StreamConsumer` of ``stream``, not started."""
        return consumers.StreamConsumer(
            self.core, stream, handler, insert=self.jobs_insert, **options
        )

    def events_attach(self, events: Events) -> None:
        """Report a call sent once whose reply was lost (``WorkerNote("unsure")``) on
        ``events`` (``base.EventSource``)."""
        self.core.events = events

    def close(self) -> None:
        """Close the connection pools (safe to call twice)."""
        self.core.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self.url!r})"
