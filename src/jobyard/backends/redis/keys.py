"""Every Redis key jobyard uses, and the form of a job id.

Layout (``P`` is the URL's ``prefix=``, default ``jobyard``)::

    {P}:seq                  string  job numbers, INCRBY (one sequence for every queue)
    {P}:queues               set     every queue that was ever written to or configured
    {P}:wake:<queue>         list    wake tokens: inserts LPUSH, waiting workers BLPOP
    {P}:wakeworker:<id>      list    one worker's own wake token (jobs_wake, when it stops)
    {P}:workers              zset    worker id -> last_seen
    {P}:workers:info         hash    worker id -> WorkerInfo as JSON
    {P}:schedules            hash    schedule name -> its job's queue (where its hash lives)
    {P}:batches              zset    batches written in several calls, score the deadline
                                     past which the reaper takes one over (_insert.py)
    {P}:batch:<b>            hash    one such batch: state (staging, committed, aborting,
                                     published), queues (JSON), lo and hi (its job numbers)

    {P:<queue>}:config       hash    the queue's settings
    {P:<queue>}:prios        zset    priority levels that hold pending jobs
    {P:<queue>}:ready:<prio> zset    pending jobs of one priority, score run_at, member the
                                     zero-padded job number (ties fall back to enqueue order)
    {P:<queue>}:claims       zset    running jobs, score lease expiry: the watchdog's set
    {P:<queue>}:<state>      zset    pending/completed/failed/cancelled, score job number
    {P:<queue>}:done:<state> zset    completed/failed/cancelled, score finished_at
    {P:<queue>}:idem         hash    idempotency key -> number of the job holding it
    {P:<queue>}:ttl          string  the queue's time to live (ms) when fed with one
    {P:<queue>}:alive        string  expires ttl ms after the last push
    {P:<queue>}:waiting      zset    workflow steps waiting for their inputs, score job number
    {P:<queue>}:owed         hash    Cluster: completed job number -> its dependents, for a
                                     release of a dependent in another queue not paid yet
                                     (jobs_ack, leases_reap)
    {P:<queue>}:workflows    hash    job number -> workflow id, for jobs of a workflow
    {P:<queue>}:wf:<id>      zset    the queue's jobs of workflow <id>, score job number
    {P:<queue>}:inputs:<n>   set     Cluster: ids of the inputs already counted for waiting
                                     job <n> (an owed release is paid once however often sent)
    {P:<queue>}:stages       hash    batch id -> "lo hi": job numbers of batches still being
                                     written into the queue, hidden from every reader
    {P:<queue>}:stage:<b>    hash    a batch's stage in the queue: state (open; aborted, then
                                     expiring), a field level:<p> per ready level it holds
    {P:<queue>}:stage:<b>:ready:<p>  zset  the stage's ready entries, renamed into place
                                     when the batch is published
    {P:<queue>}:ready:<p>@<b> zset   a published stage's ready entries beside a level that
                                     held jobs already (a segment), merged into it afterwards
    {P:<queue>}:job:<n>      hash    one job
    {P:<queue>}:schedule:<s> hash    a recurring job of this queue (cron, job, next/last run)

Everything of one queue shares the hash tag ``{P:<queue>}``, so on Redis Cluster a queue lives on
one slot and each state change is one Lua script on one node. The global keys share the tag
``{P}``; a Cluster script never mixes the two (the backend makes a second call instead).

A job id is ``<queue>:<n>``: the queue tells which slot holds the job (no lookup, no index to keep
in step), and ``n`` comes from the one global sequence, so ids of every queue are ordered by
enqueue time. Queue names may hold ``:``; the number never does, so the last ``:`` splits them.
"""

from __future__ import annotations

import re

from ...errors import ConfigurationError

QUEUE_KEY_SUFFIXES: tuple[str, ...] = (
    "config",
    "prios",
    "claims",
    "pending",
    "completed",
    "failed",
    "cancelled",
    "done:completed",
    "done:failed",
    "done:cancelled",
    "idem",
    "ttl",
    "alive",
    "waiting",
    "owed",
    "workflows",
)
"""The keys of one queue, in the order every job script receives them (see ``_lib.lua``)."""

PREFIX_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}\Z")
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}\Z")  # job.NAME_RE: no braces, no spaces
JOB_ID_RE = re.compile(r"^([A-Za-z0-9_.:-]{1,100}):([1-9][0-9]{0,17})\Z")


