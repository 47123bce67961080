"""What 0012_limit_walk.sql changed: limits_stats reads a bounded part of each queue's pending
jobs, through the claim index in claim order, and its plan is never compiled (JIT)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from jobyard.backends.base import (
    JobLimits,
    JobsClaimParams,
    LimitsStatsParams,
    LimitsSyncParams,
    QueueLimits,
    Rate,
)
from jobyard.backends.postgres.backend import PostgresBackend
from tests.postgres.conftest import insert, new


def test_the_walk_reads_the_claim_index_in_order_and_is_never_compiled(
    backend: PostgresBackend, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    # given a job name with a rate, thirty of its jobs over three keys, and one running
    backend.limits_sync(LimitsSyncParams([JobLimits("a", "sms", QueueLimits(rate=Rate(1, 60.0)))]))
    insert(backend, *(new("a", "sms", key=f"k{i % 3}") for i in range(30)))
    assert len(backend.jobs_claim(JobsClaimParams("w", ["a"], 5))) == 1
    # then limits_stats counts the first ten of them, and says it read only part
    (_, sms) = backend.limits_stats(LimitsStatsParams(("a",), walk=10))
    assert (sms.running, sms.due, sms.exact) == (1, 10, False)
    # and its plan reads the claim index in order (never sorted, never the partition's pages),
    # uncompiled even where any plan would be (a plan priced with enable_seqscan off passes
    # jit_above_cost, and compiling it cost 540 ms)
    conn = connect(autocommit=True)
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_analyze = on")
    conn.execute("SET client_min_messages = log")
    conn.execute("SET jit_above_cost = 0")
    rows = conn.execute("SELECT * FROM jobyard_limit_walk('{}'::text[], 10, 0)").fetchall()
    assert sum(r[3] for r in rows) == 10 and sum(r[5] for r in rows) == 1
    (inner,) = [p for p in plans if "jobs_pending" in p]
    walk = [line for line in inner.splitlines() if "on jobs_pending p " in line]
    assert walk and all("Index Scan using jobs_pending_claim" in line for line in walk), inner
    assert "rows=10 " in walk[0], inner
    assert "Seq Scan" not in inner and "Sort Key: p." not in inner, inner
    assert "JIT" not in inner, inner
