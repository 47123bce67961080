"""How a worker feeds its slots: a buffer only while jobs are short, handed back when they are
not; async handlers as tasks on one loop (see worker/_slots.py)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import ClaimedJob, JobsClaimParams, Outcome
from jobyard.worker import completer
from jobyard.worker._slots import FAST, SPAN, Pace
from jobyard.worker.completer import Completer

from ..conftest import running_worker, wait_until


def test_pace_buffers_only_while_handlers_are_fast() -> None:
    pace = Pace(concurrency=8)
    assert pace.buffer() == 0  # nothing known yet: claim for free slots only
    for _ in range(50):
        pace.finished(0.001)
    assert pace.buffer() >= 1
    assert pace.threshold() == max(1, (pace.buffer() + 1) // 2)
    for _ in range(50):
        pace.finished(FAST * 4)
    assert pace.buffer() == 0  # long handlers: no job waits behind them


def test_a_handed_back_job_turns_the_buffer_off_until_a_fast_finish() -> None:
    pace = Pace(concurrency=4)
    for _ in range(20):
        pace.finished(0.001)
    assert pace.buffer() >= 1
    pace.handed_back()
    assert pace.buffer() == 0
    pace.finished(FAST * 2)
    assert pace.buffer() == 0
    pace.finished(0.001)
    assert pace.buffer() >= 1


def test_a_claim_round_trip_that_varies_gets_a_deeper_buffer() -> None:
    """The half of the buffer left when a claim is sent must last until the claim returns: a
    round trip that is 2 ms on average but often 3 ms needs more than a steady 2 ms one."""
    steady, jittery = Pace(concurrency=8), Pace(concurrency=8)
    for pace in (steady, jittery):
        for _ in range(50):
            pace.finished(0.002)  # 8 slots: 4,000 jobs/s
    for i in range(200):
        steady.claimed(0.002)
        jittery.claimed(0.001 if i % 2 else 0.003)
    assert abs(steady.claim_avg - jittery.claim_avg) < 0.0001
    assert jittery.buffer() > steady.buffer()
    held_back = jittery.buffer() - jittery.threshold()  # jobs left when the claim is sent
    assert held_back / 4000 >= 0.005  # seconds: a round trip well above the average


def test_claims_bring_at_least_a_span_of_the_slots_work_however_quick_the_store() -> None:
    """A claim round trip costs the worker and the store a fixed part whatever it brings: with
    a quick store and short jobs the buffer still holds SPAN seconds of the slots' work, so a
    claim brings half of that at least, not a handful of jobs."""
    pace = Pace(concurrency=8)
    for _ in range(50):
        pace.finished(0.002)  # 8 slots: 4,000 jobs/s
    for _ in range(50):
        pace.claimed(0.0001)
    assert pace.buffer() >= 4000 * SPAN
    assert pace.threshold() >= 4000 * SPAN / 2
    assert pace.buffer() <= 4000 * pace.hold / 2  # every buffered job still starts in time


def test_the_buffer_follows_the_pace_the_slots_are_seen_to_finish_at() -> None:
    """Handlers that hold the interpreter lock take turns on it: a thread runs jobs back to
    back for its turn (here 13 of 0.35 ms), and the job its turn ends in waits out the others'
    (35 ms). The average run time swings with that, and concurrency / run time overstates the
    pace after a run of short ones. The buffer's bound (what the slots finish in half the hold
    time) follows the returns as they are seen, so a buffered job does not wait past the hold
    time and get handed back."""
    pace = Pace(concurrency=8, hold=0.05)
    now = 0.0
    for i in range(14 * 20 - 1):  # it ends after a turn's 13 short jobs
        now += 0.00035  # one return every 0.35 ms: 2,857 jobs/s
        pace.finished(0.035 if i % 14 == 13 else 0.00035, now)
        pace.claimed(0.03)  # slow claims call for a deep buffer
    assert 8 / (pace.run_avg or 1) > 1.5 * 2857  # the run times alone overstate the pace
    assert pace.buffer() <= 2857 * pace.hold / 2
    assert pace.buffer() >= 2857 * pace.hold / 4  # still a deep one


def test_outcomes_that_fill_a_batch_are_written_without_sitting_out_the_gap(
    make_app: Callable[..., jobyard.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the completer spaces its writes MIN_GAP apart, so that its batches grow; when
    FULL outcomes are waiting it writes them at once all the same."""
    app = make_app()

    @app.job
    def quick() -> None:
        pass

    quick.enqueue_many([((), {}) for _ in range(completer.FULL + 2)])
    claimed = app.backend.jobs_claim(JobsClaimParams("w", ("default",), completer.FULL + 2))
    outcomes = [Outcome(j.id, j.token, "completed", result="null") for j in claimed]
    assert len(outcomes) == completer.FULL + 2
    written: list[list[Outcome]] = []
    writer = Completer(app.backend, lambda batch, _: written.append(batch), threading.Event())
    writer.start()
    try:
        # given a writer that has just written (an idle writer writes a lone outcome at once)
        writer.put(outcomes[0])
        wait_until(lambda: written, what="the first write")
        monkeypatch.setattr(completer, "MIN_GAP", 60.0)  # a gap no test sits out
        # when one more outcome comes, the writer takes it and waits for the gap, and FULL more
        # arrive while it waits
        writer.put(outcomes[1])
        wait_until(lambda: writer._queue.empty(), what="the writer took it")
        for outcome in outcomes[2:]:
            writer.put(outcome)
        # then they are written without waiting for it
        wait_until(lambda: sum(map(len, written)) == len(outcomes), timeout=10, what="the rest")
    finally:
        writer.stop()
    assert {app.get(o.id).status for o in outcomes} == {"completed"}


