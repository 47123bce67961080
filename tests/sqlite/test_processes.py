"""Several real processes on one database file: the write lock must make every read-decide-write
atomic (claims, max_concurrency, idempotency keys, max_pending, migrations, cron ticks)."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_module
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobyard.backends.base import (
    JobsClaimParams,
    JobsListParams,
    JobsWaitParams,
    QueueConfig,
    Schedule,
    SchedulesSyncParams,
    StatsParams,
)
from jobyard.backends.sqlite import _sql
from jobyard.backends.sqlite.backend import SQLiteBackend

from . import _procs
from .conftest import T0, insert, new

pytestmark = pytest.mark.processes


@pytest.fixture
def live(open_backend: Callable[..., SQLiteBackend]) -> SQLiteBackend:
    """A backend on the store's own clock, as the child processes use."""
    return open_backend()


SPAWN = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited threads or locks
FORK = multiprocessing.get_context("fork")


@pytest.fixture
def run_children() -> Iterator[Callable[..., list[Any]]]:
    """Start ``target(*args, start, results)`` in each of several processes released together by
    a barrier; return what each reported. Children still alive at teardown are killed."""
    started: list[Any] = []

    def run(
        target: Callable[..., None], args: list[tuple[Any, ...]], timeout: float = 60
    ) -> list[Any]:
        start = SPAWN.Barrier(len(args))
        results = SPAWN.Queue()
        procs = [SPAWN.Process(target=target, args=(*a, start, results)) for a in args]
        started.extend(procs)
        for p in procs:
            p.start()
        reports = []
        for _ in procs:
            try:
                reports.append(results.get(timeout=timeout))
            except queue_module.Empty:
                pytest.fail(f"a child process reported nothing within {timeout}s")
        for p in procs:
            p.join(timeout)
        errors = [text for kind, _, text in reports if kind == "error"]
        assert not errors, errors[0]
        assert [p.exitcode for p in procs] == [0] * len(procs)
        return [value for _, _, value in reports]

    yield run
    for p in started:
        if p.is_alive():
            p.kill()
            p.join(5)


