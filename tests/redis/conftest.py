"""Fixtures for the Redis backend's own tests: backends on a fresh prefix of the shared server or
of the session's 3-node cluster, and raw clients for the checks the Backend API cannot make."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from jobyard.backends.base import JobsInsertParams, NewJob
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from tests.conftest import backends_on
from tests.redis import support

PAYLOAD = '{"args":[],"kwargs":{}}'
T0 = 1_800_000_000.0


def new(queue: str = "q", name: str = "task", **options: object) -> NewJob:
    """A NewJob with a valid payload; ``options`` are NewJob fields."""
    return NewJob(name=name, queue=queue, payload=PAYLOAD, **options)  # type: ignore[arg-type]


def insert(backend: RedisBackend, *jobs: NewJob) -> list[str]:
    """Insert and return the ids."""
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


def url_for(kind: str, **query: str | float) -> str:
    """A fresh store URL of this kind."""
    return support.cluster_url(**query) if kind == "cluster" else support.fresh_url(**query)


@pytest.fixture
def clock() -> FrozenClock:
    """A frozen clock at a fixed instant."""
    return FrozenClock(T0)


@pytest.fixture(params=["node", "cluster"])
def kind(request: pytest.FixtureRequest) -> str:
    """Each test runs on a single node and on the 3-node cluster."""
    return str(request.param)


@pytest.fixture
def make_backend(kind: str) -> Iterator[Callable[..., RedisBackend]]:
    """Build backends on one fresh prefix (``at=`` to pick another); all closed at the end."""
    with backends_on(RedisBackend, url_for(kind)) as build:
        yield build


@pytest.fixture
def backend(make_backend: Callable[..., RedisBackend], clock: FrozenClock) -> RedisBackend:
    """A backend on a fresh prefix whose time is the frozen clock."""
    return make_backend(clock)


@pytest.fixture
def raw(backend: RedisBackend) -> Any:
    """A plain decoded client of the backend's server (or cluster), for looking at keys."""
    return backend.client


def cluster_client() -> redis.cluster.RedisCluster:
    """A client of the session's cluster."""
    url = support.cluster_url()
    port = int(url.split(":")[2].split("?")[0])
    return redis.cluster.RedisCluster(host=support.SHARED_HOST, port=port, decode_responses=True)
