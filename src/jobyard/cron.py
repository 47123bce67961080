"""Recurring schedules: cron expressions that enqueue a job at every tick, and never twice.

Every worker of an app with schedules runs the ticker. Firing a tick is one atomic step in the
store (``schedules_fire``): it moves the schedule's ``next_run_at`` from the tick to the next one
and inserts the job together, only if ``next_run_at`` still equals the tick, so of many workers
exactly one fires it, and a crash between the two halves cannot happen.

Expressions are evaluated in UTC. A schedule whose ticks were missed while no worker ran fires
once when a worker returns, not once per missed tick: that job carries the first missed tick as
its ``run_at``, and the schedule moves on to the first tick after now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from croniter import croniter

from .backends.base import Backend, Schedule, SchedulesFireParams, SchedulesSyncParams
from .errors import ConfigurationError, QueueFull

log = logging.getLogger("jobyard.cron")


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


def next_tick(expression: str, after: float) -> float:
    """The first tick of ``expression`` strictly after ``after`` (epoch seconds, UTC)."""
    start = datetime.fromtimestamp(after, UTC)
    second_first = len(expression.split()) == 6
    it = croniter(expression, start, second_at_beginning=second_first)
    nxt: datetime = it.get_next(datetime)
    return nxt.timestamp()


def sync(backend: Backend, schedules: Iterable[Schedule]) -> None:
    """Store the app's schedules; new or changed ones start at their next tick from now."""
    now = backend.clock_now()
    ready = [replace(s, next_run_at=next_tick(s.cron, now)) for s in schedules]
    backend.schedules_sync(SchedulesSyncParams(ready))


def tick(backend: Backend) -> list[str]:
    """Fire every due tick of every active schedule; the names of those this call fired."""
    now = backend.clock_now()
    fired: list[str] = []
    for sched in backend.schedules_list():
        due = sched.next_run_at
        if not sched.active or due is None or due > now:
            continue
        params = SchedulesFireParams(sched.name, due, next_tick(sched.cron, max(now, due)))
        try:
            inserted = backend.schedules_fire(params)
        except QueueFull as exc:
            log.warning("schedule %s: not fired, %s; retrying next tick", sched.name, exc)
            continue
        if inserted is not None:
            log.info("schedule %s fired job %s", sched.name, inserted.id)
            fired.append(sched.name)
    return fired
