"""The throughput history and the oldest pending job's age, on every store.

``jobs_ack`` and ``leases_reap`` add each completed and failed job to its queue's minute in the
store (``throughput_get``), so another App on the same store (a restarted dashboard) reads the
same history; ``jobs_expire`` drops minutes past ``THROUGHPUT_KEEP``. ``stats_get`` tells the
run_at of each queue's oldest due pending job: the earliest of its priority levels' heads of the
line (the first due job in claim order), which outside fair queues is the oldest due job.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    FAIR_TURN,
    THROUGHPUT_KEEP,
    Backend,
    JobsAckParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsInsertParams,
    NewJob,
    Outcome,
    QueueConfig,
    QueueLimits,
    StatsParams,
    ThroughputMinute,
    ThroughputParams,
)
from jobyard.worker.reaper import reap

PAYLOAD = '{"args":[],"kwargs":{}}'
T0 = 1_800_000_000.0  # the clock fixture's instant: a minute's start (divisible by 60)


def new(queue: str, **kw: object) -> NewJob:
    return NewJob(name="task", queue=queue, payload=PAYLOAD, **kw)  # type: ignore[arg-type]


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def settle(backend: Backend, queue: str, *kinds: str) -> None:
    backend.jobs_insert(JobsInsertParams([new(queue) for _ in kinds]))
    jobs = backend.jobs_claim(JobsClaimParams("w1", [queue], len(kinds)))
    assert len(jobs) == len(kinds)
    outcomes = [Outcome(j.id, j.token, kind) for j, kind in zip(jobs, kinds, strict=True)]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


def test_acks_and_the_reaper_count_per_queue_and_minute(
    backend: Backend, clock: jobyard.FrozenClock, make_app: Callable[..., jobyard.App]
) -> None:
    assert T0 % 60 == 0
    # given completions, failures, a retry, a release and a cancellation in one minute
    clock.advance(5)
    settle(backend, "a", "completed", "completed", "failed", "retry", "release", "cancelled")
    settle(backend, "b", "completed")
    # and a stale ack, which counts nothing
    backend.jobs_insert(JobsInsertParams([new("b")]))
    (job,) = backend.jobs_claim(JobsClaimParams("w1", ["b"], 1))
    backend.jobs_ack(JobsAckParams([Outcome(job.id, "not-the-token", "completed")]))
    assert backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, "failed")])) == []

    # when two minutes later the reaper fails a job whose lapsed lease spent its last attempt
    clock.advance(120)
    backend.jobs_insert(JobsInsertParams([new("c", lease=1, max_attempts=1)]))
    backend.jobs_insert(JobsInsertParams([new("c", lease=1, max_attempts=3)]))
    assert len(backend.jobs_claim(JobsClaimParams("w2", ["c"], 2))) == 2
    clock.advance(5)
    assert sorted(r.status for r in reap(backend)) == [
        "failed",
        "pending",
    ]

    # then the history holds each minute's completed and failed jobs, by queue then minute
    expected = [
        ThroughputMinute("a", T0, 2, 1),
        ThroughputMinute("b", T0, 1, 1),
        ThroughputMinute("c", T0 + 120, 0, 1),
    ]
    assert backend.throughput_get(ThroughputParams(since=3600)) == expected
    # only the queues asked for, and only the minutes that end after now - since
    assert backend.throughput_get(ThroughputParams(3600, queues=["b"])) == [expected[1]]
    assert backend.throughput_get(ThroughputParams(since=60)) == [expected[2]]
    assert backend.throughput_get(ThroughputParams(3600, queues=["nope"])) == []

    # and another App on the same store (a restarted dashboard) reads the same history
    other = make_app(clock).backend
    assert other.throughput_get(ThroughputParams(since=86400)) == expected


def test_a_day_of_history_is_kept_and_older_minutes_are_pruned(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a minute of history, then another a day later
    settle(backend, "a", "completed")
    clock.advance(86400)
    settle(backend, "a", "failed")
    backend.jobs_expire(JobsExpireParams())
    # then both are kept (a day and an hour is kept), the day's read sees both
    assert backend.throughput_get(ThroughputParams(since=86400 + 60)) == [
        ThroughputMinute("a", T0, 1, 0),
        ThroughputMinute("a", T0 + 86400, 0, 1),
    ]
    # when time passes beyond what is kept and maintenance runs
    clock.advance(THROUGHPUT_KEEP - 86400 + 120)
    backend.jobs_expire(JobsExpireParams())
    # then only the recent minute is left, whatever is asked for
    assert backend.throughput_get(ThroughputParams(since=10 * 86400)) == [
        ThroughputMinute("a", T0 + 86400, 0, 1)
    ]


def test_stats_tell_the_oldest_due_pending_job(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given due jobs of several priorities, a delayed one and a queue with nothing due
    backend.jobs_insert(JobsInsertParams([new("a", priority=5)]))
    clock.advance(10)
    backend.jobs_insert(JobsInsertParams([new("a", priority=0), new("a", priority=-3)]))
    backend.jobs_insert(JobsInsertParams([new("a", run_at=T0 - 100, priority=1)]))
    backend.jobs_insert(JobsInsertParams([new("b", delay=60)]))
    clock.advance(10)

    def oldest() -> dict[str, float | None]:
        return {s.queue: s.oldest_pending_at for s in backend.stats_get(StatsParams())}

    # then a's oldest due job is the one due earliest, whatever its priority; b has none due
    ages = oldest()
    assert ages["a"] == pytest.approx(T0 - 100, abs=1e-3)
    assert ages["b"] is None
    # when it is claimed, the next one counts: the first insert (priority 5, due at T0)
    claimed = backend.jobs_claim(JobsClaimParams("w", ["a"], 1))
    assert [c.id for c in claimed]  # the priority-5 job goes first
    assert oldest()["a"] == pytest.approx(T0 - 100, abs=1e-3)
    backend.jobs_claim(JobsClaimParams("w", ["a"], 1))  # run_at T0 - 100, priority 1
    assert oldest()["a"] == pytest.approx(T0 + 10, abs=1e-3)
    # and once b's delayed job is due it is b's oldest
    clock.advance(60)
    assert oldest()["b"] == pytest.approx(T0 + 70, abs=1e-3)
    assert backend.stats_get(StatsParams(["b"]))[0].oldest_pending_at == pytest.approx(
        T0 + 70, abs=1e-3
    )


def oldest_at(backend: Backend, queue: str) -> float | None:
    (stats,) = backend.stats_get(StatsParams([queue]))
    return stats.oldest_pending_at


def test_a_fair_queue_tells_the_head_of_its_line(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a fair queue: key A's first round of jobs due now, and behind them, in A's next
    # round, a job that was due earlier (its run_at set in the past)
    backend.queues_configure(QueueConfig("f", limits=QueueLimits(fair=True)))
    clock.advance(10)
    backend.jobs_insert(JobsInsertParams([new("f", key="A") for _ in range(FAIR_TURN)]))
    backend.jobs_insert(JobsInsertParams([new("f", key="A", run_at=T0 - 100)]))
    # then the queue tells the run_at of the head of its line, the job the claim takes first,
    # not of the job further back that was due earlier (finding that one reads every round)
    assert oldest_at(backend, "f") == pytest.approx(T0 + 10, abs=1e-3)
    (first,) = backend.jobs_claim(JobsClaimParams("w", ["f"], 1))
    assert first.run_at == pytest.approx(T0 + 10, abs=1e-3)
    # and once A's first round is taken, that job heads the line
    assert len(backend.jobs_claim(JobsClaimParams("w", ["f"], FAIR_TURN - 1))) == FAIR_TURN - 1
    assert oldest_at(backend, "f") == pytest.approx(T0 - 100, abs=1e-3)
    # a higher priority level's head counts too: the earliest of the heads is told
    clock.advance(10)
    backend.jobs_insert(JobsInsertParams([new("f", key="B", priority=5)]))
    assert oldest_at(backend, "f") == pytest.approx(T0 - 100, abs=1e-3)
    (urgent,) = backend.jobs_claim(JobsClaimParams("w", ["f"], 1))
    assert urgent.run_at == pytest.approx(T0 + 20, abs=1e-3)


def test_a_fair_round_with_nothing_due_does_not_hide_a_due_job_behind_it(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a fair queue whose key A has a round of jobs due in ten minutes, then a job due now
    backend.queues_configure(QueueConfig("f", limits=QueueLimits(fair=True)))
    backend.jobs_insert(JobsInsertParams([new("f", key="A", delay=600) for _ in range(FAIR_TURN)]))
    clock.advance(10)
    backend.jobs_insert(JobsInsertParams([new("f", key="A")]))
    # then the due one is told (the claim takes it), wherever its round stands
    assert oldest_at(backend, "f") == pytest.approx(T0 + 10, abs=1e-3)
    (due,) = backend.jobs_claim(JobsClaimParams("w", ["f"], FAIR_TURN))
    assert due.run_at == pytest.approx(T0 + 10, abs=1e-3)
    # and with only jobs not yet due, nothing is
    assert oldest_at(backend, "f") is None
    clock.advance(600)
    assert oldest_at(backend, "f") == pytest.approx(T0 + 600, abs=1e-3)


def test_a_plain_queue_tells_its_oldest_due_job_behind_jobs_not_due(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a plain queue's level holding jobs not yet due, then due ones enqueued later with
    # run_at values out of order
    backend.jobs_insert(JobsInsertParams([new("p", delay=600) for _ in range(3)]))
    clock.advance(10)
    backend.jobs_insert(
        JobsInsertParams([new("p"), new("p", run_at=T0 - 50), new("p", run_at=T0 + 5)])
    )
    # then its oldest due job is told exactly, and the claim takes it first
    assert oldest_at(backend, "p") == pytest.approx(T0 - 50, abs=1e-3)
    (first,) = backend.jobs_claim(JobsClaimParams("w", ["p"], 1))
    assert first.run_at == pytest.approx(T0 - 50, abs=1e-3)
    assert oldest_at(backend, "p") == pytest.approx(T0 + 5, abs=1e-3)
