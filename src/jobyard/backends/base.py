"""The Backend protocol: the one contract every store implements.

A backend only moves state. It knows nothing of handlers, retries or backoff: the worker decides
what happens to a job and tells the backend in a typed parameter object; the backend makes the
change atomically and fenced by the claim's lease token.

Time: every method that needs "now" reads ``self.clock.now()``, which is ``None`` unless a test
froze the clock, and passes it into its statement as ``coalesce(:now, <store clock>)``. Delays
travel as seconds relative to that "now", never as host wall-clock instants.

Every timestamp crossing this interface is epoch seconds (float, UTC).

``tests/contract/`` is the executable form of this file: a backend is done when it passes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..clock import Clock
from ..errors import ConfigurationError
from ..events import Events

Delivery = Literal["at_least_once", "at_most_once"]
CatchUp = Literal["latest", "all", "none"]
StoreKind = Literal["memory", "sqlite", "postgres", "redis", "redis_cluster"]
OutcomeKind = Literal["completed", "retry", "failed", "release", "cancelled"]
# What an insert does with a job whose idempotency key a pending job already holds: return that
# job as it is ("keep", seed 001), or give it this job's arguments (and run_at, when this job
# sets one) and return it ("replace": a debounce). See :class:`NewJob`.
OnConflict = Literal["keep", "replace"]
ON_CONFLICTS: tuple[str, ...] = ("keep", "replace")

# ``waiting``: a workflow step whose inputs (``NewJob.after``) have not all completed yet; the
# store moves it to ``pending`` when the last of them completes (see ``jobs_ack``).
STATUSES: tuple[str, ...] = ("waiting", "pending", "running", "completed", "failed", "cancelled")
FINISHED: tuple[str, ...] = ("completed", "failed", "cancelled")  # a job never leaves these
ACTIVE: tuple[str, ...] = ("pending", "running")  # where an idempotency key is held
REDRIVABLE: tuple[str, ...] = ("failed", "cancelled")  # what retry(id) moves back to pending
CANCELLABLE: tuple[str, ...] = ("waiting", "pending")  # what cancel(id) finishes at once
QUEUED: tuple[str, ...] = ("waiting", "pending")  # accepted, not started: what max_pending caps
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_LEASE = 30.0
DEFAULT_FORGET_AFTER = 60.0  # seconds of silence after which a worker counts as gone
# Bounds every store can hold and every listing can show (a datetime ends in year 9999):
# checked when a job is made (NewJob), so no store ever receives a value outside them.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # PostgreSQL's integer
MAX_DELAY = 100 * 365 * 86400.0  # 100 years, in seconds
MAX_RUN_AT = 253402214400.0  # 9999-12-31T00:00:00Z

LEASE_LOST_ERROR = "lease expired: the worker running this job stopped renewing it"
AT_MOST_ONCE_LOST_ERROR = "worker lost during an at_most_once job: not run again"
# A running job someone asked to cancel whose worker stopped renewing: cancelled, not run again.
CANCEL_LOST_ERROR = "cancelled on request: the worker running it stopped renewing its lease"
MAX_IDEMPOTENCY_KEY = 200  # characters of an idempotency key (checked by JobOptions)
MAX_CANCELLED_BY = 200  # characters of who asked a cancellation (``app.cancel(id, by=...)``)
MAX_PROGRESS_NOTE = 200  # characters of a progress note (``current_job().progress``)
MAX_LIMIT_KEY = 200  # characters of a limit key (``.options(key=...)``, checked by JobOptions)
# The throughput history (:meth:`Backend.throughput_get`): one bucket per queue and minute,
# kept for a day and an hour (a day's chart is always whole), older ones pruned by
# ``jobs_expire`` (Redis: by a key TTL).
THROUGHPUT_STEP = 60
THROUGHPUT_KEEP = 25 * 3600


# --- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the store holds it (``app.get`` turns it into a :class:`jobyard.Job`)."""

    id: str
    name: str
    queue: str
    payload: str  # JSON text: {"args": [...], "kwargs": {...}}; may be corrupt, never trusted
    status: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: float
    created_at: float
    started_at: float | None
    finished_at: float | None
    worker_id: str | None
    result: str | None  # JSON text
    error: str | None
    parent_id: str | None
    idempotency_key: str | None
    delivery: Delivery = "at_least_once"
    # A cancellation asked of the job (``app.cancel``): when, and by whom (free text, may be
    # None). Set at once on a pending job (then cancelled); on a running one it is a request
    # the worker honours at its next heartbeat.
    cancel_requested_at: float | None = None
    cancelled_by: str | None = None
    # The handler's latest ``current_job().progress``, as of the worker's last renewal.
    progress: float | None = None
    progress_note: str | None = None
    # Workflows (chains and groups): the workflow the job belongs to, the jobs whose completion
    # it waits for (its inputs, in order) and the jobs waiting for it.
    workflow_id: str | None = None
    depends_on: tuple[str, ...] = ()
    dependents: tuple[str, ...] = ()
    key: str | None = None  # the limit key (NewJob.key)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a claim hands a worker: enough to run the job and to settle it."""

    id: str
    name: str
    queue: str
    payload: str
    attempts: int  # including this claim
    max_attempts: int
    backoff: str | None  # Backoff.to_json() of the job or its queue; None: the default policy
    timeout: float | None
    lease: float
    token: str  # the fencing token of this claim
    delivery: Delivery
    parent_id: str | None
    # When the job became due (its run_at, by the store's clock, epoch seconds): what the
    # worker's enqueue-to-start latency is measured from. None when the store does not say.
    run_at: float | None = None


# --- flow control (limits enforced inside jobs_claim) ------------------------------------------
#
# The parsing, bounds and rules of who may declare what live in ``jobyard.limits`` (the core);
# here are the types a store receives and the arithmetic every store applies alike.

RATE_MAX_COUNT = 10**9  # starts per period
RATE_MIN_PER, RATE_MAX_PER = 1.0, 7 * 86400.0  # seconds of a rate's period
MAX_KEY_CONCURRENCY = 2**31 - 1
# A burst of a tenth of a second's starts: "100/s" lets 10 start at once, then one every 10 ms.
RATE_BURST_WINDOW = 0.1
# Jobs a key takes per round in a fair queue (QueueLimits.fair): the round of a job whose turn is
# t (turns count from 1 per key) is (t - 1) // FAIR_TURN. Every store writes this number into
# its claim order (SQL: the claim index's expression; Lua: the turns zset's score); the contract
# suite checks each against it.
FAIR_TURN = 4


