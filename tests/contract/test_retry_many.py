"""Re-driving many jobs in one move (``jobs_retry_many``): what the dead letter's bulk retry
(``jobyard retry --all``, the dashboard) sends, one store call per batch rather than one per
job; each job moved as ``jobs_retry`` moves it, the ones it would refuse skipped."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    Backend,
    DeadGroupsParams,
    JobsAckParams,
    JobsCancelParams,
    JobsRetryManyParams,
    Outcome,
    StatsParams,
)

from .test_backend import claim, insert, new


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def fail(backend: Backend, queues: tuple[str, ...], *ids: str) -> None:
    claimed = {c.id: c for c in claim(backend, 50, queues)}
    outcomes = [Outcome(i, claimed[i].token, "failed", error="ValueError: no") for i in ids]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


def counts(backend: Backend) -> dict[str, dict[str, int]]:
    return {
        s.queue: {k: v for k, v in s.counts.items() if v}
        for s in backend.stats_get(StatsParams(recent=False))
    }


def test_many_jobs_are_redriven_in_one_move_and_the_refused_ones_skipped(
    backend: Backend,
) -> None:
    # given failed jobs in two queues (one key in both queues), a failed job whose key a
    # pending job holds now, two failed jobs of one key, a cancelled job, a pending one
    a, b, k1, k2, held, d1 = insert(
        backend,
        new("q"),
        new("r"),
        new("q", idempotency_key="k"),
        new("r", idempotency_key="k"),
        new("q", idempotency_key="h"),
        new("r", idempotency_key="d"),
    )
    fail(backend, ("q", "r"), a, b, k1, k2, held, d1)
    d2, cancelled = insert(backend, new("r", idempotency_key="d"), new("r"))
    backend.jobs_cancel(JobsCancelParams(cancelled))
    fail(backend, ("r",), d2)
    holder, pending = insert(backend, new("q", idempotency_key="h"), new("r"))
    assert backend.dead_groups(DeadGroupsParams()).scanned == 7
    # when all of them are re-driven in one move (one id twice, one unknown)
    ids = [a, b, k1, k2, held, cancelled, pending, "999999", d1, d2, a]
    done = backend.jobs_retry_many(JobsRetryManyParams(ids))
    # then each failed or cancelled job is pending again, attempts reset, in the order given;
    # the job whose key a pending job holds is skipped, and of two sharing a key one goes
    assert done[:5] == [a, b, k1, k2, cancelled] and len(done) == 6 and done[5] in (d1, d2)
    for job_id in done:
        rec = backend.jobs_get(job_id)
        assert rec is not None
        assert (rec.status, rec.attempts, rec.finished_at) == ("pending", 0, None)
    left = d2 if done[5] == d1 else d1
    assert [backend.jobs_get(i).status for i in (held, left)] == ["failed"] * 2  # type: ignore[union-attr]
    # and the counts and the dead letter moved with them
    assert backend.dead_groups(DeadGroupsParams()).scanned == 2
    assert counts(backend) == {"q": {"pending": 3, "failed": 1}, "r": {"pending": 5, "failed": 1}}
    # and each took its key back: enqueueing with it finds the re-driven job
    assert insert(backend, new("q", idempotency_key="k"), new("r", idempotency_key="d")) == [
        k1,
        done[5],
    ]
    # and the re-driven jobs are claimed again
    redriven = {a, b, k1, k2, cancelled, done[5]}
    assert {c.id for c in claim(backend, 50, ("q", "r"))} == redriven | {holder, pending}


def test_nothing_to_redrive_is_no_move(backend: Backend) -> None:
    assert backend.jobs_retry_many(JobsRetryManyParams([])) == []
    assert backend.jobs_retry_many(JobsRetryManyParams(["nope", "1"])) == []


def test_redriven_jobs_wake_a_waiting_worker(backend: Backend) -> None:
    import threading
    import time

    from jobyard.backends.base import JobsWaitParams

    # given failed jobs, and a waiter on the settled store (its first waits may return at
    # once: PostgreSQL wakes every waiter when its LISTEN connection comes up)
    ids = insert(backend, new("q"), new("q"))
    fail(backend, ("q",), *ids)
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
    # when they are re-driven in one move
    started = time.monotonic()
    assert backend.jobs_retry_many(JobsRetryManyParams(ids)) == ids
    t.join(10)
    # then the wait returns True, after the move began and well before its timeout
    ((woke, at),) = result
    assert woke is True
    assert started <= at < started + 4
