"""Fixtures for the PostgreSQL backend's own tests: a fresh schema per test, backends on it
(closed at teardown), and plain psycopg connections into the same schema for the checks the
Backend API cannot make."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from jobyard.backends.base import JobsInsertParams, NewJob
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.clock import FrozenClock
from tests.conftest import backends_on
from tests.postgres.support import BASE_URL, fresh_url, schema_of

PAYLOAD = '{"args":[],"kwargs":{}}'
T0 = 1_800_000_000.0


def new(queue: str = "q", name: str = "task", **options: Any) -> NewJob:
    """A NewJob with a valid payload; ``options`` are NewJob fields."""
    return NewJob(name=name, queue=queue, payload=PAYLOAD, **options)


def insert(backend: PostgresBackend, *jobs: NewJob) -> list[str]:
    """Insert and return the ids."""
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


@pytest.fixture
def app_name() -> str:
    """An application_name unique to this test, to find its server connections."""
    return f"jyt-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(app_name: str) -> str:
    """A fresh, migrated schema (its connections named ``app_name``)."""
    return fresh_url(application_name=app_name)


@pytest.fixture
def schema(url: str) -> str:
    """The schema of this test's store."""
    name = schema_of(url)
    assert name is not None
    return name


@pytest.fixture
def clock() -> FrozenClock:
    """A frozen clock at a fixed instant."""
    return FrozenClock(T0)


@pytest.fixture
def open_backend(url: str) -> Iterator[Callable[..., PostgresBackend]]:
    """Open backends on this test's schema (``at=`` for another); all closed at teardown."""
    with backends_on(PostgresBackend, url) as build:
        yield build


@pytest.fixture
def backend(open_backend: Callable[..., PostgresBackend], clock: FrozenClock) -> PostgresBackend:
    """A backend on this test's schema with a frozen clock."""
    return open_backend(clock)


@pytest.fixture
def connect(schema: str) -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """Plain psycopg connections to the test database (search_path: the test's schema unless
    ``own_path``), as an application would hold them; closed afterwards."""
    conns: list[psycopg.Connection[Any]] = []

    def build(*, autocommit: bool = False, own_path: bool = False) -> psycopg.Connection[Any]:
        options = "" if own_path else f"-c search_path={schema}"
        conn = psycopg.connect(BASE_URL, autocommit=autocommit, options=options)
        conns.append(conn)
        return conn

    yield build
    for conn in conns:
        conn.close()


@pytest.fixture
def sql(connect: Callable[..., psycopg.Connection[Any]]) -> Callable[..., list[tuple[Any, ...]]]:
    """Run one statement in the test's schema (autocommit) and return its rows."""
    conn = connect(autocommit=True)

    def run(query: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    return run


def terminate(app_name: str) -> int:
    """``pg_terminate_backend`` every server connection named ``app_name``; how many."""
    with psycopg.connect(BASE_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            [app_name],
        ).fetchall()
    return len(rows)


def connections(app_name: str) -> int:
    """Server connections named ``app_name``."""
    with psycopg.connect(BASE_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app_name]
        ).fetchone()
    return int(row[0]) if row else 0
