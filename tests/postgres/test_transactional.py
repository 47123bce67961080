"""Transactional enqueue and completion: jobyard's writes join the caller's transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.sql
import pytest

import jobyard
from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    Outcome,
    QueueConfig,
)
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.worker.reaper import reap
from tests.postgres.conftest import BASE_URL, insert, new

Connect = Callable[..., psycopg.Connection[Any]]
Sql = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture
def orders(sql: Sql) -> None:
    """An application table in the test's schema."""
    sql("CREATE TABLE orders (id int PRIMARY KEY)")


@pytest.fixture
def app(url: str) -> Any:
    app = jobyard.App(url)
    yield app
    app.close()


def pending(backend: PostgresBackend) -> list[str]:
    return [r.id for r in backend.jobs_list(jobyard.backends.base.JobsListParams(status="pending"))]


def test_enqueue_commits_with_the_callers_transaction(
    app: jobyard.App, connect: Connect, orders: None, sql: Sql
) -> None:
    @app.job
    def send_receipt(order: int) -> None:
        return None

    conn = connect()
    conn.execute("INSERT INTO orders VALUES (7)")
    handle = send_receipt.options(connection=conn).enqueue(7)
    assert app.jobs() == []  # not visible outside the transaction yet
    conn.commit()
    assert app.get(handle.id).args == (7,)
    assert sql("SELECT id FROM orders") == [(7,)]


def test_enqueue_rolls_back_with_the_callers_transaction(
    app: jobyard.App, connect: Connect, orders: None, sql: Sql
) -> None:
    @app.job
    def send_receipt(order: int) -> None:
        return None

    conn = connect()
    conn.execute("INSERT INTO orders VALUES (8)")
    keyed = send_receipt.options(connection=conn, idempotency_key="order-8")
    first = keyed.enqueue(8)
    conn.rollback()
    assert app.jobs() == [] and sql("SELECT id FROM orders") == []
    again = send_receipt.options(idempotency_key="order-8").enqueue(8)
    assert again.created and again.id != first.id  # the rolled-back key was never taken


def test_a_caller_search_path_without_the_schema_is_restored(
    backend: PostgresBackend, connect: Connect
) -> None:
    conn = connect(own_path=True)
    before = conn.execute("SHOW search_path").fetchone()
    (inserted,) = backend.jobs_insert(JobsInsertParams([new()], connection=conn))
    assert conn.execute("SHOW search_path").fetchone() == before
    conn.commit()
    assert backend.jobs_get(inserted.id) is not None


def test_queue_full_leaves_the_callers_transaction_usable(
    backend: PostgresBackend, connect: Connect, orders: None, sql: Sql
) -> None:
    backend.queues_configure(QueueConfig("q", max_pending=1))
    insert(backend, new())
    conn = connect()
    conn.execute("INSERT INTO orders VALUES (1)")
    with pytest.raises(jobyard.QueueFull, match="'q'"):
        backend.jobs_insert(JobsInsertParams([new()], connection=conn))
    conn.execute("INSERT INTO orders VALUES (2)")  # the transaction goes on
    conn.commit()
    assert sql("SELECT id FROM orders ORDER BY id") == [(1,), (2,)]
    assert len(pending(backend)) == 1


def test_an_autocommit_connection_commits_at_once(
    backend: PostgresBackend, connect: Connect
) -> None:
    conn = connect(autocommit=True, own_path=True)
    (inserted,) = backend.jobs_insert(JobsInsertParams([new()], connection=conn))
    assert backend.jobs_get(inserted.id) is not None
    assert conn.execute("SHOW search_path").fetchone() == ('"$user", public',)


def test_a_failed_callers_transaction_is_refused_clearly(
    backend: PostgresBackend, connect: Connect
) -> None:
    conn = connect()
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM no_such_table")
    with pytest.raises(jobyard.ConfigurationError, match="roll it back"):
        backend.jobs_insert(JobsInsertParams([new()], connection=conn))


def test_enqueue_async_on_an_async_connection(
    app: jobyard.App, schema: str, orders: None, sql: Sql
) -> None:
    @app.job
    def send_receipt(order: int) -> None:
        return None

    orders_table = psycopg.sql.Identifier(schema, "orders")
    insert_order = psycopg.sql.SQL("INSERT INTO {} VALUES (%s)").format(orders_table)

    async def place(order: int, commit: bool) -> jobyard.JobHandle:
        # The server's default search_path: the backend puts its schema around its statements.
        conn = await psycopg.AsyncConnection.connect(BASE_URL)
        try:
            await conn.execute(insert_order, [order])
            handle = await send_receipt.options(connection=conn).enqueue_async(order)
            await (conn.commit() if commit else conn.rollback())
            return handle
        finally:
            await conn.close()

    kept = asyncio.run(place(1, commit=True))
    asyncio.run(place(2, commit=False))
    assert [j.id for j in app.jobs()] == [kept.id]
    assert sql("SELECT id FROM orders") == [(1,)]


def test_async_connection_on_the_sync_api_is_refused(backend: PostgresBackend) -> None:
    async def go() -> None:
        conn = await psycopg.AsyncConnection.connect(BASE_URL)
        async with conn:
            with pytest.raises(jobyard.ConfigurationError, match="async"):
                backend.jobs_insert(JobsInsertParams([new()], connection=conn))
            (done,) = await backend.jobs_insert_async(JobsInsertParams([new()], connection=conn))
            assert done.created
            await conn.rollback()

    asyncio.run(go())
    assert pending(backend) == []


