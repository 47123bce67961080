"""Fixtures for the SQLite backend's own tests: a backend on a fresh file per test, and raw
``sqlite3`` access to that file for the checks (and corruptions) the Backend API cannot make."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobyard.backends.base import JobsInsertParams, NewJob
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import FrozenClock
from tests.conftest import backends_on

PAYLOAD = '{"args":[],"kwargs":{}}'
T0 = 1_800_000_000.0


def new(queue: str = "q", name: str = "task", **options: object) -> NewJob:
    """A NewJob with a valid payload; ``options`` are NewJob fields."""
    return NewJob(name=name, queue=queue, payload=PAYLOAD, **options)  # type: ignore[arg-type]


def insert(backend: SQLiteBackend, *jobs: NewJob) -> list[str]:
    """Insert and return the ids."""
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


@pytest.fixture
def url(tmp_path: Path) -> str:
    """The URL of a database file that does not exist yet."""
    return f"sqlite:///{tmp_path}/jobs.db"


@pytest.fixture
def clock() -> FrozenClock:
    """A frozen clock at a fixed instant."""
    return FrozenClock(T0)


@pytest.fixture
def open_backend(url: str) -> Iterator[Callable[..., SQLiteBackend]]:
    """Open backends on this test's file (``at=`` for another); all closed at teardown."""
    with backends_on(SQLiteBackend, url) as build:
        yield build


@pytest.fixture
def backend(open_backend: Callable[..., SQLiteBackend], clock: FrozenClock) -> SQLiteBackend:
    """A backend on a fresh file with a frozen clock."""
    return open_backend(clock)


@pytest.fixture
def raw(backend: SQLiteBackend) -> Iterator[sqlite3.Connection]:
    """A plain autocommit connection to the backend's file."""
    conn = sqlite3.connect(backend.path, isolation_level=None, timeout=10)
    yield conn
    conn.close()


class Child:
    """A helper process started with ``spawn`` that runs until its ``stop`` event is set."""

    def __init__(self, target: Callable[..., None], *args: object) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.results = ctx.Queue()
        self.proc = ctx.Process(target=target, args=(*args, self.stop, self.results))
        self.proc.start()

    def finish(self, timeout: float = 30) -> object:
        """Stop the child and return what it reported."""
        self.stop.set()
        kind, _, value = self.results.get(timeout=timeout)
        self.proc.join(timeout)
        assert kind == "ok", value
        return value


@pytest.fixture
def spawn_child() -> Iterator[Callable[..., Child]]:
    """Start helper processes; any still running at teardown are stopped, then killed."""
    children: list[Child] = []

    def start(target: Callable[..., None], *args: object) -> Child:
        child = Child(target, *args)
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop.set()
        child.proc.join(10)
        if child.proc.is_alive():
            child.proc.kill()
            child.proc.join(5)


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> object:
    """Poll ``predicate`` until it is truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.01)
    return value