def fair_round(turn: int) -> int:
    """The round of a job whose turn in a fair queue is ``turn`` (0 outside fair queues: round
    0, the plain order)."""
    return max(turn - 1, 0) // FAIR_TURN


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts per ``per`` seconds across every worker, smoothed: a GCRA
    (generic cell rate algorithm, a token bucket kept as one instant) whose state is one float
    per bucket, ``tat``, the "theoretical arrival time" (absent: as if ``tat <= now``).

    With ``T = per / count`` (:attr:`interval`) and ``B`` = :attr:`burst`, a claim at ``now``
    sees ``s = max(tat, now)`` and may start :meth:`admits` ``= max(0, floor((now - s) / T +
    B))`` jobs; starting ``k`` of them stores ``tat = s + k * T`` (:meth:`taken`). A held back
    start is admitted again from :meth:`opens_at` ``= s - (B - 1) * T``. The bound this gives,
    over any window of ``w`` seconds: at most ``w / T + B`` starts. A bucket whose ``tat`` is
    past is the same as no bucket: the store may forget it (``store_tidy``)."""

    count: int
    per: float = 1.0
    burst: int = 0  # 0: RATE_BURST_WINDOW seconds' worth of starts, at least 1

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or not 1 <= self.count <= RATE_MAX_COUNT:
            raise ConfigurationError(
                f"a rate's count must be a whole number from 1 to {RATE_MAX_COUNT}, "
                f"got {self.count!r}"
            )
        if not _is_number(self.per) or not RATE_MIN_PER <= self.per <= RATE_MAX_PER:
            raise ConfigurationError(
                f"a rate's period must be from {RATE_MIN_PER:.0f} s to {RATE_MAX_PER:.0f} s "
                f"(7 days), got {self.per!r}"
            )
        object.__setattr__(self, "per", float(self.per))
        if not self.burst:
            per_second = self.count / self.per
            object.__setattr__(self, "burst", max(1, int(per_second * RATE_BURST_WINDOW)))
        if not isinstance(self.burst, int) or not 1 <= self.burst <= self.count:
            raise ConfigurationError(
                f"a rate's burst must be a whole number from 1 to its count, got {self.burst!r}"
            )

    @property
    def interval(self) -> float:
        """Seconds between two starts at the steady rate (``T``)."""
        return self.per / self.count

    def admits(self, tat: float | None, now: float) -> int:
        """How many starts the bucket allows at ``now`` (``tat`` None: an empty bucket)."""
        s = now if tat is None else max(tat, now)
        return max(0, int((now - s) / self.interval + self.burst + 1e-9))

    def taken(self, tat: float | None, now: float, k: int) -> float:
        """The bucket's ``tat`` after ``k`` starts at ``now``."""
        return (now if tat is None else max(tat, now)) + k * self.interval

    def opens_at(self, tat: float | None, now: float) -> float:
        """When the bucket next admits a start (``now`` if it does now)."""
        s = now if tat is None else max(tat, now)
        return max(now, s - (self.burst - 1) * self.interval)

    def text(self) -> str:
        """As a user writes it: ``100/s``, ``600/m``, ``5/10s``."""
        units = {1.0: "s", 60.0: "m", 3600.0: "h", 86400.0: "d"}
        if self.per in units:
            return f"{self.count}/{units[self.per]}"
        return f"{self.count}/{self.per:g}s"


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Limits on starts, held by ``jobs_claim`` across every worker of every host: of a queue
    (:attr:`QueueConfig.limits`), or of one job name in one queue (:class:`JobLimits`).

    - ``rate``: starts of the scope's jobs (:class:`Rate`; one bucket per scope).
    - ``key_concurrency``: at most that many ``running`` jobs of the scope with the same key
      (``NewJob.key``); jobs without a key are not concerned. Counted from the running jobs
      themselves, so a lapsed lease holds its key slot until ``leases_reap`` rescues the job.
    - ``key_rate``: starts of the scope's jobs with the same key (one bucket per key).
    - ``fair`` (queues only): the queue's due jobs are taken in turns between keys (round
      robin; jobs without a key take their turns as one more key), up to :data:`FAIR_TURN` of
      a key's jobs per round: a key's jobs enqueued together sit side by side in a store, and a
      claim that takes a few of them at once writes a few places, not one per key.
    """

    rate: Rate | None = None
    key_concurrency: int | None = None
    key_rate: Rate | None = None
    fair: bool = False

    @property
    def keyed(self) -> bool:
        """Whether any of these limits is about keys."""
        return self.key_concurrency is not None or self.key_rate is not None or self.fair

    def __bool__(self) -> bool:
        return self.rate is not None or self.keyed


@dataclass(frozen=True, slots=True)
class JobLimits:
    """The limits ``@app.job(rate_limit=..., key_concurrency=..., key_rate_limit=...)`` declares
    for the jobs named ``name`` in ``queue`` (the queue ``@app.job`` names; the same job sent
    to another queue with ``.options(queue=...)`` is not concerned). Every bucket and every
    key count of a job's limits is per (queue, name): never shared with another job name or
    with the queue's own limits. ``fair`` is never set here (a queue's setting)."""

    queue: str
    name: str
    limits: QueueLimits = field(default_factory=QueueLimits)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Per-queue settings kept in the store."""

    name: str
    max_concurrency: int | None = None  # across every worker of every host; None: unlimited
    max_attempts: int | None = None
    backoff: str | None = None  # Backoff.to_json()
    max_pending: int | None = None
    paused: bool = False
    # Seconds a completed job of this queue is kept after it finished; None: the store's
    # default (Redis: the URL's result_ttl; elsewhere until purged or a worker's --retention).
    retention: float | None = None
    # Flow control of the queue's jobs (see QueueLimits and jobs_claim); max_concurrency above
    # is one more limit of the same gate.
    limits: QueueLimits = field(default_factory=QueueLimits)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker as status shows it."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    last_seen: float


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for one queue."""

    queue: str
    counts: dict[str, int]  # status -> jobs
    completed_last_minute: int
    # The ``run_at`` of the head of the queue's line: per priority level, the first due pending
    # job in claim order (limits aside, the one the next claim of that level takes), the
    # earliest of the levels; None when no pending job is due. Outside fair queues a level's
    # claim order is by run_at, so this is the oldest due job, the one waiting longest since it
    # became due. In a fair queue it is the oldest due job among those whose turn comes first
    # (the lowest round holding due jobs; Redis: its first turn, in enqueue order): a job
    # further back in the line may have been due earlier (a key's job enqueued with a past
    # run_at behind its own backlog), and is not told until its round comes up. That is what
    # "how long jobs wait" watches (the age of the jobs being served now), and it is found by
    # a few index probes per level whatever the backlog, where the exact oldest would take a
    # probe per round, or an index of its own written by every fair insert and claim.
    oldest_pending_at: float | None = None


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """Which history to read: the minutes that end after ``now - since`` (the one under way
    included), of ``queues`` (empty: every queue)."""

    since: float = 3600.0
    queues: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ThroughputMinute:
    """Jobs of ``queue`` that ended in the minute starting at ``minute`` (epoch seconds, a
    multiple of :data:`THROUGHPUT_STEP`): ``completed`` (by an acknowledgement) and ``failed``
    (into the dead letter: by an acknowledgement, or by the reaper when a lapsed lease spent
    the last attempt). Cancelled jobs and retries are not counted."""

    queue: str
    minute: float
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a store tells about itself rather than about a job (:meth:`Backend.store_info`):
    what ``jobyard status`` and the dashboard show beside the queues."""

    kind: StoreKind
    # Seconds the store keeps a completed job after it finished when its queue sets no
    # ``retention`` (Redis: the URL's ``result_ttl``); None: until purged.
    retention: float | None = None
    # The same for failed and cancelled jobs (Redis: the URL's ``failed_ttl``); None: until
    # purged (the dead letter).
    failed_retention: float | None = None
    # What an operator should know about the server, one line each (PostgreSQL: autovacuum off).
    warnings: tuple[str, ...] = ()


# --- parameter objects -----------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_priority(value: object) -> int:
    """A priority within the range every store holds, else ``ConfigurationError``."""
    if not (isinstance(value, int) and not isinstance(value, bool)) or not (
        PRIORITY_MIN <= value <= PRIORITY_MAX
    ):
        raise ConfigurationError(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}, got {value!r}"
        )
    return value


def check_delay(value: object, low: float = 0.0) -> float:
    """A delay of ``low`` to :data:`MAX_DELAY` seconds, else ``ConfigurationError``."""
    if not _is_number(value) or not low <= value <= MAX_DELAY:  # type: ignore[operator]
        raise ConfigurationError(
            f"delay must be a number of seconds from {low:.0f} to {MAX_DELAY:.0f} (100 years), "
            f"got {value!r}"
        )
    return float(value)  # type: ignore[arg-type]


def bounded_delay(value: float) -> float:
    """A retry delay every store can hold: at most :data:`MAX_DELAY`; NaN (an arithmetic
    accident), zero and negatives retry at once."""
    delay = float(value)
    return min(delay, MAX_DELAY) if delay > 0 else 0.0


def check_on_conflict(value: object, idempotency_key: object = "") -> OnConflict:
    """``"keep"`` or ``"replace"`` (the latter only with an idempotency key), else
    ``ConfigurationError``."""
    if value not in ON_CONFLICTS:
        raise ConfigurationError(f"on_conflict must be 'keep' or 'replace', got {value!r}")
    if value == "replace" and idempotency_key is None:
        raise ConfigurationError(
            "on_conflict='replace' needs an idempotency_key: it replaces the pending job "
            "holding that key"
        )
    return value  # type: ignore[return-value]


