"""Dropped connections and restarts: the backend (and a worker on it) carries on.

Restarts happen on servers these tests start themselves on private ports; the shared server on
6379 is only ever asked to drop this test's own named connections."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

import jobyard
from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsWaitParams,
    Outcome,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import SystemClock
from tests.conftest import running_worker, wait_until
from tests.redis import support
from tests.redis.conftest import insert, new, url_for


@pytest.fixture
def server() -> Iterator[support.Server]:
    """A redis-server of this test's own, on a private port."""
    server = support.Server.start_new()
    yield server
    server.close()


def claim(backend: RedisBackend, limit: int = 10) -> list[jobyard.backends.base.ClaimedJob]:
    return backend.jobs_claim(JobsClaimParams("w", ["q"], limit))


def test_a_backend_survives_client_kill(kind: str) -> None:
    name = f"victim-{uuid.uuid4().hex[:8]}"
    url = url_for(kind, client_name=name)
    backend = RedisBackend(url, SystemClock())
    try:
        first = insert(backend, new())[0]
        woke: list[bool] = []
        waiter = threading.Thread(
            target=lambda: woke.append(backend.jobs_wait(JobsWaitParams(["q2"], 15)))
        )
        waiter.start()

        def waiting() -> bool:
            conns = [c for p in support.server_ports(url) for c in support.connections(p, name)]
            return any(c.get("cmd") == "blpop" for c in conns)

        wait_until(waiting, what="the waiter to block")
        # when every connection of the backend is killed, the blocked one included
        killed = sum(support.kill_connections(p, name) for p in support.server_ports(url))
        assert killed >= 1
        # then the next calls reconnect, and the waiter is still woken by an insert
        (c,) = claim(backend)
        assert c.id == first
        assert backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed")])) == []
        wait_until(waiting, what="the waiter to block again")
        backend.jobs_insert(JobsInsertParams([new("q2")]))
        waiter.join(15)
        assert woke == [True]
    finally:
        backend.close()


def test_a_backend_survives_a_restart_of_its_server(server: support.Server) -> None:
    # given jobs in a store, one of them claimed
    backend = RedisBackend(server.url + "?prefix=r", SystemClock())
    try:
        a, b = insert(backend, new(), new())
        (ca,) = claim(backend, 1)
        # when the server restarts (its data saved), with an empty script cache
        server.restart(save=True)
        # then the backend reconnects, loads its scripts again, and the state is there
        assert backend.jobs_ack(JobsAckParams([Outcome(ca.id, ca.token, "completed")])) == []
        (cb,) = claim(backend)
        assert cb.id == b
        # and a call made while the server is down waits for it to come back
        server.stop(save=True)
        done: list[str] = []
        t = threading.Thread(target=lambda: done.extend(insert(backend, new())))
        t.start()
        wait_until(lambda: t.is_alive(), what="the insert to be in flight")
        server.start()
        t.join(30)
        assert len(done) == 1 and backend.jobs_get(done[0]) is not None
        rec = backend.jobs_get(a)
        assert rec is not None and rec.status == "completed"
    finally:
        backend.close()


def test_a_backend_carries_on_after_its_server_lost_everything(server: support.Server) -> None:
    backend = RedisBackend(server.url + "?prefix=r", SystemClock())
    try:
        insert(backend, new())
        server.restart(save=False)  # SIGKILL, no persistence: the store comes back empty
        assert claim(backend) == []
        (job_id,) = insert(backend, new())
        assert [c.id for c in claim(backend)] == [job_id]
    finally:
        backend.close()


def test_scripts_are_loaded_again_after_script_flush(server: support.Server) -> None:
    backend = RedisBackend(server.url + "?prefix=r", SystemClock())
    try:
        insert(backend, new())
        server.client().script_flush()
        assert len(claim(backend)) == 1
    finally:
        backend.close()


def test_a_worker_survives_client_kill_and_a_restart(server: support.Server) -> None:
    name = f"worker-{uuid.uuid4().hex[:8]}"
    app = jobyard.App(f"{server.url}?prefix=w&client_name={name}")

    @app.job
    def echo(n: int) -> int:
        return n

    try:
        with running_worker(app, concurrency=2):
            assert echo.enqueue(1).result(timeout=10) == 1
            assert support.kill_connections(server.port, name) >= 1
            assert echo.enqueue(2).result(timeout=10) == 2
            server.restart(save=True)
            assert echo.enqueue(3).result(timeout=30) == 3
    finally:
        app.close()


def test_a_cluster_url_may_name_several_nodes_and_any_live_one_will_do() -> None:
    url = support.cluster_url()
    ports = support.server_ports(url)
    dead = support.free_port()  # nothing listens there
    _, _, query = url.partition("?")
    several = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{ports[1]}?{query}"
    app = jobyard.App(several)
    try:
        handle = app.enqueue("task", 1)
        assert app.get(handle.id).status == "pending"
    finally:
        app.close()
    with pytest.raises(jobyard.ConfigurationError, match="redis\\+cluster"):
        jobyard.App("redis://127.0.0.1:1,127.0.0.1:2/0").enqueue("task")


def test_an_outage_is_logged_once_per_step_however_many_threads_retry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import redis.exceptions

    from jobyard.backends.redis import _connection

    # given one backend's outage log, and a clock we move by hand
    now = [1000.0]
    monkeypatch.setattr(_connection.time, "monotonic", lambda: now[0])
    outage = _connection.Outage()
    refused = redis.exceptions.ConnectionError("Error 111 connecting to h:1. Connection refused.")
    caplog.set_level(logging.WARNING, logger="jobyard.redis")

    # when three threads' calls fail every 50 ms each for 10 s, then Redis answers
    for _ in range(200):
        for _ in range(3):
            outage.failed(refused)
        now[0] += 0.05
    outage.answered()
    outage.answered()

    # then the outage took one line per doubling of its length, and one line when it ended
    lines = [r.getMessage() for r in caplog.records if r.name == "jobyard.redis"]
    assert len(lines) == 1 + 3 + 1, lines  # at 0 s, then after 1, 3 and 7 s, then the end
    assert "Connection refused" in lines[0] and "reachable again after 10.0s" in lines[-1]
