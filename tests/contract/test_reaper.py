"""The lease reaper on every store: the rule decided once above the store, the move fenced.

``leases_lapsed`` reads the running jobs whose lease lapsed; ``jobyard.retry.decide_lapsed``
decides each with the job's own retry policy; ``leases_reap`` applies the decisions only where
the lease is still the lapsed one, so a renewal or an ack between the read and the move wins.
"""

from __future__ import annotations

import random
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
    JobsInsertParams,
    Lapsed,
    LeasesLapsedParams,
    LeasesReapParams,
    LeasesRenewParams,
    NewJob,
    Outcome,
    QueueConfig,
    ReapMove,
    ThroughputParams,
)
from jobyard.retry import Backoff, decide_lapsed
from jobyard.worker.reaper import reap

PAYLOAD = '{"args":[],"kwargs":{}}'


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(name="task", queue=queue, payload=PAYLOAD, **kw)  # type: ignore[arg-type]


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def insert(backend: Backend, *jobs: NewJob) -> list[str]:
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


def claim(backend: Backend, queue: str = "q", worker: str = "w1"):
    return backend.jobs_claim(JobsClaimParams(worker, (queue,), 10))


def lapsed(backend: Backend) -> list[Lapsed]:
    return backend.leases_lapsed(LeasesLapsedParams())


def apply(backend: Backend, moves: list[ReapMove]) -> list[tuple[str, str]]:
    return [(r.id, r.status) for r in backend.leases_reap(LeasesReapParams(moves))]


def test_lapsed_reads_what_the_decision_needs_and_moves_nothing(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a job with its own retry policy whose worker stopped renewing its lease, and one
    # whose lease runs exactly until now (still held)
    policy = Backoff("linear", base=4.0, jitter=False).to_json()
    job_id, held_id = insert(backend, new(lease=5, max_attempts=3, backoff=policy), new(lease=6))
    by_id = {c.id: c for c in claim(backend)}
    backend.jobs_cancel(JobsCancelParams(held_id, by="ops"))
    clock.advance(6)
    # when the reaper reads the lapsed leases, twice
    first, again = lapsed(backend), lapsed(backend)
    # then it reads the lapsed one only, as the claim gave it, and the read changed nothing
    assert first == again
    assert [(j.id, j.token, j.name, j.queue) for j in first] == [
        (job_id, by_id[job_id].token, "task", "q")
    ]
    (job,) = first
    assert (job.attempts, job.max_attempts, job.delivery, job.cancel_requested) == (
        1,
        3,
        "at_least_once",
        False,
    )
    assert Backoff.from_json(job.backoff) == Backoff.from_json(policy)
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.status == "running"
    # and a lapsed job someone asked to cancel says so
    clock.advance(1)
    asked = {j.id: j.cancel_requested for j in lapsed(backend)}
    assert asked == {job_id: False, held_id: True}


def test_a_renewal_that_races_the_reaper_wins(backend: Backend, clock: jobyard.FrozenClock) -> None:
    # given a lapsed lease the reaper has read and decided on
    (job_id,) = insert(backend, new(lease=5))
    (c,) = claim(backend)
    clock.advance(6)
    moves = [decide_lapsed(j) for j in lapsed(backend)]
    assert [(m.id, m.kind) for m in moves] == [(job_id, "retry")]
    # when the worker, only slow, renews it before the reaper's move lands
    assert backend.leases_renew(LeasesRenewParams("w1", [(c.id, c.token)])).lost == []
    # then the move is skipped: the job still runs under its token, and its worker settles it
    assert apply(backend, moves) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.attempts, rec.error) == ("running", 1, None)
    assert backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed")])) == []
    assert lapsed(backend) == []


def test_an_ack_that_races_the_reaper_wins(backend: Backend, clock: jobyard.FrozenClock) -> None:
    # given a lapsed lease on its last attempt, decided "failed" by the reaper
    (job_id,) = insert(backend, new(lease=5, max_attempts=1))
    (c,) = claim(backend)
    clock.advance(6)
    moves = [decide_lapsed(j) for j in lapsed(backend)]
    assert [(m.id, m.kind) for m in moves] == [(job_id, "failed")]
    # when the worker's completion lands first
    assert backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed")])) == []
    # then the move is skipped: completed, and counted once, as completed
    assert apply(backend, moves) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.error) == ("completed", None)
    history = backend.throughput_get(ThroughputParams(since=3600))
    assert [(m.completed, m.failed) for m in history] == [(1, 0)]


