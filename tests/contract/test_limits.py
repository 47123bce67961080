"""Flow control in the claim, on every store: the gate of ``jobs_claim`` (paused, max_concurrency,
rate limits of a queue and of a job name, key concurrency, key rates, fair turns between keys),
its ``next_open`` hint, ``limits_sync`` / ``limits_stats``, and the refusals of bad limits where
they are declared (docs/backend-contract.md, ``jobs_claim``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    FAIR_TURN,
    Backend,
    Claimed,
    JobLimits,
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    LimitsStatsParams,
    LimitsSyncParams,
    NewJob,
    Outcome,
    QueueConfig,
    QueueLimits,
    Rate,
)
from jobyard.errors import ConfigurationError
from jobyard.worker.reaper import reap
from tests.conftest import running_worker

PAYLOAD = '{"args":[],"kwargs":{}}'


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(name=str(kw.pop("name", "task")), queue=queue, payload=PAYLOAD, **kw)  # type: ignore[arg-type]


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def insert(backend: Backend, *jobs: NewJob) -> list[str]:
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


def claim(
    backend: Backend, limit: int = 10, queues: tuple[str, ...] = ("q",), worker: str = "w1"
) -> Claimed:
    return backend.jobs_claim(JobsClaimParams(worker, queues, limit))


def keys_of(backend: Backend, claimed: list) -> list[str | None]:  # type: ignore[type-arg]
    out = []
    for c in claimed:
        rec = backend.jobs_get(c.id)
        assert rec is not None
        out.append(rec.key)
    return out


def complete(backend: Backend, *claimed: object) -> None:
    outcomes = [Outcome(c.id, c.token, "completed", result="null") for c in claimed]  # type: ignore[attr-defined]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


# --- max_concurrency (the gate's oldest limit) ---------------------------------------------------


def test_max_concurrency_counts_running_jobs_of_every_worker(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", max_concurrency=2))
    insert(backend, *[new() for _ in range(5)])
    assert len(claim(backend, 10, worker="w1")) == 2
    assert claim(backend, 10, worker="w2") == []
    backend.queues_configure(QueueConfig("q", max_concurrency=3))
    assert len(claim(backend, 10, worker="w2")) == 1


def test_max_concurrency_across_two_workers(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    app.configure_queue("limited", max_concurrency=2)
    lock = threading.Lock()
    active = [0]
    peak = [0]

    @app.job(queue="limited")
    def probe() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1

    handles = probe.enqueue_many([((), {}) for _ in range(12)])
    with running_worker(app, concurrency=4), running_worker(app, concurrency=4):
        for h in handles:
            h.result(timeout=30)
    assert peak[0] == 2


# --- the contract's types round-trip ------------------------------------------------------------


def test_queue_limits_and_keys_round_trip(backend: Backend) -> None:
    limits = QueueLimits(rate=Rate(600, 60.0), key_concurrency=3, key_rate=Rate(5), fair=True)
    backend.queues_configure(QueueConfig("q", max_concurrency=9, limits=limits))
    (stored,) = backend.queues_list()
    assert (stored.limits, stored.max_concurrency) == (limits, 9)
    (a,) = insert(backend, new(key="customer:42"))
    rec = backend.jobs_get(a)
    assert rec is not None and rec.key == "customer:42"
    (got,) = claim(backend)
    assert isinstance(claim(backend), Claimed) and got.id == a


# --- rate limits ---------------------------------------------------------------------------------


def test_queue_rate_admits_a_burst_then_one_start_per_interval(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # 100/s: a burst of 10 (a tenth of a second's starts), then one every 10 ms.
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(rate=Rate(100))))
    insert(backend, *[new() for _ in range(60)])
    first = claim(backend, 50)
    assert len(first) == 10
    held = claim(backend, 50, worker="w2")  # across workers: the bucket is the store's
    assert held == [] and held.next_open == pytest.approx(0.01, abs=0.002)
    clock.advance(0.05)
    assert len(claim(backend, 50, worker="w2")) == 5
    clock.advance(30.0)  # idle for long: the burst is capped, not saved up
    assert len(claim(backend, 50)) == 10


def test_a_job_held_back_stays_pending_untouched(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(rate=Rate(1, 10.0))))
    a, b = insert(backend, new(), new())
    assert [c.id for c in claim(backend)] == [a]
    assert claim(backend) == []
    rec = backend.jobs_get(b)
    assert rec is not None
    assert (rec.status, rec.attempts, rec.worker_id, rec.started_at) == ("pending", 0, None, None)
    clock.advance(10.0)
    assert [c.id for c in claim(backend)] == [b]


def test_job_name_rate_holds_that_name_only(backend: Backend, clock: jobyard.FrozenClock) -> None:
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "slow", QueueLimits(rate=Rate(1)))]))
    insert(backend, *[new(name="slow") for _ in range(3)], *[new(name="fast") for _ in range(3)])
    got = claim(backend)
    assert sorted(c.name for c in got) == ["fast", "fast", "fast", "slow"]
    assert got.next_open == pytest.approx(1.0, abs=0.01)
    clock.advance(1.0)
    assert [c.name for c in claim(backend)] == ["slow"]
    # Empty limits delete the stored ones.
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "slow")]))
    assert [c.name for c in claim(backend)] == ["slow"]


def test_job_limits_are_per_queue(backend: Backend) -> None:
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "t", QueueLimits(rate=Rate(1, 60.0)))]))
    insert(backend, new(name="t"), new(name="t"), new("other", name="t"), new("other", name="t"))
    assert len(claim(backend, 10, queues=("q", "other"))) == 3


def test_no_rate_held_back_means_no_next_open(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", max_concurrency=1))
    insert(backend, new(), new())
    assert len(got := claim(backend)) == 1 and got.next_open is None
    assert (held := claim(backend)) == [] and held.next_open is None


# --- key concurrency -----------------------------------------------------------------------------


def test_key_concurrency_holds_one_key_not_the_others(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_concurrency=1)))
    a1, a2, b1, free = insert(backend, new(key="a"), new(key="a"), new(key="b"), new())
    got = claim(backend)
    assert sorted(c.id for c in got) == sorted([a1, b1, free])  # a2 waits behind a1 only
    assert claim(backend, worker="w2") == []
    complete(backend, *[c for c in got if c.id == a1])
    assert [c.id for c in claim(backend, worker="w2")] == [a2]


def test_key_concurrency_of_a_job_name_counts_that_name_only(backend: Backend) -> None:
    sms = JobLimits("q", "sms", QueueLimits(key_concurrency=2))
    backend.limits_sync(LimitsSyncParams([sms]))
    insert(backend, *[new(name="sms", key="c1") for _ in range(3)], new(name="email", key="c1"))
    got = claim(backend)
    assert sorted(c.name for c in got) == ["email", "sms", "sms"]


def test_a_lapsed_lease_holds_its_key_slot_until_the_reaper_rescues_it(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_concurrency=1)))
    insert(backend, new(key="k", lease=5.0), new(key="k", lease=5.0))
    (first,) = claim(backend)
    clock.advance(10.0)  # its worker died: the lease lapsed, but the job is still running
    assert claim(backend, worker="w2") == []
    assert [r.id for r in reap(backend)] == [first.id]
    assert len(claim(backend, worker="w2")) == 1  # one of the two, never both
    assert claim(backend, worker="w3") == []


def test_key_rate_per_key(backend: Backend, clock: jobyard.FrozenClock) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_rate=Rate(1))))
    insert(backend, *[new(key="a") for _ in range(3)], *[new(key="b") for _ in range(3)], new())
    got = claim(backend)
    assert sorted(map(str, keys_of(backend, got))) == ["None", "a", "b"]
    assert got.next_open == pytest.approx(1.0, abs=0.01)
    assert claim(backend) == []
    clock.advance(1.0)
    assert sorted(map(str, keys_of(backend, claim(backend)))) == ["a", "b"]


# --- fair turns ----------------------------------------------------------------------------------


def test_fair_queue_takes_turns_between_keys_a_round_at_a_time(backend: Backend) -> None:
    # given A's 10 jobs enqueued, then B's 6, then C's 1
    T = FAIR_TURN
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(10)])
    insert(backend, *[new(key="B") for _ in range(6)])
    insert(backend, new(key="C"))
    # when they are claimed one at a time
    order = [k for _ in range(17) for k in keys_of(backend, claim(backend, 1))]
    # then each round takes up to FAIR_TURN jobs of each key, the keys in the order they came
    rounds = [["A"] * T + ["B"] * T + ["C"], ["A"] * T + ["B"] * (6 - T), ["A"] * (10 - 2 * T)]
    assert order == [k for r in rounds for k in r]


def test_fair_turns_within_one_claim_and_keyless_jobs_share_one_turn(backend: Backend) -> None:
    T = FAIR_TURN
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(6)], *[new() for _ in range(6)])
    insert(backend, new(key="B"), new(key="B"))
    got = keys_of(backend, claim(backend, 14))
    assert got == ["A"] * T + [None] * T + ["B", "B"] + ["A"] * (6 - T) + [None] * (6 - T)


def test_fair_turns_come_after_priority(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(2 * FAIR_TURN)])
    (urgent,) = insert(backend, new(key="A", priority=5))  # A's latest turn, the top priority
    insert(backend, new(key="B"))
    got = claim(backend, FAIR_TURN + 2)
    assert got[0].id == urgent and keys_of(backend, got[1:]) == ["A"] * FAIR_TURN + ["B"]


def test_a_late_tenant_is_not_queued_behind_a_backlog(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(200)])
    assert len(claim(backend, 50)) == 50  # A's backlog is being served
    insert(backend, *[new(key="B") for _ in range(5)])
    # B's jobs are taken within the next three rounds' worth of A's, not after A's 150
    assert keys_of(backend, claim(backend, 3 * FAIR_TURN)).count("B") == 5


def test_a_late_tenant_joins_the_round_being_served_not_ahead_of_it(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(200)])
    assert len(claim(backend, 50)) == 50
    insert(backend, *[new(key="C") for _ in range(40)])  # a big late batch: turns from now on
    got = keys_of(backend, claim(backend, 4 * FAIR_TURN))
    # the two keys share the claims: C neither goes first (all C) nor waits (all A)
    assert abs(got.count("A") - got.count("C")) <= FAIR_TURN


def test_a_key_whose_last_job_was_taken_rejoins_the_round_being_served(backend: Backend) -> None:
    # given A's jobs of round 0 all taken, while B still has jobs of rounds 0 and 1
    T = FAIR_TURN
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A") for _ in range(T)])
    insert(backend, *[new(key="B") for _ in range(2 * T)])
    assert keys_of(backend, claim(backend, T)) == ["A"] * T
    # when A enqueues again
    insert(backend, new(key="A"))
    # then its job has no pending turn of A's to follow: it takes the round being served (0),
    # not the round after its last turn (1, behind all of B's)
    order = [k for _ in range(2 * T + 1) for k in keys_of(backend, claim(backend, 1))]
    assert order == ["B"] * T + ["A"] + ["B"] * T


# --- the state a limit keeps is bounded ---------------------------------------------------------


def bucket_count(kind: str, backend: Backend) -> int:
    """Rate buckets the store holds (each store's own table or dict)."""
    if kind == "memory":
        return len(backend._tats)  # type: ignore[attr-defined]
    if kind == "sqlite":
        conn = backend._conns.get()  # type: ignore[attr-defined]
        return int(conn.execute("SELECT count(*) FROM limit_buckets").fetchone()[0])
    if kind == "postgres":
        rows = backend._run(  # type: ignore[attr-defined]
            lambda c: c.execute("SELECT count(*) FROM limit_buckets").fetchall()
        )
        return int(rows[0][0])
    pytest.skip("Redis buckets are keys with a TTL: tests/redis counts them")


def forget(backend: Backend) -> None:
    """What forgets lapsed buckets: the SQL stores' maintenance, memory's next claim."""
    from jobyard.backends.base import StoreTidyParams, as_tidying

    tidying = as_tidying(backend)
    if tidying is not None:
        tidying.store_tidy(StoreTidyParams())
    else:
        claim(backend)


def test_idle_keys_leave_no_bucket_behind(
    backend: Backend, clock: jobyard.FrozenClock, store: tuple[str, str]
) -> None:
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_rate=Rate(1, 10.0))))
    insert(backend, *[new(key=f"customer:{i}") for i in range(300)])
    assert len(claim(backend, 300)) == 300
    assert bucket_count(store[0], backend) == 300  # one per key, while it is closed
    forget(backend)
    assert bucket_count(store[0], backend) == 300  # none has opened yet: all kept
    clock.advance(10.0)
    forget(backend)
    assert bucket_count(store[0], backend) == 0


