"""Inserting jobs on Redis: a batch in one script when it is small, else staged.

Redis serves nobody while a script runs, so a batch is one script only while that is short:
at most :data:`SLICE_JOBS` jobs (250 workflow steps) and :data:`SLICE_BYTES` of rows (about
10 ms of Redis time, 30 at most on a loaded machine).
A larger batch, and on Cluster any batch that spans queues (their slots may sit on different
nodes, where no script reaches them all), is *staged* (see "Staged batches" in
``scripts/_lib.lua``):

1. ``batch_open`` reserves its job numbers ``[lo, hi]`` and records it, with a deadline, in the
   global ``{prefix}:batches`` (one call on the global tag);
2. ``jobs_stage`` writes it a slice at a time: each job where it belongs, except its ready
   entries, which wait in the stage's own levels; every reader (claim, listing, count, a read
   by id, cancel and retry by id) hides the range while the queue's ``stages`` hash lists it.
   max_pending counts the staged jobs, so a batch is refused at the slice that would take its
   queue over the cap, and an idempotency key a staged job took makes other inserters of that
   key wait for the batch's outcome (``busy``), as a row lock would in SQL;
3. the batch is committed and published: ``jobs_publish`` renames the stage's levels into
   place (or beside a level that holds jobs already, as a segment ``ready_merge`` merges
   afterwards) and drops the range: O(priority levels) per queue, whatever the batch's size. A
   single node commits and publishes every queue in that one script; Cluster commits first
   (``batch_decide``, on the record), then publishes queue by queue, each call safe to repeat.

A producer that fails before the commit deletes what it staged (``stage_abort``); one that died
leaves its batch past its deadline, and every worker's reaper (:func:`reap`, from
``leases_reap``) takes such a batch over: aborts and deletes it if it was still staging,
publishes the rest of it if it was committed. Nothing of an abandoned batch was ever visible.

On Cluster the publication of a multi-queue batch is queue by queue: once committed, each
queue's part appears when its call lands (milliseconds apart, the reaper finishing what a dead
producer left), and a step whose inputs completed in a queue published first is released into
its queue before that queue's part appears (the batch is committed: it lands).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError, JobyardError, QueueFull
from ..base import DEFAULT_MAX_ATTEMPTS, Inserted, NewJob
from ._core import dumps
from .keys import job_id as make_id

if TYPE_CHECKING:
    from ._core import Core

log = logging.getLogger("jobyard.redis")

# Jobs per script. 1000 plain jobs took 12-55 ms of Redis time here (p50 to max, a loaded
# machine), 1000 workflow steps 22-67 ms: 500, with a workflow step counting as two, keeps a
# script near 10 ms and under 30 ms, for 5-10% more Redis time in all than one script.
SLICE_JOBS = 500
SLICE_BYTES = 1_000_000  # characters of rows per script (decoding and HSET scale with them)
STAGE_TTL = 30.0  # seconds a staging batch may go unrenewed before the reaper aborts it
RENEW_EVERY = 5.0  # seconds between a producer's renewals of its batch's deadline
TOMBSTONE_TTL = 86400  # seconds an aborted stage refuses a slice that arrives late
ABORT_BATCH = 1000  # staged jobs deleted per call
MERGE_BATCH = 2000  # segment entries merged into their level per call
REAP_BATCHES = 10  # batches past their deadline one reaper call takes over
BUSY_WAIT = 2 * STAGE_TTL + 10.0  # seconds an insert waits for a staged batch holding its key


class BatchAbandoned(JobyardError):
    """A staged batch was aborted before it was complete (its producer fell silent past its
    deadline and a reaper deleted it): nothing of it was inserted."""


def links(jobs: Sequence[NewJob], ids: Sequence[str] | None = None) -> list[list[Any]]:
    """The workflow columns of each insert row (none for a plain job): ``[workflow_id, inputs,
    dependents]``. Without ``ids`` (one script numbers the jobs) the inputs are 1-based batch
    positions and the script derives the dependents; with the batch's ``ids`` (numbers
    reserved first) both are ids joined by commas (a join of 100,000 inputs is one string to
    decode, not 100,000: 60 ms of Redis time less)."""
    out: list[list[Any]] = [[] for _ in jobs]
    if not any(j.after or j.workflow_id is not None for j in jobs):
        return out
    dependents: list[list[str]] = [[] for _ in jobs]
    for i, j in enumerate(jobs):
        for p in j.after:
            if not 0 <= p < i:
                raise ValueError(f"job {i} of the batch waits on position {p}: not before it")
            if ids is not None:
                dependents[p].append(ids[i])
    for i, j in enumerate(jobs):
        if j.after or j.workflow_id is not None or dependents[i]:
            if ids is None:
                out[i] = [j.workflow_id, [p + 1 for p in j.after], []]
            else:
                inputs = ",".join(ids[p] for p in j.after)
                out[i] = [j.workflow_id, inputs, ",".join(dependents[i])]
    return out


def rows(jobs: Sequence[NewJob], links: Sequence[list[Any]], queues: list[str]) -> str:
    """The JSON rows of an insert script (``jobs_insert.lua``'s ARGV[8])."""
    group = {q: g for g, q in enumerate(queues, 1)}
    return dumps(
        [
            [
                group[j.queue],
                j.name,
                j.payload,
                int(j.priority),
                float(j.delay),
                None if j.run_at is None else float(j.run_at),
                j.max_attempts,
                j.backoff,
                None if j.timeout is None else float(j.timeout),
                float(j.lease),
                j.delivery,
                j.idempotency_key,
                j.parent_id,
                *(link if j.on_conflict == "keep" and j.key is None else _tail(j, link)),
            ]
            for j, link in zip(jobs, links, strict=True)
        ]
    )


def _tail(job: NewJob, link: list[Any]) -> list[Any]:
    """The row's columns 14 to 18 for a job with ``on_conflict="replace"`` or a limit key: the
    workflow columns (null for a plain job), then 17: 1 = replace a pending holder's payload,
    2 = its payload and run_at (the job sets one), null = keep; 18: the limit key."""
    replace = None
    if job.on_conflict == "replace":
        replace = 2 if job.run_at is not None or job.delay != 0 else 1
    return [*(link or [None, None, None]), replace, job.key]


def hidden(ranges: Sequence[str], number: str) -> bool:
    """Whether job ``number`` falls in one of a queue's staged ranges (``"lo hi"`` values of its
    ``stages`` hash): a job of a batch still being written, which no reader may see."""
    n = int(number)
    for r in ranges:
        lo, _, hi = r.partition(" ")
        if lo.isdigit() and hi.isdigit() and int(lo) <= n <= int(hi):
            return True
    return False


def _size(job: NewJob) -> int:
    """About how many characters a job's row takes (its links are ids of about 16)."""
    return 200 + len(job.payload) + 16 * len(job.after)


def _units(job: NewJob) -> int:
    """A job's share of :data:`SLICE_JOBS`: a workflow step writes twice what a job does."""
    return 2 if job.workflow_id is not None or job.after else 1


def needs_stage(core: Core, jobs: Sequence[NewJob], queues: Sequence[str]) -> bool:
    """Whether a batch is staged rather than sent as one script."""
    if core.cluster and len(queues) > 1:
        return True
    if len(jobs) > SLICE_JOBS // 2 and sum(_units(j) for j in jobs) > SLICE_JOBS:
        return True
    return len(jobs) > 1 and sum(_size(j) for j in jobs) > SLICE_BYTES


def _slices(core: Core, jobs: Sequence[NewJob], queues: Sequence[str]) -> Iterator[list[int]]:
    """The batch positions of each slice, in batch order (on Cluster each slice is of one
    queue, in the batch order of that queue's jobs): the first of a repeated idempotency key
    is always written first."""
    orders = [[i for i, j in enumerate(jobs) if j.queue == q] for q in queues]
    for order in orders if core.cluster else [list(range(len(jobs)))]:
        part: list[int] = []
        size = units = 0
        for i in order:
            full = units + _units(jobs[i]) > SLICE_JOBS or size + _size(jobs[i]) > SLICE_BYTES
            if part and full:
                yield part
                part, size, units = [], 0, 0
            part.append(i)
            size += _size(jobs[i])
            units += _units(jobs[i])
        if part:
            yield part


def wait_busy(core: Core, queue: str, key: str, since: float) -> None:
    """An idempotency key of ``queue`` is held by a batch still being written: wait a little
    (reaping batches whose producer died, which frees their keys), or give up after
    :data:`BUSY_WAIT` seconds."""
    waited = time.monotonic() - since
    if waited > BUSY_WAIT:
        raise JobyardError(
            f"idempotency key {key!r} of queue {queue!r} is held by a batch still being written "
            f"after {waited:.0f}s; nothing was inserted"
        )
    reap(core)
    time.sleep(min(0.02 + waited / 10, 0.5))


ONE = "jobs_insert_one"


def insert_one(core: Core, job: NewJob) -> Inserted | None:
    """One plain job on a single node, through the lean script (sent once: a repeat would
    insert it twice); None when the script handed it to the general one (its queue is fair, or
    fed with a time to live), having written nothing."""
    keys = core.keys
    args = [core.now(), job.queue, str(DEFAULT_MAX_ATTEMPTS), rows([job], [[]], [job.queue])]
    reply = core.run_once(
        ONE, [keys.config(job.queue), keys.seq, keys.queues, keys.wake(job.queue)], args
    )
    if isinstance(reply, list):
        if reply[0] == "full":
            raise QueueFull(job.queue, int(reply[1]))
        core.not_lean(ONE, job.queue)
        return None
    return Inserted(make_id(job.queue, str(reply)), True)


def insert(
    core: Core, jobs: list[NewJob], queues: list[str], ttl_ms: str, once: bool
) -> list[Inserted]:
    """Insert ``jobs`` (of ``queues``, in first-appearance order) all or nothing: one script,
    or staged (:func:`needs_stage`). ``once``: the batch is not safe to send twice (see
    ``_core.py``)."""
    if len(jobs) == 1 and not ttl_ms and jobs[0].plain and core.lean(ONE, queues[0]):
        got = insert_one(core, jobs[0])
        if got is not None:
            return [got]
    if needs_stage(core, jobs, queues):
        if any(j.on_conflict == "replace" for j in jobs):
            # A staged batch is hidden until published, but a replaced holder is not: its
            # new arguments would show (and stay) before the batch is sure to go in.
            raise ConfigurationError(
                f"on_conflict='replace' needs a batch Redis writes in one script (at most "
                f"{SLICE_JOBS} jobs, about {SLICE_BYTES // 1_000_000} MB, and on Redis Cluster "
                f"one queue); this batch of {len(jobs)} jobs spans {len(queues)} queue(s): "
                "enqueue it in smaller batches"
            )
        return _Batch.open(core, jobs, queues).insert(jobs, ttl_ms)
    numbers = ""
    if core.cluster:  # the insert script cannot reach the global sequence: reserve first
        first = int(
            core.run_once("seq_take", [core.keys.seq, core.keys.queues], [str(len(jobs)), *queues])
        )
        numbers = dumps([first + i for i in range(len(jobs))])
    keys = core.group_keys(queues)
    if not numbers:  # one node: the global keys ride along
        keys += [core.keys.seq, core.keys.queues, *(core.keys.wake(q) for q in queues)]
    args = [
        core.now(),
        dumps(queues),
        numbers,
        "" if numbers else "1",
        ttl_ms,
        "",
        str(DEFAULT_MAX_ATTEMPTS),
        rows(jobs, links(jobs), queues),
    ]
    run = core.run_once if once else core.run
    since = time.monotonic()
    while True:
        reply = run("jobs_insert", keys, args)
        if reply[0] != "busy":  # a busy insert wrote nothing: sending it again is safe
            break
        wait_busy(core, reply[1], reply[2], since)
    if reply[0] == "full":
        raise QueueFull(reply[1], int(reply[2]))
    pairs = list(zip(reply[1].split(","), reply[2], strict=True))
    if core.cluster:
        core.wake_after({queues[0]: sum(f != "0" for _, f in pairs)})
    return [
        Inserted(make_id(j.queue, n), f == "1", f == "2")
        for j, (n, f) in zip(jobs, pairs, strict=True)
    ]


class _Batch:
    """One staged batch: its id, queues and reserved numbers, and each of its steps."""

    def __init__(self, core: Core, batch_id: str, queues: list[str], lo: int, hi: int) -> None:
        self.core = core
        self.id = batch_id
        self.queues = queues
        self.lo, self.hi = lo, hi
        self.now = ""  # the batch's now, from batch_open: every slice stamps the same instant
        self._renewed = time.monotonic()

    @classmethod
    def open(cls, core: Core, jobs: Sequence[NewJob], queues: list[str]) -> _Batch:
        """Reserve the batch's numbers and record it (sent once: a repeat reserves again)."""
        batch_id = secrets.token_hex(8)
        keys = [core.keys.seq, core.keys.queues, core.keys.batches, core.keys.batch(batch_id)]
        args = [core.now(), str(len(jobs)), repr(STAGE_TTL), batch_id, dumps(queues)]
        first, now = core.run_once("batch_open", keys, args)
        batch = cls(core, batch_id, queues, int(first), int(first) + len(jobs) - 1)
        batch.now = now
        return batch

    # the producer's steps ----------------------------------------------------------------------

    def insert(self, jobs: list[NewJob], ttl_ms: str) -> list[Inserted]:
        """Stage every slice, then commit and publish; on any failure before the commit,
        delete what was staged (or leave it to the reaper) and raise."""
        ids = [make_id(j.queue, str(self.lo + i)) for i, j in enumerate(jobs)]
        batch_links = links(jobs, ids)
        out: list[Inserted] = [Inserted(i, True) for i in ids]
        try:
            for part in _slices(self.core, jobs, self.queues):
                self._renew_if_due()
                for i, got in zip(part, self._stage(jobs, batch_links, part), strict=True):
                    out[i] = got
            due, segments = self._commit(ttl_ms)
        except BaseException:
            if self._abandon():
                raise
            due, segments = self._committed_anyway(ttl_ms)
        self._finish(due, segments)
        return out

    def _stage(self, jobs: list[NewJob], batch_links: list[list[Any]], part: list[int]) -> Any:
        """Write the jobs at ``part`` (batch positions), hidden; their Inserted. Safe to send
        again (a job already written is not written twice), so it is retried through outages."""
        names = list(dict.fromkeys(jobs[i].queue for i in part))
        args = [
            self.now,
            dumps(names),
            dumps([self.lo + i for i in part]),
            self.id,
            str(self.lo),
            str(self.hi),
            str(DEFAULT_MAX_ATTEMPTS),
            rows([jobs[i] for i in part], [batch_links[i] for i in part], names),
        ]
        since = time.monotonic()
        while True:
            reply = self.core.run("jobs_stage", self.core.group_keys(names), args)
            if reply[0] != "busy":
                break
            self._renew_if_due()
            wait_busy(self.core, reply[1], reply[2], since)
        if reply[0] == "gone":
            raise self._gone()
        if reply[0] == "full":
            raise QueueFull(reply[1], int(reply[2]))
        flags = (f == "1" for f in reply[2])
        return [
            Inserted(make_id(jobs[i].queue, n), c)
            for i, n, c in zip(part, reply[1].split(","), flags, strict=True)
        ]

    def _renew_if_due(self) -> None:
        if time.monotonic() - self._renewed < RENEW_EVERY:
            return
        if self._decide("staging") != "ok":
            raise self._gone()
        self._renewed = time.monotonic()

    def _decide(self, state: str) -> str:
        keys = [self.core.keys.batches, self.core.keys.batch(self.id)]
        args = [self.core.now(), self.id, state, repr(STAGE_TTL)]
        return str(self.core.run("batch_decide", keys, args))

    def _gone(self) -> BatchAbandoned:
        return BatchAbandoned(
            f"a batch of {self.hi - self.lo + 1} jobs was abandoned before it was complete (its "
            f"writer was silent past its {STAGE_TTL:.0f} s deadline, and a reaper deleted it); "
            "nothing of it was inserted"
        )

    def _commit(self, ttl_ms: str) -> tuple[dict[str, int], list[str]]:
        """Make the batch visible: one script on a single node; on Cluster the commit, then
        every queue's part. The jobs made due, by queue, and the queues left with segments."""
        if not self.core.cluster:
            keys = [
                *self.core.group_keys(self.queues),
                self.core.keys.batches,
                self.core.keys.batch(self.id),
                *(self.core.keys.wake(q) for q in self.queues),
            ]
            args = [self.core.now(), self.id, "1", ttl_ms, repr(STAGE_TTL)]
            reply = self.core.run("jobs_publish", keys, args)
            if reply[0] == "gone":
                raise self._gone()
            # the script woke the workers; segments: merge every queue (a no-op where none)
            return {}, list(self.queues) if int(reply[1]) else []
        state = self._decide("committed")
        if state != "ok":
            raise self._gone()
        return self.publish(ttl_ms)

    def publish(self, ttl_ms: str) -> tuple[dict[str, int], list[str]]:
        """Publish each queue's part of a committed batch (each call safe to repeat)."""
        due: dict[str, int] = {}
        segmented = []
        for q in self.queues:
            reply = self.core.run(
                "jobs_publish", self.core.group_keys([q]), [self.core.now(), self.id, "", ttl_ms]
            )
            due[q] = int(reply[2])
            if int(reply[1]):
                segmented.append(q)
        return due, segmented

    def _abandon(self) -> bool:
        """After a failure before the commit: abort the batch and delete what it staged. False
        if it turned out committed (a commit whose reply was lost): it lands after all. A
        failure here leaves the batch to the reaper, past its deadline."""
        try:
            state = self._decide("aborting")
            if state in ("committed", "published"):
                return False
            if state == "missing" and not self._aborted():
                return False  # published and closed (a single node's commit, reply lost)
            self.clean()
        except Exception as exc:  # noqa: BLE001 - past its deadline, the reaper finishes it
            log.warning(
                "redis: batch %s left to the reaper (%s: %s)", self.id, type(exc).__name__, exc
            )
        return True

    def _aborted(self) -> bool:
        """Whether a reaper aborted the batch (its stages are tombstones) rather than closed
        it after its publication."""
        q = self.queues[0]
        key = f"{self.core.keys.tag(q)}:stage:{self.id}"
        return bool(self.core.call(lambda: self.core.client.hget(key, "state")) == "aborted")

    def _committed_anyway(self, ttl_ms: str) -> tuple[dict[str, int], list[str]]:
        """Finish publishing a batch found committed after a failure; then merge every queue
        (a queue published before the failure may have a segment: a no-op where none)."""
        due = self.publish(ttl_ms)[0] if self.core.cluster else {}
        return due, list(self.queues)

    def _finish(self, due: dict[str, int], segmented: list[str]) -> None:
        """After the batch is visible: merge its segments and forget it (wake the workers on
        Cluster). A failure here is logged, not raised: the batch is in; the reaper finishes."""
        try:
            self.merge(segmented)
            self.close(due)
        except Exception as exc:  # noqa: BLE001 - the batch is in; the reaper tidies
            log.warning(
                "redis: batch %s is published; its tidying is left to the reaper (%s: %s)",
                self.id,
                type(exc).__name__,
                exc,
            )

    # steps the reaper shares -----------------------------------------------------------------

    def clean(self) -> None:
        """Delete what an aborted batch staged, a bounded number of jobs per call."""
        args = [self.id, str(self.lo), str(self.hi), str(ABORT_BATCH), str(TOMBSTONE_TTL)]
        for names in self.core.slices(self.queues):
            while int(self.core.run("stage_abort", self.core.group_keys(names), args)):
                pass
        self.close({})

    def merge(self, queues: list[str]) -> None:
        for q in queues:
            keys = self.core.group_keys([q])
            while int(self.core.run("ready_merge", keys, [str(MERGE_BATCH), self.id])):
                pass

    def close(self, due: dict[str, int]) -> None:
        woke = {q: n for q, n in due.items() if n > 0}
        keys = [
            self.core.keys.batches,
            self.core.keys.batch(self.id),
            *(self.core.keys.wake(q) for q in woke),
        ]
        self.core.run("batch_close", keys, [self.id, *(str(n) for n in woke.values())])


def reap(core: Core) -> int:
    """Take over the batches whose producer stopped before finishing them (past their
    deadline): delete one still staging, publish the rest of one committed, merge the segments
    of one published. Every step is safe to repeat, so reapers may race. The batches handled."""
    keys = [core.keys.batches]
    args = [core.now(), str(REAP_BATCHES), core.keys.batch_prefix(), repr(STAGE_TTL)]
    taken = core.run("batches_reap", keys, args)
    for batch_id, state, queues, lo, hi in taken:
        batch = _Batch(core, batch_id, json.loads(queues), int(lo), int(hi))
        if state == "aborting":
            log.warning("redis: deleting batch %s, abandoned by its producer", batch_id)
            batch.clean()
        elif state == "committed":
            due, _ = batch.publish("")
            batch.merge(batch.queues)  # parts published before may have segments too
            batch.close(due)
        else:  # published: its segments are left to merge
            batch.merge(batch.queues)
            batch.close({})
    return len(taken)
