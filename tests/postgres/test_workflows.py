"""Workflow steps in PostgreSQL: a step waits in a partition of its own and is counted in
job_counts; the completion of its last input releases it inside the completion's transaction,
exactly once when its last two inputs complete at once on two connections; and a completion
costs the same whatever the size of the join (its long depends_on is never rewritten)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from jobyard.backends.base import (
    ClaimedJob,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsPurgeParams,
    JobsWaitParams,
    NewJob,
    Outcome,
    StoreTidyParams,
)
from jobyard.backends.postgres._sql import Q
from jobyard.backends.postgres.backend import PostgresBackend
from tests.conftest import wait_until
from tests.postgres.conftest import insert, new
from tests.postgres.test_partitions import Connect, partition_of, plan

Sql = Callable[..., list[tuple[Any, ...]]]
FLOW = "wf-1"


def step(*after: int, **options: Any) -> NewJob:
    return new(workflow_id=FLOW, after=after, **options)


def done(job: ClaimedJob) -> Outcome:
    return Outcome(job.id, job.token, "completed", result="1")


def claim(backend: PostgresBackend, limit: int = 100) -> list[ClaimedJob]:
    return backend.jobs_claim(JobsClaimParams("w1", ["q"], limit))


def waiting(sql: Sql) -> tuple[int, int]:
    """(the waiting count kept in job_counts, the rows of the waiting partition)."""
    ((kept,),) = sql("SELECT coalesce(sum(n), 0) FROM job_counts WHERE status = 'waiting'")
    ((rows,),) = sql("SELECT count(*) FROM jobs_waiting")
    return int(kept), int(rows)


def test_steps_wait_in_their_own_partition_and_are_counted_with_every_move(
    backend: PostgresBackend, sql: Sql
) -> None:
    a, b, c, d = insert(backend, step(), step(0), step(1), step(0))
    assert [partition_of(sql, i) for i in (a, b, c, d)] == [
        "jobs_pending",
        "jobs_waiting",
        "jobs_waiting",
        "jobs_waiting",
    ]
    assert waiting(sql) == (3, 3)
    backend.jobs_cancel(JobsCancelParams(d))  # out of waiting by a cancel
    assert waiting(sql) == (2, 2)
    backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend)]))  # by a release
    assert partition_of(sql, b) == "jobs_pending"
    assert waiting(sql) == (1, 1)
    assert partition_of(sql, d) == "jobs_cancelled"  # a cancelled step stays cancelled


def test_a_workflow_enqueued_in_the_callers_transaction_rolls_back_whole(
    backend: PostgresBackend, connect: Connect, sql: Sql
) -> None:
    conn = connect()
    backend.jobs_insert(JobsInsertParams([step(), step(0)], connection=conn))
    conn.rollback()
    assert sql("SELECT count(*) FROM jobs") == [(0,)]
    assert waiting(sql) == (0, 0)
    backend.jobs_insert(JobsInsertParams([step(), step(0)], connection=conn))
    conn.commit()
    assert waiting(sql) == (1, 1)


def test_the_release_commits_and_rolls_back_with_the_handlers_transaction(
    backend: PostgresBackend, sql: Sql
) -> None:
    _, b = insert(backend, step(), step(0))
    (job,) = claim(backend)
    conn = backend.connection_acquire()
    try:
        assert backend.jobs_ack(JobsAckParams([done(job)], connection=conn)) == []
        # released inside the handler's transaction, not yet outside it
        inside = conn.execute("SELECT status FROM jobs WHERE id = %s", [int(b)]).fetchall()
        assert inside == [("pending",)]
        assert backend.jobs_get(b).status == "waiting"  # type: ignore[union-attr]
        conn.rollback()
        assert backend.jobs_get(b).status == "waiting"  # type: ignore[union-attr]
        assert waiting(sql) == (1, 1)
        assert backend.jobs_ack(JobsAckParams([done(job)], connection=conn)) == []
        conn.commit()
    finally:
        backend.connection_release(conn)
    assert backend.jobs_get(b).status == "pending"  # type: ignore[union-attr]
    assert waiting(sql) == (0, 0)
    assert [j.id for j in claim(backend)] == [b]


def test_a_release_wakes_the_workers_of_the_steps_queue(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    waiter, other = open_backend(), open_backend()
    waiter.jobs_wait(JobsWaitParams(["c"], 0.01))
    wait_until(lambda: waiter._listener.connected, what="the listener to connect")
    waiter.jobs_wait(JobsWaitParams(["c"], 0.01))  # settle the connect's own wake-up
    # a step parked in queue c wakes nobody there
    insert(other, step(), step(0, queue="c"))
    assert waiter.jobs_wait(JobsWaitParams(["c"], 0.3)) is False
    # its release does
    other.jobs_ack(JobsAckParams([done(j) for j in claim(other)]))
    assert waiter.jobs_wait(JobsWaitParams(["c"], 10.0)) is True


def lock_waiter(sql: Sql, pid: int) -> bool:
    rows = sql("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
    return rows == [("Lock",)]


def test_the_last_two_inputs_completing_at_once_release_the_join_exactly_once(
    backend: PostgresBackend, sql: Sql
) -> None:
    # given a join on two members, each claimed, and two handlers' transactions
    m1, m2, join = insert(backend, step(), step(), step(0, 1))
    held = {j.id: j for j in claim(backend)}
    first, second = backend.connection_acquire(), backend.connection_acquire()
    refused: list[list[str]] = []
    try:
        # when the first completes (not committed: it holds the join's row) and the second
        # completes on its own connection, which waits for that row
        assert backend.jobs_ack(JobsAckParams([done(held[m1])], connection=first)) == []
        racer = threading.Thread(
            target=lambda: refused.append(
                backend.jobs_ack(JobsAckParams([done(held[m2])], connection=second))
            )
        )
        racer.start()
        wait_until(lambda: lock_waiter(sql, second.info.backend_pid), what="the second ack waits")
        first.commit()
        racer.join(10)
        assert refused == [[]]
        second.commit()
    finally:
        backend.connection_release(first)
        backend.connection_release(second)
    # then the second saw the first's decrement and released the join, once
    assert sql("SELECT status, waits FROM jobs WHERE id = %s", [int(join)]) == [("pending", 0)]
    assert waiting(sql) == (0, 0)
    assert [j.id for j in claim(backend)] == [join]
    assert claim(backend) == []


def toast_bytes(sql: Sql) -> int:
    ((size,),) = sql(
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'jobs_waiting'::regclass"
    )
    return int(size)


def test_a_join_on_ten_thousand_members_is_never_rewritten_by_their_completions(
    backend: PostgresBackend, sql: Sql
) -> None:
    # given a group of 10,000 members and its join: depends_on holds 10,000 ids, out of line
    n = 10_000
    ids = insert(backend, *[step() for _ in range(n)], step(*range(n)))
    join = ids[-1]
    stored = toast_bytes(sql)
    assert stored > 8192  # more than a page: stored out of line
    # when all but the last 100 complete, 100 at a time (99 decrements of the join's counter)
    for _ in range(n // 100 - 1):
        assert backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend)])) == []
    # then the list was never written again (the server runs no autovacuum here: a rewrite
    # would have left its old copy behind), and the counter says what is left
    assert toast_bytes(sql) == stored
    assert sql("SELECT waits FROM jobs WHERE id = %s", [int(join)]) == [(100,)]
    assert backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend)])) == []
    rec = backend.jobs_get(join)
    assert rec is not None and rec.status == "pending" and rec.depends_on == tuple(ids[:-1])


def test_listing_a_workflow_reads_its_index(backend: PostgresBackend, connect: Connect) -> None:
    insert(backend, step(), step(0))
    insert(backend, *[new() for _ in range(200)])
    params = {
        "workflow_id": FLOW,
        "status": None,
        "queue": None,
        "name": None,
        "limit": 5,
        "offset": 0,
    }
    text = plan(connect, Q.jobs_list_workflow, params)
    assert "workflow_id_id_idx" in text and "Seq Scan" not in text


def test_the_waiting_partition_is_vacuumed_past_the_threshold(
    backend: PostgresBackend,
) -> None:
    # given 300 chains of two whose first steps completed: 300 dead rows in jobs_waiting
    chains = [job for i in range(300) for job in (step(), step(2 * i))]
    backend.jobs_insert(JobsInsertParams(chains))
    backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend, 300)]))
    eager = StoreTidyParams(min_dead=100, dead_fraction=0.0)
    done_lines: list[str] = []

    def tidied() -> bool:
        done_lines.extend(backend.store_tidy(eager))
        return any(line.startswith("vacuumed jobs_waiting (") for line in done_lines)

    wait_until(tidied, timeout=20, interval=0.2, what="a vacuum of jobs_waiting")


def test_a_batch_of_steps_with_keys_or_later_inputs_is_refused(backend: PostgresBackend) -> None:
    with pytest.raises(ValueError, match="idempotency keys"):
        insert(backend, step(), step(0, idempotency_key="k"))
    with pytest.raises(ValueError, match="not before it"):
        insert(backend, step(1), step())


def test_0007_holds_the_inputs_of_the_workflows_a_schema_holds(
    backend: PostgresBackend, sql: Sql
) -> None:
    # given a -> b where a completed, and a schema taken back to before 0007_workflow_holds
    a, b = insert(backend, step(), step(0))
    backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend)]))
    sql("ALTER TABLE jobs DROP COLUMN holds")
    sql("DROP FUNCTION jobyard_unhold(bigint[])")
    sql("DELETE FROM jobyard_migrations WHERE name = '0007_workflow_holds'")
    # when it is migrated again, then a, which b still needs, is held and kept by a purge
    assert backend.schema_migrate() == ["0007_workflow_holds"]
    purged = backend.jobs_purge(JobsPurgeParams(("completed",)))
    assert (int(purged), purged.kept) == (0, 1)
    assert sql("SELECT holds FROM jobs WHERE id = %s", [int(a)]) == [(1,)]
    # and once b completed, a goes
    backend.jobs_ack(JobsAckParams([done(j) for j in claim(backend)]))
    assert int(backend.jobs_purge(JobsPurgeParams(("completed",)))) == 2
    assert backend.jobs_get(a) is None and backend.jobs_get(b) is None