def test_a_decision_on_an_earlier_attempt_moves_nothing(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a job reaped and claimed again, whose second lease lapsed too
    (job_id,) = insert(backend, new(lease=5, backoff=Backoff("fixed", 0.0).to_json()))
    claim(backend)
    clock.advance(6)
    old = [decide_lapsed(j) for j in lapsed(backend)]
    assert apply(backend, old) == [(job_id, "pending")]
    (second,) = claim(backend, worker="w2")
    clock.advance(6)
    # when a reaper applies the moves it decided on the first attempt (a second reaper, late)
    assert apply(backend, old) == []
    # then the second attempt is untouched until a decision on its own token
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.worker_id) == ("running", "w2")
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "pending")]
    assert backend.jobs_ack(JobsAckParams([Outcome(job_id, second.token, "completed")])) == [job_id]


def test_a_cancellation_asked_after_the_read_is_not_retried(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a lapsed lease decided "retry"
    (job_id,) = insert(backend, new(lease=5))
    claim(backend)
    clock.advance(6)
    moves = [decide_lapsed(j) for j in lapsed(backend)]
    assert [m.kind for m in moves] == ["retry"]
    # when someone asks to cancel the job before the move lands
    backend.jobs_cancel(JobsCancelParams(job_id, by="ops"))
    # then the retry is skipped and the next tick cancels it
    assert apply(backend, moves) == []
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "cancelled")]
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.error, rec.cancelled_by) == (CANCEL_LOST_ERROR, "ops")


def test_the_reaper_waits_the_jobs_own_backoff(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a job retried after 30 s, then 60 s (exponential, no jitter), and a job of a queue
    # whose policy waits 7 s (linear) where the job sets none
    own = Backoff("exponential", base=30.0, jitter=False).to_json()
    backend.queues_configure(
        QueueConfig("r", backoff=Backoff("linear", 7.0, jitter=False).to_json())
    )
    (job_id,) = insert(backend, new(lease=5, max_attempts=3, backoff=own))
    (queued_id,) = insert(backend, new("r", lease=5))
    for wait in (30.0, 60.0):
        claim(backend)
        clock.advance(6)
        # when its lease lapses
        assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "pending")]
        # then it is due again after its backoff, not at once
        rec = backend.jobs_get(job_id)
        assert rec is not None and (rec.status, rec.error) == ("pending", LEASE_LOST_ERROR)
        assert rec.run_at == pytest.approx(clock.now() + wait, abs=0.01)
        clock.advance(wait - 0.5)
        assert claim(backend) == []
        clock.advance(0.5)
    claim(backend)
    clock.advance(6)
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "failed")]  # attempts spent
    # and the queue's policy applies to a job that has none of its own
    claim(backend, "r")
    clock.advance(6)
    assert [(r.id, r.status) for r in reap(backend)] == [(queued_id, "pending")]
    rec = backend.jobs_get(queued_id)
    assert rec is not None and rec.run_at == pytest.approx(clock.now() + 7.0, abs=0.01)
    clock.advance(7.0)
    assert [c.id for c in claim(backend, "r")] == [queued_id]


def test_the_decision_is_the_retry_policys() -> None:
    # A pure function: no store. Given lapsed leases in each case, the move each one gets.
    def job(**kw: object) -> Lapsed:
        fields: dict[str, object] = {"attempts": 2, "max_attempts": 4, "backoff": None}
        fields.update(kw)
        return Lapsed("7", "tok", "task", "q", **fields)  # type: ignore[arg-type]

    rng = random.Random(7)
    asked = decide_lapsed(job(cancel_requested=True, delivery="at_most_once"))
    assert (asked.kind, asked.error, asked.delay) == ("cancelled", CANCEL_LOST_ERROR, 0.0)
    once = decide_lapsed(job(delivery="at_most_once"))
    assert (once.kind, once.error) == ("failed", AT_MOST_ONCE_LOST_ERROR)
    spent = decide_lapsed(job(attempts=4))
    assert (spent.kind, spent.error) == ("failed", LEASE_LOST_ERROR)
    # another attempt after the default policy's wait for attempt 2 (2 s, equal jitter)...
    delays = {decide_lapsed(job(), rng).delay for _ in range(50)}
    assert all(1.0 <= d <= 2.0 for d in delays) and len(delays) > 1
    # ...or the job's own, capped where the policy caps it
    capped = Backoff("exponential", base=10.0, cap=25.0, jitter=False).to_json()
    moves = [decide_lapsed(job(attempts=n, max_attempts=9, backoff=capped)) for n in (1, 2, 3)]
    assert [(m.id, m.token, m.kind, m.delay) for m in moves] == [
        ("7", "tok", "retry", 10.0),
        ("7", "tok", "retry", 20.0),
        ("7", "tok", "retry", 25.0),
    ]