# --- status --------------------------------------------------------------------------------------


def test_limits_stats_show_each_limit_and_the_top_keys(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    backend.queues_configure(
        QueueConfig("q", max_concurrency=10, limits=QueueLimits(rate=Rate(10), key_concurrency=1))
    )
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "sms", QueueLimits(rate=Rate(1, 60.0)))]))
    insert(backend, *[new(key="big") for _ in range(4)], *[new(key="small") for _ in range(2)])
    insert(backend, new(name="sms", key="x"))
    claim(backend, 10)  # burst 1 of 10/s: one job starts
    rows = backend.limits_stats(LimitsStatsParams(("q",), top_keys=2))
    assert [(r.queue, r.job) for r in rows] == [("q", None), ("q", "sms")]
    queue_row, sms_row = rows
    assert (queue_row.running, queue_row.max_concurrency, queue_row.keys_full) == (1, 10, 1)
    assert queue_row.rate_used == pytest.approx(1.0)
    assert queue_row.limits.key_concurrency == 1
    top = [(k.key, k.pending + k.running) for k in queue_row.top_keys]
    assert top == [("big", 4), ("small", 2)]
    assert sms_row.limits.rate == Rate(1, 60.0) and sms_row.top_keys == ()
    clock.advance(60.0)
    (later,) = backend.limits_stats(LimitsStatsParams(("q",)))[:1]
    assert later.rate_used == 0.0


