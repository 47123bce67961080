"""The Backend protocol, driven directly: the state moves of docs/backend-contract.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    AT_MOST_ONCE_LOST_ERROR,
    CANCEL_LOST_ERROR,
    LEASE_LOST_ERROR,
    Backend,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsInsertParams,
    JobsListParams,
    JobsPurgeParams,
    JobsWaitParams,
    LeasesRenewParams,
    NewJob,
    Outcome,
    Progress,
    QueueConfig,
    StatsParams,
    WorkerInfo,
    WorkersBeatParams,
    as_expiring,
)
from jobyard.worker.reaper import reap

PAYLOAD = '{"args":[],"kwargs":{}}'
# The default retry policy's longest wait after a first attempt (exponential, base 1 s, equal
# jitter): how far a test moves the clock for a job the reaper gave another attempt.
FIRST_BACKOFF = 1.0


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(name=str(kw.pop("name", "task")), queue=queue, payload=PAYLOAD, **kw)  # type: ignore[arg-type]


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def insert(backend: Backend, *jobs: NewJob) -> list[str]:
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


def claim(backend: Backend, limit: int = 10, queues: tuple[str, ...] = ("q",), worker: str = "w1"):
    return backend.jobs_claim(JobsClaimParams(worker, queues, limit))


def test_insert_then_get_shows_a_pending_job(backend: Backend, clock: jobyard.FrozenClock) -> None:
    (job_id,) = insert(backend, new(priority=3))
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.attempts, rec.max_attempts, rec.priority) == ("pending", 0, 4, 3)
    assert rec.created_at == pytest.approx(clock.now(), abs=0.01)
    assert rec.run_at == pytest.approx(clock.now(), abs=0.01)
    assert backend.jobs_get("999999999") is None
    assert backend.jobs_get("not-an-id") is None


def test_claim_complete_lifecycle(backend: Backend, clock: jobyard.FrozenClock) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    assert (c.id, c.attempts, c.lease) == (job_id, 1, 30.0)
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.status == "running" and rec.worker_id == "w1"
    assert claim(backend) == []  # never to two claimers
    clock.advance(2)
    assert backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed", result="42")])) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.result, rec.attempts) == ("completed", "42", 1)
    assert rec.finished_at == pytest.approx(clock.now(), abs=0.01)


def test_claim_order_is_priority_then_run_at_then_enqueue_order(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    low_late = insert(backend, new(priority=0, delay=5))[0]
    low_a, low_b = insert(backend, new(priority=0), new(priority=0))
    high = insert(backend, new(priority=9))[0]
    earlier = insert(backend, new(priority=0, run_at=clock.now() - 10))[0]
    assert [c.id for c in claim(backend)] == [high, earlier, low_a, low_b]
    clock.advance(5)
    assert [c.id for c in claim(backend)] == [low_late]


def test_claim_respects_limit_and_queues(backend: Backend) -> None:
    insert(backend, new("a"), new("a"), new("a"), new("b"))
    assert len(claim(backend, 2, ("a",))) == 2
    assert {c.queue for c in claim(backend, 10, ("b",))} == {"b"}
    assert len(claim(backend, 10, ("a", "b"))) == 1


def test_delayed_job_waits_for_its_time(backend: Backend, clock: jobyard.FrozenClock) -> None:
    insert(backend, new(delay=60))
    assert claim(backend) == []
    clock.advance(59)
    assert claim(backend) == []
    clock.advance(1.5)
    assert len(claim(backend)) == 1


def test_retry_outcome_returns_to_pending_after_delay(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "retry", error="boom", delay=10)]))
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.error, rec.attempts) == ("pending", "boom", 1)
    assert rec.run_at == pytest.approx(clock.now() + 10, abs=0.01)
    assert claim(backend) == []
    clock.advance(10.5)
    (again,) = claim(backend)
    assert again.attempts == 2 and again.token != c.token


def test_failed_outcome_is_the_dead_letter(backend: Backend) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "failed", error="Traceback: x")]))
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.error) == ("failed", "Traceback: x")
    assert rec.finished_at is not None
    assert claim(backend) == []


def test_release_does_not_count_the_attempt(backend: Backend) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "release")]))
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.attempts) == ("pending", 0)
    assert claim(backend)[0].attempts == 1


def test_stale_token_is_refused_everywhere(backend: Backend, clock: jobyard.FrozenClock) -> None:
    (job_id,) = insert(backend, new(lease=5))
    (first,) = claim(backend, worker="w1")
    clock.advance(6)
    assert [r.id for r in reap(backend)] == [job_id]
    clock.advance(FIRST_BACKOFF)
    (second,) = claim(backend, worker="w2")
    stale = Outcome(first.id, first.token, "completed", result='"first"')
    assert backend.jobs_ack(JobsAckParams([stale])) == [job_id]
    assert backend.leases_renew(LeasesRenewParams("w1", [(first.id, first.token)])).lost == [job_id]
    assert backend.leases_renew(LeasesRenewParams("w2", [(second.id, second.token)])).lost == []
    fresh = Outcome(second.id, second.token, "completed", result='"second"')
    assert backend.jobs_ack(JobsAckParams([fresh])) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.result, rec.attempts, rec.worker_id) == (
        "completed",
        '"second"',
        2,
        "w2",
    )
    assert backend.jobs_ack(JobsAckParams([fresh])) == [job_id]  # settled twice: refused


def test_renewal_keeps_a_lease_alive(backend: Backend, clock: jobyard.FrozenClock) -> None:
    (job_id,) = insert(backend, new(lease=5))
    (c,) = claim(backend)
    for _ in range(4):
        clock.advance(3)
        assert backend.leases_renew(LeasesRenewParams("w1", [(c.id, c.token)])).lost == []
        assert reap(backend) == []
    clock.advance(5.5)
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "pending")]
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.error == LEASE_LOST_ERROR and rec.attempts == 1


def test_expiry_leaves_pending_running_and_kept_jobs_alone(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a pending, a running, a completed and a failed job (every store keeps finished jobs
    # at least a day by default)
    pending, running, done, dead = insert(backend, new(), new(), new(), new())
    claimed = {c.id: c for c in claim(backend, 4)}
    backend.jobs_ack(
        JobsAckParams(
            [
                Outcome(done, claimed[done].token, "completed", result="1"),
                Outcome(dead, claimed[dead].token, "failed", error="e"),
                Outcome(pending, claimed[pending].token, "release"),
            ]
        )
    )
    clock.advance(3600)
    # when the store applies its own retention (a store without one has nothing to apply)
    expiring = as_expiring(backend)
    assert expiring is None or expiring.jobs_expire(JobsExpireParams()) == 0
    # then every job is still there, as it was
    statuses = {j: r.status for j in (pending, running, done, dead) if (r := backend.jobs_get(j))}
    assert statuses == {pending: "pending", running: "running", done: "completed", dead: "failed"}


def test_reaper_fails_a_job_whose_attempts_are_spent(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    (job_id,) = insert(backend, new(lease=1, max_attempts=2))
    for expected in ("pending", "failed"):
        claim(backend)
        clock.advance(2)
        assert [(r.id, r.status) for r in reap(backend)] == [(job_id, expected)]
        clock.advance(FIRST_BACKOFF)
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.attempts, rec.error) == (
        "failed",
        2,
        LEASE_LOST_ERROR,
    )


def test_reaper_never_reruns_an_at_most_once_job(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    (job_id,) = insert(backend, new(lease=1, delivery="at_most_once"))
    claim(backend)
    clock.advance(2)
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "failed")]
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.error == AT_MOST_ONCE_LOST_ERROR
    assert claim(backend) == []


def test_reaper_cancels_a_job_whose_cancellation_was_asked(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a running job someone asked to cancel, whose worker then died
    (job_id,) = insert(backend, new(lease=1))
    claim(backend)
    backend.jobs_cancel(JobsCancelParams(job_id, by="ops"))
    clock.advance(2)
    # then the reaper cancels it instead of running it again
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "cancelled")]
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.error, rec.cancelled_by) == ("cancelled", CANCEL_LOST_ERROR, "ops")
    assert rec.finished_at is not None
    stats = {s.queue: s for s in backend.stats_get(StatsParams())}["q"]
    assert (stats.counts["cancelled"], stats.counts["running"]) == (1, 0)
    assert claim(backend) == []


def test_idempotency_key_scope_is_pending_and_running(backend: Backend) -> None:
    first = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0]
    again = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0]
    other_queue = backend.jobs_insert(JobsInsertParams([new("r", idempotency_key="order-7")]))[0]
    assert first.created and not again.created and again.id == first.id
    assert other_queue.created and other_queue.id != first.id
    (c,) = claim(backend)
    running = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0]
    assert running.id == first.id and not running.created
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed", result="null")]))
    # once it completed the key is free (on Redis an entry left behind for the key would not
    # show here, since every reader re-checks the holder's status: tests/redis/test_backend.py
    # checks the entry itself, for every way a job ends)
    after = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0]
    assert after.created and after.id != first.id


def test_idempotency_key_repeated_in_one_batch(backend: Backend) -> None:
    a, b, c = backend.jobs_insert(
        JobsInsertParams([new(idempotency_key="k"), new(idempotency_key="k"), new()])
    )
    assert a.created and not b.created and b.id == a.id and c.created


def test_max_pending_refuses_the_whole_batch(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", max_pending=3))
    insert(backend, new(), new())
    with pytest.raises(jobyard.QueueFull):
        insert(backend, new(), new())
    assert len(backend.jobs_list(JobsListParams(queue="q", limit=100))) == 2
    insert(backend, new())
    with pytest.raises(jobyard.QueueFull):
        insert(backend, new())
    claim(backend, 1)
    insert(backend, new())  # a running job no longer counts as pending


def test_a_batch_too_large_for_one_call_is_all_or_nothing(backend: Backend) -> None:
    # given a queue with room for 2,999 jobs (Redis writes a batch of 3,000 in six scripts)
    backend.queues_configure(QueueConfig("q", max_pending=2999))
    jobs = [new(idempotency_key=f"k{i}") for i in range(3000)]
    # when a batch of 3,000 is enqueued, it is refused whole, and leaves no key held
    with pytest.raises(jobyard.QueueFull):
        backend.jobs_insert(JobsInsertParams(jobs))
    assert backend.jobs_list(JobsListParams(queue="q")) == []
    assert [s.counts["pending"] for s in backend.stats_get(StatsParams())] in ([], [0])
    # and with room for it, all of it lands: counted, listed, claimable in enqueue order
    backend.queues_configure(QueueConfig("q", max_pending=3000))
    got = backend.jobs_insert(JobsInsertParams(jobs))
    assert all(i.created for i in got)
    (stats,) = backend.stats_get(StatsParams())
    assert stats.counts["pending"] == 3000
    assert [r.id for r in backend.jobs_list(JobsListParams(queue="q", limit=3))] == [
        i.id for i in got[:-4:-1]
    ]
    assert [c.id for c in claim(backend, 1500)] == [i.id for i in got[:1500]]


def test_queue_settings_apply_where_the_job_sets_none(backend: Backend) -> None:
    backoff = jobyard.Backoff("linear", base=2.0).to_json()
    backend.queues_configure(QueueConfig("q", max_attempts=7, backoff=backoff))
    a, b = insert(backend, new(), new(max_attempts=2))
    recs = {r.id: r for r in backend.jobs_list(JobsListParams(queue="q"))}
    assert (recs[a].max_attempts, recs[b].max_attempts) == (7, 2)
    claimed = {c.id: c for c in claim(backend)}
    assert jobyard.Backoff.from_json(claimed[a].backoff).kind == "linear"
    assert [q.name for q in backend.queues_list()] == ["q"]


def test_paused_queue_is_not_claimed(backend: Backend) -> None:
    backend.queues_configure(QueueConfig("q", paused=True))
    insert(backend, new())
    assert claim(backend) == []
    backend.queues_configure(QueueConfig("q"))
    assert len(claim(backend)) == 1


def test_cancel_and_retry(backend: Backend) -> None:
    a, b = insert(backend, new(idempotency_key="x"), new())
    assert backend.jobs_cancel(JobsCancelParams(a)).status == "cancelled"
    with pytest.raises(jobyard.InvalidTransition):
        backend.jobs_cancel(JobsCancelParams(a))
    with pytest.raises(jobyard.JobNotFound):
        backend.jobs_cancel(JobsCancelParams("424242"))
    (c,) = claim(backend)
    assert c.id == b
    with pytest.raises(jobyard.InvalidTransition):
        backend.jobs_cancel(JobsCancelParams(b, pending_only=True))  # cancel_pending's move
    with pytest.raises(jobyard.InvalidTransition):
        backend.jobs_retry(b)
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "failed", error="e")]))
    rec = backend.jobs_retry(b)
    assert (rec.status, rec.attempts) == ("pending", 0)
    holder = insert(backend, new(idempotency_key="x"))[0]  # a's key is free once cancelled
    with pytest.raises(jobyard.DuplicateJob):
        backend.jobs_retry(a)
    backend.jobs_cancel(JobsCancelParams(holder))
    assert backend.jobs_retry(a).status == "pending"


def test_list_filters_and_newest_first(backend: Backend) -> None:
    a, b, c = insert(backend, new(), new(name="other"), new("r"))
    assert [r.id for r in backend.jobs_list(JobsListParams())] == [c, b, a]
    assert [r.id for r in backend.jobs_list(JobsListParams(queue="q"))] == [b, a]
    assert [r.id for r in backend.jobs_list(JobsListParams(name="other"))] == [b]
    assert [r.id for r in backend.jobs_list(JobsListParams(limit=1, offset=1))] == [b]
    assert backend.jobs_list(JobsListParams(status="running")) == []


def test_purge_removes_old_finished_jobs_only(backend: Backend, clock: jobyard.FrozenClock) -> None:
    insert(backend, new(), new(), new())
    done, failed = claim(backend, 2)
    backend.jobs_ack(
        JobsAckParams(
            [
                Outcome(done.id, done.token, "completed", result="1"),
                Outcome(failed.id, failed.token, "failed", error="e"),
            ]
        )
    )
    clock.advance(100)
    assert backend.jobs_purge(JobsPurgeParams(("completed",), older_than=200)) == 0
    assert backend.jobs_purge(JobsPurgeParams(("completed",), older_than=50)) == 1
    assert backend.jobs_get(done.id) is None and backend.jobs_get(failed.id) is not None
    with pytest.raises(ValueError):
        backend.jobs_purge(JobsPurgeParams(("pending",)))


def test_stats_and_workers(backend: Backend, clock: jobyard.FrozenClock) -> None:
    insert(backend, new(), new(), new("r"))
    (c,) = claim(backend, 1)
    backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed", result="1")]))
    stats = {s.queue: s for s in backend.stats_get(StatsParams())}
    assert stats["q"].counts == {
        "waiting": 0,
        "pending": 1,
        "running": 0,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert stats["q"].completed_last_minute == 1 and stats["r"].counts["pending"] == 1
    assert [s.queue for s in backend.stats_get(StatsParams(("r",)))] == ["r"]
    clock.advance(61)
    assert backend.stats_get(StatsParams(("q",)))[0].completed_last_minute == 0

    info = WorkerInfo("w-1", "host", 123, ("q",), 8, clock.now(), 0.0)
    backend.workers_beat(WorkersBeatParams(info))
    (seen,) = backend.workers_list()
    assert (seen.id, seen.pid, seen.queues) == ("w-1", 123, ("q",))
    assert seen.last_seen == pytest.approx(clock.now(), abs=0.01)
    clock.advance(100)
    backend.workers_beat(WorkersBeatParams(WorkerInfo("w-2", "h", 1, ("q",), 1, 0, 0)))
    assert [w.id for w in backend.workers_list()] == ["w-2"]  # w-1 went silent
    backend.workers_beat(
        WorkersBeatParams(WorkerInfo("w-2", "h", 1, ("q",), 1, 0, 0), stopping=True)
    )
    assert backend.workers_list() == []


def test_a_silent_worker_is_gone_after_its_own_limit_even_with_no_other_worker(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given two workers that stated different silence limits, then went silent
    def info(wid: str) -> WorkerInfo:
        return WorkerInfo(wid, "host", 1, ("q",), 1, clock.now(), 0.0)

    backend.workers_beat(WorkersBeatParams(info("short"), forget_after=10.0))
    backend.workers_beat(WorkersBeatParams(info("long"), forget_after=100.0))

    # when less than the short limit passes, both are live
    clock.advance(9)
    assert sorted(w.id for w in backend.workers_list()) == ["long", "short"]

    # when it has passed, the listing alone (no beat of any worker) drops the short one
    clock.advance(2)
    assert [w.id for w in backend.workers_list()] == ["long"]

    # and its entry is gone from the store: going back in time does not bring it back
    clock.advance(-11)
    assert [w.id for w in backend.workers_list()] == ["long"]


def test_wait_is_woken_by_an_insert(backend: Backend) -> None:
    import threading
    import time

    # given a waiter on a settled store: its first waits may return at once (PostgreSQL wakes
    # every waiter when its LISTEN connection comes up), so it waits until one times out
    settled = threading.Event()
    result: list[tuple[bool, float]] = []

    def waiter() -> None:
        for _ in range(50):
            if not backend.jobs_wait(JobsWaitParams(["q"], 0.2)):
                settled.set()
                result.append((backend.jobs_wait(JobsWaitParams(["q"], 5)), time.monotonic()))
                return

    t = threading.Thread(target=waiter)
    t.start()
    assert settled.wait(20), "the waiter never timed out: it is woken without a reason"
    time.sleep(0.05)  # let the waiter block again; correctness does not depend on it
    # when a job is inserted
    started = time.monotonic()
    insert(backend, new())
    t.join(10)
    # then the wait returns True, after the insert began and well before its timeout
    ((woke, at),) = result
    assert woke is True
    assert started <= at < started + 4


def test_a_waiting_claim_takes_the_job_whose_insert_woke_it(backend: Backend) -> None:
    import threading
    import time

    # given an idle worker's claim waiting for a push signal (an early return is allowed: it
    # claims nothing and waits again)
    got: list[tuple[list[str], float]] = []
    waiting = threading.Event()

    def waiter() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            waiting.set()
            jobs = backend.jobs_claim(JobsClaimParams("w1", ["q"], 8, wait=30))
            if jobs:
                got.append(([j.id for j in jobs], time.monotonic()))
                return

    t = threading.Thread(target=waiter)
    t.start()
    assert waiting.wait(10)
    time.sleep(0.2)  # let the waiter block; correctness does not depend on it
    # when a job is inserted
    started = time.monotonic()
    (job_id,) = insert(backend, new())
    t.join(25)
    # then the waiting claim returns it, claimed, long before its 30 s wait ran out
    ((ids, at),) = got
    assert ids == [job_id]
    assert started <= at < started + 4
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.worker_id) == ("running", "w1")


def test_a_waiting_claim_claims_after_its_wait_even_unwoken(backend: Backend) -> None:
    # given a due job (its push signal may have been taken already) and nothing else
    (job_id,) = insert(backend, new())
    # when a claim waits at most 0.3 s, then it claims the job: at once or after its wait
    jobs = backend.jobs_claim(JobsClaimParams("w1", ["q"], 8, wait=0.3))
    assert [j.id for j in jobs] == [job_id]
    # and with nothing due, it returns nothing after its wait
    assert backend.jobs_claim(JobsClaimParams("w1", ["q"], 8, wait=0.2)) == []


def test_corrupt_payload_is_stored_as_given(backend: Backend) -> None:
    (job_id,) = insert(backend, NewJob(name="task", queue="q", payload="{not json"))
    (c,) = claim(backend)
    assert c.payload == "{not json"
    assert backend.jobs_get(job_id) is not None


# cancelling a running job, and progress -------------------------------------------------------


def test_a_cancel_request_reaches_the_renewal_and_the_job_ends_cancelled(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a running job and another beside it
    a, b = insert(backend, new(), new())
    held = {c.id: c for c in claim(backend)}
    clock.advance(2)
    # when someone asks to cancel the first
    asked = backend.jobs_cancel(JobsCancelParams(a, by="alice"))
    # then it still runs, with the request recorded, and only its renewal reports it
    assert (asked.status, asked.cancelled_by, asked.finished_at) == ("running", "alice", None)
    assert asked.cancel_requested_at == pytest.approx(clock.now(), abs=0.01)
    pairs = [(a, held[a].token), (b, held[b].token)]
    renewed = backend.leases_renew(LeasesRenewParams("w1", pairs))
    assert (renewed.lost, renewed.cancel_requested) == ([], [a])
    # and the worker's "cancelled" outcome finishes it, keeping who asked and when
    out = Outcome(a, held[a].token, "cancelled", error="cancelled on request: stopped")
    assert backend.jobs_ack(JobsAckParams([out])) == []
    rec = backend.jobs_get(a)
    assert rec is not None
    assert (rec.status, rec.cancelled_by, rec.error) == (
        "cancelled",
        "alice",
        "cancelled on request: stopped",
    )
    assert rec.cancel_requested_at == asked.cancel_requested_at
    assert rec.finished_at == pytest.approx(clock.now(), abs=0.01)
    with pytest.raises(jobyard.InvalidTransition):
        backend.jobs_cancel(JobsCancelParams(a))
    # a re-drive forgets the request: the job runs again in full
    redriven = backend.jobs_retry(a)
    assert (redriven.cancel_requested_at, redriven.cancelled_by) == (None, None)


def test_a_pending_job_cancelled_at_once_records_who_and_when(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    (job_id,) = insert(backend, new())
    rec = backend.jobs_cancel(JobsCancelParams(job_id, by="cron cleanup"))
    assert (rec.status, rec.cancelled_by) == ("cancelled", "cron cleanup")
    assert rec.cancel_requested_at == rec.finished_at == pytest.approx(clock.now(), abs=0.01)


def test_a_stale_worker_cannot_settle_or_report_through_the_cancel_path(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a job whose first worker stalled past its lease, now run again under a new token
    (job_id,) = insert(backend, new(lease=5))
    (first,) = claim(backend)
    clock.advance(6)
    reap(backend)
    clock.advance(FIRST_BACKOFF)
    (second,) = claim(backend, worker="w2")
    backend.jobs_cancel(JobsCancelParams(job_id, by="bob"))
    # when the stalled worker renews with progress, and acks "cancelled", on its old token
    stale = backend.leases_renew(
        LeasesRenewParams("w1", [(job_id, first.token)], [Progress(job_id, 0.9, "stale")])
    )
    refused = backend.jobs_ack(JobsAckParams([Outcome(job_id, first.token, "cancelled")]))
    # then both are refused: no progress, no cancel report, the new attempt still runs
    assert (stale.lost, stale.cancel_requested, refused) == ([job_id], [], [job_id])
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.progress, rec.progress_note) == ("running", None, None)
    # and the current worker's token does both
    fresh = backend.leases_renew(
        LeasesRenewParams("w2", [(job_id, second.token)], [Progress(job_id, 0.5, "half")])
    )
    assert (fresh.lost, fresh.cancel_requested) == ([], [job_id])
    done = backend.jobs_ack(JobsAckParams([Outcome(job_id, second.token, "cancelled")]))
    assert done == []
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.progress, rec.progress_note) == ("cancelled", 0.5, "half")


def test_progress_rides_on_the_renewal_of_its_own_job(backend: Backend) -> None:
    a, b = insert(backend, new(), new())
    held = {c.id: c for c in claim(backend)}
    pairs = [(a, held[a].token), (b, held[b].token)]
    # the first beat carries a's progress; b reports none
    backend.leases_renew(LeasesRenewParams("w1", pairs, [Progress(a, 0.25, "1 of 4")]))
    # the next one moves a on and clears its note; a beat without progress keeps the last
    backend.leases_renew(LeasesRenewParams("w1", pairs, [Progress(a, 1.0)]))
    backend.leases_renew(LeasesRenewParams("w1", pairs))
    ra, rb = backend.jobs_get(a), backend.jobs_get(b)
    assert ra is not None and rb is not None
    assert (ra.progress, ra.progress_note) == (1.0, None)
    assert (rb.progress, rb.progress_note) == (None, None)
    backend.leases_renew(LeasesRenewParams("w1", pairs, [Progress(b, 0.0, "é" * 200)]))
    rb = backend.jobs_get(b)
    assert rb is not None and (rb.progress, rb.progress_note) == (0.0, "é" * 200)


@pytest.mark.parametrize(
    ("fraction", "note"),
    [(1.5, None), (-0.1, None), (float("nan"), None), (True, None), (0.5, "x" * 201)],
)
def test_progress_out_of_bounds_is_refused(fraction: object, note: object) -> None:
    with pytest.raises(jobyard.ConfigurationError):
        Progress("1", fraction, note)  # type: ignore[arg-type]
