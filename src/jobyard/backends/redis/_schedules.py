"""Recurring jobs on Redis: each schedule is a hash on its job's queue tag, so firing a tick
(move ``next_run_at`` on and insert the job) is one script on one slot; a global hash on the
``{prefix}`` tag maps schedule names to their queues."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ...errors import QueueFull
from .._stored import readable
from ..base import (
    DEFAULT_MAX_ATTEMPTS,
    CatchUp,
    Inserted,
    NewJob,
    Schedule,
    SchedulesFireParams,
    SchedulesPauseParams,
    SchedulesSkipParams,
    SchedulesSyncParams,
)
from . import _insert
from .keys import job_id

if TYPE_CHECKING:
    from ._core import Core


def _job_of(queue: str, text: str) -> NewJob:
    """A schedule's job as stored (:meth:`NewJob.to_json`). Versions before it kept a positional
    list, which a schedule not synced since still holds."""
    if not text.startswith("["):
        return NewJob.from_json(text)
    f: list[Any] = json.loads(text)
    return NewJob(
        name=f[0],
        queue=queue,
        payload=f[1],
        priority=int(f[2]),
        max_attempts=f[3],
        backoff=f[4],
        timeout=f[5],
        lease=float(f[6]),
        delivery=f[7],
        idempotency_key=f[8],
        parent_id=f[9],
    )


def _opt(value: str | None) -> float | None:
    return None if value is None else float(value)


def sync(c: Core, params: SchedulesSyncParams) -> None:
    """Store the given schedules (see ``SchedulesSyncParams``); deactivate the others."""
    index: dict[str, str] = c.call(lambda: c.client.hgetall(c.keys.schedules))
    given = {s.name for s in params.schedules}
    for s in params.schedules:
        queue = s.job.queue
        old_queue = index.get(s.name)
        carried = ""  # the pause of a schedule whose hash moves to another slot
        if old_queue is not None and old_queue != queue:
            # the job moved to another queue: its schedule moves to that queue's slot
            stale = c.keys.schedule(old_queue, s.name)
            was = c.call(lambda: c.client.hget(stale, "paused"))  # noqa: B023
            carried = "1" if was == "1" else "0"
            c.call(lambda: c.client.delete(stale))  # noqa: B023 - called at once
        next_run = repr(float(s.next_run_at if s.next_run_at is not None else c.clock_now()))
        every = "" if s.every is None else repr(float(s.every))
        c.run(
            "schedules_sync",
            [c.keys.schedule(queue, s.name)],
            [
                s.name,
                s.cron or "",
                queue,
                s.job.to_json(),
                next_run,
                every,
                s.timezone,
                s.catch_up,
                carried,
            ],
        )
        c.call(lambda: c.client.hset(c.keys.schedules, s.name, queue))  # noqa: B023
    for name, queue in index.items():
        if name not in given:
            _deactivate(c, c.keys.schedule(queue, name))


def _deactivate(c: Core, key: str) -> None:
    if c.call(lambda: c.client.exists(key)):
        c.call(lambda: c.client.hset(key, "active", "0"))


def list_all(c: Core) -> list[Schedule]:
    """Every stored schedule, by name."""
    index: dict[str, str] = c.call(lambda: c.client.hgetall(c.keys.schedules))
    names = sorted(index)
    if not names:
        return []

    def fetch() -> list[dict[str, str]]:
        pipe = c.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(c.keys.schedule(index[name], name))
        rows: list[dict[str, str]] = pipe.execute()
        return rows

    def read(pair: tuple[str, dict[str, str]]) -> Schedule:
        name, h = pair
        return Schedule(
            name=name,
            cron=h["cron"] or None,  # empty: an interval schedule
            job=_job_of(index[name], h["job"]),
            active=h.get("active") == "1",
            next_run_at=_opt(h.get("next_run_at")),
            last_run_at=_opt(h.get("last_run_at")),
            every=_opt(h.get("every") or None),
            timezone=h.get("timezone") or "UTC",
            catch_up=_catch_up(h.get("catch_up")),
            paused=h.get("paused") == "1",
        )

    stored = [(n, h) for n, h in zip(names, c.call(fetch), strict=True) if h]
    return readable(stored, read, "schedule")


def skip(c: Core, params: SchedulesSkipParams) -> bool:
    """Drop ticks if the schedule still waits for ``fire_at`` (one script on its slot)."""
    queue = c.call(lambda: c.client.hget(c.keys.schedules, params.name))
    if queue is None:
        return False
    args = [repr(float(params.fire_at)), repr(float(params.next_at))]
    return bool(c.run("schedules_skip", [c.keys.schedule(queue, params.name)], args))


def pause(c: Core, params: SchedulesPauseParams) -> bool:
    """Pause or resume a schedule (one script on its slot); False if there is none."""
    queue = c.call(lambda: c.client.hget(c.keys.schedules, params.name))
    if queue is None:
        return False
    next_run = "" if params.next_run_at is None else repr(float(params.next_run_at))
    args = ["1" if params.paused else "0", next_run]
    return bool(c.run("schedules_pause", [c.keys.schedule(queue, params.name)], args))


def _catch_up(value: str | None) -> CatchUp:
    return value if value in ("all", "none") else "latest"  # type: ignore[return-value]


def fire(c: Core, params: SchedulesFireParams) -> Inserted | None:
    """Fire one tick if the schedule still waits for it (one script on the queue's slot)."""
    queue = c.call(lambda: c.client.hget(c.keys.schedules, params.name))
    if queue is None:
        return None
    keys = [*c.keys.queue(queue), c.keys.schedule(queue, params.name)]
    if c.cluster:
        first = str(c.run_once("seq_take", [c.keys.seq, c.keys.queues], ["1", queue]))
    else:
        first = ""
        keys += [c.keys.seq, c.keys.queues, c.keys.wake(queue)]
    args = [
        c.now(),
        repr(float(params.fire_at)),
        repr(float(params.next_at)),
        params.idempotency_key or "",
        first,
        "" if c.cluster else "1",
        str(DEFAULT_MAX_ATTEMPTS),
    ]
    since = time.monotonic()
    reply = c.run("schedules_fire", keys, args)
    while reply[0] == "busy":  # its key is held by a batch still being written: nothing changed
        _insert.wait_busy(c, reply[1], reply[2], since)
        reply = c.run("schedules_fire", keys, args)
    if reply[0] == "skip":
        return None
    if reply[0] == "full":
        raise QueueFull(reply[1], int(reply[2]))
    created = reply[2] == "1"
    if c.cluster and created:
        c.wake_after({queue: 1})
    return Inserted(job_id(queue, reply[1]), created)
