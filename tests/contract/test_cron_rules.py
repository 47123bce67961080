"""A schedule's ticks are the same on every host and every store can hold them: an interval is
bounded as a delay is, and a timezone is an IANA zone, not a name of the host's own."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest

import jobyard
from jobyard import cron
from jobyard.backends.base import MAX_DELAY
from jobyard.cli import main

REFUSED = [
    ({"every": 1e12}, "invalid every=1000000000000.0: a number of seconds from 1 to 3153600000"),
    ({"every": cron.MAX_EVERY + 1}, "invalid every=3153600001.0"),
    ({"every": float("inf")}, "invalid every=inf"),
    ({"expression": "0 9 * * *", "timezone": "localtime"}, "'localtime' (it names each host's"),
    ({"expression": "0 9 * * *", "timezone": "posixrules"}, "unknown timezone 'posixrules'"),
    ({"expression": "0 9 * * *", "timezone": "posix/Europe/Berlin"}, "'posix/Europe/Berlin'"),
    ({"expression": "0 9 * * *", "timezone": "right/UTC"}, "unknown timezone 'right/UTC'"),
    ({"expression": "0 9 * * *", "timezone": "/etc/localtime"}, "'/etc/localtime'"),
    ({"expression": "0 9 * * *", "timezone": "Europe"}, "unknown timezone 'Europe'"),
    ({"expression": "0 9 * * *", "timezone": "zone1970.tab"}, "'zone1970.tab'"),
    ({"expression": "0 9 * * *", "timezone": "utc"}, "unknown timezone 'utc'"),
]
ACCEPTED = ["UTC", "Europe/Berlin", "US/Pacific", "Etc/GMT+5", "America/Argentina/Buenos_Aires"]
current: jobyard.App | None = None  # the App the command runs against, in this process


def test_the_interval_bound_is_the_delay_bound() -> None:
    assert cron.MAX_EVERY == MAX_DELAY


def test_ticks_that_differ_by_host_or_no_store_can_hold_are_refused_when_declared(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def ping() -> None:
        return None

    for declare, message in REFUSED:
        # when a schedule is declared with them, then it is refused there, naming the value
        with pytest.raises(jobyard.ConfigurationError) as refused:
            app.cron(**declare)  # type: ignore[arg-type]
        assert message in str(refused.value), (declare, str(refused.value))
        options = dict(declare)
        with pytest.raises(jobyard.ConfigurationError, match=r"invalid every|unknown timezone"):
            app.schedule(options.pop("expression", None), ping, **options)  # type: ignore[arg-type]
    assert app.declared_schedules == {}
    for n, zone in enumerate(ACCEPTED):
        app.schedule("0 9 * * *", ping, name=f"at-9-{n}", timezone=zone)
    assert len(app.declared_schedules) == len(ACCEPTED)


def test_the_longest_interval_is_stored_and_listed(
    make_app: Callable[..., jobyard.App],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a schedule with the longest interval, stored
    app = make_app()

    @app.cron(every=cron.MAX_EVERY)
    @app.job
    def centennial() -> None:
        return None

    app.sync_schedules()
    # when the schedules are listed, then its next tick is a time like any other
    monkeypatch.setattr(sys.modules[__name__], "current", app)
    with pytest.raises(SystemExit) as done:
        main(["cron", f"{__name__}:current", "--json"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    (listed,) = [json.loads(line) for line in out.splitlines()]
    assert listed["every"] == cron.MAX_EVERY and listed["next_run_at"].endswith("+00:00")
