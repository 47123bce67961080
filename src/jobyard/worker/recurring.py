"""Recurring schedules against the store: sync an app's schedules, fire the ticks that are due.

Every worker of an app with schedules runs the ticker (from its maintenance). Firing a tick is
one atomic step in the store (``schedules_fire``): it moves the schedule's ``next_run_at`` from the
tick to the next one and inserts the job together, only if ``next_run_at`` still equals the tick,
so of many workers exactly one fires it, and a crash between the two halves cannot happen.
Dropping ticks (``schedules_skip``) is the same compare-and-set without the insert.

What a round does to a due schedule (the ticks missed while no worker ran, by its ``catch_up``)
is decided by the rules in ``jobyard.cron`` (``plan``); this module only carries it out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from ..backends.base import (
    Backend,
    Schedule,
    SchedulesFireParams,
    SchedulesSkipParams,
    SchedulesSyncParams,
)
from ..cron import CATCH_UP_MAX, next_run, plan
from ..errors import QueueFull
from ..events import Enqueued, Events, WorkerNote

log = logging.getLogger("jobyard.cron")


def sync(backend: Backend, schedules: Iterable[Schedule]) -> None:
    """Store the app's schedules; new or changed ones start at their next tick from now."""
    now = backend.clock_now()
    ready = [replace(s, next_run_at=next_run(s, now)) for s in schedules]
    backend.schedules_sync(SchedulesSyncParams(ready))


def tick(backend: Backend, events: Events | None = None) -> list[str]:
    """Fire every due tick of every active schedule; the names of those this call fired, once
    per tick fired (a tick whose job's own key was held fires, and makes no new job)."""
    now = backend.clock_now()
    fired: list[str] = []
    for sched in backend.schedules_list():
        todo = plan(sched, now)
        try:
            if todo.skip is not None:
                if backend.schedules_skip(SchedulesSkipParams(sched.name, *todo.skip)):
                    log.info("schedule %s: missed ticks dropped (catch_up=none)", sched.name)
                    if events is not None and events.active:
                        events.emit(WorkerNote("tick_skipped", 1, sched.name))
                continue
            for fire_at, next_at in todo.fires:
                params = SchedulesFireParams(
                    sched.name, fire_at, next_at, sched.job.idempotency_key
                )
                inserted = backend.schedules_fire(params)
                if inserted is None:
                    break  # another worker fired it, and goes on from there
                log.info("schedule %s fired job %s", sched.name, inserted.id)
                fired.append(sched.name)
                if events is not None and events.active:
                    events.emit(WorkerNote("tick_fired", 1, sched.name))
                    if inserted.created:
                        events.emit(Enqueued([(sched.job.name, sched.job.queue)]))
            else:
                if todo.dropped:
                    log.warning(
                        "schedule %s: more than %d ticks missed; fired the first %d, dropped "
                        "the rest (catch_up=all)",
                        sched.name,
                        CATCH_UP_MAX,
                        CATCH_UP_MAX,
                    )
        except QueueFull as exc:
            log.warning("schedule %s: not fired, %s; retrying next tick", sched.name, exc)
    return fired
