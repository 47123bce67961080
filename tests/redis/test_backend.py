"""What only the Redis backend has: its key layout and slots, ids that name their queue, the
claims set the watchdog reads, retention by expiry, queues that lapse, Redis's own clock, and the
Cluster paths (several queues in one claim or insert). Each test runs on one node and on the
session's 3-node cluster."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redis.crc import key_slot

import jobyard
from jobyard.backends.base import (
    AT_MOST_ONCE_LOST_ERROR,
    PRIORITY_MIN,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsInsertParams,
    JobsListParams,
    JobsWaitParams,
    LeasesLapsedParams,
    LeasesRenewParams,
    Outcome,
    QueueConfig,
    QueueLimits,
    Schedule,
    SchedulesFireParams,
    SchedulesSyncParams,
    StatsParams,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.backends.redis.keys import QUEUE_KEY_SUFFIXES, parse_job_id
from jobyard.clock import FrozenClock, SystemClock
from jobyard.worker.reaper import reap
from tests.conftest import wait_until
from tests.redis import support
from tests.redis.conftest import T0, insert, new, url_for


def claim(backend: RedisBackend, limit: int = 10, queues: tuple[str, ...] = ("q",)) -> Any:
    return backend.jobs_claim(JobsClaimParams("w1", queues, limit))


def keys_of(backend: RedisBackend) -> list[str]:
    return sorted(backend.client.scan_iter(match=backend.keys.pattern(), count=1000))


def test_every_key_of_a_queue_shares_its_hash_tag(backend: RedisBackend) -> None:
    # given a queue that went through every state
    backend.queues_configure(QueueConfig("q", max_concurrency=5))
    *_, c = insert(backend, new(priority=3, idempotency_key="k"), new(), new(delay=60))
    x, y = claim(backend, 2)
    backend.jobs_ack(JobsAckParams([Outcome(x.id, x.token, "completed", result="1")]))
    backend.jobs_ack(JobsAckParams([Outcome(y.id, y.token, "failed", error="e")]))
    backend.jobs_cancel(JobsCancelParams(c))
    # then every key is either global ({prefix}) or carries the queue's tag ({prefix:q})
    tag, glob = backend.keys.tag("q"), "{" + backend.keys.prefix + "}"
    found = keys_of(backend)
    assert any(k.startswith(tag + ":job:") for k in found)
    assert all(k.startswith((tag + ":", glob + ":")) for k in found), found
    slots = {key_slot(k.encode()) for k in found if k.startswith(tag)}
    assert slots == {key_slot(tag.encode())}


def test_job_ids_name_their_queue_and_grow_across_queues(backend: RedisBackend) -> None:
    ids = insert(backend, new("emails"), new("reports:daily"), new("emails"))
    parsed = [parse_job_id(i) for i in ids]
    assert [p[0] for p in parsed if p] == ["emails", "reports:daily", "emails"]
    numbers = [int(p[1]) for p in parsed if p]
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    assert backend.jobs_get("emails:0") is None and backend.jobs_get("{x}:1") is None


def test_the_claims_set_holds_the_lease_and_the_watchdog_reads_it(
    backend: RedisBackend, clock: FrozenClock, raw: Any
) -> None:
    (job_id,) = insert(backend, new(lease=5))
    n = job_id.rsplit(":", 1)[1]
    claims = backend.keys.queue("q")[2]
    (c,) = claim(backend)
    assert float(raw.zscore(claims, n)) == pytest.approx(T0 + 5)
    clock.advance(3)
    assert backend.leases_renew(LeasesRenewParams("w1", [(c.id, c.token)])).lost == []
    assert float(raw.zscore(claims, n)) == pytest.approx(T0 + 8)
    clock.advance(5)  # exactly at expiry: still held
    assert reap(backend) == []
    clock.advance(0.5)
    assert [r.status for r in reap(backend)] == ["pending"]
    assert raw.zscore(claims, n) is None
    clock.advance(1.0)  # past the backoff of attempt 1 (the default policy: at most 1 s)
    assert [j.id for j in claim(backend)] == [job_id]


def test_the_lapsed_read_drops_a_dangling_claim_and_frees_its_key_slot(
    backend: RedisBackend, clock: FrozenClock, raw: Any
) -> None:
    # given a keyed job of a queue with a key_concurrency, claimed, whose hash then says it is
    # no longer running (a hand edit): its claims entry and key slot are left dangling
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(key_concurrency=1)))
    (job_id,) = insert(backend, new(lease=5, key="k"))
    claim(backend)
    tag, n = backend.keys.tag("q"), job_id.rsplit(":", 1)[1]
    assert raw.hget(f"{tag}:keyrun", "q\nk") == "1"
    raw.hset(backend.keys.job("q", n), "status", "completed")
    clock.advance(6)
    # when the reaper reads the lapsed leases
    assert backend.leases_lapsed(LeasesLapsedParams()) == []
    # then no lease is left to decide on, and the key's slot is free for its next job
    assert raw.zscore(backend.keys.queue("q")[2], n) is None
    assert not raw.hexists(f"{tag}:keyrun", "q\nk")
    (other,) = insert(backend, new(key="k"))
    assert [c.id for c in claim(backend)] == [other]


def test_an_at_most_once_job_leaves_the_queue_when_claimed(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    (job_id,) = insert(backend, new(delivery="at_most_once", lease=1, max_attempts=5))
    (c,) = claim(backend)
    assert c.delivery == "at_most_once"
    assert backend.jobs_list(JobsListParams(status="pending")) == []
    clock.advance(2)  # its worker died mid-handler
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "failed")]
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.error, rec.attempts) == (AT_MOST_ONCE_LOST_ERROR, 1)


def test_the_store_clock_is_redis_time_unless_frozen(
    make_backend: Callable[..., RedisBackend],
) -> None:
    backend = make_backend(SystemClock())
    secs, micros = backend.client.time()
    redis_now = int(secs) + int(micros) / 1e6
    (job_id,) = insert(backend, new())
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.created_at == pytest.approx(redis_now, abs=2.0)
    assert backend.clock_now() == pytest.approx(redis_now, abs=2.0)


def test_completed_jobs_expire_and_failed_ones_are_kept(kind: str, clock: FrozenClock) -> None:
    # given a store that keeps completed jobs for an hour
    backend = RedisBackend(url_for(kind, result_ttl=3600), clock)
    try:
        done_id, failed_id = insert(backend, new(), new())
        done, failed = claim(backend, 2)
        backend.jobs_ack(
            JobsAckParams(
                [
                    Outcome(done.id, done.token, "completed", result="1"),
                    Outcome(failed.id, failed.token, "failed", error="e"),
                ]
            )
        )
        # then the completed job's hash expires with its result, the dead letter does not
        n_done, n_failed = (i.rsplit(":", 1)[1] for i in (done_id, failed_id))
        assert 3590 < backend.client.ttl(backend.keys.job("q", n_done)) <= 3600
        assert backend.client.ttl(backend.keys.job("q", n_failed)) == -1
        # and once the hour has passed, retention prunes its index entries too (the lease
        # reaper does not: it recovers leases only)
        clock.advance(3601)
        assert reap(backend) == []
        (stats,) = backend.stats_get(StatsParams())
        assert stats.counts["completed"] == 1
        assert backend.jobs_expire(JobsExpireParams()) == 1
        assert backend.jobs_get(done_id) is None
        (stats,) = backend.stats_get(StatsParams())
        assert (stats.counts["completed"], stats.counts["failed"]) == (0, 1)
        # and a re-driven dead letter keeps no expiry
        backend.jobs_retry(failed_id)
        assert backend.client.ttl(backend.keys.job("q", n_failed)) == -1
    finally:
        backend.close()


def test_a_queue_with_a_ttl_is_re_armed_at_every_push_and_lapses_when_unfed(
    backend: RedisBackend, raw: Any
) -> None:
    # given a queue fed with a 5 s time to live
    ttl = JobsInsertParams([new("feed")])
    backend.jobs_insert(ttl, queue_ttl=5.0)
    alive = backend.keys.queue("feed")[12]
    first = raw.pttl(alive)
    assert 0 < first <= 5000
    # when it is fed again, the expiry starts over
    wait_until(lambda: raw.pttl(alive) < first - 50, what="the ttl to run down a little")
    backend.jobs_insert(JobsInsertParams([new("feed")]), queue_ttl=5.0)
    assert raw.pttl(alive) > first - 50
    # when nobody feeds it for its ttl, it lapses with the jobs it holds
    backend.jobs_insert(JobsInsertParams([new("feed")]), queue_ttl=0.2)
    wait_until(lambda: raw.exists(alive) == 0, what="the queue to lapse")
    assert claim(backend, queues=("feed",)) == []
    assert backend.jobs_list(JobsListParams(queue="feed")) == []
    # and a queue without a ttl never lapses
    insert(backend, new("plain"))
    assert raw.exists(backend.keys.queue("plain")[11]) == 0


def test_one_claim_orders_jobs_across_queues(backend: RedisBackend) -> None:
    low = insert(backend, new("a", priority=1))[0]
    high = insert(backend, new("b", priority=7))[0]
    mid = insert(backend, new("c", priority=3))[0]
    assert [j.id for j in claim(backend, 2, ("a", "b", "c"))] == [high, mid]
    assert [j.id for j in claim(backend, 5, ("a", "b", "c"))] == [low]


def test_max_concurrency_holds_per_queue_within_a_multi_queue_claim(
    backend: RedisBackend,
) -> None:
    backend.queues_configure(QueueConfig("a", max_concurrency=1))
    insert(backend, new("a"), new("a"), new("b"), new("b"))
    assert sorted(j.queue for j in claim(backend, 10, ("a", "b"))) == ["a", "b", "b"]


def test_a_full_queue_refuses_a_batch_spanning_queues(backend: RedisBackend) -> None:
    backend.queues_configure(QueueConfig("small", max_pending=1))
    with pytest.raises(jobyard.QueueFull, match="small"):
        insert(backend, new("big"), new("small"), new("small"))
    assert backend.jobs_list(JobsListParams()) == []


def test_concurrent_inserts_of_one_key_create_one_job(
    make_backend: Callable[..., RedisBackend],
) -> None:
    backends = [make_backend() for _ in range(6)]
    barrier = threading.Barrier(len(backends))
    results: list[jobyard.backends.base.Inserted] = []
    lock = threading.Lock()

    def race(b: RedisBackend) -> None:
        barrier.wait()
        (got,) = b.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))
        with lock:
            results.append(got)

    threads = [threading.Thread(target=race, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len({r.id for r in results}) == 1 and sum(r.created for r in results) == 1


def test_wake_tokens_stay_few_and_one_insert_wakes_a_waiter(
    kind: str, make_backend: Callable[..., RedisBackend]
) -> None:
    name = f"waiter-{uuid.uuid4().hex[:8]}"
    url = url_for(kind, client_name=name)
    backend = make_backend(at=url)
    insert(backend, *[new() for _ in range(100)])
    assert backend.client.llen(backend.keys.wake("q")) <= 16
    while backend.jobs_wait(JobsWaitParams(["q"], 0)):
        pass  # take the tokens
    woke: list[float] = []

    def wait() -> None:
        if backend.jobs_wait(JobsWaitParams(["other", "q"], 10)):
            woke.append(time.monotonic())

    def blocked() -> bool:
        conns = [c for p in support.server_ports(url) for c in support.connections(p, name)]
        return any(c.get("cmd") == "blpop" for c in conns)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(blocked, what="the waiter to block")
    sent = time.monotonic()
    insert(backend, new())
    t.join(10)
    assert woke and woke[0] - sent < 1.0


def test_the_lowest_priority_and_exact_float_times_round_trip(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    clock.set(1_712_345_678.123456)
    (job_id,) = insert(backend, new(priority=PRIORITY_MIN, delay=0.1))
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert rec.priority == PRIORITY_MIN
    assert rec.created_at == clock.now() and rec.run_at == clock.now() + 0.1


def test_a_schedule_stored_by_an_older_version_still_lists_and_fires(
    backend: RedisBackend,
) -> None:
    # given a schedule hash as versions before NewJob.to_json wrote it (a positional job list)
    job = new(name="ping", priority=2, max_attempts=3, lease=10.0)
    backend.schedules_sync(SchedulesSyncParams([Schedule("ping", "* * * * *", job, True, T0)]))
    legacy = json.dumps(
        ["ping", job.payload, 2, 3, None, None, 10.0, "at_least_once", None, None],
        separators=(",", ":"),
    )
    backend.client.hset(backend.keys.schedule("q", "ping"), "job", legacy)

    # when it is listed and its tick fires
    (stored,) = backend.schedules_list()
    inserted = backend.schedules_fire(SchedulesFireParams("ping", T0, T0 + 60))

    # then both read the old form as the same job
    assert stored.job == job
    assert inserted is not None
    rec = backend.jobs_get(inserted.id)
    assert rec is not None
    assert (rec.name, rec.priority, rec.max_attempts, rec.idempotency_key) == (
        "ping",
        2,
        3,
        f"cron:ping:{T0!r}",
    )


# --- corrupt job hashes met after the claim --------------------------------------------------


def test_a_record_corrupted_while_running_fails_alone_in_ack_renew_and_reap(
    backend: RedisBackend, clock: FrozenClock, raw: Any
) -> None:
    # given four running jobs of one claim
    ids = insert(backend, *(new(lease=10) for _ in range(4)))
    a, b, c, d = claim(backend, 4)
    key = {j.id: backend.keys.job("q", j.id.rsplit(":", 1)[1]) for j in (a, b, c, d)}
    # when a retry meets a priority that is not a number, its neighbour in the batch retries
    raw.hset(key[a.id], "priority", "high")
    refused = backend.jobs_ack(
        JobsAckParams([Outcome(a.id, a.token, "retry", error="e"), Outcome(b.id, b.token, "retry")])
    )
    assert refused == []
    bad = backend.jobs_get(a.id)
    assert bad is not None and bad.status == "failed"
    assert bad.error == 'corrupt job record: field priority is not an integer: "high"'
    assert backend.jobs_get(b.id).status == "pending"  # type: ignore[union-attr]
    # a heartbeat meeting a lease that is gone loses that job alone, and fails it
    raw.hdel(key[c.id], "lease")
    lost = backend.leases_renew(LeasesRenewParams("w1", [(c.id, c.token), (d.id, d.token)])).lost
    assert lost == [c.id]
    assert backend.jobs_get(c.id).error == "corrupt job record: field lease missing"  # type: ignore[union-attr]
    # the watchdog meeting max_attempts "x" on a lapsed lease fails it, and counts it failed
    raw.hset(key[d.id], "max_attempts", "x")
    clock.advance(60)
    assert [(r.id, r.status) for r in reap(backend)] == [(d.id, "failed")]
    counts = backend.stats_get(StatsParams(["q"]))[0].counts
    assert counts["failed"] == 3 and counts["pending"] == 1 and counts["running"] == 0
    assert len(ids) == 4


def test_cancel_and_retry_of_a_corrupt_record_answer_without_breaking_the_queue(
    backend: RedisBackend, raw: Any
) -> None:
    # given a pending job whose priority was deleted
    pending, failed, healthy = insert(backend, new(), new(), new())
    raw.hdel(backend.keys.job("q", pending.rsplit(":", 1)[1]), "priority")
    # then it still cancels
    assert backend.jobs_cancel(JobsCancelParams(pending)).status == "cancelled"
    # and a failed job whose priority turned to text is refused a retry, with the reason
    (f, _) = claim(backend, 2)
    assert f.id == failed
    backend.jobs_ack(JobsAckParams([Outcome(f.id, f.token, "failed", error="e")]))
    raw.hset(backend.keys.job("q", failed.rsplit(":", 1)[1]), "priority", "x")
    with pytest.raises(jobyard.InvalidTransition, match="corrupt job record: field priority"):
        backend.jobs_retry(failed)
    assert backend.jobs_get(failed).status == "failed"  # type: ignore[union-attr]
    assert backend.jobs_get(healthy).status == "running"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://127.0.0.1:6379/abc", "must be a number"),
        ("redis://127.0.0.1:6379/1.5", "must be a number"),
        ("redis://127.0.0.1:6379/99999999", "must be a number"),
        ("redis+cluster://127.0.0.1:7000/3", "database 0 only"),
    ],
)
def test_a_database_that_is_not_a_number_is_refused(url: str, why: str) -> None:
    app = jobyard.App(url)
    with pytest.raises(jobyard.ConfigurationError, match=why):
        app.backend  # noqa: B018 - opening the store is the point
    app.close()


def test_a_completed_job_is_stored_compact_and_still_shown_in_full(
    backend: RedisBackend, raw: Any, clock: FrozenClock
) -> None:
    # given a job with every option, run to completion
    (job_id,) = insert(
        backend,
        new(priority=3, timeout=9.0, lease=12.0, backoff='{"kind":"fixed"}', parent_id="x-1"),
    )
    (delayed_id,) = insert(backend, new(delay=5.0))
    claimed = claim(backend)
    before = backend.jobs_get(job_id)
    clock.advance(5.0)
    claimed += claim(backend)
    backend.jobs_ack(JobsAckParams([Outcome(j.id, j.token, "completed", "42") for j in claimed]))
    # then what only a next attempt reads is gone from its hash
    queue, number = parse_job_id(job_id)  # type: ignore[misc]
    stored = raw.hgetall(backend.keys.job(queue, number))
    assert not {"lease", "backoff", "timeout", "run_at", "token"} & set(stored)
    # and the record shows everything the API promises
    rec = backend.jobs_get(job_id)
    assert rec is not None and before is not None
    assert (rec.status, rec.result, rec.priority, rec.parent_id) == ("completed", "42", 3, "x-1")
    assert (rec.run_at, rec.created_at, rec.started_at) == (
        before.run_at,
        before.created_at,
        before.started_at,
    )
    assert rec.finished_at == pytest.approx(T0 + 5.0, abs=0.001)
    # a delayed job keeps its own run_at
    delayed = backend.jobs_get(delayed_id)
    assert delayed is not None and delayed.run_at == pytest.approx(T0 + 5.0, abs=0.001)
    assert delayed.created_at == pytest.approx(T0, abs=0.001)


def test_a_queue_retention_overrides_the_store_default(kind: str, clock: FrozenClock) -> None:
    # given a store keeping completed jobs a day, and a queue that keeps them a minute
    backend = RedisBackend(url_for(kind), clock)
    try:
        backend.queues_configure(QueueConfig("brief", retention=60))
        short_id, day_id = insert(backend, new("brief"), new("q"))
        jobs = claim(backend, 2, ("brief", "q"))
        backend.jobs_ack(JobsAckParams([Outcome(j.id, j.token, "completed") for j in jobs]))
        # then each completed job's hash expires after its queue's retention
        n_short, n_day = (i.rsplit(":", 1)[1] for i in (short_id, day_id))
        assert 50 < backend.client.ttl(backend.keys.job("brief", n_short)) <= 60
        assert 86390 < backend.client.ttl(backend.keys.job("q", n_day)) <= 86400
        # and retention prunes by it
        clock.advance(61)
        assert backend.jobs_expire(JobsExpireParams()) == 1
        assert backend.jobs_get(short_id) is None
        assert backend.jobs_get(day_id) is not None
        assert [q.retention for q in backend.queues_list()] == [60.0]
    finally:
        backend.close()


def idem_of(backend: RedisBackend) -> str:
    """The hash of queue "q" that maps each held idempotency key to its job's number."""
    return backend.keys.queue("q")[QUEUE_KEY_SUFFIXES.index("idem")]


