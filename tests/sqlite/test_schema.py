"""Opening a store: URLs, connection settings, migrations, and the SQL files themselves."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from jobyard.backends import open_backend as open_by_url
from jobyard.backends._sqlfiles import expand_fragments, parse_blocks
from jobyard.backends.sqlite import _sql
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import SystemClock
from jobyard.errors import ConfigurationError, SchemaError
from tests.sqlite.conftest import T0, insert, new

MIGRATIONS = [
    "0001_initial",
    "0002_schedules",
    "0003_workers_forget_after",
    "0004_schedule_rules",
    "0005_counts",
    "0006_cancel_progress",
    "0007_workflows",
]


# --- URLs ------------------------------------------------------------------------------------


def test_a_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_backend: Callable[..., SQLiteBackend]
) -> None:
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    backend = open_backend(at="sqlite:///data/jobs.db")
    assert backend.path == str((tmp_path / "data" / "jobs.db").resolve())
    assert (tmp_path / "data" / "jobs.db").is_file()


def test_an_absolute_url_has_four_slashes(
    tmp_path: Path, open_backend: Callable[..., SQLiteBackend]
) -> None:
    backend = open_backend(at=f"sqlite:///{tmp_path}/abs.db")  # tmp_path starts with "/"
    assert backend.path == str((tmp_path / "abs.db").resolve())
    assert backend.url == f"sqlite:///{tmp_path}/abs.db"


def test_the_url_scheme_registry_opens_sqlite(tmp_path: Path) -> None:
    backend = open_by_url(f"sqlite:///{tmp_path}/reg.db", SystemClock())
    try:
        assert isinstance(backend, SQLiteBackend)
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:///file::memory:?cache=shared", "in-memory"),
        ("sqlite:///", "no database file"),
        ("sqlite:///some/dir/", "no database file"),
        ("sqlite://jobs.db", "invalid SQLite URL"),
        ("sqlite:///no/such/dir/jobs.db", "no directory"),
    ],
)
def test_unusable_urls_are_refused_with_a_reason(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        SQLiteBackend(url, SystemClock())


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_bytes(b"these are not the pages you are looking for" * 100)
    with pytest.raises(ConfigurationError, match="cannot open"):
        SQLiteBackend(f"sqlite:///{tmp_path}/notes.db", SystemClock())


# --- connection settings -------------------------------------------------------------------


def test_connections_use_wal_normal_sync_and_a_busy_timeout(backend: SQLiteBackend) -> None:
    conn = backend._conns.get()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    assert conn.isolation_level is None  # transactions are the backend's own


# --- migrations ------------------------------------------------------------------------------


def test_opening_migrates_once_and_records_each_version(
    backend: SQLiteBackend, raw: sqlite3.Connection, open_backend: Callable[..., SQLiteBackend]
) -> None:
    rows = raw.execute("SELECT version, name FROM jobyard_migrations ORDER BY version").fetchall()
    assert rows == [
        (1, "0001_initial"),
        (2, "0002_schedules"),
        (3, "0003_workers_forget_after"),
        (4, "0004_schedule_rules"),
        (5, "0005_counts"),
        (6, "0006_cancel_progress"),
        (7, "0007_workflows"),
        (8, "0008_workflow_holds"),
        (9, "0009_limits"),
        (10, "0010_throughput"),
        (11, "0011_turns_index"),
        (12, "0012_dead_lines"),
        (13, "0013_fair_rounds"),
    ]
    assert backend.schema_migrate() == []
    backend.schema_check()
    open_backend().schema_check()  # a second open finds nothing to do


def test_a_store_behind_is_reported_then_caught_up(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    # given a file on which the two migrations of the schedules table never ran
    raw.execute("DROP TABLE schedules")
    raw.execute("DELETE FROM jobyard_migrations WHERE version IN (2, 4)")
    # then the check names the way out
    with pytest.raises(SchemaError, match=r"0002_schedules.*jobyard migrate"):
        backend.schema_check()
    # and migrating applies just what is missing
    assert backend.schema_migrate() == ["0002_schedules", "0004_schedule_rules"]
    backend.schema_check()


def test_a_store_without_a_migrations_table_is_behind(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    raw.execute("DROP TABLE jobyard_migrations")
    with pytest.raises(SchemaError, match=r"0001_initial, 0002_schedules"):
        backend.schema_check()


def test_a_failed_migration_leaves_nothing_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a migration whose second statement fails
    last = len(_sql.migrations())
    broken = _sql.Migration(
        last + 1,
        f"{last + 1:04d}_broken",
        ("CREATE TABLE half (x INTEGER)", "CREATE TABLE jobs (x INTEGER)"),
    )
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/m.db", SystemClock())
    try:
        monkeypatch.setattr(
            "jobyard.backends.sqlite.backend.migrations",
            lambda: (*_sql.migrations(), broken),
        )
        with pytest.raises(sqlite3.OperationalError, match="already exists"):
            backend.schema_migrate()
        # then the first statement was rolled back with it, and the version not recorded
        conn = backend._conns.get()
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchone() is None
        assert conn.execute("SELECT max(version) FROM jobyard_migrations").fetchone()[0] == last
        assert not conn.in_transaction
    finally:
        backend.close()


# --- the SQL files ---------------------------------------------------------------------------


def test_named_blocks_are_split_and_trimmed() -> None:
    text = """-- preamble, dropped
-- name: one
-- what it does
SELECT 1;
-- a trailing comment