def check_run_at(value: object) -> float | None:
    """``None`` or an instant from 1970 to the end of year 9998, else ``ConfigurationError``."""
    if value is None:
        return None
    if not _is_number(value) or not 0 <= value <= MAX_RUN_AT:  # type: ignore[operator]
        raise ConfigurationError(
            f"run_at must be an instant from 1970-01-01 to 9999-12-31 UTC, got {value!r}"
        )
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to insert. ``None`` options fall back to the queue's, then to the defaults."""

    name: str
    queue: str
    payload: str
    priority: int = 0
    delay: float = 0.0  # seconds after now
    run_at: float | None = None  # an absolute instant; wins over delay
    max_attempts: int | None = None
    backoff: str | None = None
    timeout: float | None = None
    lease: float = DEFAULT_LEASE
    delivery: Delivery = "at_least_once"
    idempotency_key: str | None = None
    parent_id: str | None = None
    # A workflow step (chains and groups; the core sets these, never a user):
    # ``workflow_id`` groups a workflow's jobs (``JobsListParams.workflow_id`` finds them);
    # ``after`` holds the positions, in the same insert batch and before this job, of the jobs
    # it waits for. A job with ``after`` is inserted ``waiting`` and becomes ``pending`` when
    # each of them has completed (never before its own run_at). Such batches carry no
    # idempotency keys.
    workflow_id: str | None = None
    after: tuple[int, ...] = ()
    # The limit key (``.options(key="customer:42")``): what key_concurrency, key_rate and fair
    # turns count by, within the queue. Checked by JobOptions (1 to MAX_LIMIT_KEY characters).
    key: str | None = None
    # A key held by a pending job: "keep" returns that job unchanged; "replace" gives it this
    # job's payload, and this job's run_at (``run_at``, else now + ``delay``) when this job sets
    # either (a delay of 0 and no run_at leave the holder's run_at as it was); nothing else of
    # the holder changes (name, priority, attempts, options). A key held by a *running* job
    # returns that job unchanged either way: a started job's arguments are never rewritten, and
    # its key stays held until it finishes. ``Inserted.replaced`` tells which happened.
    on_conflict: OnConflict = "keep"

    def __post_init__(self) -> None:
        if self.on_conflict != "keep":
            check_on_conflict(self.on_conflict, self.idempotency_key)
            if self.after or self.workflow_id is not None:
                raise ConfigurationError("a workflow step cannot set on_conflict")
        defaults = self.priority == 0 and self.delay == 0.0 and self.run_at is None
        if defaults and type(self.priority) is int and type(self.delay) in (int, float):
            return  # nothing to check (most jobs, and every bulk enqueue)
        check_priority(self.priority)
        check_delay(self.delay, -MAX_DELAY)  # the store may be asked for an instant past
        check_run_at(self.run_at)

    @property
    def plain(self) -> bool:
        """No idempotency key, no limit key, not a workflow step (so no on_conflict either): a
        job the stores' lean single-job insert takes (Redis, PostgreSQL)."""
        return (
            self.idempotency_key is None
            and self.key is None
            and self.workflow_id is None
            and not self.after
        )

    def to_json(self) -> str:
        """The job as a store keeps it (a schedule's job): JSON with sorted keys, so equal jobs
        are equal text and a store can compare them as text."""
        data = dataclasses.asdict(self)
        for name in _WORKFLOW_FIELDS:  # a schedule's job is never a workflow step: text as before
            if not data[name]:
                del data[name]
        if data["on_conflict"] == "keep":  # the default: stored text as before it existed
            del data["on_conflict"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> NewJob:
        """The inverse of :meth:`to_json`; fields this version does not know are ignored."""
        data = json.loads(text)
        if "after" in data:
            data["after"] = tuple(data["after"])
        return cls(**{k: v for k, v in data.items() if k in _NEW_JOB_FIELDS})


_NEW_JOB_FIELDS = frozenset(f.name for f in dataclasses.fields(NewJob))
_WORKFLOW_FIELDS = ("after", "workflow_id", "key")  # left out when unset: text as before


@dataclass(frozen=True, slots=True)
class JobsInsertParams:
    """Insert jobs in one round trip. All or nothing: a full queue refuses the whole batch.

    A job with ``after`` is stored ``waiting`` with ``depends_on`` the ids of those positions
    (in that order), and each of those jobs lists it in ``dependents``.

    ``max_pending`` caps a queue's :data:`QUEUED` jobs, ``waiting`` steps counted with the
    ``pending`` ones (they will run there): the batch is refused if the queue's waiting and
    pending jobs plus the batch's new jobs of that queue (waiting or not) exceed it. The cap is
    checked at insert only: a waiting step released to ``pending`` by its last input's
    completion was counted when it was accepted, and is never refused.

    ``NewJob.on_conflict = "replace"`` (a debounce): a key held by a pending job gives it the
    new job's payload (and run_at, when the new job sets one) in the same atomic move as the
    key's check, answered ``Inserted(id, False, replaced=True)``; a running holder is answered
    unchanged (``replaced=False``). See docs/backend-contract.md.

    All or nothing for readers as well: no claim, listing, count or read by id sees a job of
    the batch before all of it is stored. A store that cannot store a large batch in one short
    move (Redis, where a long script stops every other client) writes it in several, hidden
    until a last move publishes it; one abandoned half-way is deleted, by its producer or by
    ``leases_reap`` (see :class:`LeasesReapParams`).
    """

    jobs: Sequence[NewJob]
    # A caller's open connection (PostgreSQL): the jobs commit or roll back with its transaction.
    connection: Any = None


@dataclass(frozen=True, slots=True)
class Inserted:
    """The outcome of one :class:`NewJob`: a new id, or the id of the job holding its key
    (``replaced``: that pending job was given this one's arguments, ``on_conflict="replace"``)."""

    id: str
    created: bool
    replaced: bool = False


@dataclass(frozen=True, slots=True)
class JobsClaimParams:
    """Claim up to ``limit`` due jobs from ``queues``, in DESIGN.md order (a fair queue: in
    turns between keys), through the store's one *gate*: paused, max_concurrency and every
    :class:`QueueLimits` of the queue and of the jobs' names (:class:`JobLimits`), across all
    workers, each start counted against them as it is made. A job a limit holds back stays
    pending, untouched, and does not hold back the jobs behind it that no exhausted limit
    concerns. Counts an attempt and issues a fresh token.

    ``wait`` > 0: first sleep until a push signal for ``queues`` arrives (as :meth:`jobs_wait`)
    or ``wait`` seconds pass, then claim, whichever ended the sleep. An idle worker's next claim:
    a store that can carry the claim with the wake-up does both in one round trip (Redis sends
    the claim behind its blocking read), so a job enqueued to an idle worker costs one round
    trip to start, not two."""

    worker_id: str
    queues: Sequence[str]
    limit: int
    wait: float = 0.0


class Claimed(list[ClaimedJob]):
    """What :meth:`Backend.jobs_claim` returns: a ``list`` of the claimed jobs, with
    ``next_open`` beside it: when a rate limit held back a due job, the seconds from the
    store's now until the first such limit admits a start again (the worker's next claim need
    not come sooner); None when no rate held a job back."""

    next_open: float | None

    def __init__(self, jobs: Iterable[ClaimedJob] = (), next_open: float | None = None) -> None:
        super().__init__(jobs)
        self.next_open = next_open

    def __repr__(self) -> str:
        return f"Claimed({list(self)!r}, next_open={self.next_open!r})"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one claimed job ended.

    completed: store ``result``. retry: back to pending after ``delay`` seconds, ``error`` kept.
    failed: the dead letter, ``error`` kept. release: back to pending now, the attempt uncounted.
    cancelled: the handler stopped on a cancellation request (``error`` says how); finished.
    """

    id: str
    token: str
    kind: OutcomeKind
    result: str | None = None
    error: str | None = None
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class JobsAckParams:
    """Settle a batch of claimed jobs. Each takes effect only if its token still matches.

    A ``completed`` outcome that takes effect also releases the job's ``dependents``: one whose
    ``depends_on`` have now all completed moves ``waiting`` -> ``pending`` (run_at: the later of
    now and its own) and wakes the workers, in the same atomic move as the completion, so a
    dependent is released exactly once however its inputs' completions race. A store that cannot
    make both one move (Redis Cluster, across hash slots) records the release as owed with the
    completion and pays it before ``jobs_ack`` returns, or in ``leases_reap`` if the caller died.

    The same move frees the job's inputs (its ``depends_on``) for retention: a completed job is
    *held* while one of its dependents exists and has not completed (waiting, pending, running,
    or failed or cancelled and so still re-drivable with ``jobs_retry``, which reads the inputs
    again), and no purge, expiry or key TTL drops a held job (see :class:`JobsPurgeParams`).
    Each store counts a job's dependents not completed yet with the moves (a completion, and
    the deletion of a dependent that had not completed, count one down), so that retention
    finds the held jobs by a flag or an index of their own, never by reading dependents. A
    freed job is kept as any completed job, counted from its own ``finished_at``. Redis
    Cluster frees an input in another hash slot as it pays a release (owed, then paid).
    """

    outcomes: Sequence[Outcome]
    connection: Any = None  # PostgreSQL: commit the acks inside the handler's transaction


def check_progress(fraction: object, note: object) -> tuple[float, str | None]:
    """A fraction from 0 to 1 and a note of at most :data:`MAX_PROGRESS_NOTE` characters (or
    None), else ``ConfigurationError``."""
    if not _is_number(fraction) or not 0.0 <= fraction <= 1.0:  # type: ignore[operator]
        raise ConfigurationError(f"progress must be a number from 0 to 1, got {fraction!r}")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_PROGRESS_NOTE):
        raise ConfigurationError(
            f"a progress note must be text of at most {MAX_PROGRESS_NOTE} characters"
        )
    return float(fraction), note  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a running job has got, sent with its lease's renewal."""

    id: str
    fraction: float
    note: str | None = None

    def __post_init__(self) -> None:
        check_progress(self.fraction, self.note)


