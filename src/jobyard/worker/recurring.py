"""Recurring schedules against the store: sync an app's schedules, fire the ticks that are due.

Every worker of an app with schedules runs the ticker (from its maintenance). Firing a tick is
one atomic step in the store (``schedules_fire``): it moves the schedule's ``next_run_at`` from the
tick to the next one and inserts the job together, only if ``next_run_at`` still equals the tick,
so of many workers exactly one fires it, and a crash between the two halves cannot happen.

A schedule whose ticks were missed while no worker ran fires once when a worker returns, not
once per missed tick: that job carries the first missed tick as its ``run_at``, and the schedule
moves on to the first tick after now. The cron rules themselves are in ``jobyard.cron``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from ..backends.base import Backend, Schedule, SchedulesFireParams, SchedulesSyncParams
from ..cron import next_tick
from ..errors import QueueFull

log = logging.getLogger("jobyard.cron")


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
        params = SchedulesFireParams(
            sched.name, due, next_tick(sched.cron, max(now, due)), sched.job.idempotency_key
        )
        try:
            inserted = backend.schedules_fire(params)
        except QueueFull as exc:
            log.warning("schedule %s: not fired, %s; retrying next tick", sched.name, exc)
            continue
        if inserted is not None:
            log.info("schedule %s fired job %s", sched.name, inserted.id)
            fired.append(sched.name)
    return fired
