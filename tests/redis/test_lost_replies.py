"""A reply lost after Redis ran the call: only calls that are safe to repeat are sent again.

A proxy in front of the shared server forwards one call to Redis and drops the connection
instead of passing its reply back (see ``proxy.py``): no mock, Redis really ran the call.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.exceptions

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    Outcome,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from jobyard.worker.reaper import reap
from tests.redis import support
from tests.redis.conftest import T0, insert, new
from tests.redis.proxy import LosingProxy, losing_proxy


@pytest.fixture
def proxy() -> Iterator[LosingProxy]:
    with losing_proxy(support.SHARED_HOST, support.SHARED_PORT) as p:
        yield p


@pytest.fixture
def backend(proxy: LosingProxy) -> Iterator[RedisBackend]:
    """A backend on a fresh prefix of the shared server, through the proxy, on a frozen clock."""
    url = support.fresh_url().replace(f":{support.SHARED_PORT}/", f":{proxy.port}/")
    b = RedisBackend(url, FrozenClock(T0))
    yield b
    b.close()


def sha(backend: RedisBackend, script: str) -> bytes:
    return str(backend.scripts[script].sha).encode()


def claim(backend: RedisBackend, limit: int) -> list[str]:
    return [c.id for c in backend.jobs_claim(JobsClaimParams("w", ["q"], limit))]


@pytest.mark.parametrize(
    ("script", "queues"), [("jobs_claim_one", ["q"]), ("jobs_claim", ["q", "other"])]
)
def test_a_claim_whose_reply_was_lost_is_not_sent_again(
    backend: RedisBackend, proxy: LosingProxy, script: str, queues: list[str]
) -> None:
    # given two pending jobs, and the claim script already in Redis's cache (one queue: the
    # lean script; more: the general one)
    a, b = insert(backend, new(lease=5.0), new(lease=5.0))
    warm = [f"other{i}" for i in range(len(queues))]
    assert backend.jobs_claim(JobsClaimParams("w", warm, 1)) == []
    # when a claim of one job runs in Redis but its reply is lost
    proxy.lose_reply_to(sha(backend, script))
    with pytest.raises(redis.exceptions.ConnectionError):
        backend.jobs_claim(JobsClaimParams("w", queues, 1))
    # then the store did not claim again: the first job is running, unseen, the second pending
    assert proxy.lost == 1 and backend.core.unsure[script] == 1
    statuses = {j: rec.status for j in (a, b) if (rec := backend.jobs_get(j)) is not None}
    assert statuses == {a: "running", b: "pending"}
    # and the worker's next claim takes the second job
    (cb,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert cb.id == b
    assert backend.jobs_ack(JobsAckParams([Outcome(b, cb.token, "completed")])) == []
    # and the first comes back once its lease lapses, that attempt counted
    backend.clock.advance(6.0)  # type: ignore[attr-defined]
    assert [(r.id, r.status) for r in reap(backend)] == [(a, "pending")]
    backend.clock.advance(1.0)  # type: ignore[attr-defined]  # past attempt 1's backoff
    (again,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert (again.id, again.attempts) == (a, 2)


@pytest.mark.parametrize(("script", "size"), [("jobs_insert_one", 1), ("jobs_insert", 2)])
def test_an_insert_without_keys_whose_reply_was_lost_is_not_sent_again(
    backend: RedisBackend, proxy: LosingProxy, script: str, size: int
) -> None:
    # given the script that inserts a batch of this size in Redis's cache (one plain job: the
    # lean script; more: the general one)
    insert(backend, *[new() for _ in range(size)])
    # when an insert's reply is lost after Redis ran it
    proxy.lose_reply_to(sha(backend, script))
    with pytest.raises(redis.exceptions.ConnectionError):
        insert(backend, *[new() for _ in range(size)])
    # then the jobs were inserted once: the caller was told they may have been
    assert backend.core.unsure[script] == 1
    assert len(claim(backend, 10)) == 2 * size


def test_an_insert_with_keys_whose_reply_was_lost_is_sent_again(
    backend: RedisBackend, proxy: LosingProxy
) -> None:
    insert(backend, new(idempotency_key="other"))
    proxy.lose_reply_to(sha(backend, "jobs_insert"))
    (got,) = backend.jobs_insert(JobsInsertParams([new(idempotency_key="k")]))
    # the repeat found the key held: the one job the lost call inserted
    assert proxy.lost == 1 and not backend.core.unsure
    ids = claim(backend, 10)
    assert got.created is False and len(ids) == 2 and got.id in ids


def test_an_ack_whose_reply_was_lost_is_sent_again_and_refused_as_stale(
    backend: RedisBackend, proxy: LosingProxy
) -> None:
    (a,) = insert(backend, new())
    (c,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    proxy.lose_reply_to(sha(backend, "jobs_ack"))
    refused = backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed")]))
    # the repeat changed nothing (the token was spent) and says so; the first ack holds
    assert proxy.lost == 1 and not backend.core.unsure
    assert refused == [a]
    rec = backend.jobs_get(a)
    assert rec is not None and rec.status == "completed"