@dataclass(frozen=True, slots=True)
class LeasesRenewParams:
    """Heartbeat: push the lease of each (id, token) to now + that job's lease seconds, and
    store the ``progress`` of those among them still held (fenced by the same token)."""

    worker_id: str
    jobs: Sequence[tuple[str, str]]
    progress: Sequence[Progress] = ()


@dataclass(frozen=True, slots=True)
class Renewed:
    """What a renewal found: ``lost`` leases (token no longer matches), and the renewed jobs
    someone asked to cancel (``cancel_requested``)."""

    lost: list[str] = field(default_factory=list)
    cancel_requested: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class JobsCancelParams:
    """Cancel a job: a waiting or pending one at once, a running one by recording a request."""

    id: str
    by: str | None = None  # who asked (free text)
    # Refuse a running job as a finished one (InvalidTransition) instead of recording a
    # request: ``cancel_pending`` skips a job a worker claimed meanwhile.
    pending_only: bool = False

    def __post_init__(self) -> None:
        if self.by is not None and (
            not isinstance(self.by, str) or not 0 < len(self.by) <= MAX_CANCELLED_BY
        ):
            raise ConfigurationError(
                f"cancel(by=...) must be text of 1 to {MAX_CANCELLED_BY} characters"
            )


@dataclass(frozen=True, slots=True)
class JobsCancelManyParams:
    """Cancel many jobs in one move (a workflow's jobs, a queue's pending ones): each job as
    :class:`JobsCancelParams` would, but a job that is unknown, finished, or running with
    ``pending_only`` is skipped (left as it is) instead of refused."""

    ids: Sequence[str]
    by: str | None = None
    pending_only: bool = False

    def __post_init__(self) -> None:
        JobsCancelParams("", self.by)  # the same check of ``by``


@dataclass(frozen=True, slots=True)
class JobsResumeParams:
    """Re-drive the failed and cancelled jobs of a workflow in one move
    (``app.resume_workflow``), so that it can complete: each job of ``ids`` that is failed or
    cancelled gets its attempts reset, as :meth:`Backend.jobs_retry` does, and becomes
    ``pending`` if all its inputs (``depends_on``) have completed, else ``waiting`` again with
    its count of inputs not completed yet: the completion of the last of them releases it, as
    at insert. The count is taken in the same atomic move as the inputs' completions, so an
    input completing meanwhile releases the job exactly once. A job that is unknown, in another
    status, or holds an idempotency key (workflow jobs never do; ``jobs_retry`` re-drives such a
    job) is skipped."""

    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class JobsRetryManyParams:
    """Re-drive many jobs in one move (the dead letter's bulk retry, a batch of ids at a time):
    each job as :meth:`Backend.jobs_retry` would, but a job that is unknown, neither failed nor
    cancelled, or whose idempotency key another pending or running job holds (also one
    re-driven before it in the same move) is skipped, left as it is, instead of refused."""

    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class LeasesLapsedParams:
    """Read up to ``limit`` running jobs whose lease lapsed (``lease_expires_at < now``), the
    longest lapsed first: what the reaper above the store decides on (see :class:`Lapsed`)."""

    limit: int = 1000


@dataclass(frozen=True, slots=True)
class Lapsed:
    """A running job whose lease lapsed, with what the decision needs: the claim's ``token``
    (what the move is fenced by), the attempts spent (this one included), the job's retry
    policy (``backoff``: ``Backoff.to_json()`` of the job or its queue, as a claim gives it) and
    whether someone asked to cancel it."""

    id: str
    token: str
    name: str
    queue: str
    attempts: int
    max_attempts: int
    backoff: str | None
    delivery: Delivery = "at_least_once"
    cancel_requested: bool = False