# --- transactional completion -------------------------------------------------------------------


def claim_one(backend: PostgresBackend, worker: str = "w1") -> Any:
    (job,) = backend.jobs_claim(JobsClaimParams(worker, ["q"], 1))
    return job


def test_completion_commits_with_the_handlers_writes(
    backend: PostgresBackend, orders: None, sql: Sql
) -> None:
    (job_id,) = insert(backend, new())
    job = claim_one(backend)
    conn = backend.connection_acquire()
    try:
        conn.execute("INSERT INTO orders VALUES (1)")
        done = Outcome(job.id, job.token, "completed", result="1")
        assert backend.jobs_ack(JobsAckParams([done], connection=conn)) == []
        assert sql("SELECT count(*) FROM orders") == [(0,)]  # nothing visible before commit
        assert backend.jobs_get(job_id).status == "running"  # type: ignore[union-attr]
        conn.commit()
    finally:
        backend.connection_release(conn)
    assert sql("SELECT id FROM orders") == [(1,)]
    assert backend.jobs_get(job_id).status == "completed"  # type: ignore[union-attr]


def test_a_rollback_undoes_writes_and_settlement(
    backend: PostgresBackend, orders: None, sql: Sql
) -> None:
    (job_id,) = insert(backend, new())
    job = claim_one(backend)
    conn = backend.connection_acquire()
    try:
        conn.execute("INSERT INTO orders VALUES (1)")
        done = Outcome(job.id, job.token, "completed", result="1")
        assert backend.jobs_ack(JobsAckParams([done], connection=conn)) == []
        conn.rollback()
    finally:
        backend.connection_release(conn)
    assert sql("SELECT count(*) FROM orders") == [(0,)]
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.status == "running"
    assert backend.jobs_ack(JobsAckParams([done])) == []  # the token still holds


def test_a_stale_worker_is_refused_inside_its_transaction(
    backend: PostgresBackend, clock: jobyard.FrozenClock, orders: None, sql: Sql
) -> None:
    (job_id,) = insert(backend, new(lease=5))
    first = claim_one(backend, "w1")
    clock.advance(6)
    assert [r.id for r in reap(backend)] == [job_id]
    clock.advance(1.0)  # past the backoff of attempt 1 (the default policy: at most 1 s)
    second = claim_one(backend, "w2")
    conn = backend.connection_acquire()
    try:
        conn.execute("INSERT INTO orders VALUES (1)")
        late = Outcome(first.id, first.token, "completed", result='"first"')
        assert backend.jobs_ack(JobsAckParams([late], connection=conn)) == [job_id]
        conn.rollback()  # what the worker does with a refused settlement
    finally:
        backend.connection_release(conn)
    assert sql("SELECT count(*) FROM orders") == [(0,)]
    fresh = Outcome(second.id, second.token, "completed", result='"second"')
    assert backend.jobs_ack(JobsAckParams([fresh])) == []


def test_a_lent_connection_returns_in_autocommit(backend: PostgresBackend) -> None:
    conn = backend.connection_acquire()
    assert not conn.autocommit
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    mode = conn.execute("SHOW plan_cache_mode").fetchone()
    assert mode == ("auto",)  # the handler's own statements plan as PostgreSQL would
    backend.connection_release(conn)
    assert conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_handlers_session_changes_do_not_outlive_its_job(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    from psycopg.rows import dict_row

    backend = open_backend(at=None)
    for round_ in range(6):  # the pool is small: the same connection comes back each time
        conn = backend.connection_acquire()
        conn.row_factory = dict_row  # type: ignore[assignment]
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS scratch (x int)")
        conn.execute("SET search_path = public")
        conn.execute("SET SESSION lock_timeout = '1ms'")
        conn.commit()
        backend.connection_release(conn)
        (inserted,) = backend.jobs_insert(JobsInsertParams([new()]))
        assert backend.jobs_get(inserted.id) is not None, round_
    again = backend.connection_acquire()
    try:
        assert again.execute("SHOW lock_timeout").fetchone() == ("0",)
        assert again.execute("SELECT to_regclass('pg_temp.scratch')").fetchone() == (None,)
    finally:
        backend.connection_release(again)


def test_a_caller_connection_with_another_row_factory(
    backend: PostgresBackend, connect: Connect
) -> None:
    from psycopg.rows import dict_row

    conn = connect()
    conn.row_factory = dict_row  # type: ignore[assignment]
    (inserted,) = backend.jobs_insert(JobsInsertParams([new()], connection=conn))
    conn.commit()
    assert backend.jobs_get(inserted.id) is not None


def test_a_heartbeat_does_not_wait_for_a_settling_transaction(backend: PostgresBackend) -> None:
    from jobyard.backends.base import LeasesRenewParams

    insert(backend, new(), new())
    a, b = backend.jobs_claim(JobsClaimParams("w1", ["q"], 2))
    conn = backend.connection_acquire()
    try:
        done = Outcome(a.id, a.token, "completed", result="1")
        assert backend.jobs_ack(JobsAckParams([done], connection=conn)) == []
        # a's row is locked until the handler's transaction commits: the heartbeat skips it
        # (not lost: its settlement is in flight) and renews b without waiting.
        beat = LeasesRenewParams("w1", [(a.id, a.token), (b.id, b.token)])
        assert backend.leases_renew(beat).lost == []
        conn.commit()
    finally:
        backend.connection_release(conn)
    assert backend.leases_renew(LeasesRenewParams("w1", [(a.id, a.token)])).lost == [a.id]
