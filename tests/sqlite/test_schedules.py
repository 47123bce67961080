"""Recurring jobs in the SQLite store: sync keeps unchanged schedules' progress, and firing a tick
is one compare-and-set with the job's insert."""

from __future__ import annotations

import pytest

from jobyard.backends.base import (
    JobsListParams,
    QueueConfig,
    Schedule,
    SchedulesFireParams,
    SchedulesSyncParams,
)
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import FrozenClock
from jobyard.errors import QueueFull

from .conftest import T0, new


def sched(name: str, cron: str = "* * * * *", at: float = T0 + 60, **job: object) -> Schedule:
    return Schedule(name, cron, new(name=name, **job), next_run_at=at)


def sync(backend: SQLiteBackend, *schedules: Schedule) -> dict[str, Schedule]:
    backend.schedules_sync(SchedulesSyncParams(list(schedules)))
    return {s.name: s for s in backend.schedules_list()}


def fire(backend: SQLiteBackend, name: str, fire_at: float, next_at: float | None = None):  # type: ignore[no-untyped-def]
    return backend.schedules_fire(SchedulesFireParams(name, fire_at, next_at or fire_at + 60))


def test_sync_stores_keeps_resets_and_deactivates(backend: SQLiteBackend) -> None:
    stored = sync(backend, sched("a"), sched("b", priority=3))
    assert stored["b"].job == new(name="b", priority=3)  # the job survives the round trip
    assert [(s.active, s.next_run_at, s.last_run_at) for s in stored.values()] == [
        (True, T0 + 60, None)
    ] * 2
    assert fire(backend, "a", T0 + 60) is not None
    # an unchanged schedule keeps its progress, whatever next_run_at the app computes now
    stored = sync(backend, sched("a", at=T0 + 999), sched("b", cron="0 * * * *", at=T0 + 3600))
    assert (stored["a"].next_run_at, stored["a"].last_run_at) == (T0 + 120, T0 + 60)
    # a changed one starts afresh
    assert (stored["b"].cron, stored["b"].next_run_at) == ("0 * * * *", T0 + 3600)
    # one the app no longer declares is kept, inactive, and never fires
    stored = sync(backend, sched("b", cron="0 * * * *"))
    assert stored["a"].active is False and stored["b"].active is True
    assert fire(backend, "a", T0 + 120) is None
    assert sync(backend, sched("a"))["a"].active is True


def test_a_tick_fires_once_with_its_key_and_run_at(backend: SQLiteBackend) -> None:
    sync(backend, sched("ping"))
    assert fire(backend, "ping", T0 + 30) is None  # not the stored tick
    inserted = fire(backend, "ping", T0 + 60 + 0.0004)  # within the 1 ms tolerance
    assert inserted is not None and inserted.created
    assert fire(backend, "ping", T0 + 60) is None  # already fired
    assert fire(backend, "nope", T0 + 60) is None
    (job,) = backend.jobs_list(JobsListParams())
    assert (job.id, job.run_at, job.idempotency_key) == (
        inserted.id,
        T0 + 60.0004,
        f"cron:ping:{T0 + 60.0004!r}",
    )


def test_a_full_queue_leaves_the_tick_due(backend: SQLiteBackend, clock: FrozenClock) -> None:
    backend.queues_configure(QueueConfig("q", max_pending=0))
    sync(backend, sched("ping"))
    with pytest.raises(QueueFull):
        fire(backend, "ping", T0 + 60)
    (stored,) = backend.schedules_list()
    assert (stored.next_run_at, stored.last_run_at) == (T0 + 60, None)
    backend.queues_configure(QueueConfig("q"))
    assert fire(backend, "ping", T0 + 60) is not None