class Keys:
    """Key names for one prefix."""

    __slots__ = ("batches", "prefix", "queues", "schedules", "seq", "workers", "workers_info")

    def __init__(self, prefix: str) -> None:
        if not PREFIX_RE.match(prefix):
            raise ConfigurationError(
                f"invalid Redis key prefix {prefix!r}: use 1 to 100 of A-Z a-z 0-9 _ . : -"
            )
        self.prefix = prefix
        g = "{" + prefix + "}"
        self.seq = f"{g}:seq"
        self.queues = f"{g}:queues"
        self.workers = f"{g}:workers"
        self.workers_info = f"{g}:workers:info"
        self.schedules = f"{g}:schedules"
        self.batches = f"{g}:batches"

    def batch(self, batch_id: str) -> str:
        """The record of a batch written in several calls (on the global tag)."""
        return self.batch_prefix() + batch_id

    def batch_prefix(self) -> str:
        """What every batch record's key starts with."""
        return "{" + self.prefix + "}:batch:"

    def stages(self, queue: str) -> str:
        """The hash of the ranges of job numbers a queue hides (batches still staged)."""
        return f"{self.tag(queue)}:stages"

    def wake(self, queue: str) -> str:
        """The wake list of a queue (on the global tag, so one BLPOP covers many queues)."""
        return "{" + self.prefix + "}:wake:" + queue

    def worker_wake(self, worker_id: str) -> str:
        """A worker's own wake list, read with its queues' by its waiting claim: ``jobs_wake``
        pushes on it when the worker stops (on the global tag, like the queues' lists)."""
        return "{" + self.prefix + "}:wakeworker:" + worker_id

    def tag(self, queue: str) -> str:
        """The hash tag every key of ``queue`` carries."""
        return "{" + self.prefix + ":" + queue + "}"

    def config(self, queue: str) -> str:
        """The settings hash of a queue, the first of its keys (what a lean script declares)."""
        return self.tag(queue) + ":" + QUEUE_KEY_SUFFIXES[0]

    def queue(self, queue: str) -> list[str]:
        """The 16 keys of a queue, in ``QUEUE_KEY_SUFFIXES`` order."""
        base = self.tag(queue) + ":"
        return [base + suffix for suffix in QUEUE_KEY_SUFFIXES]

    def job(self, queue: str, number: str) -> str:
        """The hash of one job."""
        return f"{self.tag(queue)}:job:{number}"

    def job_limits(self, queue: str) -> str:
        """The hash of a queue's job limits (job name -> its limits, ``limits_sync``), read by
        the claim's gate."""
        return f"{self.tag(queue)}:joblimits"

    def owed(self, queue: str) -> str:
        """The hash of completed jobs of ``queue`` (number -> dependents) whose release of a
        dependent is owed."""
        return f"{self.tag(queue)}:owed"

    def schedule(self, queue: str, name: str) -> str:
        """The hash of one schedule, on its job's queue so a tick fires in one script."""
        return f"{self.tag(queue)}:schedule:{name}"

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this prefix (global and per queue)."""
        return "{" + _glob_escape(self.prefix) + "[:}]*"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def job_id(queue: str, number: str) -> str:
    """The public id of job ``number`` of ``queue``."""
    return f"{queue}:{number}"


def parse_job_id(value: str) -> tuple[str, str] | None:
    """``(queue, number)`` of a job id, or ``None`` if it is not one of ours."""
    if not isinstance(value, str):
        return None
    m = JOB_ID_RE.fullmatch(value)  # not match: "$" would let "q:1\n" through
    return None if m is None else (m.group(1), m.group(2))


# Consumers of lists and streams written by other programs use the user's own key names; the
# keys they add sit next to them with a suffix, as seed 003 names them.


def processing_key(key: str) -> str:
    """Where a reliable list consumer keeps entries while a handler runs."""
    return key + ".processing"


def claims_key(key: str) -> str:
    """A reliable list's recovery set: entry -> time taken (ms)."""
    return key + ".claims"


def dead_key(key: str) -> str:
    """Where dropped and undecodable entries go, so none is lost silently."""
    return key + ".dead"


def deliveries_key(key: str) -> str:
    """A list's delivery counts (entry -> deliveries without an ack), with ``max_deliveries``."""
    return key + ".deliveries"


def reasons_key(dead: str) -> str:
    """Why each entry of a list's dead list is there (entry -> reason)."""
    return dead + ".reasons"
