"""Workflow steps in the SQLite store: the 0007 migration of a file that holds jobs, the links
table behind depends_on and dependents, what a plain job's ack does not run, and a join of
10,000 members."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    JobsPurgeParams,
    NewJob,
    Outcome,
)
from jobyard.backends.sqlite import _sql
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import FrozenClock

from .conftest import PAYLOAD, T0, insert, new
from .test_schema import plan

FLOW = "wf-1"


def step(*after: int, **options: object) -> NewJob:
    return new(workflow_id=FLOW, after=after, **options)


def complete(backend: SQLiteBackend, limit: int = 100, queues: tuple[str, ...] = ("q",)) -> int:
    """Claim up to ``limit`` jobs and complete them in one ack; how many."""
    held = backend.jobs_claim(JobsClaimParams("w1", queues, limit))
    outcomes = [Outcome(c.id, c.token, "completed", result="1") for c in held]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []
    return len(held)


# --- the migration ---------------------------------------------------------------------------


def migrated_to(path: Path, version: int) -> sqlite3.Connection:
    """A database file with the migrations up to ``version`` applied, as an older jobyard left
    it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(_sql.queries()["migrations_init"])
    for m in _sql.migrations():
        if m.version > version:
            break
        for statement in m.statements:
            conn.execute(statement)
        conn.execute(
            _sql.queries()["migrations_record"],
            {"version": m.version, "name": m.name, "now": T0},
        )
    return conn


def test_0007_keeps_every_job_and_never_reuses_a_purged_id(
    tmp_path: Path, open_backend: Callable[..., SQLiteBackend]
) -> None:
    # given a file at 0006 with a pending job holding a key, a completed one, and a purged newest
    conn = migrated_to(tmp_path / "old.db", 6)
    columns = "queue, name, status, max_attempts, lease, run_at, created_at, payload"
    for status, key in (("pending", "k1"), ("completed", None), ("completed", None)):
        conn.execute(
            f"INSERT INTO jobs ({columns}, idempotency_key) VALUES (?, ?, ?, 4, 30, ?, ?, ?, ?)",
            ("q", "task", status, T0, T0, PAYLOAD, key),
        )
    conn.execute("DELETE FROM jobs WHERE id = 3")
    conn.close()
    # when a backend opens it
    backend = open_backend(FrozenClock(T0), at=f"sqlite:///{tmp_path}/old.db")
    # then the jobs are there as they were, with no workflow links
    one, two = backend.jobs_get("1"), backend.jobs_get("2")
    assert one is not None and two is not None
    assert (one.status, one.idempotency_key, two.status) == ("pending", "k1", "completed")
    assert (one.workflow_id, one.depends_on, one.dependents) == (None, (), ())
    # and the purged id is not handed out again, steps can wait, and the key is still held
    assert insert(backend, step(), step(0)) == ["4", "5"]
    assert backend.jobs_list(JobsListParams(status="waiting"))[0].id == "5"
    (again,) = backend.jobs_insert(JobsInsertParams([new(idempotency_key="k1")]))
    assert (again.id, again.created) == ("1", False)


# --- the links and the SQL behind them -------------------------------------------------------


