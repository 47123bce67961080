"""Optional store capabilities are declared (``backends/base.py``) and refused in one way: each
store either has a capability or refuses the features needing it with one ConfigurationError."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

import jobyard
from jobyard import testing
from jobyard.backends.base import ForeignQueueBackend, TransactionalBackend

TRANSACTIONAL = {"postgres"}
FOREIGN_QUEUES = {"redis", "redis_cluster"}


def test_each_store_declares_what_it_can_do(
    store: tuple[str, str], make_app: Callable[..., jobyard.App]
) -> None:
    backend = make_app().backend

    assert isinstance(backend, TransactionalBackend) == (store[0] in TRANSACTIONAL)
    assert isinstance(backend, ForeignQueueBackend) == (store[0] in FOREIGN_QUEUES)


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
