"""Recurring jobs people steer, on every backend: timezones and daylight saving, intervals below a
minute, catch-up policies, a pause that survives restarts, and racing workers firing each tick
once. Time is a frozen clock, so every tick is an exact instant."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import get_args
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jobyard
from jobyard import cron, testing
from jobyard.backends.base import CatchUp, Schedule, SchedulesFireParams, SchedulesSkipParams
from jobyard.worker import recurring
from tests.conftest import running_worker, wait_until

BERLIN = ZoneInfo("Europe/Berlin")
FRIDAY = datetime(2027, 3, 26, 10, 0, tzinfo=UTC).timestamp()  # before the spring change
START = datetime(2027, 3, 1, 8, 59, 30, tzinfo=UTC).timestamp()  # a Monday


def tick(app: jobyard.App) -> list[str]:
    """One ticker round, as a worker's maintenance runs it."""
    return recurring.tick(app.backend)


def local(epoch: float | None) -> str:
    assert epoch is not None
    return datetime.fromtimestamp(epoch, BERLIN).strftime("%m-%d %H:%M%z")


def walk(app: jobyard.App, frozen: jobyard.FrozenClock, until: datetime, step: float) -> None:
    """Tick every ``step`` seconds of frozen time up to ``until``, as a worker would."""
    while frozen.now() < until.timestamp():
        frozen.advance(step)
        tick(app)


def fired_at(app: jobyard.App, name: str) -> list[str]:
    """The ticks (local Berlin time) of the jobs ``name`` fired, in order."""
    return [local(t) for t in sorted(j.run_at.timestamp() for j in testing.enqueued(app, name))]


# --- declaring ----------------------------------------------------------------------------------


def test_cron_stacks_on_job_and_ticks_in_its_timezone(
    make_app: Callable[..., jobyard.App],
) -> None:
    frozen = jobyard.FrozenClock(FRIDAY)
    app = make_app(frozen)

    @app.cron("0 9 * * 1-5", timezone="Europe/Berlin", name="standup", kwargs={"room": "b"})
    @app.job(queue="reports")
    def remind(room: str) -> str:
        return room

    # the decorator hands back the job function itself
    assert isinstance(remind, jobyard.JobFunction) and app.registry["remind"] is remind
    assert app.declared_schedules["standup"].timezone == "Europe/Berlin"
    app.sync_schedules()
    (sched,) = app.stored_schedules()
    # Friday 10:00 UTC is past 09:00 in Berlin: next is Monday, after the spring change (CEST)
    assert local(sched.next_run_at) == "03-29 09:00+0200"
    assert sched.next_run_at == datetime(2027, 3, 29, 7, 0, tzinfo=UTC).timestamp()
    frozen.set(sched.next_run_at + 1)
    assert tick(app) == ["standup"]
    (job,) = testing.enqueued(app, "remind")
    assert job.kwargs == {"room": "b"} and job.queue == "reports"
    assert local(app.stored_schedules()[0].next_run_at) == "03-30 09:00+0200"


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        ({"expression": "61 * * * *"}, "invalid cron expression '61 \\* \\* \\* \\*'"),
        ({"expression": "0 9 * * *", "timezone": "Mars/Olympus"}, "'0 9 \\* \\* \\*'.*Mars"),
        ({"expression": "0 9 * * *", "timezone": "../etc/passwd"}, "'0 9 \\* \\* \\*'.*passwd"),
        ({"expression": "0 9 * * *", "every": 30}, "'0 9 \\* \\* \\*' and every=30"),
        ({}, "a cron expression or every="),
        ({"every": 0}, "invalid every=0"),
        ({"every": 0.5}, "invalid every=0.5"),
        ({"every": "30"}, "invalid every='30'"),
        ({"every": True}, "invalid every=True"),
        ({"every": float("nan")}, "invalid every=nan"),
        ({"every": 30, "timezone": "Europe/Berlin"}, "every=30 counts real seconds"),
        ({"expression": "0 9 * * *", "catch_up": "some"}, "'0 9 \\* \\* \\*'.*catch_up"),
    ],
)
def test_bad_schedules_are_refused_when_declared(
    make_app: Callable[..., jobyard.App], declare: dict[str, object], message: str
) -> None:
    app = make_app()

    @app.job
    def ping() -> None:
        return None

    with pytest.raises(jobyard.ConfigurationError, match=message):
        app.cron(**declare)  # type: ignore[arg-type]
    options = dict(declare)
    expression = options.pop("expression", None)
    with pytest.raises(jobyard.ConfigurationError, match=message):
        app.schedule(expression, ping, **options)  # type: ignore[arg-type]
    assert app.declared_schedules == {}


