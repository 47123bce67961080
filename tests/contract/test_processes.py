"""Behaviour that is about processes, with real worker processes: kill -9 is a real kill."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobyard
from tests.apps.contract_app import marks
from tests.conftest import WorkerProcess, wait_until

pytestmark = pytest.mark.processes


@pytest.fixture
def app(shared_store: tuple[str, str]) -> Iterator[jobyard.App]:
    app = jobyard.App(shared_store[1])
    yield app
    app.close()


def job_of(app: jobyard.App, job_id: str) -> jobyard.Job:
    return app.get(job_id)


def test_sigkilled_workers_job_completes_elsewhere(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    handle = app.by_name("hang_first", queue="leases", lease=1.0, max_attempts=3).enqueue("k", 60)
    first = spawn_worker(shared_store[1], "-q", "leases", "-c", "2", "--reap-interval", "0.2")
    wait_until(lambda: marks(sink, "start", "k"), what="first attempt started")
    first.signal(signal.SIGKILL)
    first.wait()
    spawn_worker(shared_store[1], "-q", "leases", "-c", "2", "--reap-interval", "0.2")
    assert handle.result(timeout=30) == "second"
    job = job_of(app, handle.id)
    assert (job.status, job.attempts) == ("completed", 2)
    assert sorted(p.read_text() for p in marks(sink, "start", "k")) == ["1", "2"]
    assert marks(sink, "late", "k") == []


def test_paused_worker_cannot_overwrite_the_rescuers_outcome(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    handle = app.by_name("hang_first", queue="leases", lease=1.0, max_attempts=3).enqueue("f", 2.5)
    paused = spawn_worker(shared_store[1], "-q", "leases", "-c", "1", "--reap-interval", "0.2")
    wait_until(lambda: marks(sink, "start", "f"), what="first attempt started")
    paused.signal(signal.SIGSTOP)
    spawn_worker(shared_store[1], "-q", "leases", "-c", "1", "--reap-interval", "0.2")
    assert handle.result(timeout=30) == "second"
    paused.signal(signal.SIGCONT)
    wait_until(lambda: marks(sink, "late", "f"), what="the paused handler to finish")
    wait_until(lambda: "refused" in paused.output(), what="the stale outcome to be refused")
    job = job_of(app, handle.id)
    assert (job.status, job.result, job.attempts) == ("completed", "second", 2)
    assert paused.proc.poll() is None  # the stale worker keeps going


def test_heartbeats_keep_a_long_job_across_worker_processes(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    handle = app.by_name("outlive_lease", queue="leases", lease=1.0).enqueue("h", 3.0)
    for _ in range(2):
        spawn_worker(shared_store[1], "-q", "leases", "-c", "2", "--reap-interval", "0.1")
    assert handle.result(timeout=30) == 1
    assert len(marks(sink, "start", "h")) == 1
    assert job_of(app, handle.id).attempts == 1


def test_sigterm_releases_what_cannot_finish_within_grace(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    stuck = app.by_name("sleep_for", queue="slow").enqueue("stuck", 60)
    worker = spawn_worker(shared_store[1], "-q", "slow", "-c", "1", "--grace", "0.5")
    wait_until(lambda: marks(sink, "start", "stuck"), what="the job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    job = job_of(app, stuck.id)
    assert (job.status, job.attempts) == ("pending", 0)
    assert "released" in worker.output()


def test_sigterm_lets_a_running_job_finish(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    short = app.by_name("sleep_for", queue="slow").enqueue("short", 1.0)
    worker = spawn_worker(shared_store[1], "-q", "slow", "-c", "1", "--grace", "20")
    wait_until(lambda: marks(sink, "start", "short"), what="the job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    job = job_of(app, short.id)
    assert (job.status, job.attempts) == ("completed", 1)


def test_second_signal_stops_at_once(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    stuck = app.by_name("sleep_for", queue="slow").enqueue("again", 60)
    worker = spawn_worker(shared_store[1], "-q", "slow", "-c", "1", "--grace", "120")
    wait_until(lambda: marks(sink, "start", "again"), what="the job to start")
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in worker.output(), what="the first signal to register")
    worker.signal(signal.SIGINT)
    assert worker.wait(20) == 0
    job = job_of(app, stuck.id)
    assert (job.status, job.attempts) == ("pending", 0)
