"""The data model underneath: rows live in their status's partition, idempotency keys in
``job_keys`` exactly while their job is pending or running, and the hot path's statements read
only the partitions they need."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql as pgsql

import jobyard
from jobyard.backends._sqlfiles import parse_blocks
from jobyard.backends.base import (
    STATUSES,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsPurgeParams,
    Outcome,
    QueueConfig,
    QueueLimits,
)
from jobyard.backends.postgres._connect import parse_url
from jobyard.backends.postgres._sql import Q
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.worker.reaper import reap
from tests.postgres.conftest import T0, insert, new

Sql = Callable[..., list[tuple[Any, ...]]]
Connect = Callable[..., psycopg.Connection[Any]]


def partition_of(sql: Sql, job_id: str) -> str:
    ((name,),) = sql("SELECT tableoid::regclass::text FROM jobs WHERE id = %s", [int(job_id)])
    return str(name).rsplit(".", 1)[-1]


def keys(sql: Sql) -> dict[tuple[str, str], str]:
    return {(q, k): str(j) for q, k, j in sql("SELECT queue, key, job_id FROM job_keys")}


def test_a_job_moves_through_the_partitions(backend: PostgresBackend, sql: Sql) -> None:
    (job_id,) = insert(backend, new(idempotency_key="k"))
    assert partition_of(sql, job_id) == "jobs_pending"
    assert keys(sql) == {("q", "k"): job_id}
    (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    assert partition_of(sql, job_id) == "jobs_running"
    assert keys(sql) == {("q", "k"): job_id}  # running still holds the key
    backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, "completed", result="1")]))
    assert partition_of(sql, job_id) == "jobs_completed"
    assert keys(sql) == {}


def test_keys_follow_every_way_in_and_out_of_scope(
    backend: PostgresBackend, clock: jobyard.FrozenClock, sql: Sql
) -> None:
    cancelled, reaped, failed = insert(
        backend,
        new(idempotency_key="c"),
        new(idempotency_key="r", lease=1, max_attempts=1),
        new(idempotency_key="f"),
    )
    backend.jobs_cancel(JobsCancelParams(cancelled))
    assert set(keys(sql)) == {("q", "r"), ("q", "f")}
    claimed = {c.id: c for c in backend.jobs_claim(JobsClaimParams("w", ["q"], 2))}
    f = claimed[failed]
    backend.jobs_ack(JobsAckParams([Outcome(f.id, f.token, "failed", error="e")]))
    clock.advance(2)
    assert [(r.id, r.status) for r in reap(backend)] == [(reaped, "failed")]
    assert keys(sql) == {}
    backend.jobs_retry(cancelled)
    assert keys(sql) == {("q", "c"): cancelled}  # a re-driven job takes its key back


def test_retry_and_release_keep_the_key(backend: PostgresBackend, sql: Sql) -> None:
    (job_id,) = insert(backend, new(idempotency_key="k"))
    for kind in ("retry", "release"):
        (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
        backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, kind, error="e")]))  # type: ignore[arg-type]
        assert keys(sql) == {("q", "k"): job_id}


def plan(connect: Connect, query: str, params: dict[str, Any], *, fence: bool = False) -> str:
    """EXPLAIN ANALYZE of ``query`` run as a generic prepared plan, as the pool runs it (with
    ``fence``: behind purge_fence, as jobs_purge runs)."""
    conn = connect(autocommit=True)
    conn.execute("SET plan_cache_mode = force_generic_plan")
    if fence:  # here for the session; the backend's is transaction-local, in one pipeline
        conn.execute(Q.purge_fence.replace("true)", "false)"))
    return plan_on(conn, query, params)


def plan_on(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any], *, costs: bool = False
) -> str:
    """EXPLAIN ANALYZE of ``query`` prepared on ``conn`` (as its session plans it); with
    ``costs`` the estimates too, and what JIT compilation took (only printed with them)."""
    for n, name in enumerate(params, 1):  # psycopg placeholders to PREPARE's numbered ones
        query = query.replace(f"%({name})s", f"${n}").replace(f"%({name})b", f"${n}")
    conn.execute(pgsql.SQL("PREPARE probe AS {}").format(pgsql.SQL(query)))
    placeholders = pgsql.SQL(", ").join(pgsql.Placeholder() for _ in params)
    options = pgsql.SQL("ANALYZE, COSTS ON" if costs else "ANALYZE, COSTS OFF")
    explain = pgsql.SQL("EXPLAIN ({}) EXECUTE probe ({})").format(options, placeholders)
    rows = psycopg.ClientCursor(conn).execute(explain, list(params.values())).fetchall()
    return "\n".join(r[0] for r in rows)


def test_purge_reads_only_the_finished_partitions_it_names(
    backend: PostgresBackend, connect: Connect
) -> None:
    insert(backend, new(), new())
    (job,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, "completed", result="1")]))
    params = {"statuses": ["completed"], "now": None, "older_than": 0.0, "queue": None, "ids": None}
    text = plan(connect, Q.jobs_purge, params, fence=True)
    # the completed partition is read by its finish time (never analyzed, it was read whole)
    assert "Seq Scan on jobs_completed" not in text and "jobs_completed_finished" in text
    # the hot partitions and the waiting one (the steps downstream of a deleted workflow job)
    # are in the plan, behind one-time filters that keep them unread when no workflow job goes
    for other in ("jobs_failed", "jobs_cancelled", "jobs_pending", "jobs_running", "jobs_waiting"):
        scans = [line for line in text.splitlines() if f"Scan on {other}" in line]
        assert scans and all("never executed" in scan for scan in scans), text
    assert backend.jobs_purge(JobsPurgeParams(("completed",))) == 1


def test_listing_one_status_reads_one_partition(backend: PostgresBackend, connect: Connect) -> None:
    insert(backend, new())
    params = {"status": "pending", "queue": None, "name": None, "limit": 5, "offset": 0}
    assert f"Subplans Removed: {len(STATUSES) - 1}" in plan(connect, Q.jobs_list_status, params)


def test_the_claim_reads_the_claim_index(
    backend: PostgresBackend, sql: Sql, connect: Connect
) -> None:
    insert(backend, *[new() for _ in range(50)])
    sql("ANALYZE jobs, queues, job_limits, limit_buckets")  # this schema's, not the database's
    params = {
        "now": None,
        "queues": ["q"],
        "limit": 5,
        "worker_id": "w",
        "async_commit": True,
        "locked": False,
    }
    text = plan(connect, Q.jobs_claim, params)
    assert "Index Scan using jobs_pending_claim" in text
    assert "jobs_completed" not in text
    # the open-gate claim too, in the index's order (no sort of the pending jobs)
    open_params = {k: v for k, v in params.items() if k != "locked"}
    text = plan(connect, Q.jobs_claim_open, open_params)
    assert "Index Scan using jobs_pending_claim" in text, text
    assert not [line for line in text.splitlines() if "Sort Key: j." in line], text
    # and the claims of a queue capped as a whole or by a key's count (behind the lock)
    for capped in (Q.jobs_claim_whole, Q.jobs_claim_capped):
        text = plan(connect, capped, open_params)
        assert "Index Scan using jobs_pending_claim" in text, text
        assert not [line for line in text.splitlines() if "Sort Key: j." in line], text


def test_a_fair_claim_reads_the_claim_index_in_order(
    backend: PostgresBackend, sql: Sql, connect: Connect, clock: jobyard.FrozenClock
) -> None:
    # The claim orders a fair queue's jobs by their round, (turn - 1) / 4: the claim index holds
    # that expression, so the jobs come in order from it, never sorted (a sort reads them all).
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key=f"k{i % 7}") for i in range(200)])
    sql("ANALYZE")
    params = {
        "now": clock.now(),
        "queues": ["q"],
        "limit": 5,
        "worker_id": "w",
        "async_commit": True,
        "locked": False,
    }
    text = plan(connect, Q.jobs_claim, params)
    (scan,) = [line for line in text.splitlines() if "on jobs_pending j " in line]
    assert "Index Scan using jobs_pending_claim" in scan and "rows=5 " in scan, text
    assert not [line for line in text.splitlines() if "Sort Key: j." in line], text


def test_the_claim_is_not_compiled_however_large_the_backlog_the_statistics_show(
    backend: PostgresBackend, sql: Sql, connect: Connect, url: str
) -> None:
    # given a backlog the server has statistics of (as a server's autoanalyze keeps them)
    for _ in range(20):
        insert(backend, *[new() for _ in range(1000)])
    sql("VACUUM ANALYZE jobs_pending")
    params = {
        "now": T0,  # the backend's frozen clock, when the jobs are due
        "queues": ["q"],
        "limit": 72,
        "worker_id": "w",
        "async_commit": True,
        "locked": False,
    }
    # then the claim's generic plan is estimated past jit_above_cost: a session with
    # PostgreSQL's defaults compiles it at every execution (a quarter of a second here)
    probe = connect(autocommit=True)
    probe.execute("SET plan_cache_mode = force_generic_plan")
    probe.execute("SET jit = on")
    probe.execute("RESET jit_above_cost")
    assert "JIT:" in plan_on(probe, Q.jobs_claim, params, costs=True)
    # and a session opened as the store opens its pooled ones never compiles it
    settings = parse_url(url)
    with psycopg.connect(settings.conninfo, **settings.kwargs) as own:
        text = plan_on(own, Q.jobs_claim, params, costs=True)
    assert "JIT:" not in text and "Index Scan using jobs_pending_claim" in text


def test_an_outcome_with_unstorable_text_is_stored_escaped(backend: PostgresBackend) -> None:
    insert(backend, new(), new())
    a, b = backend.jobs_claim(JobsClaimParams("w", ["q"], 2))
    outcomes = [
        Outcome(a.id, a.token, "failed", error="boom\x00 in C, \udc80 from a filename"),
        Outcome(b.id, b.token, "completed", result='"nul\x00"'),
    ]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []
    failed, done = backend.jobs_get(a.id), backend.jobs_get(b.id)
    assert failed is not None and failed.error == "boom\\x00 in C, \\udc80 from a filename"
    assert done is not None and done.result == '"nul\\x00"'


def test_keys_that_utf8_cannot_hold_are_kept_exactly(backend: PostgresBackend) -> None:
    odd = ["\ud800", "a\udfff b", "\ufdd0starts with the mark", "plain", "é"]
    ids = insert(backend, *[new(idempotency_key=k, parent_id=k) for k in odd])
    again = backend.jobs_insert(JobsInsertParams([new(idempotency_key=k) for k in odd]))
    assert [i.id for i in again] == ids and not any(i.created for i in again)
    for job_id, key in zip(ids, odd, strict=True):
        rec = backend.jobs_get(job_id)
        assert rec is not None and (rec.idempotency_key, rec.parent_id) == (key, key)
    claimed = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert sorted(c.parent_id or "" for c in claimed) == sorted(odd)


def test_a_fair_turn_is_one_probe_keyless_or_keyed(
    backend: PostgresBackend, sql: Sql, connect: Connect
) -> None:
    # given a fair queue holding 300 keyless and 300 keyed pending jobs
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new() for _ in range(300)], *[new(key="k") for _ in range(300)])
    # when a new job's turn is read (the insert's own fragment, as the insert runs it)
    text = (resources.files("jobyard.backends.postgres") / "queries" / "jobs.sql").read_text()
    fragment = parse_blocks(text)["_fair_turn"]
    for key in (None, "k"):
        query = (
            f"SELECT {fragment} FROM (SELECT 'q'::text AS queue, %(key)s::text AS limit_key,"
            " 1 AS ord) AS x, queues AS xq WHERE xq.name = x.queue"
        )
        got = plan(connect, query, {"key": key})
        # then it reads the key's latest entry alone, backwards, for a keyless job too (the
        # planner read every keyless entry and sorted them while the key was `IS NULL`)
        assert "Index Scan Backward using jobs_pending_turns" in got, got
        assert re.search(r"jobs_pending_turns on jobs_pending t .*rows=1 loops", got), got
