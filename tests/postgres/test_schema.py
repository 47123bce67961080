"""Migrations: versioned, idempotent, safe when hosts run them at once; a missing or old schema
is reported in one line naming ``jobyard migrate``."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobyard
from jobyard.backends.postgres._sql import MIGRATIONS
from jobyard.backends.postgres.backend import PostgresBackend
from tests.postgres import support
from tests.postgres._procs import run_processes
from tests.postgres.support import schema_of

ALL = [name for name, _ in MIGRATIONS]


@pytest.fixture
def bare_url() -> Iterator[str]:
    """The URL of a schema that does not exist yet (dropped afterwards if it was made)."""
    url = support.with_params(support.BASE_URL, schema=f"jyt_bare_{uuid.uuid4().hex[:12]}")
    yield url
    support.drop(url)


def test_a_missing_schema_says_to_run_migrate(
    bare_url: str, open_backend: Callable[..., PostgresBackend]
) -> None:
    backend = open_backend(at=bare_url)
    with pytest.raises(jobyard.SchemaError, match="run `jobyard migrate APP`") as caught:
        backend.schema_check()
    assert "\n" not in str(caught.value)
    with pytest.raises(jobyard.SchemaError, match="jobyard migrate"):
        jobyard.App(bare_url).get("1")  # the App checks when it opens the store
    # App.backend drops the backend whose check failed without closing it; close it here, or
    # its pool's threads outlive this test and warn in a later one.
    for leaked in [o for o in gc.get_objects() if isinstance(o, PostgresBackend)]:
        if schema_of(leaked.url) == schema_of(bare_url):
            leaked.close()


def test_migrate_twice_applies_once(
    bare_url: str, open_backend: Callable[..., PostgresBackend]
) -> None:
    backend = open_backend(at=bare_url)
    assert backend.schema_migrate() == ALL
    assert backend.schema_migrate() == []
    backend.schema_check()
    assert backend.queues_list() == []


def test_concurrent_migrations_take_turns(
    bare_url: str, open_backend: Callable[..., PostgresBackend]
) -> None:
    from tests.postgres import _procs

    reports: list[Any] = run_processes(_procs.migrate, bare_url)
    assert sorted(reports, key=len) == [[], [], [], ALL]
    open_backend(at=bare_url).schema_check()


def test_a_schema_behind_says_so(url: str, backend: PostgresBackend, sql: Any) -> None:
    sql("DELETE FROM jobyard_migrations WHERE name = %s", [ALL[-1]])
    with pytest.raises(jobyard.SchemaError, match=rf"behind \(missing {ALL[-1]}\).*migrate"):
        backend.schema_check()


def test_app_migrate_through_the_app(bare_url: str) -> None:
    app = jobyard.App(bare_url)
    try:
        assert app.migrate() == ALL
        assert app.jobs() == []
    finally:
        app.close()


def test_url_settings_are_checked() -> None:
    from jobyard.backends.postgres._connect import parse_url

    with pytest.raises(jobyard.ConfigurationError, match="invalid schema"):
        parse_url("postgresql://127.0.0.1/test?schema=Bad-Name")
    with pytest.raises(jobyard.ConfigurationError, match="pool_max_size"):
        parse_url("postgresql://127.0.0.1/test?pool_max_size=0")
    with pytest.raises(jobyard.ConfigurationError, match="worker_commit"):
        parse_url("postgresql://127.0.0.1/test?worker_commit=maybe")
    s = parse_url("postgres://u:secret@db:5433/app?schema=jobs&sslmode=disable&pool_max_size=4")
    assert (s.schema, s.pool_max, s.async_commit) == ("jobs", 4, True)
    assert "schema" not in s.conninfo and "sslmode=disable" in s.conninfo
    assert "search_path=jobs,pg_temp" in s.kwargs["options"]


def test_the_printable_url_hides_the_password(open_backend: Callable[..., PostgresBackend]) -> None:
    backend = open_backend(at="postgresql://postgres:hunter2@127.0.0.1/test?pool_min_size=0")
    assert "hunter2" not in backend.url and "***" in backend.url