ReapKind = Literal["retry", "failed", "cancelled"]
REAP_KINDS: tuple[str, ...] = ("retry", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class ReapMove:
    """What the reaper decided for one lapsed lease (``jobyard.retry.decide_lapsed``): ``retry``
    (pending again, ``run_at = now + delay``), ``failed`` or ``cancelled`` (finished now);
    ``error`` is stored in every case."""

    id: str
    token: str
    kind: ReapKind
    error: str
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in REAP_KINDS:
            raise ValueError(f"unknown reap kind {self.kind!r} for job {self.id}")
        if not (0.0 <= self.delay <= MAX_DELAY):
            raise ValueError(f"a reap delay must be 0 to {MAX_DELAY:.0f} seconds")


@dataclass(frozen=True, slots=True)
class LeasesReapParams:
    """Apply the reaper's decisions, each fenced: a move applies only if its job is still
    ``running`` with the move's ``token`` and its lease still lapsed (``lease_expires_at < now``)
    at the time of the move, so a renewal or an acknowledgement that raced the reaper wins and
    the move is skipped. Applied moves clear the token and lease and free what a running job
    holds (its key slots), in one atomic move with the finished-job counts and the throughput
    history (a ``failed`` move counts as failed).

    A store that writes large batches in several calls (see :class:`JobsInsertParams`) also
    takes over those whose producer stopped past their deadline: deletes one not complete,
    publishes one complete; Redis Cluster also pays the releases a completion left owed. So the
    reaper calls this on every tick, with no moves when nothing lapsed."""

    moves: Sequence[ReapMove] = ()


@dataclass(frozen=True, slots=True)
class JobsExpireParams:
    """Apply the retention a store keeps by itself, apart from any purge: drop finished jobs
    past it, at most ``limit`` per queue and status per call (a backlog is caught up over a few
    ticks). Redis keeps completed jobs ``?result_ttl=`` seconds (or the queue's own), failed
    and cancelled ones ``?failed_ttl=`` (when set), and drops the pending jobs of a queue fed
    with a time to live that lapsed. Stores that keep finished jobs until purged drop nothing.

    What a purge keeps, an expiry keeps (a completed job a workflow step still needs: see
    :class:`JobsAckParams`), and what it takes with a job, an expiry takes (its waiting steps:
    see :class:`JobsPurgeParams`); a Redis job hash that either concerns is given no key TTL,
    so that only these moves, which keep the links right, ever delete it."""

    limit: int = 500


@dataclass(frozen=True, slots=True)
class Reaped:
    """A job the reaper moved, and where to (with its ``name`` and ``queue``, for the lease-lost
    count of ``jobyard.web.metrics``)."""

    id: str
    status: str
    name: str = ""
    queue: str = ""


@dataclass(frozen=True, slots=True)
class JobsListParams:
    """Filter for listing jobs; newest first."""

    queue: str | None = None
    status: str | None = None
    name: str | None = None
    limit: int = 50
    offset: int = 0
    workflow_id: str | None = None  # the jobs of one workflow
    ids: Sequence[str] | None = None  # only these jobs (unknown ids are left out)


@dataclass(frozen=True, slots=True)
class JobsSearchParams:
    """One page of jobs, newest first, found by cursor (the dashboard's listing, the dead letter's
    bulk moves). ``queue`` and ``status`` choose what is walked, through an index (SQL: the
    primary key backwards, within a status's partition or index; Redis: a state index per
    queue). ``name``, ``idempotency_key`` (exact), ``contains`` (a substring of the payload's
    JSON text) and ``error_contains`` (of the error) are checked on the jobs walked; a key alone
    is looked up in its own index (SQL; Redis walks). ``before``: the ``next`` of the previous
    page (the store's own cursor, opaque to the caller). At most ``scan`` jobs are walked per
    call (Redis shares them between the queue and state indexes it walks, at least one each),
    so a filter that matches rarely costs a bounded time per page and says where to go on."""

    queue: str | None = None
    status: str | None = None
    name: str | None = None
    idempotency_key: str | None = None
    contains: str | None = None
    error_contains: str | None = None
    before: str | None = None
    limit: int = 50
    scan: int = 5000

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}: use one of {', '.join(STATUSES)}")
        if self.limit < 1 or self.scan < 1:
            raise ValueError("limit and scan must be at least 1")


@dataclass(frozen=True, slots=True)
class JobsPage:
    """What :meth:`Backend.jobs_search` found: up to ``limit`` matching jobs, newest first;
    ``next``, the cursor of the next (older) page, or None when nothing older is left to walk;
    and ``scanned``, how many jobs were walked to find them. A page may hold fewer than
    ``limit`` jobs (even none) and still have a ``next``: the walk stopped at ``scan``."""

    jobs: list[JobRecord]
    next: str | None
    scanned: int


def error_line(error: str | None) -> str:
    """The line a failed job's error is grouped by in the dead letter: its last line with
    anything but spaces, tabs and carriage returns on it (a traceback's exception and message),
    without those around it. Lines end at "\n" only, as every store splits them."""
    if not error:
        return ""
    return error.rstrip(" \t\r\n").rsplit("\n", 1)[-1].strip(" \t\r")


ERROR_TAIL = 1000  # characters of an error a store may group by (a longer last line: its end)


def group_line(error: str | None) -> str:
    """The line a store groups a failed job by (and stores when the job fails, where it
    keeps one): :func:`error_line` of the error's last :data:`ERROR_TAIL` characters."""
    return error_line((error or "")[-ERROR_TAIL:])


