"""A lost connection is survived: the pool replaces terminated connections, a statement that
met one is retried once on a fresh one, and the listener reconnects with backoff."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsWaitParams,
    Outcome,
)
from jobyard.backends.postgres.backend import PostgresBackend
from tests.conftest import wait_until
from tests.postgres.conftest import connections, insert, new, terminate
from tests.postgres.support import with_params

# alone: the reconnects are bounded in seconds; make test runs them after the parallel part
pytestmark = pytest.mark.alone


def test_a_backend_survives_the_termination_of_its_connections(
    open_backend: Callable[..., PostgresBackend], app_name: str
) -> None:
    backend = open_backend()
    insert(backend, new(), new())
    (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    for _ in range(3):
        assert terminate(app_name) >= 1
        # Every call after a termination goes through: a connection found dead on checkout is
        # replaced, one that dies under a statement is retried once on a fresh one.
        insert(backend, new())
        assert backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, "completed")])) == []
        (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))


def test_a_terminated_connection_is_replaced_without_a_failed_call(
    open_backend: Callable[..., PostgresBackend], app_name: str
) -> None:
    backend = open_backend()
    insert(backend, new())
    terminate(app_name)
    wait_until(lambda: connections(app_name) == 0, what="the terminated connections to go")
    # The pool's checkout sees the dead socket and opens a new connection: no retry needed.
    assert len(insert(backend, new(), new())) == 2


def test_the_listener_reconnects_and_wakes_waiters(
    open_backend: Callable[..., PostgresBackend], url: str, app_name: str
) -> None:
    waiter = open_backend()
    producer = open_backend(at=with_params(url, application_name=f"{app_name}-producer"))
    assert waiter.jobs_wait(JobsWaitParams(["q"], 2.0)) in (True, False)  # starts the listener
    wait_until(lambda: waiter._listener.connected, what="the listener to connect")
    terminate(app_name)
    wait_until(lambda: not waiter._listener.connected, what="the listener to notice")
    # While it is down, a waiter polls instead of sleeping out its whole timeout.
    started = time.monotonic()
    assert waiter.jobs_wait(JobsWaitParams(["q"], 30.0))
    assert time.monotonic() - started < 10
    wait_until(lambda: waiter._listener.connected, what="the listener to reconnect")
    waiter.jobs_wait(JobsWaitParams(["q"], 0.01))  # settle the reconnect's own wake-up

    woke: list[bool] = []
    ready = threading.Event()

    def wait() -> None:
        ready.set()
        woke.append(waiter.jobs_wait(JobsWaitParams(["q"], 30.0)))

    thread = threading.Thread(target=wait)
    thread.start()
    ready.wait(5)
    started = time.monotonic()
    insert(producer, new())
    thread.join(30)
    assert woke == [True] and time.monotonic() - started < 10


def test_waiting_on_one_queue_ignores_another(open_backend: Callable[..., PostgresBackend]) -> None:
    backend = open_backend()
    backend.jobs_wait(JobsWaitParams(["q"], 0.01))
    wait_until(lambda: backend._listener.connected, what="the listener to connect")
    backend.jobs_wait(JobsWaitParams(["q"], 0.01))  # settle the connect's own wake-up
    insert(backend, new("other"))
    assert backend.jobs_wait(JobsWaitParams(["q"], 0.3)) is False
    insert(backend, new("q"))
    assert backend.jobs_wait(JobsWaitParams(["q"], 10)) is True


def test_a_slot_freed_in_a_limited_queue_wakes_its_waiters(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    from jobyard.backends.base import QueueConfig

    waiter, other = open_backend(), open_backend()
    waiter.queues_configure(QueueConfig("q", max_concurrency=1))
    insert(waiter, new(), new())
    (job,) = other.jobs_claim(JobsClaimParams("w2", ["q"], 5))
    assert waiter.jobs_claim(JobsClaimParams("w1", ["q"], 5)) == []  # the queue is full
    waiter.jobs_wait(JobsWaitParams(["q"], 0.01))
    wait_until(lambda: waiter._listener.connected, what="the listener to connect")
    waiter.jobs_wait(JobsWaitParams(["q"], 0.01))  # settle the connect's own wake-up
    other.jobs_ack(JobsAckParams([Outcome(job.id, job.token, "completed")]))
    started = time.monotonic()
    assert waiter.jobs_wait(JobsWaitParams(["q"], 30.0))
    assert time.monotonic() - started < 10
    assert len(waiter.jobs_claim(JobsClaimParams("w1", ["q"], 5))) == 1


def test_pool_reconnect_warnings_are_one_line_per_step_of_an_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    from jobyard.backends.postgres import _connect

    # given the pool's filter, and a clock we move by hand
    now = [1000.0]
    monkeypatch.setattr(_connect.time, "monotonic", lambda: now[0])
    keep = _connect.PoolOutageFilter()

    def attempt() -> logging.LogRecord | None:
        record = logging.LogRecord(
            "psycopg.pool", logging.WARNING, __file__, 1, "error connecting in %r: %s",
            ("jobyard", "connection refused\n\tIs the server running?"), None,
        )  # fmt: skip
        return record if keep.filter(record) else None

    # when the pool's threads fail every 50 ms for 10 s of an outage
    passed = []
    for _ in range(200):
        if (record := attempt()) is not None:
            passed.append((now[0] - 1000.0, record.getMessage()))
        now[0] += 0.05

    # then one line passes per doubling of the outage (0, 1, 3, 7 s), each on one line
    assert [round(t) for t, _ in passed] == [0, 1, 3, 7]
    assert all("\n" not in m and "Is the server running?" in m for _, m in passed)
    # and other pool messages are untouched
    other = logging.LogRecord("psycopg.pool", logging.WARNING, "", 1, "discarding", (), None)
    assert keep.filter(other) and other.getMessage() == "discarding"
    # a minute without failures ends the outage: the next failure is logged at once
    now[0] += 61
    assert attempt() is not None