def test_three_processes_claiming_never_double_claim(
    live: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    # given 1,500 pending jobs
    ids = insert(live, *(new() for _ in range(1500)))
    # when three processes claim small batches as fast as they can
    reports = run_children(_procs.claim_until_empty, [(url, 3), (url, 5), (url, 7)])
    # then each job went to exactly one of them, and all of them
    claimed = Counter(i for got in reports for i in got)
    assert [i for i, n in claimed.items() if n > 1] == []
    assert sorted(claimed, key=int) == ids
    assert all(reports), "every process should have won some claims"
    # and each was run once
    rec = live.jobs_list(JobsListParams(status="completed", limit=2000))
    assert len(rec) == 1500 and {r.attempts for r in rec} == {1}


def test_processes_completing_a_group_together_release_its_join_once_and_wake_a_worker(
    live: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    # given a group of 600 members in q and its join in j, and a worker here idle on j
    n = 600
    members = [new(workflow_id="wf") for _ in range(n)]
    ids = insert(live, *members, new(queue="j", workflow_id="wf", after=tuple(range(n))))
    join = ids[n]
    woken: list[bool] = []
    waiter = threading.Thread(
        target=lambda: woken.append(live.jobs_wait(JobsWaitParams(["j"], 30)))
    )
    waiter.start()
    # when three processes complete the members in small batches, racing each other
    run_children(_procs.claim_until_empty, [(url, 3), (url, 5), (url, 7)])
    waiter.join(40)
    # then the idle worker woke (nothing in this process signalled it: the file showed a due
    # job in j), and the join is pending with no wait left, claimable once
    assert woken == [True]
    raw = sqlite3.connect(live.path, isolation_level=None)
    try:
        assert raw.execute("SELECT status, waits FROM jobs WHERE id = ?", (join,)).fetchone() == (
            "pending",
            0,
        )
    finally:
        raw.close()
    assert [c.id for c in live.jobs_claim(JobsClaimParams("w", ["j"], 5))] == [join]
    assert {r.status for r in live.jobs_list(JobsListParams(ids=ids[:n], limit=n))} == {"completed"}


def test_max_concurrency_holds_across_processes(
    live: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    live.queues_configure(QueueConfig("capped", max_concurrency=3))
    insert(live, *(new(queue="capped") for _ in range(300)))
    highest = run_children(_procs.claim_under_a_cap, [(url, 300)] * 3)
    assert max(highest) <= 3
    (stats,) = live.stats_get(StatsParams(queues=("capped",)))
    assert stats.counts["completed"] == 300


def test_an_idempotency_key_creates_one_job_under_racing_producers(
    live: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    keys = [f"order-{i}" for i in range(200)]
    # three producers, each inserting every key, in different orders
    reports = run_children(
        _procs.insert_keys, [(url, keys), (url, keys[::-1]), (url, keys[100:] + keys[:100])]
    )
    outcomes = [o for report in reports for o in report]
    created = Counter(k for k, _, was_created in outcomes if was_created)
    assert all(created[k] == 1 for k in keys) and len(created) == len(keys)
    ids_per_key = {k: {i for kk, i, _ in outcomes if kk == k} for k in keys}
    assert all(len(v) == 1 for v in ids_per_key.values())
    assert len(live.jobs_list(JobsListParams(limit=1000))) == 200


def test_max_pending_holds_under_racing_producers(
    live: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    live.queues_configure(QueueConfig("bounded", max_pending=25))
    accepted = run_children(_procs.insert_until_full, [(url, 15)] * 3)
    assert sum(accepted) == 25
    (stats,) = live.stats_get(StatsParams(queues=("bounded",)))
    assert stats.counts["pending"] == 25


def test_processes_opening_a_new_file_together_migrate_it_once(
    tmp_path: Path, run_children: Callable[..., list[Any]]
) -> None:
    url = f"sqlite:///{tmp_path}/fresh.db"
    again = run_children(_procs.open_store, [(url,)] * 3)
    assert again == [[], [], []]  # each found the file migrated once it had opened it
    with contextlib.closing(sqlite3.connect(tmp_path / "fresh.db")) as raw:
        rows = raw.execute("SELECT name FROM jobyard_migrations ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [m.name for m in _sql.migrations()]


def test_racing_processes_fire_a_cron_tick_once(
    backend: SQLiteBackend, url: str, run_children: Callable[..., list[Any]]
) -> None:
    fire_at = T0 + 30
    backend.schedules_sync(
        SchedulesSyncParams([Schedule("ping", "* * * * *", new(name="ping"), next_run_at=fire_at)])
    )
    fired = run_children(_procs.fire_tick, [(url, fire_at + 1, "ping", fire_at)] * 3)
    winners = [f for f in fired if f is not None]
    assert len(winners) == 1
    (job,) = backend.jobs_list(JobsListParams())
    assert (job.id, job.run_at, job.name) == (winners[0], fire_at, "ping")
    (sched,) = backend.schedules_list()
    assert (sched.last_run_at, sched.next_run_at) == (fire_at, fire_at + 60)


def test_a_backend_inherited_over_fork_opens_its_own_connections(
    live: SQLiteBackend,
) -> None:
    # given a backend this process has used (it holds a connection)
    (parent_job,) = insert(live, new())
    results = FORK.Queue()

    def child() -> None:
        # the inherited object works in the child, on connections of its own
        (child_job,) = insert(live, new())
        claimed = [c.id for c in live.jobs_claim(JobsClaimParams("child", ["q"], 10))]
        live.close()
        results.put((child_job, claimed))

    proc = FORK.Process(target=child)
    proc.start()
    child_job, claimed = results.get(timeout=30)
    proc.join(30)
    assert proc.exitcode == 0
    assert claimed == [parent_job, child_job]
    # and the parent's own connection still works after the child closed its copy and exited
    assert [r.status for r in live.jobs_list(JobsListParams())] == ["running", "running"]
    insert(live, new())