def in_group(error: str | None, line: str) -> bool:
    """Whether a failed job's error belongs to a dead-letter group of ``line``: its
    :func:`error_line`, or (a last line longer than :data:`ERROR_TAIL`, which a store groups
    by its end) a line that ends with it."""
    mine = error_line(error)
    return mine == line or (len(line) >= ERROR_TAIL // 2 and mine.endswith(line))


@dataclass(frozen=True, slots=True)
class DeadGroupsParams:
    """Group the dead letter: the newest ``scan`` failed jobs (of ``queue``, or of every
    queue) by queue, name and :func:`error_line` of the error's last :data:`ERROR_TAIL`
    characters (so a store reads no more of each error than that)."""

    queue: str | None = None
    scan: int = 10_000


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """Failed jobs of one queue and name whose errors end with the same line: how many, the
    latest and the earliest finished_at, and ``sample_id``, the id of the group's newest job
    (the last enqueued: the first a listing shows)."""

    queue: str
    name: str
    error_line: str
    count: int
    newest: float
    oldest: float
    sample_id: str


@dataclass(frozen=True, slots=True)
class DeadGroups:
    """What :meth:`Backend.dead_groups` found: the groups, biggest first (then newest first,
    then by queue, name and line); how many failed jobs were walked; and whether that was every
    failed job of the queue (or of every queue)."""

    groups: list[DeadGroup]
    scanned: int
    complete: bool


@dataclass(frozen=True, slots=True)
class JobsPurgeParams:
    """Delete finished jobs. ``statuses`` may only name finished states (ValueError otherwise);
    each is kept once, in the order given.

    Workflows, in the same atomic move (Redis Cluster: per hash slot, what reaches another slot
    owed and paid as a release is):

    - A *held* completed job (a dependent that exists has not completed: see
      :class:`JobsAckParams`) is kept, and counted in :attr:`Purged.kept`; it goes once its
      dependents completed or were deleted, by its own ``finished_at``.
    - A deleted job takes with it every ``waiting`` job that waits on it, transitively: such a
      step can never run (``Purged.waiting`` counts them, within the total). Its inputs and
      theirs lose a dependent: a completed one no step needs any more is freed, and is deleted
      by this same purge when it matches the filter.
    """

    statuses: Sequence[str] = FINISHED
    older_than: float = 0.0  # seconds before now, judged by finished_at
    queue: str | None = None
    # Only these jobs (the dead letter's bulk purge, a batch of ids at a time; unknown ids and
    # jobs the other filters leave out are ignored); an input this frees is deleted with them
    # only if it is among them. None: every job the other filters match.
    ids: Sequence[str] | None = None

    def __post_init__(self) -> None:
        statuses = tuple(dict.fromkeys(self.statuses))
        bad = [s for s in statuses if s not in FINISHED]
        if bad:
            raise ValueError(f"only finished jobs ({', '.join(FINISHED)}) can be purged, not {bad}")
        object.__setattr__(self, "statuses", statuses)


class Purged(int):
    """What :meth:`Backend.jobs_purge` did: an ``int``, the number of jobs deleted, the waiting
    workflow steps it took with them included, with two counts beside it: ``waiting``, how many
    of those were waiting steps, and ``kept``, the completed jobs the filter matched that were
    kept, because a workflow step that has not completed still needs their results."""

    waiting: int
    kept: int

    def __new__(cls, jobs: int = 0, waiting: int = 0, kept: int = 0) -> Purged:
        self = super().__new__(cls, jobs)
        self.waiting = waiting
        self.kept = kept
        return self

    def plus(self, other: Purged) -> Purged:
        """The counts of two purges (of several queues or batches) added up."""
        return Purged(int(self) + int(other), self.waiting + other.waiting, self.kept + other.kept)

    def __repr__(self) -> str:
        return f"Purged({int(self)}, waiting={self.waiting}, kept={self.kept})"


@dataclass(frozen=True, slots=True)
class JobsWaitParams:
    """Block until a job may be due in ``queues`` or ``timeout`` seconds pass."""

    queues: Sequence[str]
    timeout: float


@dataclass(frozen=True, slots=True)
class JobsWakeParams:
    """End the waiting claim (``JobsClaimParams.wait``) of worker ``worker_id`` on ``queues``
    now, as a push signal would: the worker is stopping and must not sleep out its wait."""

    worker_id: str
    queues: Sequence[str]


@dataclass(frozen=True, slots=True)
class WorkersBeatParams:
    """Register or refresh a worker; ``stopping`` removes it."""

    worker: WorkerInfo
    stopping: bool = False
    # This worker counts as gone once it has been silent this long (its beat interval times a
    # margin); stored with it, so any worker's beat and ``workers_list`` drop it after that.
    forget_after: float = DEFAULT_FORGET_AFTER


@dataclass(frozen=True, slots=True)
class StatsParams:
    """Which queues to count (empty: all). ``recent`` False: ``completed_last_minute`` may be
    left 0 (a store that counts the last minute's jobs skips it: the dashboard reads the
    throughput history instead, which costs the same however busy the minute was)."""

    queues: Sequence[str] = field(default_factory=tuple)
    recent: bool = True


@dataclass(frozen=True, slots=True)
class QueuesNamesParams:
    """Name the queues that hold finished jobs of ``statuses`` (finished states only,
    ValueError otherwise): the queues a purge of those statuses could find work in."""

    statuses: Sequence[str] = ("completed",)

    def __post_init__(self) -> None:
        statuses = tuple(dict.fromkeys(self.statuses))
        bad = [s for s in statuses if s not in FINISHED]
        if bad:
            raise ValueError(f"only finished states ({', '.join(FINISHED)}) are named, not {bad}")
        object.__setattr__(self, "statuses", statuses)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring job: ``job`` is inserted at every tick.

    The ticks are those of the cron expression ``cron`` read in ``timezone``, or, when ``cron``
    is None, every ``every`` seconds. ``catch_up`` says what ticks missed while no worker ran
    become (see ``jobyard.cron``). ``active`` is whether the app still declares the schedule;
    ``paused`` is set by ``app.pause_schedule`` and kept by the store: syncing never changes it."""

    name: str
    cron: str | None
    job: NewJob
    active: bool = True
    next_run_at: float | None = None  # kept by the store
    last_run_at: float | None = None
    every: float | None = None  # seconds, when cron is None
    timezone: str = "UTC"
    catch_up: CatchUp = "latest"
    paused: bool = False


@dataclass(frozen=True, slots=True)
class SchedulesSyncParams:
    """Make the stored schedules those of ``schedules`` (others are deactivated). A new schedule,
    or one whose ticks (``cron``, ``every``, ``timezone``) or job changed, starts at its
    ``next_run_at``; an unchanged one keeps the stored ``next_run_at`` so a restart never fires a
    tick twice or skips one. ``catch_up`` is always taken from the given schedule; ``paused`` is
    never touched (a new schedule starts unpaused), so a deploy cannot resume a paused one."""

    schedules: Sequence[Schedule]


@dataclass(frozen=True, slots=True)
class SchedulesFireParams:
    """Fire one tick: only if the schedule is active, not paused, and its stored next_run_at
    still equals ``fire_at``, move it to ``next_at`` and insert the schedule's job, atomically.
    Of many workers firing the same tick, exactly one succeeds.

    The inserted job carries ``idempotency_key``: the schedule job's own key when it has one,
    else the tick's, ``cron:<name>:<fire_at>`` (filled in here when left out), so a tick that
    somehow fires twice still makes one job."""

    name: str
    fire_at: float
    next_at: float
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if self.idempotency_key is None:
            object.__setattr__(self, "idempotency_key", f"cron:{self.name}:{self.fire_at!r}")


@dataclass(frozen=True, slots=True)
class SchedulesSkipParams:
    """Drop ticks without firing them: the compare-and-set of :class:`SchedulesFireParams`
    (active, not paused, next_run_at equals ``fire_at``), moving next_run_at to ``next_at``
    and inserting nothing; last_run_at is unchanged."""

    name: str
    fire_at: float
    next_at: float


@dataclass(frozen=True, slots=True)
class SchedulesPauseParams:
    """Pause or resume a stored schedule. Resuming a paused one also sets its next_run_at to
    ``next_run_at`` (the ticks it missed while paused are dropped); resuming one that is not
    paused changes nothing."""

    name: str
    paused: bool
    next_run_at: float | None = None  # required when resuming


@dataclass(frozen=True, slots=True)
class LimitsSyncParams:
    """Store the limits of these job names (every worker at start, for the jobs it registers):
    each (queue, name) given replaces the stored one; one with empty limits deletes it. Names
    not given are left as they are."""

    jobs: Sequence[JobLimits]


# Pending jobs of each queue ``limits_stats`` reads at most to count them by job name and key
# (a status read must stay cheap under any backlog: 10,000 rows are 10-20 ms on every store).
LIMITS_WALK = 10_000


@dataclass(frozen=True, slots=True)
class LimitsStatsParams:
    """Which queues' limits to read (empty: all), how many of the keys holding the most
    pending jobs to list per queue, and how many pending jobs of each queue the store reads
    at most to count them by job name and key (see :attr:`LimitStats.exact`)."""

    queues: Sequence[str] = field(default_factory=tuple)
    top_keys: int = 5
    walk: int = LIMITS_WALK

    def __post_init__(self) -> None:
        if not isinstance(self.walk, int) or self.walk < 0:  # SQLite reads on to the end below 0
            raise ValueError(f"walk must be a whole number from 0, got {self.walk!r}")


@dataclass(frozen=True, slots=True)
class KeyStats:
    """One key of a queue: its pending (due or not) and running jobs."""

    key: str
    pending: int
    running: int


@dataclass(frozen=True, slots=True)
class LimitStats:
    """One limited scope as it stands: a queue's own limits (``job`` None: its
    ``max_concurrency`` and :attr:`QueueConfig.limits`) or a job name's (:class:`JobLimits`).

    ``running``: running jobs of the scope. ``rate_used``: how much of the rate's burst is
    taken now, from 0 (idle) to 1 (the next start waits), None without a rate.
    ``keys_running``: how many keys have running jobs in the scope; ``keys_full``: how many of
    them are at ``key_concurrency`` (0 without it). ``top_keys`` (queue rows only, and only for
    a queue whose jobs carry keys): up to ``top_keys`` keys with the most pending jobs, most
    first, then by key.

    What the scope's limits may hold back now: ``due``, its due pending jobs (``run_at <=
    now``; a job name's: that name's in the queue), and ``due_keys_full``, those of them whose
    key is at ``key_concurrency`` (0 without it). The running figures count every running job;
    the pending ones (``due``, ``due_keys_full``, ``top_keys``) count the queue's pending jobs
    the store read, at most :attr:`LimitsStatsParams.walk` of them (the next ones to be
    claimed, where the store has that order): ``exact`` is True when that was all of them,
    False when the walk stopped at its bound (the counts are then lower bounds)."""

    queue: str
    job: str | None
    limits: QueueLimits
    max_concurrency: int | None
    running: int
    rate_used: float | None
    keys_running: int
    keys_full: int
    top_keys: tuple[KeyStats, ...] = ()
    due: int = 0
    due_keys_full: int = 0
    exact: bool = True


@dataclass(frozen=True, slots=True)
class StoreTidyParams:
    """Housekeeping of the store itself, run by every worker's maintenance: a table that churns
    (every move of a job leaves a dead row behind on PostgreSQL) is vacuumed once it holds more
    than ``min_dead`` dead rows plus ``dead_fraction`` of its live rows, or once that many rows
    were inserted since its last vacuum. Stores without dead rows do nothing.

    A store that keeps rate buckets (:class:`Rate`) in tables also forgets here those whose
    ``tat`` is past, so an idle key leaves nothing behind (the others forget theirs by
    themselves: memory as it claims, Redis by key TTLs)."""

    min_dead: int = 5000
    dead_fraction: float = 0.2


def sort_groups(groups: Sequence[DeadGroup]) -> list[DeadGroup]:
    """Groups in :class:`DeadGroups` order: biggest, then newest, then queue, name, line."""
    return sorted(groups, key=lambda g: (-g.count, -g.newest, g.queue, g.name, g.error_line))


def group_dead(rows: Sequence[tuple[str, str, str | None, float | None, str]]) -> list[DeadGroup]:
    """Group walked failed jobs, ``(queue, name, error, finished_at, id)`` newest first, as
    :meth:`Backend.dead_groups` does (a store that reads the rows and groups them here)."""
    out: dict[tuple[str, str, str], list[Any]] = {}
    for queue, name, error, finished, job_id in rows:
        at = finished or 0.0
        g = out.get(key := (queue, name, group_line(error)))
        if g is None:
            out[key] = [1, at, at, job_id]  # the first walked: the newest job
        else:
            g[0] += 1
            g[1] = max(g[1], at)
            g[2] = min(g[2], at)
    return sort_groups([DeadGroup(*k, *v) for k, v in out.items()])


# --- the protocol ------------------------------------------------------------------------------


@runtime_checkable
class Backend(Protocol):
    """Everything a store must do. Methods are thread-safe and each is one round trip where the
    store allows it."""

    clock: Clock
    url: str  # printable: a password in the URL is masked
    # The most jobs one jobs_claim should be asked for, or None: a worker asks for no more at
    # once, and claims again at once when a claim comes back full. For a store that serves
    # nothing else while a claim runs (Redis runs each as one script).
    claim_max: int | None

    # schema
    def schema_migrate(self) -> list[str]:
        """Apply pending migrations (idempotent, safe when run concurrently); names applied."""
        ...

    def schema_check(self) -> None:
        """Raise :class:`jobyard.errors.SchemaError` naming ``jobyard migrate`` if behind."""
        ...

    # producer side
    def jobs_insert(self, params: JobsInsertParams) -> list[Inserted]:
        """Insert jobs; raise :class:`QueueFull` (writing nothing) past a queue's max_pending."""
        ...

    def jobs_get(self, job_id: str) -> JobRecord | None:
        """One job, or ``None``."""
        ...

    def jobs_list(self, params: JobsListParams) -> list[JobRecord]:
        """Jobs matching the filter, newest first."""
        ...

    def jobs_search(self, params: JobsSearchParams) -> JobsPage:
        """A page of jobs by cursor, newest first (see :class:`JobsSearchParams`): never by
        offset, and never walking more than ``scan`` jobs."""
        ...

    def dead_groups(self, params: DeadGroupsParams) -> DeadGroups:
        """The dead letter grouped (see :class:`DeadGroupsParams`): the newest failed jobs
        walked newest first, never more than ``scan`` of them."""
        ...

    def jobs_cancel(self, params: JobsCancelParams) -> JobRecord:
        """Cancel a waiting or pending job at once; on a running job record a cancellation
        request (the first request's time and author are kept). Raise JobNotFound, or
        InvalidTransition if the job is finished."""
        ...

    def jobs_cancel_many(self, params: JobsCancelManyParams) -> list[str]:
        """Cancel each job as :meth:`jobs_cancel` would, in one round trip per store call
        (Redis Cluster: one per queue), skipping the jobs it would refuse; the ids of those it
        changed (cancelled, or a request recorded on a running one), in the order given."""
        ...

    def jobs_retry(self, job_id: str) -> JobRecord:
        """Re-drive a failed or cancelled job: pending now, attempts reset. Raise JobNotFound,
        InvalidTransition, or DuplicateJob if its idempotency key is held by another job."""
        ...

    def jobs_resume(self, params: JobsResumeParams) -> list[str]:
        """Re-drive failed and cancelled workflow jobs, each ``pending`` or ``waiting`` again on
        its inputs not completed (see :class:`JobsResumeParams`), in one move per store call
        (Redis: one script per 500 jobs, per queue on Cluster); the ids it changed, in the order
        given."""
        ...

    def jobs_retry_many(self, params: JobsRetryManyParams) -> list[str]:
        """Re-drive each job as :meth:`jobs_retry` would, in one round trip per store call
        (Redis Cluster: one per queue), skipping the jobs it would refuse; the ids of those it
        re-drove, in the order given (an id given twice, once)."""
        ...

    def jobs_purge(self, params: JobsPurgeParams) -> Purged:
        """Delete finished jobs and the waiting steps that wait on them (see
        :class:`JobsPurgeParams`); how many, of which waiting, and how many were kept."""
        ...

    # worker side
    def jobs_claim(self, params: JobsClaimParams) -> Claimed:
        """Claim due jobs through the gate (see :class:`JobsClaimParams`, :class:`Claimed`)."""
        ...

    def jobs_ack(self, params: JobsAckParams) -> list[str]:
        """Apply outcomes; return the ids whose token no longer matched (refused, stale)."""
        ...

    def jobs_wait(self, params: JobsWaitParams) -> bool:
        """Sleep until woken by an insert (push signal) or timeout; True if woken."""
        ...

    def jobs_wake(self, params: JobsWakeParams) -> None:
        """End that worker's waiting claim at once (see :class:`JobsWakeParams`): its in-process
        waiters are woken (SQLite, PostgreSQL, memory), or a token is pushed on the worker's own
        wake list, which its blocking read covers beside the queues' (Redis). A claim that is
        not waiting yet returns at once from its next wait; waking others is allowed."""
        ...

    def leases_renew(self, params: LeasesRenewParams) -> Renewed:
        """Renew leases and store progress; which leases were lost (token no longer matches)
        and which renewed jobs have a cancellation request."""
        ...

    def leases_lapsed(self, params: LeasesLapsedParams) -> list[Lapsed]:
        """The running jobs whose lease lapsed, longest lapsed first: a read, nothing moved."""
        ...

    def leases_reap(self, params: LeasesReapParams) -> list[Reaped]:
        """Apply the reaper's decisions on lapsed leases, each fenced by its token and by the
        lease being still lapsed; the jobs moved (a move that lost a race is left out)."""
        ...

    # queues, workers, stats
    def queues_configure(self, config: QueueConfig) -> None:
        """Create or replace a queue's settings."""
        ...

    def queues_list(self) -> list[QueueConfig]:
        """Every configured queue."""
        ...

    def workers_beat(self, params: WorkersBeatParams) -> None:
        """Register or refresh (or remove, when stopping) a worker."""
        ...

    def workers_list(self) -> list[WorkerInfo]:
        """Live workers; those silent longer than their own ``forget_after`` are dropped from
        the registry here too, so a killed worker leaves ``jobyard status`` on time even when
        no other worker is left to forget it."""
        ...

    def stats_get(self, params: StatsParams) -> list[QueueStats]:
        """Per queue: counts by status, completions in the last minute and the run_at of the
        head of its line (:attr:`QueueStats.oldest_pending_at`)."""
        ...

    def throughput_get(self, params: ThroughputParams) -> list[ThroughputMinute]:
        """The kept throughput history (see :class:`ThroughputMinute`): only minutes in which
        something ended, by queue then minute. ``jobs_ack`` and ``leases_reap`` add to it in
        the same atomic move as the job's change, so it survives every restart of workers and
        readers; minutes older than :data:`THROUGHPUT_KEEP` are dropped by ``jobs_expire``
        (or by the store itself)."""
        ...

    # flow control
    def limits_sync(self, params: LimitsSyncParams) -> None:
        """Store job names' limits (see :class:`LimitsSyncParams`)."""
        ...

    def limits_stats(self, params: LimitsStatsParams) -> list[LimitStats]:
        """Every limited scope of the queues asked, queue rows first then job rows by name,
        queues by name (see :class:`LimitStats`); a queue with keyed pending jobs and no limit
        gets a row too, for its top keys. A read for status: it reads every running job and at
        most ``params.walk`` pending jobs of each queue, whatever its backlog."""
        ...

    def queues_names(self, params: QueuesNamesParams) -> list[str]:
        """The queues holding finished jobs of ``params.statuses``, by name: one cheap read of
        what the store keeps with the moves, never a count or a scan of jobs (maintenance
        asks it every few seconds). A name too many is allowed (it costs its caller an empty
        purge); a queue holding such jobs is never left out."""
        ...

    def store_info(self) -> StoreInfo:
        """The store's kind, its own retention of finished jobs and its server's warnings (see
        :class:`StoreInfo`): one cheap read at most, never of the jobs."""
        ...

    # time and recurring jobs
    def clock_now(self) -> float:
        """The store's "now" (or the frozen clock's), in epoch seconds."""
        ...

    def schedules_sync(self, params: SchedulesSyncParams) -> None:
        """Store the app's schedules (see :class:`SchedulesSyncParams`)."""
        ...

    def schedules_list(self) -> list[Schedule]:
        """Every stored schedule, with its next and last run."""
        ...

    def schedules_fire(self, params: SchedulesFireParams) -> Inserted | None:
        """Fire a due tick (see :class:`SchedulesFireParams`); None if another worker did."""
        ...

    def schedules_skip(self, params: SchedulesSkipParams) -> bool:
        """Drop due ticks (see :class:`SchedulesSkipParams`); False if another worker moved on."""
        ...

    def schedules_pause(self, params: SchedulesPauseParams) -> bool:
        """Pause or resume (see :class:`SchedulesPauseParams`); False if no such schedule."""
        ...

    def close(self) -> None:
        """Release connections; safe to call twice."""
        ...


