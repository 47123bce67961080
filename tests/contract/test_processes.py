"""Behaviour that is about processes, with real worker processes: kill -9 is a real kill."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobyard
from tests.apps.contract_app import marks, open_gate
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
    starts = sorted(marks(sink, "start", "k"), key=lambda p: p.read_text())
    assert [p.read_text() for p in starts] == ["1", "2"]
    # the second attempt ran in the second worker (mark names carry the pid)
    first_pid, second_pid = (p.name.split(".")[2] for p in starts)
    assert first_pid == str(first.pid) and second_pid != first_pid


def test_a_killed_worker_is_shown_gone_and_its_entry_cleared(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    # given a registered worker process, killed so that it cannot unregister
    worker = spawn_worker(shared_store[1], "-q", "work", "--reap-interval", "0.2")
    (info,) = wait_until(app.workers, what="the worker to register")
    assert info.pid == worker.pid
    worker.signal(signal.SIGKILL)
    worker.wait()
    assert [w.pid for w in app.workers()] == [worker.pid]  # silent, not yet for long

    # when the workers are listed (as status does) after its stated silence limit, with no
    # other worker left to forget it (the clock is moved instead of waiting 20 s)
    later = jobyard.App(shared_store[1], clock=jobyard.FrozenClock(time.time() + 120))
    try:
        # then it is not shown
        assert later.workers() == []
    finally:
        later.close()
    # and its entry is cleared from the store, not only hidden
    assert app.workers() == []


def test_paused_worker_cannot_overwrite_the_rescuers_outcome(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    # given a worker paused mid-attempt, whose job a second worker rescued and now runs
    handle = app.by_name("hang_first", queue="leases", lease=1.0, max_attempts=3).enqueue(
        "f", 2.5, gated=True
    )
    paused = spawn_worker(shared_store[1], "-q", "leases", "-c", "1", "--reap-interval", "0.2")
    wait_until(lambda: marks(sink, "start", "f"), what="first attempt started")
    paused.signal(signal.SIGSTOP)
    spawn_worker(shared_store[1], "-q", "leases", "-c", "1", "--reap-interval", "0.2")
    wait_until(lambda: len(marks(sink, "start", "f")) == 2, what="the rescuer's attempt")

    # when the paused worker resumes while the rescuer's attempt is still running, finishes
    # its stale attempt and stops (a graceful stop writes every outcome it holds)
    paused.signal(signal.SIGCONT)
    wait_until(lambda: marks(sink, "late", "f"), what="the paused handler to finish")
    paused.signal(signal.SIGTERM)
    assert paused.wait(30) == 0

    # then its outcome was refused: the job still runs under the rescuer's attempt
    job = job_of(app, handle.id)
    assert (job.status, job.result, job.attempts) == ("running", None, 2)
    # and the rescuer's outcome is the one that stands
    open_gate(sink, "f")
    assert handle.result(timeout=30) == "second"
    job = job_of(app, handle.id)
    assert (job.status, job.result, job.attempts) == ("completed", "second", 2)


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


def test_a_join_runs_once_when_workers_are_sigkilled_around_member_completions(
    app: jobyard.App,
    shared_store: tuple[str, str],
    spawn_worker: Callable[..., WorkerProcess],
    sink: Path,
) -> None:
    # given a group of 80 members (queue work) and its join (queue fan), run by two worker
    # processes, one of which is SIGKILLed three times while members complete (so some die
    # between a member's completion and anything after it), each time replaced
    args = ("-q", "work", "-q", "fan", "-c", "4", "--reap-interval", "0.2")
    member = app.by_name("fan_member", queue="work", lease=1.0)
    join = app.by_name("fan_join", queue="fan", lease=1.0)
    flow = jobyard.group(*[member.s("g", i) for i in range(80)]).then(join.s("g")).enqueue()
    spawn_worker(shared_store[1], *args)
    victim = spawn_worker(shared_store[1], *args)
    for kill in range(3):
        wait_until(lambda k=kill: len(marks(sink, "member", "g")) >= 15 * (k + 1), what="members")
        victim.signal(signal.SIGKILL)
        victim.wait()
        victim = spawn_worker(shared_store[1], *args)
    # then the workflow completes with one join, which got every result in member order
    assert flow.result(timeout=60) == sum(range(80))
    joins = [j for j in app.workflow(flow.id).jobs if j.name == "fan_join"]
    assert [j.status for j in joins] == ["completed"]
    (ran,) = marks(sink, "join", "g")
    assert ran.read_text() == json.dumps(list(range(80)))