def test_links_are_rows_and_a_join_keeps_only_a_counter(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    m1, m2, join = insert(backend, step(), step(), step(1, 0))
    assert raw.execute(
        "SELECT job_id, position, input_id FROM job_links ORDER BY job_id, position"
    ).fetchall() == [(int(join), 0, int(m2)), (int(join), 1, int(m1))]
    row = "SELECT status, fanin, fanout, waits FROM jobs WHERE id = ?"
    assert raw.execute(row, (join,)).fetchone() == ("waiting", 2, 0, 2)
    assert raw.execute(row, (m1,)).fetchone() == ("pending", 0, 1, 0)
    complete(backend, limit=1)
    assert raw.execute(row, (join,)).fetchone() == ("waiting", 2, 0, 1)


def test_the_workflow_queries_use_their_indexes(raw: sqlite3.Connection) -> None:
    assert "USING INDEX jobs_workflow (workflow_id=?)" in plan(raw, "jobs_list_workflow")
    ids = plan(raw, "jobs_list_ids")
    assert "USING INTEGER PRIMARY KEY (rowid=?)" in ids and "SCAN jobs" not in ids
    release = plan(raw, "jobs_release")
    assert "USING COVERING INDEX job_links_input (input_id=?)" in release
    assert "SCAN jobs" not in release
    record = plan(raw, "jobs_get")
    assert "SEARCH l USING PRIMARY KEY (job_id=?)" in record
    assert "SEARCH l USING COVERING INDEX job_links_input (input_id=?)" in record


def test_a_plain_ack_runs_no_statement_of_the_release(backend: SQLiteBackend) -> None:
    # given a plain job and a workflow's first step, each claimed
    insert(backend, new(), step(), step(1))
    held = backend.jobs_claim(JobsClaimParams("w1", ("q",), 10))
    assert len(held) == 2
    plain, first = sorted(held, key=lambda c: int(c.id))
    statements: list[str] = []
    backend._conns.get().set_trace_callback(statements.append)
    # when the plain job completes, then no statement touches the links
    backend.jobs_ack(JobsAckParams([Outcome(plain.id, plain.token, "completed", result="1")]))
    assert not [s for s in statements if "job_links" in s]
    # and the step's completion runs the release once
    backend.jobs_ack(JobsAckParams([Outcome(first.id, first.token, "completed", result="1")]))
    assert len([s for s in statements if "job_links" in s]) == 1


def test_purging_a_step_deletes_its_links(backend: SQLiteBackend, raw: sqlite3.Connection) -> None:
    a, b = insert(backend, step(), step(0))
    complete(backend)
    complete(backend)
    assert backend.jobs_purge(JobsPurgeParams()) == 2
    assert raw.execute("SELECT count(*) FROM job_links").fetchone()[0] == 0
    assert backend.jobs_get(a) is None and backend.jobs_get(b) is None


def test_a_batch_whose_step_points_forward_is_refused_whole(backend: SQLiteBackend) -> None:
    with pytest.raises(ValueError, match="position 2"):
        insert(backend, step(), step(2), step())
    assert backend.jobs_list(JobsListParams()) == []


# --- scale -----------------------------------------------------------------------------------


def test_a_join_of_10000_members_is_released_by_the_last_of_them(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    n = 10_000
    ids = insert(backend, *[step() for _ in range(n)], step(*range(n)))
    join = ids[-1]
    rec = backend.jobs_get(join)
    assert rec is not None and rec.depends_on == tuple(ids[:n])
    done = 0
    while done < n - 1:
        done += complete(backend, limit=min(100, n - 1 - done))
        assert backend.jobs_list(JobsListParams(ids=[join]))[0].status == "waiting"
    assert raw.execute("SELECT waits FROM jobs WHERE id = ?", (join,)).fetchone() == (1,)
    complete(backend, limit=1)
    rec = backend.jobs_get(join)
    assert rec is not None and rec.status == "pending"
    assert raw.execute("SELECT waits FROM jobs WHERE id = ?", (join,)).fetchone() == (0,)


def test_0008_holds_the_inputs_of_the_workflows_a_file_holds(
    tmp_path: Path, open_backend: Callable[..., SQLiteBackend]
) -> None:
    # given a file at 0007 with two chains: a (completed) -> b (failed), c -> d both completed
    conn = migrated_to(tmp_path / "old.db", 7)
    columns = "queue, name, status, max_attempts, lease, run_at, created_at, finished_at, payload"
    rows = [("completed", 0, 1), ("failed", 1, 0), ("completed", 0, 1), ("completed", 1, 0)]
    for status, fanin, fanout in rows:
        conn.execute(
            f"INSERT INTO jobs ({columns}, workflow_id, fanin, fanout)"
            " VALUES ('q', 'task', ?, 4, 30, ?, ?, ?, ?, ?, ?, ?)",
            (status, T0, T0, T0, PAYLOAD, FLOW, fanin, fanout),
        )
    conn.executemany("INSERT INTO job_links VALUES (?, 0, ?)", [(2, 1), (4, 3)])
    conn.execute("INSERT INTO job_counts VALUES ('q', 'completed', 3), ('q', 'failed', 1)")
    conn.close()
    # when a backend opens it, then a purge of completed jobs keeps a, which b may still need
    backend = open_backend(FrozenClock(T0 + 100), at=f"sqlite:///{tmp_path}/old.db")
    purged = backend.jobs_purge(JobsPurgeParams(("completed",)))
    assert (int(purged), purged.kept) == (2, 1)
    assert [r.id for r in backend.jobs_list(JobsListParams())] == ["2", "1"]
