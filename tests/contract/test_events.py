"""The event stream on every store: what a claim and a reap tell the core (``ClaimedJob.run_at``,
``Reaped.name``/``queue``), and the events a real worker's parts emit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobyard
from jobyard.backends.base import (
    JobsClaimParams,
    JobsInsertParams,
    NewJob,
    Reaped,
)
from jobyard.events import Acked, Claimed, Finished, Started
from jobyard.worker.reaper import reap
from tests.conftest import running_worker, wait_until


def test_a_claim_says_when_its_job_became_due(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    backend = make_app(clock).backend
    backend.jobs_insert(JobsInsertParams([NewJob("n", "q", '{"args":[],"kwargs":{}}', delay=5)]))
    clock.advance(7)
    (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    assert job.run_at == clock.now() - 2


def test_a_reap_names_the_job_and_its_queue(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)
    h = app.by_name("mailer", queue="emails", lease=1.0).enqueue()
    app.backend.jobs_claim(JobsClaimParams("w", ["emails"], 1))
    clock.advance(5)
    assert reap(app.backend) == [Reaped(h.id, "pending", "mailer", "emails")]


def test_a_worker_emits_its_events(make_app: Callable[..., jobyard.App]) -> None:
    # given an app with a subscriber, two jobs to run and one whose lease lapses (claimed by a
    # "worker" that died at once)
    app = make_app()
    seen: list[Any] = []
    app.events.subscribe(seen.append)
    app.metrics()  # counting starts

    @app.job(queue="ev")
    def work(n: int) -> int:
        return n

    app.by_name("orphan", queue="gone", lease=0.5, max_attempts=1).enqueue()
    app.backend.jobs_claim(JobsClaimParams("dead-worker", ["gone"], 1))
    handles = [work.enqueue(n) for n in range(2)]

    # when a worker runs the two and its reaper finds the lapsed lease
    with running_worker(app, queues=["ev"]) as worker:
        assert [h.result(timeout=10) for h in handles] == [0, 1]
        wait_until(lambda: app.metrics().total("lease_lost") == 1, what="the lapsed lease")
        wait_until(lambda: sum(e.written for e in seen if isinstance(e, Acked)) >= 2)

    # then it told what it claimed, started, finished and had acknowledged
    assert sum(e.count for e in seen if isinstance(e, Claimed)) == 2
    assert {e.worker_id for e in seen if isinstance(e, Claimed)} == {worker.id}
    started = [e for e in seen if isinstance(e, Started)]
    assert sorted(e.id for e in started) == sorted(h.id for h in handles)
    assert all(e.waited is not None and e.waited >= 0 for e in started)
    done = [e for e in seen if isinstance(e, Finished) and e.queue == "ev"]
    assert [(e.outcome, e.source) for e in done] == [("completed", "job")] * 2
    # and the reaped job counts as a lost lease and, its one attempt spent, a dead job
    snap = app.metrics()
    assert snap.counters["lease_lost"] == {("gone", "orphan"): 1}
    assert snap.counters["failed"] == {("gone", "orphan"): 1}


def test_schedule_ticks_are_events(make_app: Callable[..., jobyard.App]) -> None:
    # given a schedule that fires and one that drops its missed ticks (catch_up none)
    start = 1_800_000_000.0
    frozen = jobyard.FrozenClock(start)
    app = make_app(frozen)
    app.metrics()

    @app.job(queue="reports")
    def report() -> None: ...

    app.schedule(None, report, every=60, name="fires")
    app.schedule(None, report, every=60, name="drops", catch_up="none")
    app.sync_schedules()
    frozen.advance(61)
    # when the ticker runs past one tick of each, then past several missed ones
    from jobyard.worker import recurring

    recurring.tick(app.backend, app.events)
    frozen.advance(300)
    recurring.tick(app.backend, app.events)
    # then each fired tick is counted, with the job it enqueued, and each drop
    snap = app.metrics()
    # (fires: its first tick, then the latest of the five missed; drops: its first tick, then
    # the missed ones dropped)
    assert snap.notes["tick_skipped"] == 1
    assert snap.notes["tick_fired"] == 3
    assert snap.counters["enqueued"] == {("reports", "report"): 3}