def test_a_job_names_full_rate_holds_back_its_due_jobs_and_not_another_names(
    backend: Backend,
) -> None:
    # given a job name allowed one start a minute, with three due jobs and one not due yet,
    # and another name in the same queue whose rate has room
    backend.limits_sync(
        LimitsSyncParams(
            [
                JobLimits("q", "sms", QueueLimits(rate=Rate(1, 60.0))),
                JobLimits("q", "mail", QueueLimits(rate=Rate(100))),
            ]
        )
    )
    insert(backend, *[new(name="sms") for _ in range(3)], new(name="sms", delay=60.0))
    # when its one start is taken and the other name's jobs arrive
    assert len(claim(backend, 10)) == 1
    insert(backend, new(name="mail"), new(name="mail"))
    rows = {r.job: r for r in backend.limits_stats(LimitsStatsParams(("q",)))}
    # then the full rate's scope has its two due jobs left, the delayed one not counted
    sms, mail = rows["sms"], rows["mail"]
    assert sms.rate_used == pytest.approx(1.0) and sms.running == 1
    assert (sms.due, sms.exact) == (2, True)
    # and the other name's due jobs are its own, under a rate with room
    assert (mail.due, mail.running, mail.rate_used) == (2, 0, 0.0)


def test_a_job_names_key_concurrency_holds_back_the_due_jobs_of_its_keys_at_their_cap(
    backend: Backend,
) -> None:
    # given a job name with key_concurrency=1 and jobs of two keys, one of them with three
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "sms", QueueLimits(key_concurrency=1))]))
    insert(backend, *[new(name="sms", key="a") for _ in range(3)], new(name="sms", key="b"))
    insert(backend, new(name="sms", key="a", delay=60.0))
    # when each key has its one job running, then more jobs arrive: the name's of a key with
    # none running, and another name's of the key at the cap
    assert sorted(keys_of(backend, claim(backend, 10))) == ["a", "b"]
    insert(backend, new(name="sms", key="c"), new(name="mail", key="a"), new(name="mail", key="c"))
    rows = {r.job: r for r in backend.limits_stats(LimitsStatsParams(("q",)))}
    # then the name's scope holds back the due jobs of its key at the cap, "a": two (not the
    # delayed one, nor the other name's, nor those of "c", which may start)
    sms = rows["sms"]
    assert (sms.keys_running, sms.keys_full, sms.due, sms.due_keys_full) == (2, 2, 3, 2)
    # and the queue's own row (no limit: it lists its top keys) counts every name's
    queue = rows[None]
    assert (queue.due, queue.due_keys_full, queue.keys_full) == (5, 0, 0)
    assert [(k.key, k.pending, k.running) for k in queue.top_keys] == [
        ("a", 4, 1),
        ("c", 2, 0),
    ]


