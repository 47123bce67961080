"""The rules of recurring schedules, pure: which schedules are valid, when their ticks are, and
what a ticker round does to a due one. Syncing schedules to the store and firing their ticks is
the workers' part: ``worker/recurring.py``.

A schedule ticks at a cron expression read in a timezone (``zoneinfo``), or every N seconds.

Cron expressions read local wall-clock time, so a day with a daylight-saving change needs two
rules. A local time that does not exist (the skipped hour, 02:00-03:00 on the spring night in
Berlin) fires at the first instant after the change (03:00 CEST), once however many ticks fell in
the gap. A local time that happens twice (the repeated hour in autumn) fires once, at its first
occurrence: the second pass of that hour fires nothing. ``every=N`` counts real seconds, at the
multiples of N since the epoch, and knows no daylight saving.

Ticks missed while no worker ran follow the schedule's ``catch_up``:

- ``"latest"`` (the default): one job stands for them all; it carries the first missed tick as
  its ``run_at``, and the schedule moves on to its first tick after now.
- ``"all"``: one job per missed tick, each with its tick as ``run_at``, for at most
  :data:`CATCH_UP_MAX` ticks; ticks missed beyond those are dropped.
- ``"none"``: a tick more than :data:`LATE_AFTER` seconds late is dropped, with every tick after
  it up to now; the schedule waits for its first tick after now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo, available_timezones

from croniter import croniter

from .errors import ConfigurationError

CATCH_UP_MAX = 100  # catch_up="all": at most this many jobs for the ticks of one outage
LATE_AFTER = 60.0  # catch_up="none": a tick later than this (seconds) counts as missed
MIN_EVERY = 1.0  # seconds: workers tick about once a second
# seconds: 100 years, the longest delay a job may have (``backends.base.MAX_DELAY``, which this
# module of rules does not import): a tick beyond it would be a time no datetime can hold.
MAX_EVERY = 100 * 365 * 86400.0
# Names a host's zoneinfo directory may hold that name no IANA zone, or one that differs
# from host to host ("localtime" is a link to the host's own zone on many systems).
_HOST_ZONES = frozenset({"localtime", "posixrules"})
_TOLERANCE = 0.001  # seconds: the stores' tick comparison; a tick is never its own next tick
_SEARCH_LIMIT = 100_000  # candidate local times tried for one tick (a repeated hour of seconds)
CATCH_UPS = ("latest", "all", "none")  # the policies (typed as CatchUp in backends/base.py)

C = TypeVar("C", bound=str)


class Ticking(Protocol):
    """What the rules read of a schedule (a stored ``jobyard.backends.base.Schedule``)."""

    @property
    def cron(self) -> str | None: ...
    @property
    def every(self) -> float | None: ...
    @property
    def timezone(self) -> str: ...
    @property
    def catch_up(self) -> str: ...
    @property
    def active(self) -> bool: ...
    @property
    def paused(self) -> bool: ...
    @property
    def next_run_at(self) -> float | None: ...


def check_cron(expression: str) -> str:
    """Validate a cron expression (5 fields, or 6 with seconds); ConfigurationError if bad."""
    if not isinstance(expression, str) or not expression.strip():
        raise ConfigurationError(f"invalid cron expression {expression!r}: it is empty")
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ConfigurationError(
            f"invalid cron expression {expression!r}: expected 5 fields "
            "(minute hour day month weekday) or 6 (with seconds)"
        )
    try:
        valid = croniter.is_valid(expression)
        if valid:
            next_tick(expression, 0.0)
    except Exception as exc:  # noqa: BLE001 - croniter raises many kinds of error on odd input
        raise ConfigurationError(f"invalid cron expression {expression!r}: {exc}") from None
    if not valid:
        raise ConfigurationError(f"invalid cron expression {expression!r}")
    return expression


def check_rule(
    cron: str | None, every: float | None, timezone: str, catch_up: C
) -> tuple[str | None, float | None, str, C]:
    """Validate a schedule's ticks and catch-up policy; ConfigurationError naming the
    expression (or the interval) if anything is wrong."""
    what = f"cron expression {cron!r}" if cron is not None else f"every={every!r}"
    if cron is not None and every is not None:
        raise ConfigurationError(f"{what} and every={every!r}: a schedule takes one of them")
    if cron is None and every is None:
        raise ConfigurationError("a schedule needs a cron expression or every= (seconds)")
    if cron is not None:
        check_cron(cron)
    else:
        if (
            isinstance(every, bool)
            or not isinstance(every, int | float)
            or not math.isfinite(every)
            or not MIN_EVERY <= every <= MAX_EVERY
        ):
            raise ConfigurationError(
                f"invalid every={every!r}: a number of seconds from {MIN_EVERY:g} to "
                f"{MAX_EVERY:.0f} (100 years)"
            )
        if timezone != "UTC":
            raise ConfigurationError(
                f"every={every!r} counts real seconds: timezone={timezone!r} applies only to "
                "cron expressions"
            )
    try:
        if timezone != "UTC" and timezone not in _iana_zones():
            raise KeyError(timezone)  # a path, or a host's own name: ticks would differ by host
        _zone(timezone)
    except (ValueError, TypeError, KeyError, OSError):
        hint = "an IANA name such as 'Europe/Berlin'"
        if isinstance(timezone, str) and timezone in _HOST_ZONES:
            hint = f"it names each host's own zone, so ticks would differ by host: give {hint}"
        elif not _iana_zones():
            hint = "this host has no time zone database: `pip install tzdata`"
        raise ConfigurationError(f"{what}: unknown timezone {timezone!r} ({hint})") from None
    if catch_up not in CATCH_UPS:
        raise ConfigurationError(
            f"{what}: catch_up must be one of {', '.join(map(repr, CATCH_UPS))}, not {catch_up!r}"
        )
    return cron, None if every is None else float(every), timezone, catch_up


@lru_cache(maxsize=1)
def _iana_zones() -> frozenset[str]:
    """The IANA zone names this host knows (its zoneinfo directory, else the tzdata package),
    without the host-specific ones; read once, as the scan takes some 50 ms."""
    return frozenset(available_timezones()) - _HOST_ZONES


@lru_cache(maxsize=64)
def _zone(name: str) -> tzinfo:
    """The zone named ``name``. UTC needs no time zone database, so a host without one (and
    without the ``tzdata`` package) still runs UTC schedules."""
    if not isinstance(name, str):
        raise TypeError(name)
    if name == "UTC":
        return UTC
    return ZoneInfo(name)


def _instant(wall: datetime, tz: tzinfo) -> float:
    """The instant of the naive local time ``wall``: its first occurrence if it happens twice,
    the end of the gap if it does not exist (a daylight-saving change skipped it)."""
    first = wall.replace(tzinfo=tz, fold=0)
    at = first.timestamp()
    if datetime.fromtimestamp(at, tz).replace(tzinfo=None) == wall:
        return at
    # In a gap, fold=0 reads the wall time with the offset before the change (an instant after
    # the change) and fold=1 with the offset after it (an instant before): the change is
    # between, where the offset turns into that of ``at``. Changes fall on whole seconds.
    lo, hi = math.floor(wall.replace(tzinfo=tz, fold=1).timestamp()), math.ceil(at)
    after = datetime.fromtimestamp(at, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return float(hi)


def next_tick(expression: str, after: float, timezone: str = "UTC") -> float:
    """The first tick of ``expression`` in ``timezone`` strictly after ``after`` (epoch
    seconds), by the daylight-saving rules in this module's docstring."""
    tz = _zone(timezone)
    wall = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    # Local times only move forward here. In the second pass of a repeated hour, the candidates
    # still in that hour map to their first occurrence, before ``after``: step past them.
    it = croniter(expression, wall, second_at_beginning=len(expression.split()) == 6)
    for _ in range(_SEARCH_LIMIT):
        candidate: datetime = it.get_next(datetime)
        at = _instant(candidate, tz)
        if at > after:
            return at
    raise ConfigurationError(f"cron expression {expression!r}: no tick found after {after}")


