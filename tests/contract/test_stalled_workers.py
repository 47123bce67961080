"""A worker that stalls (paused, starved, its store slow to answer) while it holds a job may, once
it resumes, claim that same job again after a reaper put it back: it then holds two attempts of
one job, and every reply about one of them (a lost lease, a refused outcome) must be applied to
that attempt alone. Otherwise the healthy new attempt is marked lost, never renewed, lapses and
runs a third time, or ends in the dead letter although its worker was alive."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import jobyard
from jobyard.backends.base import (
    JobsClaimParams,
    LeasesRenewParams,
    Outcome,
    Renewed,
)
from jobyard.worker import heartbeat
from jobyard.worker._held import Running
from jobyard.worker.completer import Completer
from jobyard.worker.reaper import reap
from tests.apps.contract_app import marks
from tests.conftest import WorkerProcess, running_worker, wait_until

LEASE = 0.6  # seconds: a renewal every 0.2 s of real time (the store's time is frozen)
FAST = jobyard.Backoff("fixed", base=0.0, jitter=False)


def test_a_lost_lease_report_marks_only_the_attempt_it_was_about(
    make_app: Callable[..., jobyard.App],
    clock: jobyard.FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a worker running a job's first attempt, whose renewal of it stalls on the way
    app = make_app(clock)
    release = {1: threading.Event(), 2: threading.Event()}
    runs: list[int] = []

    @app.job(lease=LEASE, max_attempts=2, backoff=FAST)
    def healthy() -> int:
        attempt = jobyard.current_job().attempt
        runs.append(attempt)
        release[attempt].wait(30)
        return attempt

    held, answer = threading.Event(), threading.Event()
    renewals: list[tuple[list[tuple[str, str]], list[str]]] = []  # (sent, lost), in order
    renew = app.backend.leases_renew

    def stalling(params: LeasesRenewParams) -> Renewed:
        if params.jobs and not answer.is_set():
            held.set()
            answer.wait(30)  # the worker's heartbeat is stuck here, as if it were paused
        out = renew(params)
        renewals.append((list(params.jobs), list(out.lost)))
        return out

    app.backend.leases_renew = stalling  # type: ignore[method-assign]
    handle = healthy.enqueue()

    def renewed_after(n: int) -> bool:
        """A renewal after the n-th one sent the job and did not come back lost."""
        return any(
            any(job_id == handle.id for job_id, _ in sent) and handle.id not in lost
            for sent, lost in renewals[n:]
        )

    with (
        caplog.at_level(logging.WARNING, logger="jobyard.worker"),
        running_worker(app, concurrency=2),
    ):
        try:
            wait_until(lambda: runs == [1] and held.is_set(), what="the stalled renewal")
            # when its lease lapses meanwhile, a reaper puts the job back to pending, and the
            # same worker claims it again (a new attempt, a new token)
            clock.advance(LEASE * 2)
            reap(app.backend)  # or the worker's own reaper did
            wait_until(lambda: runs == [1, 2], what="the second attempt, on the same worker")
            # and only then the stalled renewal is answered: the first attempt's lease is lost
            answer.set()
            wait_until(lambda: renewals, what="the stale renewal's answer")
            (stale_sent, stale_lost), *_ = renewals
            assert [job_id for job_id, _ in stale_sent] == [handle.id]
            assert stale_lost == [handle.id]
            # then the second attempt's lease is still renewed: moved past its first expiry,
            # the job is not reaped
            wait_until(lambda: renewed_after(1), timeout=10, what="a renewal of attempt 2")
            clock.advance(LEASE * 0.9)
            seen = len(renewals)
            wait_until(lambda: renewed_after(seen), timeout=10, what="a later renewal")
            clock.advance(LEASE * 0.5)  # past the lease attempt 2 was claimed with
            assert reap(app.backend) == []
            release[2].set()
            assert handle.result(timeout=10) == 2
        finally:
            answer.set()
            release[1].set()
            release[2].set()
    job = app.get(handle.id)
    assert (job.status, job.attempts, job.result) == ("completed", 2, 2)
    assert runs == [1, 2]  # never a third time
    lost = [r.getMessage() for r in caplog.records if "lost its lease" in r.getMessage()]
    assert lost and all("attempt 1 " in line for line in lost)


def _two_attempts(app: jobyard.App, clock: jobyard.FrozenClock) -> tuple[str, list[Running]]:
    """A job claimed, its lease lapsed and reaped, claimed again: both attempts as a worker
    holding them both would (the first one stalled)."""

    @app.job(lease=LEASE, max_attempts=3)
    def twice() -> None:
        pass

    handle = twice.enqueue()
    backend = app.backend
    (first,) = backend.jobs_claim(JobsClaimParams("w", ["default"], 1))
    clock.advance(LEASE * 2)
    assert [r.id for r in reap(backend)] == [handle.id]
    clock.advance(1.0)  # past the backoff of attempt 1 (the default policy: at most 1 s)
    (second,) = backend.jobs_claim(JobsClaimParams("w", ["default"], 1))
    assert first.token != second.token
    ctx = [jobyard.JobContext(job, "w", backend) for job in (first, second)]
    return handle.id, [Running(first, ctx[0], 0.0), Running(second, ctx[1], 0.0)]


def test_a_renewal_sends_one_attempt_per_job(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    """The store answers a renewal by job id: two attempts of one job in one request would make
    its answer ambiguous, so the second waits for the next beat."""
    app = make_app(clock)
    job_id, (first, second) = _two_attempts(app, clock)
    lock = threading.Lock()
    running = {(r.job.id, r.job.token): r for r in (first, second)}
    # given both attempts due for renewal
    beat = heartbeat.scan(running.values(), now=1.0, hold=None)
    # then one is sent; the store says it is lost, and only that one is marked
    assert beat.renew == [(job_id, first.job.token)]
    heartbeat.renew(app.backend, "w", beat, running, lock, now=1.0)
    assert (first.lost, second.lost) == (True, False)
    # and the other goes at the next beat, and is renewed
    beat = heartbeat.scan(running.values(), now=1.0, hold=None)
    assert beat.renew == [(job_id, second.job.token)]
    heartbeat.renew(app.backend, "w", beat, running, lock, now=1.0)
    assert second.lost is False


def test_a_refused_outcome_is_matched_to_its_own_attempt(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    # given both attempts' outcomes queued for the same write: the stale one, then the new one
    app = make_app(clock)
    job_id, (first, second) = _two_attempts(app, clock)
    stale = Outcome(job_id, first.job.token, "completed", result="1")
    fresh = Outcome(job_id, second.job.token, "completed", result="2")
    heard: list[tuple[list[Outcome], list[Outcome]]] = []
    completer = Completer(app.backend, lambda b, r: heard.append((b, r)), threading.Event())
    completer.put(stale)
    completer.put(fresh)
    # when the completer writes them
    completer.start()
    completer.stop()
    # then both were written, in order, the store took the new attempt's outcome, and the
    # refusal it reported names the stale attempt alone
    assert [o for batch, _ in heard for o in batch] == [stale, fresh]
    assert [o for _, refused in heard for o in refused] == [stale]
    job = app.get(job_id)
    assert (job.status, job.result) == ("completed", 2)


def test_the_reaper_says_only_that_the_lease_lapsed(
    make_app: Callable[..., jobyard.App],
    clock: jobyard.FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lapsed lease is all a reaper knows: the worker may be dead, or alive but stalled."""
    app = make_app(clock)

    @app.job(lease=LEASE)
    def quiet() -> None:
        pass

    # given a job whose worker stopped renewing its lease
    handle = quiet.enqueue()
    app.backend.jobs_claim(JobsClaimParams("stalled", ["default"], 1))
    clock.advance(LEASE * 2)
    # when another worker's maintenance reaps it
    with caplog.at_level(logging.WARNING, logger="jobyard.worker"):
        app.worker(reap_interval=0.2).maintenance.tick()
    # then the log says what is known, and no more
    (line,) = [r.getMessage() for r in caplog.records if handle.id in r.getMessage()]
    assert line == (
        f"job {handle.id}: lease lapsed (the worker running it stopped renewing it); now pending"
    )