def test_limits_stats_read_at_most_the_walk_of_each_queues_pending_jobs(
    backend: Backend,
) -> None:
    # given a job name with a rate and five due jobs of one key
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "sms", QueueLimits(rate=Rate(1, 60.0)))]))
    insert(backend, *[new(name="sms", key="k") for _ in range(5)])

    def sms(walk: int) -> tuple[int, int, bool]:
        rows = {r.job: r for r in backend.limits_stats(LimitsStatsParams(("q",), walk=walk))}
        (top,) = rows[None].top_keys
        return rows["sms"].due, top.pending, rows["sms"].exact

    # when the store may read fewer than the queue holds: the counts are of those it read,
    # and not exact (reading as many as the walk allows, it cannot tell there are no more)
    assert sms(3) == (3, 3, False)
    assert sms(5) == (5, 5, False)
    # and when the walk is longer than the backlog, all of them, exact
    assert sms(6) == (5, 5, True)


# --- through the App and a worker -----------------------------------------------------------------


def test_job_limits_declared_on_the_job_hold_across_two_workers(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    lock = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}

    @app.job(queue="sms", key_concurrency=1)
    def send(customer: str) -> None:
        with lock:
            running[customer] = running.get(customer, 0) + 1
            peak[customer] = max(peak.get(customer, 0), running[customer])
        time.sleep(0.02)
        with lock:
            running[customer] -= 1

    handles = [send.options(key=f"c{i % 3}").enqueue(f"c{i % 3}") for i in range(12)]
    with running_worker(app, concurrency=4), running_worker(app, concurrency=4):
        for h in handles:
            h.result(timeout=30)
    assert peak == {"c0": 1, "c1": 1, "c2": 1}


