"""The claim's gate on Redis (``_gate.lua``): every key a limited queue keeps lives on the
queue's hash slot (a Cluster script may touch no other), the state a limit keeps is bounded
(rate buckets expire, key slots and turns are deleted once unused), and the Cluster claim's
probe of several queues goes through the same gate."""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot

from jobyard.backends.base import (
    FAIR_TURN,
    JobLimits,
    JobsAckParams,
    JobsClaimParams,
    LimitsSyncParams,
    Outcome,
    QueueConfig,
    QueueLimits,
    Rate,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from jobyard.worker.reaper import reap
from tests.redis.conftest import insert, new

LIMITS = QueueLimits(rate=Rate(1000), key_concurrency=1, key_rate=Rate(5), fair=True)


def claim(backend: RedisBackend, limit: int = 20, queues: tuple[str, ...] = ("q",)) -> Any:
    return backend.jobs_claim(JobsClaimParams("w1", queues, limit))


def complete(backend: RedisBackend, claimed: Any) -> None:
    outcomes = [Outcome(c.id, c.token, "completed", result="null") for c in claimed]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


def keys_of(raw: Any, backend: RedisBackend, queue: str) -> list[str]:
    tag = backend.keys.tag(queue)
    pattern = tag.replace("{", "\\{").replace("}", "\\}") + "*"
    if backend.cluster:
        return sorted(raw.scan_iter(match=pattern, target_nodes=raw.ALL_NODES))
    return sorted(raw.scan_iter(match=pattern))


def exercise(backend: RedisBackend) -> None:
    """Every limit of the gate, a job name's included, through claims, a completion and a
    lapsed lease."""
    backend.queues_configure(QueueConfig("q", max_concurrency=50, limits=LIMITS))
    sms = QueueLimits(rate=Rate(100), key_concurrency=2, key_rate=Rate(10))
    backend.limits_sync(LimitsSyncParams([JobLimits("q", "sms", sms)]))
    insert(backend, *[new(key=f"k{i % 4}", name="sms" if i % 2 else "task") for i in range(12)])
    insert(backend, new(), new(lease=1.0, key="lapsing"))
    complete(backend, claim(backend, 3))
    claim(backend)


def test_every_key_of_a_limited_queue_shares_its_hash_slot(
    backend: RedisBackend, raw: Any, clock: FrozenClock
) -> None:
    exercise(backend)
    clock.advance(5.0)
    reap(backend)
    keys = keys_of(raw, backend, "q")
    names = {k.rsplit(":", 1)[-1].split("\n")[0] for k in keys}
    assert {"keyrun", "turn", "joblimits", "config"} <= names, keys
    assert any(":tat:k:" in k for k in keys) and any(":tat:jk:sms" in k for k in keys)
    assert {key_slot(k.encode()) for k in keys} == {key_slot(backend.keys.tag("q").encode())}


def test_the_state_a_limit_keeps_goes_away_with_its_jobs(
    backend: RedisBackend, raw: Any, clock: FrozenClock
) -> None:
    # given a fair queue with key limits whose jobs all ran
    backend.queues_configure(QueueConfig("q", limits=LIMITS))
    insert(backend, *[new(key=f"tenant-{i}") for i in range(6)], new(), new(key="x", lease=1.0))
    claimed = claim(backend)
    assert len(claimed) == 8
    done = [c for c in claimed if backend.jobs_get(c.id).key != "x"]  # type: ignore[union-attr]
    complete(backend, done)
    clock.advance(5.0)  # the last one's worker died: the reaper frees its key slot
    assert len(reap(backend)) == 1
    clock.advance(1.0)  # past the backoff of attempt 1 (the default policy: at most 1 s)
    (again,) = claim(backend)
    complete(backend, [again])
    # then no key slot, turn or turn order is left; rate buckets expire by themselves
    tag = backend.keys.tag("q")
    assert raw.exists(f"{tag}:keyrun", f"{tag}:turn", f"{tag}:turns:0") == 0
    buckets = [k for k in keys_of(raw, backend, "q") if ":tat" in k]
    assert len(buckets) == 8  # the queue's and one per key
    assert all(0 < raw.pttl(k) <= 60_000 + 1_000 for k in buckets)


def test_the_cluster_probe_of_several_queues_goes_through_the_gate(
    backend: RedisBackend,
) -> None:
    backend.queues_configure(QueueConfig("a", limits=QueueLimits(rate=Rate(1, 10.0))))
    insert(backend, *[new("a") for _ in range(3)], *[new("b") for _ in range(3)])
    got = claim(backend, 10, queues=("a", "b"))
    assert sorted(c.queue for c in got) == ["a", "b", "b", "b"]
    assert got.next_open == pytest.approx(10.0, abs=0.01)
    again = claim(backend, 10, queues=("a", "b"))
    assert again == [] and again.next_open == pytest.approx(10.0, abs=0.01)


def test_a_fair_queue_serves_due_jobs_past_delayed_and_retried_ones(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    # given a fair queue where one tenant's many jobs are not due yet (delayed, or retried
    # with a backoff) and another's are
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key="A", delay=60.0) for _ in range(30)])
    insert(backend, *[new(key="R") for _ in range(3)])
    retried = claim(backend, 3)
    outcomes = [Outcome(c.id, c.token, "retry", error="e", delay=60.0) for c in retried]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []
    (b,) = insert(backend, new(key="B"))
    # when a worker claims one job, then it gets the due one
    assert [c.id for c in claim(backend, 1)] == [b]
    # and once the others are due they take turns, a round of up to FAIR_TURN jobs each
    clock.advance(61.0)
    got = claim(backend, 40)
    assert len(got) == 33
    keys = [backend.jobs_get(c.id).key for c in got]  # type: ignore[union-attr]
    assert keys[: FAIR_TURN + 4] == ["A"] * FAIR_TURN + ["R"] * 3 + ["A"]


def test_a_queue_made_fair_with_jobs_in_it_claims_them_all(backend: RedisBackend) -> None:
    insert(backend, *[new(key="A") for _ in range(5)], *[new(key="B") for _ in range(2)])
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    got = claim(backend, 10)
    assert len(got) == 7
    keys = [backend.jobs_get(c.id).key for c in got]  # type: ignore[union-attr]
    assert keys == ["A"] * FAIR_TURN + ["B", "B"] + ["A"] * (5 - FAIR_TURN)


def test_a_fair_queue_behind_a_staged_batch_still_claims_full_batches(
    backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a batch written in several calls (its jobs take their turns as claims find them)
    from jobyard.backends.redis import _insert

    monkeypatch.setattr(_insert, "SLICE_JOBS", 20)
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    insert(backend, *[new(key=f"t{i % 3}") for i in range(150)])
    # when a worker asks for 100, then it gets 100 (a short claim would make it wait a poll)
    got = claim(backend, 100)
    assert len(got) == 100
    assert [backend.jobs_get(c.id).key for c in got[:3]] == ["t0", "t1", "t2"]  # type: ignore[union-attr]
    assert len(claim(backend, 100)) == 50


def test_a_cancelled_fair_job_leaves_no_turn_behind(backend: RedisBackend, raw: Any) -> None:
    from jobyard.backends.base import JobsCancelParams

    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    a, b = insert(backend, new(key="A"), new(key="B"))
    backend.jobs_cancel(JobsCancelParams(b))
    (got,) = claim(backend)
    assert got.id == a
    tag = backend.keys.tag("q")
    assert raw.exists(f"{tag}:turn", f"{tag}:turns:0", f"{tag}:unturned:0") == 0
