"""A real network partition: workers on test hosts of their own (network namespaces joined to
the store by veth links), one host's link cut while it runs a job.

The cut-off worker cannot renew its lease, so a worker on the other host rescues the job once
the lease lapses and runs it again. The cut-off handler then finishes too, and when the link
comes back, while the rescuer's attempt is still running, its late completion reaches the store
and is refused by the lease token (fencing; the job's status alone would not refuse it): the
job runs on under the rescuer, whose outcome is the one that stands, and the cut-off worker
lives on.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard
from tests.chaos import chaos_app
from tests.chaos.harness import Proc, wait_for
from tests.chaos.netns import Hosts
from tests.chaos.servers import PostgresServer, RedisServer

# required_where_ci: where it cannot run it skips, unless JOBYARD_REQUIRE_PARTITION=1 (.ci/run)
# makes that a failure (tests/chaos/conftest.py). alone, xdist_group: as the chaos runs
# (test_chaos.py)
pytestmark = [
    pytest.mark.processes,
    pytest.mark.required_where_ci,
    pytest.mark.timeout(300),
    pytest.mark.alone,
    pytest.mark.xdist_group("chaos"),
]

BACKENDS = {
    "postgres": "jobyard.backends.postgres.backend",
    "redis": "jobyard.backends.redis.backend",
}


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    made = Hosts(2)
    yield made
    made.close()


@pytest.fixture(params=list(BACKENDS))
def partition_store(request: pytest.FixtureRequest, hosts: Hosts) -> Iterator[Any]:
    """A private server listening on localhost and on the root end of every host's link."""
    kind: str = request.param
    if importlib.util.find_spec(BACKENDS[kind]) is None:
        pytest.skip(f"{BACKENDS[kind]} is not written yet")
    listen = ["127.0.0.1", *(h.root_addr for h in hosts.hosts)]
    server: Any
    if kind == "postgres":
        server = PostgresServer(listen=listen, subnets=[hosts.subnet])
        request.addfinalizer(server.close)
        server.init()
        jobyard.App(server.url).migrate()
    else:
        server = RedisServer(bind=listen)
        request.addfinalizer(server.close)
        server.start()
    yield server


def test_a_cut_off_worker_cannot_overwrite_the_rescuers_outcome(
    hosts: Hosts, partition_store: Any, tmp_path: Path
) -> None:
    sink = tmp_path / "sink"
    sink.mkdir()
    procs: dict[str, Proc] = {}
    app = jobyard.App(partition_store.url)
    try:
        for h in hosts.hosts:
            env = {
                **os.environ,
                "JOBYARD_URL": partition_store.url_for(h.root_addr),
                "JOBYARD_SINK": str(sink),
                "JOBYARD_HOST": h.name,
                "PYTHONUNBUFFERED": "1",
            }
            argv = h.exec_argv(
                sys.executable, "-m", "jobyard", "worker", "tests.chaos.chaos_app:app",
                "-q", chaos_app.PARTITION_QUEUE, "-c", "1", "--reap-interval", "0.2",
                "--grace", "1",
            )  # fmt: skip
            procs[h.name] = Proc(argv, env, tmp_path / f"worker-{h.name}.log")
        wait_for(
            lambda: all("started: queues=" in p.output() for p in procs.values()),
            60,
            "a worker to start on each host",
        )

        job_fn = app.by_name(
            "partition_job",
            queue=chaos_app.PARTITION_QUEUE,
            lease=chaos_app.LEASE,
            max_attempts=3,
            backoff=jobyard.Backoff("fixed", 0.0),
        )
        handle = job_fn.enqueue("cut")
        started = wait_for(lambda: list(sink.glob("start.cut.*")), 30, "the first attempt")
        victim_name = started[0].read_text().split(":")[0]
        victim = next(h for h in hosts.hosts if h.name == victim_name)
        rescuer = next(h for h in hosts.hosts if h.name != victim_name)

        victim.cut()
        # The lease (1 s) lapses; the other host's reaper hands the job out again, and the
        # rescuer's attempt holds it (running, attempt 2) until the test lets it answer.
        wait_for(lambda: len(list(sink.glob("start.cut.*"))) == 2, 60, "the rescue")
        rescue = app.get(handle.id)
        assert (rescue.status, rescue.attempts) == ("running", 2)

        # The cut-off handler finishes now: its completion cannot reach the store yet.
        (sink / "release.cut").touch()
        wait_for(lambda: list(sink.glob("late.cut.*")), 30, "the cut-off handler to finish")
        time.sleep(3.0)  # a partition of several leases: the worker's calls hang or time out
        victim.heal()
        # Wait for the late completion's fate: refused (the worker says so for this job), or
        # applied (the job leaves running), whichever comes first.
        stale = f"job {handle.id}: outcome completed refused"
        wait_for(
            lambda: stale in procs[victim.name].output() or app.get(handle.id).status != "running",
            120,
            "the late completion",
        )
        job = app.get(handle.id)
        assert (job.status, job.result, job.attempts) == ("running", None, 2)

        # The rescuer's outcome is the one that stands.
        (sink / "rescue.cut").touch()
        assert handle.result(timeout=60).startswith(f"rescued {rescuer.name}:")
        assert app.get(handle.id).attempts == 2
        assert procs[victim.name].alive(), procs[victim.name].output()[-3000:]
        assert procs[rescuer.name].alive(), procs[rescuer.name].output()[-3000:]
        # The workers keep working once the link is back.
        for i in range(4):
            (sink / f"release.after{i}").touch()
        after = [job_fn.enqueue(f"after{i}") for i in range(4)]
        for h in after:
            assert h.result(timeout=60).startswith("first ")
    finally:
        for p in procs.values():
            p.close()
        app.close()
