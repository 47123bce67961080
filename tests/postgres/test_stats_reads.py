"""What stats_get reads under a backlog (0013_oldest_head.sql): the oldest pending job is a few
probes of the claim index per queue and priority level, never a read of a level's jobs, and
the counts of the pending jobs read the claim index only, no heap page once the store's own
tidy has vacuumed (the server here runs with autovacuum off)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg

from jobyard.backends.base import JobsClaimParams, StatsParams, StoreTidyParams
from jobyard.backends.postgres.backend import PostgresBackend
from tests.conftest import wait_until
from tests.postgres.conftest import T0, insert, new

EAGER = StoreTidyParams(min_dead=0, dead_fraction=0.0)


def inner_plans(
    connect: Callable[..., psycopg.Connection[Any]], call: str, *params: object
) -> list[str]:
    """The plans (EXPLAIN ANALYZE, by auto_explain) of the statements run inside ``call``."""
    conn = connect(autocommit=True)
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_analyze = on")
    conn.execute("SET client_min_messages = log")
    conn.execute("SET jit_above_cost = 0")  # any plan would be compiled, unless it says no
    conn.execute(call, list(params)).fetchall()
    return [p for p in plans if "jobs_pending" in p]


def pending_scans(plan: str) -> list[tuple[str, int]]:
    """Each scan of the pending partition in ``plan``: its line and the rows it returned (0
    when never executed)."""
    lines = [line for line in plan.splitlines() if re.search(r"Scan.* on jobs_pending ", line)]
    found = [re.search(r"rows=(\d+) loops=", line) for line in lines]
    return [(line, int(m[1]) if m else 0) for line, m in zip(lines, found, strict=True)]


def test_the_oldest_pending_job_is_a_few_probes_of_the_claim_index_per_level(
    backend: PostgresBackend, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    # given a level of 300 pending jobs, and a queue of two levels with a job not yet due
    # ahead of a due one
    insert(backend, *(new("b", run_at=T0 - 300 + i) for i in range(300)))
    insert(backend, new("a", priority=1, delay=60), new("a"))
    # then stats_get tells each queue's oldest due job
    stats = {s.queue: s.oldest_pending_at for s in backend.stats_get(StatsParams())}
    assert stats == {"a": T0, "b": T0 - 300}
    # and reads it in the claim index's order: never a sort of a level's jobs, at most one
    # entry from each probe (the old probe read all 300 of b's and sorted them), uncompiled
    (plan,) = inner_plans(connect, "SELECT * FROM jobyard_oldest_pending('{}'::text[], %s)", T0)
    scans = pending_scans(plan)
    assert scans and all("jobs_pending_claim" in line for line, _ in scans), plan
    assert all(rows <= 1 for _, rows in scans), plan
    assert "Sort Key: j.run_at" not in plan and "top-N" not in plan, plan
    assert "JIT" not in plan, plan


def test_asking_for_a_queue_reads_nothing_of_the_others(
    backend: PostgresBackend, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    # given a queue named before the one asked for, holding 300 jobs
    insert(backend, *(new("a") for _ in range(300)))
    insert(backend, new("c"))
    assert [s.oldest_pending_at for s in backend.stats_get(StatsParams(["c"]))] == [T0]
    # then the asked queue is probed directly: no entry of a's is read and filtered out (the
    # old skip scan went from the first queue on, with the asked ones as a filter)
    (plan,) = inner_plans(connect, "SELECT * FROM jobyard_oldest_pending('{c}'::text[], %s)", T0)
    assert all(int(n) <= 1 for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)), plan
    assert all(rows <= 1 for _, rows in pending_scans(plan)), plan


def test_the_pending_counts_read_no_heap_page_once_the_store_tidied(
    backend: PostgresBackend, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    # given 500 pending jobs just written (the visibility map knows none of their pages), and a
    # few running
    insert(backend, *(new() for _ in range(500)))
    assert len(backend.jobs_claim(JobsClaimParams("w", ["q"], 10))) == 10
    call = "SELECT * FROM jobyard_live_counts('{}'::text[])"

    def heap_fetches() -> int:
        (plan,) = inner_plans(connect, call)
        (scan,) = [line for line, _ in pending_scans(plan)]
        assert "Index Only Scan using jobs_pending_claim" in scan, plan
        assert "JIT" not in plan, plan
        return int(re.findall(r"Heap Fetches: (\d+)", plan)[0])

    # the count goes through the claim index only, but reads each job's heap page to see it
    assert heap_fetches() >= 490

    # when the store tidies (a worker's maintenance), then it reads no heap page of them (a
    # transaction open elsewhere on the server may hold the vacuum back for a while)
    def none_read() -> bool:
        backend.store_tidy(EAGER)
        return heap_fetches() == 0

    wait_until(none_read, timeout=30, interval=0.5, what="an index-only count after the tidy")
    assert {s.queue: s.counts["pending"] for s in backend.stats_get(StatsParams())} == {"q": 490}
