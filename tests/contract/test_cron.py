"""Recurring jobs on every backend: each tick fires exactly once, whoever races for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jobyard
from jobyard import cron, testing
from jobyard.backends.base import SchedulesFireParams
from jobyard.worker import recurring

START = datetime(2027, 3, 1, 8, 59, 30, tzinfo=UTC).timestamp()


@pytest.fixture
def frozen() -> jobyard.FrozenClock:
    return jobyard.FrozenClock(START)


def test_a_schedule_fires_once_per_tick(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job(queue="reports")
    def report(kind: str) -> str:
        return kind

    app.schedule("0 9 * * 1-5", report, ["daily"], name="daily-report")
    app.sync_schedules()
    (sched,) = app.stored_schedules()
    assert sched.next_run_at == pytest.approx(START + 30)
    assert recurring.tick(app.backend) == []
    frozen.advance(31)
    assert recurring.tick(app.backend) == ["daily-report"]
    assert recurring.tick(app.backend) == []  # the same tick never fires twice
    (job,) = testing.enqueued(app, "report")
    assert job.args == ("daily",) and job.queue == "reports"
    assert job.run_at.timestamp() == pytest.approx(START + 30)
    (sched,) = app.stored_schedules()
    assert sched.last_run_at == pytest.approx(START + 30)
    assert sched.next_run_at == pytest.approx(START + 30 + 86400)  # Tuesday 09:00


def test_a_fired_job_carries_the_tick_key_unless_its_job_has_one(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job(queue="reports")
    def report(kind: str) -> str:
        return kind

    app.schedule("0 9 * * 1-5", report, ["daily"], name="daily-report")
    app.schedule("0 9 * * 1-5", report.options(idempotency_key="weekly"), ["weekly"], name="w")
    app.sync_schedules()
    frozen.advance(31)

    assert sorted(recurring.tick(app.backend)) == ["daily-report", "w"]

    keys = {job.args[0]: job.idempotency_key for job in testing.enqueued(app, "report")}
    (sched,) = [s for s in app.stored_schedules() if s.name == "daily-report"]
    assert keys == {"daily": f"cron:daily-report:{sched.last_run_at!r}", "weekly": "weekly"}


def test_racing_workers_fire_a_tick_once(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job
    def ping() -> None:
        return None

    app.schedule("* * * * *", ping)
    app.sync_schedules()
    frozen.advance(31)
    apps = [make_app(frozen) for _ in range(4)]
    fired: list[list[str]] = []
    barrier = threading.Barrier(len(apps))

    def race(a: jobyard.App) -> None:
        barrier.wait()
        fired.append(recurring.tick(a.backend))

    threads = [threading.Thread(target=race, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(name for names in fired for name in names) == ["ping"]
    assert len(testing.enqueued(app, "ping")) == 1


def test_resync_keeps_the_next_run_and_a_changed_schedule_restarts(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job
    def ping() -> None:
        return None

    app.schedule("*/5 * * * *", ping, name="p")
    app.sync_schedules()
    first = app.stored_schedules()[0].next_run_at
    frozen.advance(60)
    app.sync_schedules()  # a worker restart
    assert app.stored_schedules()[0].next_run_at == first
    stale = SchedulesFireParams("p", (first or 0) - 300, first or 0)
    assert app.backend.schedules_fire(stale) is None  # not the stored tick: refused

    other = make_app(frozen)
    other.schedule("0 * * * *", ping, name="p")
    other.sync_schedules()
    (sched,) = other.stored_schedules()
    assert sched.cron == "0 * * * *" and sched.next_run_at != first


def test_removed_schedules_are_deactivated(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job
    def ping() -> None:
        return None

    app.schedule("* * * * *", ping, name="gone")
    app.sync_schedules()
    make_app(frozen).sync_schedules()  # an app version without schedules
    (sched,) = app.stored_schedules()
    assert not sched.active
    frozen.advance(120)
    assert recurring.tick(app.backend) == []


def test_missed_ticks_fire_once(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job
    def ping() -> None:
        return None

    app.schedule("* * * * *", ping)
    app.sync_schedules()
    frozen.advance(3600)  # an hour with no worker
    assert recurring.tick(app.backend) == ["ping"]
    assert recurring.tick(app.backend) == []
    assert len(testing.enqueued(app, "ping")) == 1
    assert app.stored_schedules()[0].next_run_at == pytest.approx(START + 30 + 3600)


def test_workers_fire_schedules(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    ran = threading.Event()

    @app.job
    def every_second() -> None:
        ran.set()

    app.schedule("* * * * * *", every_second)
    from tests.conftest import running_worker

    with running_worker(app, concurrency=1, reap_interval=0.1):
        assert ran.wait(10)


@pytest.mark.parametrize(
    "expression",
    ["", "   ", "* * *", "61 * * * *", "* 25 * * *", "* * * * * * *", "a b c d e", "*/0 * * * *"],
)
def test_bad_cron_expressions_are_refused(
    make_app: Callable[..., jobyard.App], expression: str
) -> None:
    app = make_app()

    @app.job
    def ping() -> None:
        return None

    with pytest.raises(jobyard.ConfigurationError, match="invalid cron expression"):
        app.schedule(expression, ping)
    assert app.declared_schedules == {}


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.text(max_size=40)
    | st.lists(st.sampled_from(["*", "*/2", "1-5", "0", "99", ",", "L", "?", "#"]), max_size=7).map(
        " ".join
    )
)
def test_fuzzed_cron_expressions_are_valid_or_refused(expression: str) -> None:
    try:
        cron.check_cron(expression)
    except jobyard.ConfigurationError as exc:
        assert "invalid cron expression" in str(exc)
        return
    assert cron.next_tick(expression, START) > START


def test_schedule_arguments_never_collide_with_its_name(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    app = make_app(frozen)

    @app.job
    def greet(name: str) -> str:
        return name

    app.schedule("* * * * *", greet, kwargs={"name": "bob"}, name="greeter")
    with pytest.raises(TypeError, match="args must be a list or tuple"):
        app.schedule("* * * * *", greet, "bob", name="wrong")  # type: ignore[arg-type]
    app.sync_schedules()
    frozen.advance(31)
    assert recurring.tick(app.backend) == ["greeter"]
    (job,) = testing.enqueued(app, "greet")
    assert job.kwargs == {"name": "bob"}
    assert app.enqueue("greet", name="ann").created  # a job argument called name


def test_declared_and_stored_schedules_are_told_apart_and_the_old_names_still_answer(
    make_app: Callable[..., jobyard.App], frozen: jobyard.FrozenClock
) -> None:
    # given a declared schedule, not yet stored
    app = make_app(frozen)

    @app.job
    def ping() -> None:
        return None

    app.schedule("* * * * *", ping)
    assert list(app.declared_schedules) == ["ping"] and app.stored_schedules() == []
    # when it is stored
    app.sync_schedules()
    assert [s.name for s in app.stored_schedules()] == ["ping"]
    # then the former names answer the same, with a deprecation warning
    with pytest.deprecated_call():
        assert app.schedules is app.declared_schedules
    with pytest.deprecated_call():
        assert app.scheduled() == app.stored_schedules()
