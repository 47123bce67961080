"""The lean scripts of a single node (``jobs_insert_one``, ``jobs_claim_one``): one plain job
inserted, and one queue with an open gate claimed, in less Lua than the general scripts. They
store and claim exactly what the general scripts would, and hand over to them, having written
nothing, whatever they do not handle."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from jobyard.backends.base import (
    JobsClaimParams,
    JobsInsertParams,
    QueueConfig,
    QueueLimits,
    Rate,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from jobyard.errors import QueueFull
from tests.conftest import backends_on, wait_until
from tests.redis.conftest import T0, insert, new, url_for

ONE, CLAIM_ONE = "jobs_insert_one", "jobs_claim_one"


@pytest.fixture
def node() -> Iterator[Callable[[], RedisBackend]]:
    """Backends, each on a fresh prefix of the shared single node (the lean scripts' home) and
    a frozen clock at T0, that note the names of the scripts they run."""

    with backends_on(RedisBackend, url_for("node")) as build:

        def make() -> RedisBackend:
            backend: RedisBackend = build(FrozenClock(T0), at=url_for("node"))
            ran: list[str] = []
            run_once, run = backend.core.run_once, backend.core.run

            def spy_once(name: str, *a: Any, **kw: Any) -> Any:
                ran.append(name)
                return run_once(name, *a, **kw)

            def spy(name: str, *a: Any, **kw: Any) -> Any:
                ran.append(name)
                return run(name, *a, **kw)

            backend.core.run_once = spy_once  # type: ignore[method-assign]
            backend.core.run = spy  # type: ignore[method-assign]
            backend.ran = ran  # type: ignore[attr-defined]
            return backend

        yield make


def ran(backend: RedisBackend) -> list[str]:
    out: list[str] = backend.ran  # type: ignore[attr-defined]
    return out


def stored(backend: RedisBackend, job_id: str) -> dict[str, Any]:
    """A job's hash and its index entries, its number taken out."""
    queue, n = job_id.rsplit(":", 1)
    c, base = backend.client, backend.keys.tag(queue) + ":"
    h = c.hgetall(f"{base}job:{n}")
    prio = h.get("priority", "0")
    return {
        "hash": {f: v for f, v in h.items() if f != "token"},
        "token": h.get("token", "").rsplit(".", 1)[-1] == n if "token" in h else None,
        "pending": c.zscore(f"{base}pending", n),
        "ready": c.zscore(f"{base}ready:{prio}", n.rjust(20, "0")),
        "prios": c.zscore(f"{base}prios", prio),
        "claims": c.zscore(f"{base}claims", n),
        "registered": c.sismember(backend.keys.queues, queue),
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two jobs stored alike (their pending score is their own number, so only whether set)."""
    for x in (a, b):
        x["pending"] = x["pending"] is not None
        x["claims"] = x["claims"] is not None
    assert a == b


OPTIONS: list[dict[str, Any]] = [
    {},
    {"priority": -3, "delay": 30.0, "timeout": 2.5, "lease": 7.0},
    {"max_attempts": 9, "backoff": '{"kind":"fixed","base":2.0}', "delivery": "at_most_once"},
    {"run_at": T0 + 0.125, "parent_id": "q:7"},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_plain_job_alone_is_stored_as_the_general_script_stores_it(
    node: Callable[[], RedisBackend], options: dict[str, Any]
) -> None:
    # given two stores of a queue with settings of its own
    lean, general = node(), node()
    for b in (lean, general):
        b.queues_configure(QueueConfig("q", max_attempts=3, backoff='{"kind":"linear"}'))
    # when one plain job is inserted alone on one, and with another job on the other
    (one,) = insert(lean, new(**options))
    two, _ = insert(general, new(**options), new())
    # then the lean script wrote it, as the general one wrote its twin
    assert ran(lean)[-1] == ONE and ran(general)[-1] == "jobs_insert"
    same(stored(lean, one), stored(general, two))
    assert lean.client.llen(lean.keys.wake("q")) == 1
    # and a claim of each store takes it alike, once due
    for b in (lean, general):
        b.clock.advance(60.0)  # type: ignore[attr-defined]
    (a,) = lean.jobs_claim(JobsClaimParams("w", ["q"], 5))
    (b,) = [c for c in general.jobs_claim(JobsClaimParams("w", ["q", "x"], 5)) if c.id == two]
    assert ran(lean)[-1] == CLAIM_ONE and ran(general)[-1] == "jobs_claim"
    assert (a.id, a.token.split(".")[1]) == (one, one.split(":")[1])
    assert replace(a, id="", token="") == replace(b, id="", token="")
    same(stored(lean, one), stored(general, two))


def test_the_lean_claim_takes_what_the_general_claim_would(
    node: Callable[[], RedisBackend],
) -> None:
    # given the same jobs in two stores: priorities, equal run_at values, a delayed one, and a
    # stale ready entry (its job deleted behind the store's back)
    lean, general = node(), node()
    jobs = [new(priority=p, delay=d) for p, d in [(0, 0), (5, 0), (0, 0), (5, 60), (-1, 0)]]
    for b in (lean, general):
        ids = [insert(b, j)[0] for j in jobs]
        b.client.delete(b.keys.tag("q") + ":job:" + ids[2].split(":")[1])
    # when each store is claimed two at a time
    for _ in range(3):
        a = [c.id for c in lean.jobs_claim(JobsClaimParams("w", ["q"], 2))]
        b = [c.id for c in general.jobs_claim(JobsClaimParams("w", ["q", "other"], 2))]
        # then both claim the same jobs in the same order (the stale entry counted, dropped)
        assert a == b
    assert ran(lean).count(CLAIM_ONE) == 3 and CLAIM_ONE not in ran(general)
    # and both are left alike: the delayed job pending, the emptied levels gone from prios
    for b in (lean, general):
        base = b.keys.tag("q") + ":"
        assert b.client.zrange(base + "pending", 0, -1) == ["4"]
        assert b.client.zrange(base + "prios", 0, -1) == ["5"]


def test_the_lean_insert_refuses_a_full_queue_having_written_nothing(
    node: Callable[[], RedisBackend],
) -> None:
    backend = node()
    backend.queues_configure(QueueConfig("q", max_pending=1))
    insert(backend, new())
    with pytest.raises(QueueFull):
        insert(backend, new())
    assert ran(backend)[-1] == ONE
    assert backend.client.get(backend.keys.seq) == "1"


def test_a_queue_fed_with_a_time_to_live_goes_to_the_general_insert_and_lapses(
    node: Callable[[], RedisBackend],
) -> None:
    # given a queue fed with a time to live that nobody fed since
    backend = node()
    backend.jobs_insert(JobsInsertParams([new("feed")]), queue_ttl=0.05)
    alive = backend.keys.queue("feed")[12]
    wait_until(lambda: backend.client.exists(alive) == 0, what="the queue to lapse")
    # when one plain job is inserted alone
    (job,) = insert(backend, new("feed"))
    # then the lean script handed it to the general one, which let the queue lapse first
    assert ran(backend)[-2:] == [ONE, "jobs_insert"]
    claimed = backend.jobs_claim(JobsClaimParams("w", ["feed"], 10))
    assert [c.id for c in claimed] == [job]
    # and the next insert of that queue goes to the general script at once
    insert(backend, new("feed"))
    assert ran(backend)[-1] == "jobs_insert" and ran(backend)[-2] != ONE


def test_a_fair_queue_goes_to_the_general_insert_and_claim(
    node: Callable[[], RedisBackend],
) -> None:
    backend = node()
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    (job,) = insert(backend, new())
    assert ran(backend)[-2:] == [ONE, "jobs_insert"]
    assert stored(backend, job)["hash"]["turn"] == "1"  # the job took its turn (turns count from 1)
    (got,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert got.id == job and ran(backend)[-2:] == [CLAIM_ONE, "jobs_claim"]


def test_a_key_limit_goes_to_the_general_claim(node: Callable[[], RedisBackend]) -> None:
    # given a queue of one running job per key, and two due jobs of one key
    backend = node()
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_concurrency=1)))
    insert(backend, new(key="a"), new(key="a"))
    # when it is claimed, the lean script hands the claim over, and the gate holds
    got = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert ran(backend)[-2:] == [CLAIM_ONE, "jobs_claim"]
    assert len(got) == 1


def test_a_rate_alone_is_claimed_by_the_lean_script(node: Callable[[], RedisBackend]) -> None:
    # given a queue whose own rate admits one start a minute, and two due jobs
    backend = node()
    backend.queues_configure(
        QueueConfig("q", limits=QueueLimits(rate=Rate(1, 60.0, 1)), max_concurrency=5)
    )
    insert(backend, new(), new())
    # when it is claimed twice, the lean script takes one job, then none, and says when the
    # bucket admits a start again
    got = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert len(got) == 1 and got.next_open is not None and 59 < got.next_open <= 60
    again = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert len(again) == 0 and again.next_open is not None and 58 < again.next_open <= 60
    assert "jobs_claim" not in ran(backend)


def test_a_paused_or_busy_queue_is_claimed_by_the_lean_script(
    node: Callable[[], RedisBackend],
) -> None:
    # given a queue of at most two running jobs, and three due
    backend = node()
    backend.queues_configure(QueueConfig("q", max_concurrency=2))
    insert(backend, new(), new(), new())
    # then the lean claim takes two, then none; paused, none either
    assert len(backend.jobs_claim(JobsClaimParams("w", ["q"], 10))) == 2
    assert len(backend.jobs_claim(JobsClaimParams("w", ["q"], 10))) == 0
    backend.queues_configure(QueueConfig("q", paused=True))
    assert len(backend.jobs_claim(JobsClaimParams("w", ["q"], 10))) == 0
    assert set(ran(backend)) >= {CLAIM_ONE} and "jobs_claim" not in ran(backend)


def test_a_corrupt_record_is_failed_by_the_general_claim(
    node: Callable[[], RedisBackend],
) -> None:
    # given two due jobs, the first one's record corrupted behind the store's back
    backend = node()
    bad, good = insert(backend, new(), new())
    backend.client.hset(backend.keys.tag("q") + ":job:" + bad.split(":")[1], "priority", "x")
    # when the queue is claimed
    (got,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    # then the lean script handed over, and the general claim failed the corrupt record alone
    assert ran(backend)[-2:] == [CLAIM_ONE, "jobs_claim"]
    record = backend.jobs_get(bad)
    assert got.id == good and record is not None and record.status == "failed"
    assert "corrupt job record" in (record.error or "")