def next_run(sched: Ticking, after: float) -> float:
    """The first tick of ``sched`` after ``after`` (and at least a millisecond after it)."""
    after += _TOLERANCE
    if sched.cron is None:
        every = sched.every or MIN_EVERY
        return (math.floor(after / every) + 1) * every
    return next_tick(sched.cron, after, sched.timezone)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one ticker round does to a due schedule: drop ticks (``skip``: from the stored tick
    to the one after them), then fire ``fires`` in order, each (tick, the tick after it)."""

    skip: tuple[float, float] | None = None
    fires: list[tuple[float, float]] = field(default_factory=list)
    dropped: bool = False  # catch_up="all" met CATCH_UP_MAX: the later missed ticks are dropped


def plan(sched: Ticking, now: float) -> Plan:
    """The round for ``sched`` at ``now`` by its catch-up policy; empty unless a tick is due."""
    due = sched.next_run_at
    if not sched.active or sched.paused or due is None or due > now:
        return Plan()
    after_now = next_run(sched, max(now, due))
    if sched.catch_up == "none" and now - due > LATE_AFTER:
        return Plan(skip=(due, after_now))
    if sched.catch_up != "all":
        return Plan(fires=[(due, after_now)])
    ticks = [due]
    while len(ticks) < CATCH_UP_MAX:
        following = next_run(sched, ticks[-1])
        if following > now:
            break
        ticks.append(following)
    dropped = len(ticks) == CATCH_UP_MAX and next_run(sched, ticks[-1]) <= now
    return Plan(fires=list(zip(ticks, [*ticks[1:], after_now], strict=True)), dropped=dropped)
