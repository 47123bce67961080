"""The dead letter's line of each failed job, stored when it fails (0012_dead_lines.sql): a
file whose jobs failed before that migration gets their lines from it."""

from __future__ import annotations

import sqlite3

import jobyard
from jobyard.backends.base import DeadGroupsParams
from jobyard.backends.sqlite.backend import SQLiteBackend
from tests.contract.test_search import fail_all


def test_jobs_failed_before_the_migration_are_grouped_by_their_line(
    backend: SQLiteBackend, raw: sqlite3.Connection, clock: jobyard.FrozenClock
) -> None:
    # given failed jobs in a file as 0010 left it: no dead_line column, no version 11
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\n{}\n'
    fail_all(backend, "q", [tb.format("KeyError: 'x'")] * 2 + ["\t ValueError: é  \r\n"])
    raw.execute("DROP INDEX jobs_dead_lines")
    raw.execute("ALTER TABLE jobs DROP COLUMN dead_line")
    raw.execute("DELETE FROM jobyard_migrations WHERE version = 12")
    # when the file is migrated
    assert backend.schema_migrate() == ["0012_dead_lines"]
    # then the jobs that failed before are grouped by their errors' lines
    got = backend.dead_groups(DeadGroupsParams())
    assert [(g.error_line, g.count) for g in got.groups] == [
        ("KeyError: 'x'", 2),
        ("ValueError: é", 1),
    ]


def test_the_grouping_reads_the_index_alone(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    # given the statement that groups the dead letter
    sql = backend._q["dead_groups"]
    # then its walk reads the covering index, never a failed job's row (payload, traceback)
    plan = raw.execute("EXPLAIN QUERY PLAN " + sql, {"queue": None, "scan": 10}).fetchall()
    assert any("COVERING INDEX jobs_dead_lines" in row[3] for row in plan), plan