def end_keyed_job(backend: RedisBackend, clock: FrozenClock, raw: Any, how: str) -> str:
    """Insert a job holding the key "k1" and end it ``how``; returns the status it ended in."""
    options: dict[str, Any] = {"idempotency_key": "k1", "lease": 5.0}
    if how == "reap-at-most-once":
        options["delivery"] = "at_most_once"
    if how == "reap-attempts-spent":
        options["max_attempts"] = 1
    (job_id,) = insert(backend, new(**options))
    assert raw.hgetall(idem_of(backend)) == {"k1": parse_job_id(job_id)[1]}
    if how == "cancel-pending":
        return backend.jobs_cancel(JobsCancelParams(job_id, by="ops")).status
    if how == "claim-corrupt":  # the claim meets a record it cannot run, and fails it
        raw.hset(backend.keys.job("q", parse_job_id(job_id)[1]), "lease", "-5")
        assert claim(backend) == []
        return backend.jobs_get(job_id).status  # type: ignore[union-attr]
    (job,) = claim(backend)
    if how.startswith("ack-"):
        kind = how.removeprefix("ack-")
        assert backend.jobs_ack(JobsAckParams([Outcome(job.id, job.token, kind)])) == []  # type: ignore[arg-type]
        return kind
    if how == "reap-cancel-lost":
        backend.jobs_cancel(JobsCancelParams(job_id, by="ops"))
    clock.advance(10)
    (reaped,) = reap(backend)
    return reaped.status