@pytest.mark.processes
def test_a_paused_worker_that_claims_its_job_again_keeps_the_new_attempt(
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    """The race through real processes: SIGSTOP until the job is reaped, then SIGCONT. The
    resumed worker's first renewal (of the lost attempt) and its claim of the job again race;
    whichever wins, the new attempt must be renewed. Each attempt runs longer than its lease,
    so an attempt left unrenewed would lapse and, with ``max_attempts=2``, end failed."""
    url = shared_store[1]
    app = jobyard.App(url)
    try:
        # given a worker running the first attempt of a job, and another that only reaps
        reaper = spawn_worker(url, "-q", "work", "--reap-interval", "0.2")
        job = app.by_name("outlive_lease", queue="leases", lease=1.5, max_attempts=2)
        handle = job.enqueue("p", 2.5)
        paused = spawn_worker(url, "-q", "leases", "-c", "2", "--reap-interval", "0.2")
        wait_until(lambda: marks(sink, "start", "p"), what="the first attempt")
        # when it is paused until the other worker's reaper puts the job back to pending
        paused.signal(signal.SIGSTOP)
        wait_until(lambda: app.get(handle.id).status == "pending", what="the job reaped")
        # and resumed: it claims the job again while its stale renewal comes back lost
        paused.signal(signal.SIGCONT)
        # then the second attempt completes: never in the dead letter, never a third run
        assert handle.result(timeout=30) == 2
        record = app.get(handle.id)
        assert (record.status, record.attempts) == ("completed", 2)
        assert len(marks(sink, "start", "p")) == 2
        assert {p.name.split(".")[2] for p in marks(sink, "start", "p")} == {str(paused.pid)}
        assert reaper.proc.poll() is None
    finally:
        app.close()