# --- optional capabilities ---------------------------------------------------------------------
#
# What only some stores can do is declared here, as a Protocol a store satisfies by having the
# methods, and checked here only, by the ``as_...`` functions below. The core never probes a store
# for a method or names a store class.


@runtime_checkable
class TransactionalBackend(Backend, Protocol):
    """A store that takes part in its caller's transaction (PostgreSQL): ``jobs_insert`` and
    ``jobs_ack`` accept a caller's ``connection``, and it lends connections to handlers."""

    async def jobs_insert_async(self, params: JobsInsertParams) -> list[Inserted]:
        """:meth:`Backend.jobs_insert` on the caller's async connection (same statements); any
        other connection (or none) goes to :meth:`Backend.jobs_insert` on a thread."""
        ...

    def connection_acquire(self) -> Any:
        """A connection with a transaction open, lent to a handler
        (``jobyard.current_job().connection``); give it back with :meth:`connection_release`."""
        ...

    def connection_release(self, conn: Any) -> None:
        """Take back a lent connection (an open transaction is rolled back)."""
        ...


@dataclass(frozen=True, slots=True)
class EntryVerdict:
    """What a consumer of a foreign list or stream does with one entry, decided above the
    boundary (``jobyard.worker.executor.EntryRunner``: the handler run, its return or exception
    classified, the events emitted): ``ack`` it, ``retry`` it (``delay``: seconds, from
    ``Retry(delay=)``, else None), or ``drop`` it to its dead list. ``reason``: why it was
    dropped or retried (kept as a dead entry's reason when a retry passes ``max_deliveries``).
    ``result``: an acknowledged handler's return value."""

    action: Literal["ack", "retry", "drop"]
    delay: float | None = None
    reason: str = ""
    result: Any = None


