"""Real worker processes (``python -m jobyard worker``) on one schema: every job exactly once
under load, transactional completion across a kill and a lost lease, and a worker that outlives
the termination of its connections."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard
from jobyard.backends.base import StatsParams
from tests.apps.contract_app import marks, open_gate
from tests.conftest import WorkerProcess, wait_until
from tests.postgres.conftest import terminate
from tests.postgres.support import with_params

pytestmark = pytest.mark.processes

APP = "tests.postgres.pg_app:app"
Spawn = Callable[..., WorkerProcess]


@pytest.fixture
def app(url: str) -> Iterator[jobyard.App]:
    app = jobyard.App(url)
    yield app
    app.close()


def counts(app: jobyard.App, queue: str) -> dict[str, int]:
    for s in app.backend.stats_get(StatsParams((queue,))):
        return s.counts
    return {}


def run_counts(sink: Path) -> Counter[str]:
    """Executions per tag, from the ``run.<tag>.<pid>.<n>`` files."""
    return Counter(p.name.split(".")[1] for p in sink.iterdir() if p.name.startswith("run."))


def test_four_workers_run_five_thousand_jobs_exactly_once(
    app: jobyard.App, url: str, spawn_worker: Spawn, sink: Path
) -> None:
    total = 5000
    workers = [spawn_worker(url, "-q", "work", "-c", "8", app_ref=APP) for _ in range(4)]
    wait_until(lambda: len(app.workers()) == 4, what="four workers registered")
    for start in range(0, total, 1000):
        app.by_name("record", queue="work").enqueue_many(
            [((f"j{i}",), {}) for i in range(start, start + 1000)]
        )
    wait_until(
        lambda: counts(app, "work").get("completed") == total,
        timeout=120,
        interval=0.2,
        what="every job completed",
    )
    runs = run_counts(sink)
    assert len(runs) == total and set(runs.values()) == {1}
    done = app.jobs(queue="work", status="completed", limit=total)
    assert {j.attempts for j in done} == {1}
    assert len({j.worker_id for j in done}) > 1  # shared out (a fast worker may take most)
    for worker in workers:
        assert worker.proc.poll() is None, worker.output()


@pytest.fixture
def effects(sql: Any) -> Callable[[], list[tuple[Any, ...]]]:
    """The handlers' table; returns a reader of its rows."""
    sql("CREATE TABLE effects (tag text NOT NULL, attempt int NOT NULL)")
    return lambda: sql("SELECT tag, attempt FROM effects ORDER BY attempt")


def test_a_kill_between_the_write_and_the_commit_leaves_no_write(
    app: jobyard.App,
    url: str,
    spawn_worker: Spawn,
    sink: Path,
    effects: Callable[[], list[tuple[Any, ...]]],
) -> None:
    handle = app.by_name("tx_write", queue="tx", lease=1.0).enqueue("k", 60)
    first = spawn_worker(url, "-q", "tx", "-c", "2", "--reap-interval", "0.2", app_ref=APP)
    wait_until(lambda: marks(sink, "written", "k"), what="the first attempt's write")
    first.signal(signal.SIGKILL)
    first.wait()
    assert effects() == []  # the write died with its transaction
    spawn_worker(url, "-q", "tx", "-c", "2", "--reap-interval", "0.2", app_ref=APP)
    assert handle.result(timeout=30) == 2
    assert effects() == [("k", 2)]  # the job ran again, and only that run's write stayed


def test_a_stale_workers_commit_is_refused_with_its_writes(
    app: jobyard.App,
    url: str,
    spawn_worker: Spawn,
    sink: Path,
    effects: Callable[[], list[tuple[Any, ...]]],
) -> None:
    # given a worker paused inside its attempt's transaction, whose job a second worker
    # rescued and now runs (its own write not committed yet)
    handle = app.by_name("tx_write", queue="tx", lease=1.0).enqueue("s", 3.0, gated=True)
    paused = spawn_worker(url, "-q", "tx", "-c", "1", "--reap-interval", "0.2", app_ref=APP)
    wait_until(lambda: marks(sink, "written", "s"), what="the first attempt's write")
    paused.signal(signal.SIGSTOP)  # no heartbeat: the lease lapses and the job is rescued
    spawn_worker(url, "-q", "tx", "-c", "1", "--reap-interval", "0.2", app_ref=APP)
    wait_until(lambda: len(marks(sink, "written", "s")) == 2, what="the rescuer's write")

    # when the paused worker resumes while the rescuer's attempt still runs, finishes its
    # stale attempt and stops (a graceful stop settles every outcome it holds)
    paused.signal(signal.SIGCONT)
    wait_until(lambda: marks(sink, "late", "s"), what="the paused attempt to finish")
    paused.signal(signal.SIGTERM)
    assert paused.wait(30) == 0

    # then its completion was refused with its write: nothing committed, the job still runs
    assert effects() == []
    job = app.get(handle.id)
    assert (job.status, job.result, job.attempts) == ("running", None, 2)
    # and the rescuer's commit is the one that stands
    open_gate(sink, "s")
    assert handle.result(timeout=30) == 2
    assert effects() == [("s", 2)]
    job = app.get(handle.id)
    assert (job.status, job.result, job.attempts) == ("completed", 2, 2)


def test_a_worker_survives_the_termination_of_its_connections(
    app: jobyard.App, url: str, app_name: str, spawn_worker: Spawn, sink: Path
) -> None:
    worker_url = with_params(url, application_name=f"{app_name}-worker")
    worker = spawn_worker(worker_url, "-q", "work", "-c", "4", app_ref=APP)
    record = app.by_name("record", queue="work")
    for round_ in range(3):
        handles = record.enqueue_many([((f"r{round_}-{i}",), {}) for i in range(50)])
        wait_until(lambda: terminate(f"{app_name}-worker") > 0, what="the worker's connections")
        for h in handles:
            h.result(timeout=30)
    # Idle now, woken again by NOTIFY once its listener is back.
    wait_until(lambda: terminate(f"{app_name}-worker") > 0, what="the worker's connections")
    assert record.enqueue("after").result(timeout=30) == 1
    assert worker.proc.poll() is None, worker.output()
    assert set(run_counts(sink).values()) == {1}
