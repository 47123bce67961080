"""What 0010_dead_lines.sql changed: the dead letter's line of each failed job, stored as the
row enters the failed partition (and filled in for the jobs that failed before); the counts
of stats_get through the pending and running indexes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from jobyard.backends.base import DeadGroupsParams, JobsClaimParams, StatsParams
from jobyard.backends.postgres.backend import PostgresBackend
from tests.contract.test_search import fail_all, insert, new


def test_jobs_failed_before_the_migration_are_grouped_by_their_line(
    backend: PostgresBackend, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    # given failed jobs whose line was never stored (as before 0010)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\n{}\n'
    fail_all(backend, "q", [tb.format("KeyError: 'x'")] * 2 + ["\t ValueError: é  \r\n"])
    sql("UPDATE jobs_failed SET dead_line = NULL")
    # when the migration's fill runs on them
    sql("UPDATE jobs_failed SET dead_line = jobyard_error_line(error)")
    # then they are grouped by their errors' lines
    got = backend.dead_groups(DeadGroupsParams())
    assert [(g.error_line, g.count) for g in got.groups] == [
        ("KeyError: 'x'", 2),
        ("ValueError: é", 1),
    ]


def test_counts_of_pending_and_running_read_their_indexes_only(
    backend: PostgresBackend, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    # given a queue with pending jobs, another with one, and a running job
    insert(backend, *(new("a") for _ in range(3)), new("b"))
    backend.jobs_claim(JobsClaimParams("w", ["b"], 1))
    # then stats_get counts them exactly, of every queue or of those asked
    counts = {s.queue: s.counts for s in backend.stats_get(StatsParams())}
    assert (counts["a"]["pending"], counts["b"]["pending"], counts["b"]["running"]) == (3, 0, 1)
    assert [s.counts["pending"] for s in backend.stats_get(StatsParams(("a",)))] == [3]
    # and the count's plan reads the indexes only, never a partition's pages (which a drained
    # partition keeps), whatever the planner's statistics say
    conn = connect(autocommit=True)
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET client_min_messages = log")
    rows = conn.execute("SELECT * FROM jobyard_live_counts('{}'::text[])").fetchall()
    assert sorted(rows) == [("a", "pending", 3), ("b", "running", 1)]
    inner = [p for p in plans if "jobs_pending" in p]
    assert inner and all("Index Only Scan" in p and "Seq Scan" not in p for p in inner), plans
