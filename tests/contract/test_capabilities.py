"""Optional store capabilities are declared (``backends/base.py``) and refused in one way: each
store either has a capability or refuses the features needing it with one ConfigurationError.
What a store tells about itself (``store_info``) every store answers, in the same terms."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

import jobyard
from jobyard import testing
from jobyard.backends.base import (
    Backend,
    ExpiringBackend,
    ForeignQueueBackend,
    JobsAckParams,
    JobsInsertParams,
    NewJob,
    Outcome,
    StoreInfo,
    TidyingBackend,
    TransactionalBackend,
    as_expiring,
    as_tidying,
)

TRANSACTIONAL = {"postgres"}
FOREIGN_QUEUES = {"redis", "redis_cluster"}
REDIS = {"redis", "redis_cluster"}
# a retention of its own (Redis: result_ttl, failed_ttl, a queue's time to live; every store:
# the throughput history, which Redis prunes by key TTLs and the others in jobs_expire)
EXPIRING = {"memory", "sqlite", "postgres", *REDIS}
TIDYING = {"postgres", "sqlite"}  # dead rows to vacuum (PostgreSQL), a WAL to checkpoint


def test_each_store_declares_what_it_can_do(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    backend = make_app().backend

    assert isinstance(backend, TransactionalBackend) == (store[0] in TRANSACTIONAL)
    assert isinstance(backend, ForeignQueueBackend) == (store[0] in FOREIGN_QUEUES)
    assert isinstance(backend, ExpiringBackend) == (store[0] in EXPIRING)
    assert isinstance(backend, TidyingBackend) == (store[0] in TIDYING)
    # the optional duties are looked up in one way, and a store without one is skipped
    assert (as_expiring(backend) is backend) == (store[0] in EXPIRING)
    assert (as_tidying(backend) is backend) == (store[0] in TIDYING)
    # no store carries a duty it does not declare (a no-op method would hide a missing one)
    assert hasattr(backend, "jobs_expire") == (store[0] in EXPIRING)
    assert hasattr(backend, "store_tidy") == (store[0] in TIDYING)


def test_a_caller_connection_is_refused_without_transactions(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    if store[0] in TRANSACTIONAL:
        pytest.skip("this store takes part in the caller's transaction")
    app = make_app()

    @app.job
    def noop() -> None: ...

    # when: a producer passes its own connection to a store that cannot join its transaction
    with pytest.raises(jobyard.ConfigurationError) as refused:
        noop.options(connection=object()).enqueue()

    # then: one line says what the feature needs, and nothing was written
    assert str(refused.value) == (
        "a transactional enqueue (connection=...) needs a store that takes part in the "
        f"caller's transaction (PostgreSQL); {app.backend.url} is not one"
    )
    with pytest.raises(jobyard.ConfigurationError) as refused_async:
        asyncio.run(noop.options(connection=object()).enqueue_async())
    assert str(refused_async.value) == str(refused.value)
    assert app.jobs() == []


def test_a_store_handed_a_connection_past_the_core_refuses_it_alike(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    if store[0] in TRANSACTIONAL:
        pytest.skip("this store takes part in the caller's transaction")
    app = make_app()
    backend = app.backend
    new = NewJob(name="noop", queue="default", payload='{"args":[],"kwargs":{}}')

    # when: a caller hands the store itself a connection, past the core's refusal
    with pytest.raises(jobyard.ConfigurationError) as insert:
        backend.jobs_insert(JobsInsertParams([new], connection=object()))
    (job,) = backend.jobs_insert(JobsInsertParams([new]))
    with pytest.raises(jobyard.ConfigurationError) as ack:
        backend.jobs_ack(JobsAckParams([Outcome(job.id, "t", "completed")], connection=object()))

    # then: the one refusal of base.py, the same on every store, and nothing written
    needs = (
        "a caller's connection (connection=...) needs a store that takes part in the caller's "
        f"transaction (PostgreSQL); {backend.url} is not one"
    )
    assert str(insert.value) == str(ack.value) == needs
    assert [j.id for j in app.jobs()] == [job.id]
    assert app.get(job.id).status == "pending"


def test_a_handler_connection_is_refused_without_transactions(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    if store[0] in TRANSACTIONAL:
        pytest.skip("this store lends connections")
    app = make_app()

    @app.job(max_attempts=1)
    def writes() -> None:
        jobyard.current_job().connection  # noqa: B018 - asking for it is the point

    handle = writes.enqueue()
    testing.drain(app)

    with pytest.raises(jobyard.JobFailed, match=r"current_job\(\)\.connection needs a store"):
        handle.result(timeout=5)


def test_foreign_lists_and_streams_are_refused_without_them(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    if store[0] in FOREIGN_QUEUES:
        pytest.skip("this store consumes foreign lists and streams")
    app = make_app()
    needs = "needs a store that consumes lists and streams of other programs (Redis)"

    with pytest.raises(jobyard.ConfigurationError, match="^" + re.escape(f"consume_list {needs};")):
        app.consume_list("incoming", print, min_idle=60)
    with pytest.raises(
        jobyard.ConfigurationError, match="^" + re.escape(f"consume_stream {needs};")
    ):
        app.consume_stream("events", print, group="g")
    assert app.consumers == []


def test_each_store_tells_its_kind_retention_and_warnings(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    backend = make_app().backend

    # when: the store is asked what it is (status and the dashboard ask this, never its class)
    info = backend.store_info()

    # then: its kind, and how long it keeps finished jobs whose queue sets no retention: a day
    # of completed jobs on Redis (result_ttl), until purged elsewhere; failed ones until purged
    assert isinstance(backend, Backend) and isinstance(info, StoreInfo)
    assert info.kind == store[0]
    assert info.retention == (86400.0 if store[0] in REDIS else None)
    assert info.failed_retention is None
    # warnings are one line each; only a server can have any (PostgreSQL: tests/postgres)
    assert isinstance(info.warnings, tuple)
    assert all(isinstance(w, str) and w and "\n" not in w for w in info.warnings)
    if store[0] != "postgres":
        assert info.warnings == ()


@pytest.mark.parametrize(
    ("query", "retention", "failed_retention"),
    [({"result_ttl": 60, "failed_ttl": 600}, 60.0, 600.0), ({"result_ttl": 0}, None, None)],
    ids=["both-set", "kept-until-purged"],
)
def test_a_redis_store_tells_the_retention_of_its_url(
    store: tuple[str, str],
    query: dict[str, float],
    retention: float | None,
    failed_retention: float | None,
) -> None:
    if store[0] not in REDIS:
        pytest.skip("only Redis keeps finished jobs for a time set in its URL")
    from tests.redis.support import cluster_url, fresh_url

    url = (cluster_url if store[0] == "redis_cluster" else fresh_url)(**query)
    app = jobyard.App(url)
    try:
        info = app.store_info()
    finally:
        app.close()

    assert (info.retention, info.failed_retention) == (retention, failed_retention)
