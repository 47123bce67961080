"""At most once against at least once, with real worker processes killed mid-handler (kill -9 is
a real kill): the at-most-once job is lost and says so; the reliable one runs again elsewhere."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobyard
from jobyard.backends.base import AT_MOST_ONCE_LOST_ERROR
from tests.apps.contract_app import marks
from tests.conftest import WorkerProcess, wait_until
from tests.redis import apps
from tests.redis.conftest import url_for

APP = "tests.redis.apps:app"


@pytest.fixture
def url(kind: str) -> str:
    """A fresh store (one node, or the cluster) that worker processes can reach."""
    return url_for(kind)


@pytest.fixture
def app(url: str) -> Iterator[jobyard.App]:
    app = jobyard.App(url)
    yield app
    app.close()


def enqueue_as(app: jobyard.App, fn: jobyard.JobFunction, *args: object) -> jobyard.JobHandle:
    """Enqueue on ``app`` a job of another App's ``fn``, with that job's own options
    (at_most_once, its lease...), as a producer without the handler's code would."""
    o = fn.opts
    return app.by_name(
        o.name,
        queue=o.queue,
        priority=o.priority,
        max_attempts=o.max_attempts,
        backoff=o.backoff,
        timeout=o.timeout,
        lease=o.lease,
        delivery=o.delivery,
    ).enqueue(*args)


def kill_mid_handler(
    spawn_worker: Callable[..., WorkerProcess], url: str, queue: str, sink: Path, tag: str
) -> None:
    first = spawn_worker(url, "-q", queue, "-c", "1", "--reap-interval", "0.2", app_ref=APP)
    wait_until(lambda: marks(sink, "start", tag), what="the handler to start")
    first.signal(signal.SIGKILL)
    first.wait()


def test_at_most_once_loses_the_job_of_a_killed_worker_and_says_so(
    app: jobyard.App, url: str, spawn_worker: Callable[..., WorkerProcess], sink: Path
) -> None:
    handle = enqueue_as(app, apps.fire_once, "amo", 60)
    kill_mid_handler(spawn_worker, url, "amo", sink, "amo")
    spawn_worker(url, "-q", "amo", "-c", "1", "--reap-interval", "0.2", app_ref=APP)
    with pytest.raises(jobyard.JobFailed, match="at_most_once"):
        handle.result(timeout=30)
    job = app.get(handle.id)
    assert (job.status, job.attempts, job.error) == ("failed", 1, AT_MOST_ONCE_LOST_ERROR)
    assert len(marks(sink, "start", "amo")) == 1  # never run again


def test_at_least_once_runs_the_job_of_a_killed_worker_again(
    app: jobyard.App, url: str, spawn_worker: Callable[..., WorkerProcess], sink: Path
) -> None:
    handle = enqueue_as(app, apps.hang_first, "alo", 60)
    kill_mid_handler(spawn_worker, url, "alo", sink, "alo")
    spawn_worker(url, "-q", "alo", "-c", "1", "--reap-interval", "0.2", app_ref=APP)
    assert handle.result(timeout=30) == "second"
    job = app.get(handle.id)
    assert (job.status, job.attempts) == ("completed", 2)
    assert sorted(p.read_text() for p in marks(sink, "start", "alo")) == ["1", "2"]
