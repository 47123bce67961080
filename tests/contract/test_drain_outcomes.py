"""``testing.drain`` records what a worker would: a sync handler that overruns its timeout fails
its attempt with the worker's timeout error, and ``raise_errors=True`` raises every attempt
jobyard failed without the handler raising (a timeout, a result JSON cannot hold, a job that
could not run), naming the job, after its outcome is recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard import testing

LATER = jobyard.Backoff("fixed", base=60.0, jitter=False)  # the frozen clock moves it
TIMEOUT = 0.1  # seconds; each overrunning handler below runs about three times that


def test_a_sync_handler_that_returns_late_fails_its_attempt_as_in_a_worker(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    # given a sync handler that overruns its timeout and then returns, and one that raises late
    app = make_app(clock)

    @app.job(timeout=TIMEOUT, max_attempts=2, backoff=LATER)
    def slow() -> str:
        time.sleep(TIMEOUT * 3)
        return "late"

    @app.job(timeout=TIMEOUT, max_attempts=1)
    def slow_then_raises() -> None:
        time.sleep(TIMEOUT * 3)
        raise ValueError("after the deadline")

    @app.job(timeout=5.0)
    def in_time() -> str:
        return "on time"

    late, raising, fine = slow.enqueue(), slow_then_raises.enqueue(), in_time.enqueue()
    # when the queue is drained
    assert testing.drain(app) == 3
    # then each late attempt failed with the worker's timeout error, and its value is gone
    job = app.get(late.id)
    assert (job.status, job.attempts, job.result) == ("pending", 1, None)
    assert job.error == f"timed out after {TIMEOUT}s"
    job = app.get(raising.id)
    assert (job.status, job.error) == ("failed", f"timed out after {TIMEOUT}s")
    assert fine.result(timeout=0) == "on time"
    # and the next attempt fails the same way, into the dead letter
    clock.advance(60)
    assert testing.drain(app) == 1
    job = app.get(late.id)
    assert (job.status, job.attempts, job.result) == ("failed", 2, None)


def test_raise_errors_raises_what_jobyard_failed_naming_the_job(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job(queue="sync", timeout=TIMEOUT, max_attempts=1)
    def overruns() -> None:
        time.sleep(TIMEOUT * 3)
        raise KeyError("late")

    @app.job(queue="async", timeout=TIMEOUT, max_attempts=1)
    async def hangs() -> None:
        await asyncio.sleep(30)

    @app.job(queue="json", max_attempts=1)
    def makes_a_set() -> set[int]:
        return {1, 2}

    # a sync overrun: the timeout, chained to what the late handler raised
    h = overruns.enqueue()
    with pytest.raises(testing.JobTimeout, match=rf"job {h.id} \(overruns\): timed out") as sync:
        testing.drain(app, ["sync"], raise_errors=True)
    assert isinstance(sync.value, TimeoutError) and isinstance(sync.value.__cause__, KeyError)
    assert (app.get(h.id).status, app.get(h.id).error) == ("failed", f"timed out after {TIMEOUT}s")

    # an async timeout: cancelled at the deadline, the job failed before it is raised
    h = hangs.enqueue()
    with pytest.raises(TimeoutError, match=rf"job {h.id} \(hangs\): timed out after {TIMEOUT}s"):
        testing.drain(app, ["async"], raise_errors=True)
    job = app.get(h.id)
    assert (job.status, job.error) == ("failed", f"timed out after {TIMEOUT}s")

    # a result JSON cannot hold
    h = makes_a_set.enqueue()
    with pytest.raises(TypeError, match=rf"job {h.id} \(makes_a_set\): .*not JSON serializable"):
        testing.drain(app, ["json"], raise_errors=True)
    job = app.get(h.id)
    assert job.status == "failed" and "not JSON serializable" in (job.error or "")

    # a job with no handler here
    h = app.by_name("elsewhere", queue="json", max_attempts=1).enqueue()
    with pytest.raises(jobyard.JobyardError, match=rf"job {h.id} \(elsewhere\) did not run"):
        testing.drain(app, ["json"], raise_errors=True)
    assert app.get(h.id).status == "failed"

    # and without raise_errors all of them are recorded quietly, as before
    for fn in (overruns, hangs, makes_a_set):
        fn.enqueue()
    assert testing.drain(app, ["sync", "async", "json"]) == 3
    assert app.stats()  # the store answers: nothing was left running
    assert not app.jobs(status=jobyard.Status.RUNNING)