@pytest.mark.parametrize(
    ("how", "ends"),
    [
        ("ack-completed", "completed"),
        ("ack-failed", "failed"),
        ("ack-cancelled", "cancelled"),
        ("cancel-pending", "cancelled"),
        ("claim-corrupt", "failed"),
        ("reap-attempts-spent", "failed"),
        ("reap-at-most-once", "failed"),
        ("reap-cancel-lost", "cancelled"),
    ],
)
def test_a_finished_job_gives_its_idempotency_key_back(
    backend: RedisBackend, clock: FrozenClock, raw: Any, how: str, ends: str
) -> None:
    # The contract suite cannot see this on Redis (test_idempotency_key_scope_is_pending_and_
    # running): every reader of the key's entry checks that its holder is still pending or
    # running, so an entry left behind behaves as a free key. It would be a leak: one entry
    # per keyed job ever run, kept after the job itself expired.
    idem = idem_of(backend)
    # given a job holding a key, which then ends in one of the ways a job can end
    assert end_keyed_job(backend, clock, raw, how) == ends
    # then the key's entry is gone with it: a finished job holds no key
    assert raw.hgetall(idem) == {}
    # and the key is free again
    (again,) = backend.jobs_insert(JobsInsertParams([new(idempotency_key="k1")]))
    assert again.created
    assert raw.hget(idem, "k1") == parse_job_id(again.id)[1]