def test_a_worker_asks_no_claim_for_more_than_the_store_takes_at_once(
    make_app: Callable[..., jobyard.App],
) -> None:
    """A store's ``claim_max`` caps every claim, and a full claim is followed at once (not
    after a push signal: no job is enqueued while these drain)."""
    app = make_app()

    @app.job
    async def quick(n: int) -> int:
        return n

    claims: list[tuple[int, float, int]] = []  # (limit, wait, jobs brought)
    claim = app.backend.jobs_claim

    def recording_claim(params: JobsClaimParams) -> list[ClaimedJob]:
        jobs = claim(params)
        claims.append((params.limit, params.wait, len(jobs)))
        return jobs

    app.backend.jobs_claim = recording_claim  # type: ignore[method-assign]
    app.backend.claim_max = 3  # type: ignore[misc]
    handles = quick.enqueue_many([((n,), {}) for n in range(40)])
    with running_worker(app, concurrency=20):
        for n, h in enumerate(handles):
            assert h.result(timeout=10) == n
    assert claims and max(limit for limit, _, _ in claims) <= 3
    pairs = itertools.pairwise(claims)
    after_full = [wait for (limit, _, got), (_, wait, _) in pairs if got == limit]
    assert after_full and not any(after_full)  # none of them waited for a push signal


def test_a_fixed_prefetch_is_kept_whatever_the_pace() -> None:
    pace = Pace(concurrency=2, prefetch=3)
    assert pace.buffer() == 3
    pace.finished(10.0)
    pace.handed_back()
    assert pace.buffer() == 3
    assert Pace(concurrency=2, prefetch=0).buffer() == 0


def test_jobs_buffered_behind_a_job_that_turned_long_go_to_another_worker(
    make_app: Callable[..., jobyard.App],
) -> None:
    """A worker of short jobs holds a few ahead of its slot. When the running job turns out
    long, the buffered ones are handed back within the hold time and an idle worker runs them,
    instead of waiting behind it."""
    app = make_app()
    release = threading.Event()

    @app.job
    def quick(n: int) -> int:
        return n

    @app.job
    def slow() -> None:
        release.wait(30)

    warm = quick.enqueue_many([((i,), {}) for i in range(200)])
    with running_worker(app, concurrency=1) as first:
        for h in warm:
            h.result(timeout=30)
        assert first.pace.buffer() >= 1  # short jobs: it now claims ahead of its slot
        blocker = slow.enqueue()
        behind = quick.enqueue_many([((i,), {}) for i in range(3)])
        try:
            wait_until(lambda: first.handed_back > 0, what="a buffered job handed back")
            with running_worker(app, concurrency=2):
                for n, h in enumerate(behind):
                    assert h.result(timeout=20) == n
            assert app.get(blocker.id).status == "running"
        finally:
            release.set()
        blocker.result(timeout=20)
        record = app.get(behind[0].id)
        assert record.attempts == 1  # the hand-back did not count an attempt