def test_a_worker_claims_again_when_the_rate_opens_not_a_poll_later(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    started: list[float] = []

    @app.job(queue="paced", rate_limit="10/s")  # one start every 100 ms
    def tick() -> None:
        started.append(time.monotonic())

    handles = tick.enqueue_many([((), {}) for _ in range(6)])
    t0 = time.monotonic()
    with running_worker(app, concurrency=4, poll_interval=2.0):
        for h in handles:
            h.result(timeout=10)
        took = time.monotonic() - t0
    assert 0.45 <= took < 1.5  # paced by the rate, yet never waiting out a 2 s poll
    gaps = [b - a for a, b in zip(sorted(started), sorted(started)[1:], strict=False)]
    assert min(gaps) > 0.05


def test_workflow_steps_are_limited_like_any_job(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    started: list[float] = []

    @app.job(queue="flow", rate_limit="20/s")  # a burst of 2, then one every 50 ms
    def member(i: int) -> int:
        started.append(time.monotonic())
        return i

    @app.job(queue="flow")
    def join(results: list[int]) -> int:
        return sum(results)

    h = jobyard.group(*[member.s(i) for i in range(8)]).then(join.s()).enqueue()
    with running_worker(app, concurrency=8):
        assert h.result(timeout=20) == sum(range(8))
    assert max(started) - min(started) >= 0.25  # 8 starts at 20/s: at least 6 intervals


# --- bad limits are refused where declared ------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"rate_limit": "fast"}, "'fast'"),
        ({"rate_limit": "0/s"}, "'0/s'"),
        ({"rate_limit": "5/0s"}, "'5/0s'"),
        ({"rate_limit": "10/fortnight"}, "'10/fortnight'"),
        ({"rate_limit": 100}, "100"),
        ({"key_rate_limit": "-1/s"}, "'-1/s'"),
        ({"key_concurrency": -1}, "-1"),
        ({"key_concurrency": 0}, "0"),
        ({"key_concurrency": 1.5}, "1.5"),
        ({"key_concurrency": True}, "True"),
    ],
)
def test_bad_job_limits_are_refused_at_the_decorator(options: dict, shown: str) -> None:  # type: ignore[type-arg]
    app = jobyard.App("memory://")

    def handler() -> None: ...

    with pytest.raises(ConfigurationError, match=f"got {shown}"):
        app.job(**options)(handler)
    assert app.registry == {}
    with pytest.raises(ConfigurationError, match=f"got {shown}"):
        app.configure_queue("q", **options)
    assert app.queues() == []