# How a consumer runs one entry: ``runner(source, key, entry_id, handler, decode)``, ``source``
# "list" or "stream", ``decode()`` the entry's value (ValueError or KeyError if it cannot be
# read). Given to the store's consumers by the App (``consumer_list(..., runner=...)``).
EntryRunner = Callable[[str, str, str, Callable[[Any], Any], Callable[[], Any]], EntryVerdict]
# How a stream consumer enqueues its reply jobs: ``enqueue(jobs, send)``, the core's one way
# down (``_enqueue.Enqueue.insert``, events and hooks), ``send`` the store call that inserts.
EntryEnqueue = Callable[..., list[Inserted]]


@runtime_checkable
class ExpiringBackend(Backend, Protocol):
    """A store that keeps a retention of its own, apart from any purge (Redis: the URL's
    ``result_ttl`` and ``failed_ttl``, a queue fed with a time to live): every worker's
    maintenance applies it after each reap. The SQL stores and memory keep finished jobs until
    purged, but prune the throughput history here (minutes past :data:`THROUGHPUT_KEEP`, see
    :meth:`Backend.throughput_get`), returning 0."""

    def jobs_expire(self, params: JobsExpireParams) -> int:
        """Apply the store's own retention (see :class:`JobsExpireParams`); how many jobs were
        dropped."""
        ...


@runtime_checkable
class TidyingBackend(Backend, Protocol):
    """A store that needs housekeeping beside the moves of jobs: PostgreSQL (every move leaves
    a dead row behind: a vacuum of the hot partitions) and SQLite (the WAL checkpointed here
    rather than inside a claim's or an ack's commit). Every worker's maintenance calls it about
    once a second on a thread of its own. Redis and memory free what they delete, and have
    nothing to tidy."""

    def store_tidy(self, params: StoreTidyParams) -> list[str]:
        """Keep the store's hot tables small (see :class:`StoreTidyParams`); one line per
        action taken, for the log. Never blocks the moves of jobs; one worker at a time."""
        ...


class Consumer(Protocol):
    """A consumer of a foreign list or stream, run by the workers of its App."""

    def start(self) -> None:
        """Start consuming (safe to call twice)."""
        ...

    def stop(self, grace: float = 10.0) -> None:
        """Stop, letting running handlers finish within ``grace`` seconds (safe twice)."""
        ...


@runtime_checkable
class ForeignQueueBackend(Backend, Protocol):
    """A store that consumes the lists and streams other programs write into it (Redis)."""

    def consumer_list(self, key: str, handler: Callable[[Any], Any], **options: Any) -> Consumer:
        """A consumer of the JSON entries pushed onto list ``key``, not started."""
        ...

    def consumer_stream(
        self, stream: str, handler: Callable[[Any], Any], **options: Any
    ) -> Consumer:
        """A consumer group reader of ``stream``, not started."""
        ...


def as_transactional(backend: Backend, feature: str) -> TransactionalBackend:
    """``backend`` if it is a :class:`TransactionalBackend`, else one ConfigurationError."""
    if isinstance(backend, TransactionalBackend):
        return backend
    raise _lacks(
        backend, feature, "a store that takes part in the caller's transaction (PostgreSQL)"
    )


def refuse_connection(backend: Backend, params: JobsInsertParams | JobsAckParams) -> None:
    """The guard of a store that cannot join a caller's transaction, for a caller that reached
    it past the core (which refuses a ``connection`` first, through :func:`as_transactional`):
    the same one ConfigurationError, rather than writing outside the caller's transaction."""
    if params.connection is not None:
        as_transactional(backend, "a caller's connection (connection=...)")


@runtime_checkable
class EventSource(Protocol):
    """A store that reports events of its own on the App's bus (Redis: a call whose reply was
    lost and that was not sent again, ``WorkerNote("unsure")``)."""

    def events_attach(self, events: Events) -> None:
        """Emit this store's events on ``events`` from now on."""
        ...


def attach_events(backend: Backend, events: Events) -> None:
    """Let ``backend`` report its own events on ``events``, if it has any (see
    :class:`EventSource`)."""
    if isinstance(backend, EventSource):
        backend.events_attach(events)


def as_foreign_queues(backend: Backend, feature: str) -> ForeignQueueBackend:
    """``backend`` if it is a :class:`ForeignQueueBackend`, else one ConfigurationError."""
    if isinstance(backend, ForeignQueueBackend):
        return backend
    raise _lacks(
        backend, feature, "a store that consumes lists and streams of other programs (Redis)"
    )


def as_expiring(backend: Backend) -> ExpiringBackend | None:
    """``backend`` if it keeps a retention of its own (:class:`ExpiringBackend`), else None:
    an optional duty, which maintenance skips rather than refuses."""
    return backend if isinstance(backend, ExpiringBackend) else None


def as_tidying(backend: Backend) -> TidyingBackend | None:
    """``backend`` if it has tables to tidy (:class:`TidyingBackend`), else None: an optional
    duty, which maintenance skips rather than refuses."""
    return backend if isinstance(backend, TidyingBackend) else None


def _lacks(backend: Backend, feature: str, needs: str) -> ConfigurationError:
    return ConfigurationError(f"{feature} needs {needs}; {backend.url} is not one")