def test_async_handlers_run_as_tasks_with_a_default_concurrency_of_100(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    gate = threading.Event()

    @app.job
    async def waits() -> None:
        while not gate.is_set():
            await asyncio.sleep(0.01)

    handles = waits.enqueue_many([((), {}) for _ in range(40)])
    with running_worker(app) as worker:
        try:
            assert worker.concurrency == 100
            wait_until(
                lambda: app.stats()[0].counts.get("running", 0) == 40,
                what="all 40 async jobs running at once",
            )
            threads = [t for t in threading.enumerate() if t.name.startswith("jobyard-handler")]
            assert len(threads) == 1  # no thread per async job
        finally:
            gate.set()
        for h in handles:
            h.result(timeout=20)


def test_async_handlers_never_run_more_at_once_than_the_concurrency(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given short async jobs, so the worker buffers jobs beyond its slots
    app = make_app()
    lock = threading.Lock()
    now = [0]
    peak = [0]

    @app.job
    async def quick() -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        await asyncio.sleep(0.005)
        with lock:
            now[0] -= 1

    handles = quick.enqueue_many([((), {}) for _ in range(300)])
    # when a worker with 3 slots and a deep fixed buffer drains them
    with running_worker(app, concurrency=3, prefetch=30) as worker:
        for h in handles:
            h.result(timeout=30)
        claimed = worker.claimed
    # then the buffer was used, yet no more than 3 handlers ever ran at once
    assert claimed >= 300
    assert 1 <= peak[0] <= 3, peak[0]


def test_an_idle_worker_runs_the_job_on_the_thread_that_claimed_it(
    make_app: Callable[..., jobyard.App],
) -> None:
    """While every slot is idle, the waiting claim is made by a handler thread, which runs the
    first job it brings (no hand-off); the rest go to the other threads, never more at once
    than the worker's concurrency."""
    app = make_app()
    gate = threading.Event()
    lock = threading.Lock()
    ran_on: dict[int, str] = {}
    running = [0, 0]  # now, most at once

    @app.job
    def hold(n: int) -> None:
        with lock:
            ran_on[n] = threading.current_thread().name
            running[0] += 1
            running[1] = max(running[1], running[0])
        gate.wait(30)
        with lock:
            running[0] -= 1

    claimed_on: list[tuple[str, list[str]]] = []
    handler_waits = threading.Event()
    claim = app.backend.jobs_claim

    def recording_claim(params: JobsClaimParams) -> list[ClaimedJob]:
        on = threading.current_thread().name
        if params.wait and on.startswith("jobyard-handler"):
            handler_waits.set()
        jobs = claim(params)
        if jobs:
            claimed_on.append((on, [j.id for j in jobs]))
        return jobs

    app.backend.jobs_claim = recording_claim  # type: ignore[method-assign]
    # given an idle worker of 2 slots, one of whose handler threads waits for a job
    with running_worker(app, concurrency=2, prefetch=0):
        wait_until(handler_waits.is_set, what="a handler thread making the waiting claim")
        # when one job arrives, then the handler thread that claimed it runs it
        first = hold.enqueue(0)
        wait_until(lambda: 0 in ran_on, what="the first job started")
        ((thread, ids),) = claimed_on
        assert ids == [first.id]
        assert thread.startswith("jobyard-handler") and ran_on[0] == thread
        # and with jobs waiting behind it, never more than 2 run at once
        rest = hold.enqueue_many([((n,), {}) for n in range(1, 4)])
        wait_until(lambda: len(ran_on) == 2, what="a second job started")
        gate.set()
        for h in [first, *rest]:
            h.result(timeout=20)
    assert running[1] == 2


def test_stop_wakes_the_idle_claim_instead_of_sleeping_out_the_poll_interval(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given an idle worker with a long poll interval: after its job, its claim waits for a
    # push signal up to 20 s (a handler thread's waiting claim, or the producer's)
    app = make_app()

    @app.job(queue="idle")
    def one() -> int:
        return 1

    handle = one.enqueue()
    worker = app.worker(queues=["idle"], concurrency=2, poll_interval=20.0, reap_interval=5.0)
    worker.start()
    try:
        assert handle.result(timeout=10) == 1
        wait_until(lambda: worker.claimed >= 1, timeout=5, what="the job's claim counted")
    finally:
        # when it is stopped
        t0 = time.monotonic()
        worker.stop(grace=1.0)
        took = time.monotonic() - t0

    # then the waiting claim was woken: stop returned well within the poll interval
    assert took < 3.0, f"stop took {took:.1f} s"