def test_rates_are_read_as_written() -> None:
    from jobyard.limits import parse_rate

    assert parse_rate("100/s") == Rate(100, 1.0)
    assert parse_rate("600/m") == Rate(600, 60.0)
    assert parse_rate(" 5 / 10s ") == Rate(5, 10.0)
    assert parse_rate("3/hour") == Rate(3, 3600.0)
    assert parse_rate("2/days") == Rate(2, 86400.0)
    assert Rate(600, 60.0).burst == 1 and Rate(100).burst == 10 and Rate(5).burst == 1
    assert [r.text() for r in (Rate(600, 60.0), Rate(5, 10.0))] == ["600/m", "5/10s"]


def test_bad_keys_are_refused_at_enqueue() -> None:
    app = jobyard.App("memory://")

    @app.job(key=lambda n: "" if n == 0 else f"k{n}")
    def task(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="limit key"):
        task.options(key="x" * 201).enqueue(1)
    with pytest.raises(ConfigurationError, match="limit key"):
        task.enqueue(0)
    assert app.get(task.enqueue(7).id).key == "k7"
    assert app.get(task.options(key="mine").enqueue(7).id).key == "mine"
    assert app.jobs(status="pending") and len(app.jobs()) == 2


def test_fair_on_a_queue_whose_jobs_have_no_keys_is_refused() -> None:
    app = jobyard.App("memory://")

    @app.job(queue="reports")
    def report(tenant: str) -> None: ...

    with pytest.raises(ConfigurationError, match="fair=True on queue 'reports'"):
        app.configure_queue("reports", fair=True)
    assert app.queues() == []
    with pytest.raises(ConfigurationError, match="got 'yes'"):
        app.configure_queue("reports", fair="yes")  # type: ignore[arg-type]

    @app.job(queue="reports", key=lambda tenant: tenant)
    def summary(tenant: str) -> None: ...

    assert app.configure_queue("reports", fair=True).limits.fair
    assert jobyard.App("memory://").configure_queue("elsewhere", fair=True).limits.fair


def test_status_lists_each_limit_how_full_and_the_busiest_keys(
    make_app: Callable[..., jobyard.App],
) -> None:
    from jobyard import views

    app = make_app()

    @app.job(queue="sms", key_concurrency=1)
    def send(customer: str) -> None: ...

    app.configure_queue("sms", max_concurrency=4, rate_limit="600/m")
    app.backend.limits_sync(LimitsSyncParams(app.job_limits()))
    for customer in ("a", "a", "a", "b"):
        send.options(key=customer).enqueue(customer)
    claim(app.backend, 10, queues=("sms",))
    view = views.status(app)
    queue_row, job_row = view.limits
    assert views.limit_rules(queue_row.limits, queue_row.max_concurrency) == [
        "max_concurrency=4",
        "rate=600/m",
    ]
    assert (queue_row.running, queue_row.rate_used is not None) == (1, True)
    # The burst of 600/m is one start: the first job (of a) runs, the rest wait.
    assert [(k.key, k.pending, k.running) for k in queue_row.top_keys] == [
        ("a", 2, 1),
        ("b", 1, 0),
    ]
    assert (job_row.job, views.limit_rules(job_row.limits)) == ("send", ["key_concurrency=1"])
    assert (job_row.keys_running, job_row.keys_full) == (1, 1)
    # and what each limit holds back: the queue's full rate its three due jobs, the name's key
    # cap the two of the key at it
    assert view.held_back(queue_row) == {"max_concurrency": 0, "rate": 3}
    assert view.held_back(job_row) == {"key_concurrency": 2}
    # and, where the store read only part of the backlog, a lower bound, except the queue's own
    # max_concurrency and rate, which count the queue's whole pending backlog
    walked, _ = app.backend.limits_stats(LimitsStatsParams(("sms",), walk=2))
    assert (walked.due, walked.exact) == (2, False)
    assert views.held_back(walked) == {"max_concurrency": 0, "rate": 2}
    assert views.held_back(walked, backlog=3) == {"max_concurrency": 0, "rate": 3}