-- name: two
SELECT 2
"""
    assert parse_blocks(text) == {"one": "-- what it does\nSELECT 1", "two": "SELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        parse_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="empty"):
        parse_blocks("-- name: a\n-- nothing\n")


def test_fragments_are_written_once_and_filled_in() -> None:
    blocks = parse_blocks("-- name: _cols\nid, name\n-- name: get\nSELECT {{_cols}} FROM jobs\n")
    assert expand_fragments(blocks) == {"get": "SELECT id, name FROM jobs"}
    with pytest.raises(ValueError, match="unknown SQL fragment '_nope'"):
        expand_fragments({"get": "SELECT {{_nope}}"})


def test_migration_scripts_split_on_real_statement_ends() -> None:
    script = """-- a comment; with a semicolon
CREATE TABLE t (x TEXT DEFAULT 'a;b');
CREATE TRIGGER tr AFTER INSERT ON t BEGIN
    UPDATE t SET x = 'c;d';
END;
-- the end
"""
    statements = _sql.split_statements(script)
    assert len(statements) == 2 and statements[1].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        _sql.split_statements("CREATE TABLE t (x)")


def test_every_named_query_compiles_against_the_schema(raw: sqlite3.Connection) -> None:
    from jobyard.backends.sqlite import _connection

    # the functions every store connection has (_connection.connect)
    raw.create_function("jobyard_error_line", 1, _connection._error_line, deterministic=True)
    for name, sql in _sql.queries().items():
        params = dict.fromkeys(re.findall(r":(\w+)", sql))
        try:
            raw.execute("EXPLAIN " + sql, params).fetchall()
        except sqlite3.Error as exc:  # pragma: no cover - the message names the query
            pytest.fail(f"query {name!r} does not compile: {exc}")


def plan(raw: sqlite3.Connection, name: str) -> str:
    sql = _sql.queries()[name]
    params: dict[str, object] = dict.fromkeys(re.findall(r":(\w+)", sql))
    params.update(queues='["q"]', names='["q"]', limit=10)
    return "\n".join(r[3] for r in raw.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_the_claim_takes_jobs_in_index_order_without_sorting_them(raw: sqlite3.Connection) -> None:
    # The claim's per-queue subquery orders by the claim index's own terms (priority, the fair
    # round (turn - 1) / 4, run_at, id): a sort there would read every pending job of the queue.
    sql = _sql.queries()["jobs_claim"]
    params: dict[str, object] = dict.fromkeys(re.findall(r":(\w+)", sql))
    params.update(queues='["q"]', limit=10)
    rows = raw.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    children: dict[int, list[str]] = {}
    for _node, parent, _, detail in rows:
        children.setdefault(parent, []).append(detail)
    (scan,) = [
        node
        for node, _, _, detail in rows
        if detail.startswith("CORRELATED LIST SUBQUERY")
        and any("INDEX jobs_pending" in d for d in children.get(node, []))
    ]
    assert not any("TEMP B-TREE" in d for d in children[scan]), children[scan]


def test_the_hot_queries_use_their_indexes(raw: sqlite3.Connection) -> None:
    claim = plan(raw, "jobs_claim")
    assert "USING INDEX jobs_pending (queue=?)" in claim
    assert "SCAN jobs" not in claim  # no pass over the table, however many jobs it holds
    assert "USING INDEX jobs_pending (queue=?)" in plan(raw, "jobs_due")
    assert "USING INDEX jobs_idempotency" in plan(raw, "jobs_holder")
    # retention: one range per status and queue, ending at the cutoff
    assert "USING INDEX jobs_status (status=? AND queue=? AND finished_at<?)" in plan(
        raw, "jobs_purge"
    )
    assert "USING INDEX jobs_held" in plan(raw, "jobs_held_count")
    assert "COVERING INDEX jobs_status" in plan(raw, "stats_counts")
    assert "COVERING INDEX jobs_status" in plan(raw, "queues_over_max_pending")


def steps(raw: sqlite3.Connection, name: str, params: dict[str, object]) -> int:
    """The virtual machine instructions one run of query ``name`` takes (a progress handler
    called at each): what it reads, independent of the machine's speed."""
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return 0

    raw.set_progress_handler(tick, 1)
    try:
        raw.execute(_sql.queries()[name], params).fetchall()
    finally:
        raw.set_progress_handler(None, 1)
    return count


def test_the_oldest_pending_job_costs_the_same_whatever_the_backlog(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    # given a queue of two levels: jobs not due ahead of due ones, in each
    for priority in (0, 5):
        insert(backend, *(new(priority=priority, delay=60) for _ in range(5)))
        insert(backend, *(new(priority=priority, run_at=T0 - 10) for _ in range(5)))
    args: dict[str, object] = {"names": '["q"]', "now": T0}
    few = steps(raw, "stats_oldest", args)
    assert raw.execute(_sql.queries()["stats_oldest"], args).fetchall() == [("q", T0 - 10)]
    # when a level grows by 2,000 due jobs and 2,000 not due
    insert(backend, *(new(run_at=T0 - 5) for _ in range(2000)))
    insert(backend, *(new(delay=60) for _ in range(2000)))
    # then its oldest due job still costs a few index entries per level (a min(run_at) of the
    # level, which the claim index no longer yields first since it holds the fair round, read
    # all 4,010 entries of it)
    assert steps(raw, "stats_oldest", args) <= few + 20