def test_cron_below_job_is_refused(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    with pytest.raises(TypeError, match=r"above @app\.job"):

        @app.cron(every=30)  # type: ignore[arg-type]
        def ping() -> None:
            return None


def test_the_rules_know_the_contracts_catch_up_policies() -> None:
    # cron.py holds rules only and imports no store module, so it names the policies itself
    assert get_args(CatchUp) == cron.CATCH_UPS


# --- daylight saving ----------------------------------------------------------------------------


def test_the_skipped_hour_fires_once_at_the_change(
    make_app: Callable[..., jobyard.App],
) -> None:
    # Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST; 02:00-02:59 do not exist
    frozen = jobyard.FrozenClock(datetime(2027, 3, 28, 1, 0, tzinfo=BERLIN))
    app = make_app(frozen)

    @app.job
    def nightly() -> None:
        return None

    @app.job
    def halfhourly() -> None:
        return None

    app.schedule("30 2 * * *", nightly, timezone="Europe/Berlin")
    app.schedule("*/30 * * * *", halfhourly, timezone="Europe/Berlin")
    app.sync_schedules()
    walk(app, frozen, datetime(2027, 3, 29, 3, 0, tzinfo=BERLIN), step=900)

    # 02:30 does not exist that night: it fires at the change (03:00 CEST), the next night as usual
    assert fired_at(app, "nightly") == ["03-28 03:00+0200", "03-29 02:30+0200"]
    # the skipped 02:00 and 02:30 collapse into the one tick at 03:00, never a duplicate
    halfhourly = fired_at(app, "halfhourly")
    assert halfhourly[:4] == [
        "03-28 01:30+0100",
        "03-28 03:00+0200",
        "03-28 03:30+0200",
        "03-28 04:00+0200",
    ]
    assert len(halfhourly) == len(set(halfhourly))


def test_the_repeated_hour_fires_once_at_its_first_pass(
    make_app: Callable[..., jobyard.App],
) -> None:
    # Berlin, 2027-10-31: 03:00 CEST falls back to 02:00 CET; 02:00-02:59 happen twice
    frozen = jobyard.FrozenClock(datetime(2027, 10, 31, 1, 0, tzinfo=BERLIN))
    app = make_app(frozen)

    @app.job
    def nightly() -> None:
        return None

    @app.job
    def halfhourly() -> None:
        return None

    app.schedule("30 2 * * *", nightly, timezone="Europe/Berlin")
    app.schedule("*/30 * * * *", halfhourly, timezone="Europe/Berlin")
    app.sync_schedules()
    walk(app, frozen, datetime(2027, 11, 1, 3, 0, tzinfo=BERLIN), step=900)

    assert fired_at(app, "nightly") == ["10-31 02:30+0200", "11-01 02:30+0100"]
    # the second pass of 02:00-02:59 (CET) fires nothing: 02:30 CEST is followed by 03:00 CET,
    # even counting from inside the second pass
    second_pass = datetime(2027, 10, 31, 2, 10, tzinfo=BERLIN, fold=1).timestamp()
    assert local(cron.next_tick("*/30 * * * *", second_pass, "Europe/Berlin")) == "10-31 03:00+0100"
    assert fired_at(app, "halfhourly")[:5] == [
        "10-31 01:30+0200",
        "10-31 02:00+0200",
        "10-31 02:30+0200",
        "10-31 03:00+0100",
        "10-31 03:30+0100",
    ]


def test_every_counts_real_seconds_through_a_change(
    make_app: Callable[..., jobyard.App],
) -> None:
    frozen = jobyard.FrozenClock(datetime(2027, 10, 31, 1, 50, tzinfo=BERLIN))
    app = make_app(frozen)

    @app.job
    def pulse() -> None:
        return None

    app.schedule(every=1800, job=pulse)
    app.sync_schedules()
    walk(app, frozen, datetime(2027, 10, 31, 3, 10, tzinfo=BERLIN), step=900)
    # two real hours and twenty minutes: one tick per half hour, the repeated hour included
    assert fired_at(app, "pulse") == [
        "10-31 02:00+0200",
        "10-31 02:30+0200",
        "10-31 02:00+0100",
        "10-31 02:30+0100",
        "10-31 03:00+0100",
    ]


# --- intervals ----------------------------------------------------------------------------------


def test_every_fires_below_a_minute_on_its_grid(make_app: Callable[..., jobyard.App]) -> None:
    frozen = jobyard.FrozenClock(START)  # 08:59:30
    app = make_app(frozen)

    @app.cron(every=15)
    @app.job
    def poll() -> None:
        return None

    app.sync_schedules()
    (sched,) = app.stored_schedules()
    assert (sched.cron, sched.every) == (None, 15.0)
    assert sched.next_run_at == START + 15  # ticks sit on multiples of 15 s since the epoch
    assert tick(app) == []
    for _ in range(4):
        frozen.advance(15)
        assert tick(app) == ["poll"]
        assert tick(app) == []
    ticks = sorted(j.run_at.timestamp() for j in testing.enqueued(app, "poll"))
    assert ticks == [START + 15 * n for n in (1, 2, 3, 4)]


def test_a_worker_fires_an_every_second_schedule(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    runs: list[float] = []

    @app.cron(every=1, name="beat")
    @app.job
    def beat() -> None:
        runs.append(1.0)

    with running_worker(app, concurrency=1, reap_interval=0.2):
        wait_until(lambda: len(runs) >= 3, timeout=20, what="three ticks of every=1")
    (sched,) = app.stored_schedules()
    assert sched.last_run_at is not None and sched.last_run_at == int(sched.last_run_at)


# --- catch-up -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "ticks"),
    [
        ("latest", [START + 30]),  # one job, carrying the first missed tick
        ("all", [START + 30 + 60 * n for n in range(10)]),  # one per missed tick
        ("none", []),  # the missed ticks are dropped
    ],
)
def test_missed_ticks_follow_the_catch_up_policy(
    make_app: Callable[..., jobyard.App], policy: str, ticks: list[float]
) -> None:
    frozen = jobyard.FrozenClock(START)
    app = make_app(frozen)

    @app.cron("* * * * *", catch_up=policy)  # type: ignore[arg-type]
    @app.job
    def ping() -> None:
        return None

    app.sync_schedules()
    frozen.advance(600 + 15)  # ten ticks (09:00 to 09:09) pass with no worker
    assert tick(app) == ["ping"] * len(ticks)
    assert tick(app) == []
    jobs = testing.enqueued(app, "ping")
    assert sorted(j.run_at.timestamp() for j in jobs) == ticks
    # each caught-up tick's job carries that tick's own key, so none is held by another
    assert sorted(j.idempotency_key or "" for j in jobs) == sorted(
        f"cron:ping:{t!r}" for t in ticks
    )
    (sched,) = app.stored_schedules()
    assert sched.next_run_at == START + 30 + 600  # 09:10, the first tick after now
    assert sched.last_run_at == (ticks[-1] if ticks else None)
    # and the schedule goes on as usual
    frozen.advance(60)
    assert tick(app) == ["ping"]


def test_catch_up_all_is_bounded(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    frozen = jobyard.FrozenClock(START)
    app = make_app(frozen)

    @app.cron(every=1, catch_up="all")
    @app.job
    def ping() -> None:
        return None

    app.sync_schedules()
    frozen.advance(3600)  # 3,600 ticks missed
    with caplog.at_level("WARNING", logger="jobyard.cron"):
        assert len(tick(app)) == cron.CATCH_UP_MAX
    assert f"fired the first {cron.CATCH_UP_MAX}, dropped the rest" in caplog.text
    assert tick(app) == []
    ticks = sorted(j.run_at.timestamp() for j in testing.enqueued(app, "ping"))
    assert ticks == [START + 1 + n for n in range(cron.CATCH_UP_MAX)]  # the first ones
    assert app.stored_schedules()[0].next_run_at == START + 3601


def test_catch_up_none_still_fires_a_tick_on_time(make_app: Callable[..., jobyard.App]) -> None:
    frozen = jobyard.FrozenClock(START)
    app = make_app(frozen)

    @app.cron("* * * * *", catch_up="none")
    @app.job
    def ping() -> None:
        return None

    app.sync_schedules()
    frozen.advance(30 + cron.LATE_AFTER)  # the 09:00 tick, exactly as late as allowed
    assert tick(app) == ["ping"]


# --- pause ------------------------------------------------------------------------------------


def pinging(
    app: jobyard.App, expression: str, queue: str = "default", n: int | None = None
) -> jobyard.App:
    """``app`` with the ``ping`` job scheduled at ``expression``, catching up every tick (with
    ``n`` as the job's argument when given)."""

    @app.cron(expression, catch_up="all", kwargs=None if n is None else {"n": n})
    @app.job(queue=queue)
    def ping(n: int = 0) -> None:
        return None

    return app


def test_a_pause_survives_restarts_and_deploys(make_app: Callable[..., jobyard.App]) -> None:
    frozen = jobyard.FrozenClock(START)
    app = pinging(make_app(frozen), "* * * * *")
    app.sync_schedules()
    app.pause_schedule("ping")
    assert app.stored_schedules()[0].paused

    # a restart (a new App syncing the same schedules), then a deploy that changes the schedule
    restarted = pinging(make_app(frozen), "* * * * *")
    restarted.sync_schedules()
    (sched,) = restarted.stored_schedules()
    assert sched.paused and sched.next_run_at == START + 30  # unchanged: kept its progress
    moved = pinging(make_app(frozen), "* * * * *", queue="elsewhere")  # on Redis: another slot
    moved.sync_schedules()
    (sched,) = moved.stored_schedules()
    assert sched.paused and sched.job.queue == "elsewhere"
    deployed = pinging(make_app(frozen), "*/2 * * * *")
    deployed.sync_schedules()
    (sched,) = deployed.stored_schedules()
    assert sched.paused and sched.cron == "*/2 * * * *"
    frozen.advance(600)
    assert tick(deployed) == []  # paused: nothing fires, whoever ticks

    # resuming starts at the next tick: the ten minutes paused are not caught up
    deployed.resume_schedule("ping")
    (sched,) = deployed.stored_schedules()
    assert not sched.paused and sched.next_run_at == START + 30 + 600
    assert tick(deployed) == []
    frozen.advance(60)
    assert tick(deployed) == ["ping"]
    assert len(testing.enqueued(app, "ping")) == 1
    deployed.resume_schedule("ping")  # resuming what runs changes nothing
    assert deployed.stored_schedules()[0].next_run_at == START + 30 + 720


@pytest.mark.parametrize("change", ["cron", "args"])
def test_a_pause_survives_a_deploy_that_keeps_the_queue(
    make_app: Callable[..., jobyard.App], change: str
) -> None:
    # given a paused schedule
    frozen = jobyard.FrozenClock(START)
    app = pinging(make_app(frozen), "* * * * *")
    app.sync_schedules()
    app.pause_schedule("ping")
    frozen.advance(120)
    # when a deploy changes its ticks or its job's arguments, and leaves it on its queue
    # (on Redis the same slot: the schedule's hash is rewritten in place, not moved)
    cron, n = ("*/5 * * * *", None) if change == "cron" else ("* * * * *", 7)
    deployed = pinging(make_app(frozen), cron, n=n)
    deployed.sync_schedules()
    # then the schedule was rewritten (it starts at the next tick of its new rule) and is paused
    (sched,) = deployed.stored_schedules()
    assert (sched.cron, sched.job.queue) == (cron, "default")
    assert sched.next_run_at == (START + 330 if change == "cron" else START + 150)
    assert sched.paused
    frozen.advance(600)
    assert tick(deployed) == []  # paused: nothing fires
    # and once resumed, it fires what the deploy made it
    deployed.resume_schedule("ping")
    (sched,) = deployed.stored_schedules()
    assert sched.next_run_at is not None
    frozen.advance(sched.next_run_at - frozen.now())
    assert tick(deployed) == ["ping"]
    (job,) = testing.enqueued(app, "ping")
    assert job.kwargs == ({} if n is None else {"n": n})


def test_a_worker_starting_keeps_a_paused_schedule_paused(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    ran = threading.Event()

    @app.cron("* * * * * *", name="each-second")
    @app.job
    def each_second() -> None:
        ran.set()

    app.sync_schedules()
    app.pause_schedule("each-second")
    with running_worker(app, concurrency=1, reap_interval=0.1) as worker:
        wait_until(lambda: worker.id in {w.id for w in app.workers()}, what="worker registered")
        assert app.stored_schedules()[0].paused
        assert not ran.wait(1.5)  # a second and a half of ticks, none fired
        app.resume_schedule("each-second")
        assert ran.wait(10)


def test_pausing_an_unknown_schedule_names_it(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.cron(every=60)
    @app.job
    def ping() -> None:
        return None

    with pytest.raises(jobyard.ConfigurationError, match=r"'ping'.*--sync"):
        app.pause_schedule("ping")  # declared, not stored yet
    with pytest.raises(jobyard.ConfigurationError, match="no stored schedule named 'nope'"):
        app.resume_schedule("nope")


def test_a_skip_is_a_compare_and_set_too(make_app: Callable[..., jobyard.App]) -> None:
    frozen = jobyard.FrozenClock(START)
    app = pinging(make_app(frozen), "* * * * *")
    app.sync_schedules()
    backend = app.backend
    tick_at = START + 30
    assert not backend.schedules_skip(SchedulesSkipParams("ping", tick_at - 60, tick_at + 60))
    assert not backend.schedules_skip(SchedulesSkipParams("nope", tick_at, tick_at + 60))
    app.pause_schedule("ping")
    assert not backend.schedules_skip(SchedulesSkipParams("ping", tick_at, tick_at + 60))
    assert backend.schedules_fire(SchedulesFireParams("ping", tick_at, tick_at + 60)) is None
    (sched,) = app.stored_schedules()
    assert sched.next_run_at == tick_at
    app.resume_schedule("ping")  # resumes at the same next tick: the clock has not moved
    assert backend.schedules_skip(SchedulesSkipParams("ping", tick_at, tick_at + 120))
    assert not backend.schedules_skip(SchedulesSkipParams("ping", tick_at, tick_at + 120))
    (sched,) = app.stored_schedules()
    assert (sched.next_run_at, sched.last_run_at) == (tick_at + 120, None)
    assert testing.enqueued(app, "ping") == []


def test_resync_restarts_a_schedule_only_when_its_ticks_change(
    make_app: Callable[..., jobyard.App],
) -> None:
    frozen = jobyard.FrozenClock(START)

    def deploy(**options: object) -> Schedule:
        app = make_app(frozen)

        @app.cron("0 9 * * *", **options)  # type: ignore[arg-type]
        @app.job
        def ping() -> None:
            return None

        app.sync_schedules()
        (sched,) = app.stored_schedules()
        return sched

    first = deploy()
    assert first.next_run_at == START + 30  # 09:00 UTC
    frozen.advance(3600)
    # catch_up is a policy, not a tick: the progress stays, the policy changes
    sched = deploy(catch_up="all")
    assert (sched.next_run_at, sched.catch_up) == (START + 30, "all")
    # another timezone moves the ticks: the schedule restarts at its next tick from now
    sched = deploy(catch_up="all", timezone="Asia/Tokyo")
    assert sched.timezone == "Asia/Tokyo"
    assert sched.next_run_at == datetime(2027, 3, 2, 0, 0, tzinfo=UTC).timestamp()  # 09:00 JST


# --- racing workers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "jobs"), [("latest", 1), ("all", 7), ("none", 0)], ids=["latest", "all", "none"]
)
def test_three_workers_ticking_at_once_fire_each_tick_once(
    make_app: Callable[..., jobyard.App], policy: str, jobs: int
) -> None:
    frozen = jobyard.FrozenClock(START)
    app = make_app(frozen)

    @app.cron(every=10, catch_up=policy)  # type: ignore[arg-type]
    @app.job
    def ping() -> None:
        return None

    app.sync_schedules()
    workers = [make_app(frozen) for _ in range(3)]
    fired: list[str] = []

    def race(w: jobyard.App, barrier: threading.Barrier) -> None:
        barrier.wait()
        fired.extend(tick(w))

    for round_ in range(3):
        # round 0: seven ticks were missed, the first more than LATE_AFTER ago; then one a round
        frozen.advance(11 + cron.LATE_AFTER if round_ == 0 else 10)
        barrier = threading.Barrier(len(workers))
        fired.clear()
        threads = [threading.Thread(target=race, args=(w, barrier)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(fired) == (jobs if round_ == 0 else 1), (round_, fired)
    ticks = [j.run_at.timestamp() for j in testing.enqueued(app, "ping")]
    assert len(ticks) == len(set(ticks))  # never one tick twice


# --- the rules, property-tested -----------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"]


def changes(zone: str) -> list[int]:
    """The instants of 2027 around which ``zone``'s offset changes (to the hour)."""
    tz = ZoneInfo(zone)
    hour = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp())
    hours = range(hour, hour + 366 * 86400, 3600)
    offsets = [datetime.fromtimestamp(t, tz).utcoffset() for t in hours]
    return [hour + 3600 * i for i, (a, b) in enumerate(itertools.pairwise(offsets)) if a != b]


CHANGES = [(zone, t) for zone in ZONES for t in changes(zone)]


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(
    change=st.sampled_from(CHANGES),
    expression=st.sampled_from(["*/15 * * * *", "30 2 * * *", "0 * * * *", "*/7 0-3 * * *"]),
    before=st.integers(min_value=-7200, max_value=86400),  # some start after the change
)
def test_ticks_around_a_change_increase_and_each_local_time_fires_once(
    change: tuple[str, int], expression: str, before: int
) -> None:
    zone, at = change
    tz = ZoneInfo(zone)
    start = at - before
    ticks = [float(start)]
    while ticks[-1] < start + 2 * 86400:
        ticks.append(cron.next_tick(expression, ticks[-1], zone))
    ticks = ticks[1:]
    assert all(a < b for a, b in itertools.pairwise(ticks))
    walls = [datetime.fromtimestamp(t, tz).replace(tzinfo=None) for t in ticks]
    assert len(walls) == len(set(walls))  # a repeated local time fires once
    minutes = {"*/15 * * * *": range(0, 60, 15), "30 2 * * *": [30], "0 * * * *": [0]}
    for t, wall in zip(ticks, walls, strict=True):
        on_time = wall.minute in minutes.get(expression, range(0, 60, 7))
        # a tick off its minute is the end of a skipped stretch: the offset changed right there
        offsets = {datetime.fromtimestamp(t + d, tz).utcoffset() for d in (-1, 0)}
        assert on_time or len(offsets) == 2, (zone, expression, wall)
