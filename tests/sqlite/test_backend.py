"""The SQLite backend method by method, against a real database file in one process."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import pytest

from jobyard.backends.base import (
    AT_MOST_ONCE_LOST_ERROR,
    LEASE_LOST_ERROR,
    Backend,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    JobsPurgeParams,
    LeasesRenewParams,
    Outcome,
    QueueConfig,
    StatsParams,
    WorkerInfo,
    WorkersBeatParams,
)
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import FrozenClock, SystemClock
from jobyard.errors import (
    ConfigurationError,
    DuplicateJob,
    InvalidTransition,
    JobNotFound,
    JobyardError,
    QueueFull,
)
from jobyard.worker.reaper import reap

from .conftest import PAYLOAD, T0, insert, new


def claim(
    backend: SQLiteBackend, limit: int = 10, queues: tuple[str, ...] = ("q",), worker: str = "w1"
):  # type: ignore[no-untyped-def]
    return backend.jobs_claim(JobsClaimParams(worker, queues, limit))


def ack(backend: SQLiteBackend, *outcomes: Outcome) -> list[str]:
    return backend.jobs_ack(JobsAckParams(list(outcomes)))


def status(backend: SQLiteBackend, job_id: str) -> str:
    rec = backend.jobs_get(job_id)
    assert rec is not None
    return rec.status


# --- the protocol ----------------------------------------------------------------------------


def test_it_is_a_backend(backend: SQLiteBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.url.startswith("sqlite:///")


# --- jobs_insert -------------------------------------------------------------------------------


def test_insert_fills_defaults_from_the_queue_then_the_library(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    # given a queue with its own max_attempts and backoff
    backend.queues_configure(QueueConfig("q", max_attempts=7, backoff='{"kind":"fixed"}'))
    # when jobs with and without their own settings are inserted
    own, queue_default, other_queue, delayed, at = insert(
        backend,
        new(max_attempts=2, backoff='{"kind":"linear"}', timeout=5.0, lease=9.0),
        new(),
        new(queue="other"),
        new(delay=30.0),
        new(run_at=T0 + 99.5, delay=30.0),
    )
    # then the job's own settings win, then the queue's, then the defaults
    recs = {i: backend.jobs_get(i) for i in (own, queue_default, other_queue, delayed, at)}
    assert recs[own] is not None and recs[own].max_attempts == 2
    assert recs[queue_default] is not None and recs[queue_default].max_attempts == 7
    assert recs[other_queue] is not None and recs[other_queue].max_attempts == 4
    for rec in recs.values():
        assert rec is not None
        assert (rec.status, rec.attempts, rec.created_at) == ("pending", 0, T0)
        assert (rec.started_at, rec.finished_at, rec.worker_id, rec.result) == (None,) * 4
    assert recs[delayed] is not None and recs[delayed].run_at == T0 + 30.0
    assert recs[at] is not None and recs[at].run_at == T0 + 99.5  # run_at wins over delay
    # and the backoff, timeout and lease travel with the claim
    clock.advance(100)
    claimed = {c.id: c for c in claim(backend, queues=("q", "other"))}
    assert (claimed[own].backoff, claimed[own].timeout, claimed[own].lease) == (
        '{"kind":"linear"}',
        5.0,
        9.0,
    )
    assert claimed[queue_default].backoff == '{"kind":"fixed"}'
    assert claimed[other_queue].backoff is None


def test_ids_are_numeric_strings_increasing_in_enqueue_order(backend: SQLiteBackend) -> None:
    first = insert(backend, *(new() for _ in range(50)))
    second = insert(backend, new(), new())
    ids = [int(i) for i in first + second]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_insert_of_nothing_is_nothing(backend: SQLiteBackend) -> None:
    assert backend.jobs_insert(JobsInsertParams([])) == []


def test_a_caller_connection_is_refused(backend: SQLiteBackend) -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        backend.jobs_insert(JobsInsertParams([new()], connection=object()))
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        backend.jobs_ack(JobsAckParams([], connection=object()))


def test_idempotency_key_returns_the_holder_until_it_finishes(backend: SQLiteBackend) -> None:
    # given a pending job holding a key
    (held,) = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))
    assert held.created
    # when the key comes again, in one batch twice, and in another queue
    again = backend.jobs_insert(
        JobsInsertParams(
            [
                new(idempotency_key="order-7"),
                new(idempotency_key="order-8"),
                new(idempotency_key="order-8"),
                new(queue="elsewhere", idempotency_key="order-7"),
            ]
        )
    )
    # then the holders are returned and nothing else is written for them
    assert [(i.id, i.created) for i in again[:1]] == [(held.id, False)]
    assert again[1].created and (again[2].id, again[2].created) == (again[1].id, False)
    assert again[3].created and again[3].id != held.id  # keys are scoped to a queue
    assert len(backend.jobs_list(JobsListParams(queue="q"))) == 2
    # and the key stays held while its job runs
    (c,) = claim(backend, limit=1)
    assert c.id == held.id
    assert not backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0].created
    # once it ends, the key is free
    ack(backend, Outcome(c.id, c.token, "completed", result="1"))
    fresh = backend.jobs_insert(JobsInsertParams([new(idempotency_key="order-7")]))[0]
    assert fresh.created and fresh.id != held.id


def test_queue_full_refuses_the_whole_batch(backend: SQLiteBackend) -> None:
    # given a queue that holds at most 3 pending jobs, 2 of them pending
    backend.queues_configure(QueueConfig("q", max_pending=3))
    insert(backend, new(), new())
    # when a batch would take it to 4
    with pytest.raises(QueueFull) as refused:
        backend.jobs_insert(JobsInsertParams([new(queue="other"), new(), new()]))
    # then nothing of the batch was written, not even the other queue's job
    assert (refused.value.queue, refused.value.max_pending) == ("q", 3)
    assert len(backend.jobs_list(JobsListParams())) == 2
    # and a batch that fits goes in; keys that dedupe do not count
    ids = insert(backend, new(idempotency_key="k"), new(idempotency_key="k"))
    assert ids[0] == ids[1]
    with pytest.raises(QueueFull):
        insert(backend, new())
    # running and delayed jobs: only pending ones count, delayed ones included
    claim(backend, limit=1)
    insert(backend, new(delay=60))
    with pytest.raises(QueueFull):
        insert(backend, new())


# --- jobs_claim ---------------------------------------------------------------------------------


def test_claim_order_across_queues_is_priority_then_run_at_then_id(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    a_early = insert(backend, new(queue="a", delay=-5))[0]
    b_low, a_low = insert(backend, new(queue="b"), new(queue="a"))
    b_high = insert(backend, new(queue="b", priority=9))[0]
    insert(backend, new(queue="a", priority=99, delay=10))  # not due
    insert(backend, new(queue="c", priority=100))  # not asked for
    got = [c.id for c in claim(backend, limit=10, queues=("a", "b"))]
    assert got == [b_high, a_early, b_low, a_low]


def test_claim_honours_limit_and_never_hands_a_job_out_twice(backend: SQLiteBackend) -> None:
    ids = insert(backend, *(new() for _ in range(7)))
    first = claim(backend, limit=3)
    second = claim(backend, limit=10, worker="w2")
    assert [c.id for c in first + second] == ids
    assert claim(backend) == []
    assert len({c.token for c in first + second}) == 7
    assert all(c.attempts == 1 for c in first + second)
    assert claim(backend, limit=0) == [] and claim(backend, queues=()) == []


def test_claim_marks_running_with_a_lease(backend: SQLiteBackend, clock: FrozenClock) -> None:
    (job_id,) = insert(backend, new(lease=12.5, parent_id="77"))
    clock.advance(1)
    (c,) = claim(backend, worker="host:1:abc")
    assert (c.id, c.attempts, c.max_attempts, c.lease, c.parent_id) == (job_id, 1, 4, 12.5, "77")
    assert (c.name, c.queue, c.payload, c.delivery) == ("task", "q", PAYLOAD, "at_least_once")
    rec = backend.jobs_get(job_id)
    assert rec is not None
    assert (rec.status, rec.worker_id, rec.started_at) == ("running", "host:1:abc", T0 + 1)


def test_max_concurrency_counts_running_jobs_of_every_worker(backend: SQLiteBackend) -> None:
    backend.queues_configure(QueueConfig("q", max_concurrency=3))
    insert(backend, *(new() for _ in range(10)), *(new(queue="free") for _ in range(5)))
    assert len(claim(backend, limit=2, worker="w1")) == 2
    # the other worker gets the one slot left in q, and everything it asks of the free queue
    got = claim(backend, limit=10, queues=("q", "free"), worker="w2")
    in_q = [c for c in got if c.queue == "q"]
    assert len(in_q) == 1 and len(got) == 6
    assert claim(backend, limit=10, worker="w3") == []
    # a settled job frees its slot
    ack(backend, Outcome(in_q[0].id, in_q[0].token, "completed"))
    assert len(claim(backend, limit=10, worker="w3")) == 1


def test_a_paused_queue_hands_out_nothing(backend: SQLiteBackend) -> None:
    insert(backend, new())
    backend.queues_configure(QueueConfig("q", paused=True))
    assert claim(backend) == []
    backend.queues_configure(QueueConfig("q", paused=False))
    assert len(claim(backend)) == 1


def test_claim_with_the_store_clock_takes_due_jobs_only(
    open_backend: Callable[..., SQLiteBackend],
) -> None:
    backend = open_backend(SystemClock())
    before = time.time()
    due, _later = insert(backend, new(), new(delay=3600))
    rec = backend.jobs_get(due)
    assert rec is not None and before - 1 <= rec.created_at <= time.time() + 1
    assert [c.id for c in claim(backend)] == [due]


# --- jobs_ack and fencing -----------------------------------------------------------------------


def test_ack_applies_each_kind(backend: SQLiteBackend, clock: FrozenClock) -> None:
    done, retried, failed, released = insert(backend, *(new() for _ in range(4)))
    c = {j.id: j for j in claim(backend)}
    clock.advance(5)
    stale = ack(
        backend,
        Outcome(done, c[done].token, "completed", result='{"ok": true}'),
        Outcome(retried, c[retried].token, "retry", error="boom", delay=20.0),
        Outcome(failed, c[failed].token, "failed", error="dead"),
        Outcome(released, c[released].token, "release"),
    )
    assert stale == []
    recs = {i: backend.jobs_get(i) for i in c}
    r = recs[done]
    assert r is not None and (r.status, r.result, r.finished_at) == (
        "completed",
        '{"ok": true}',
        T0 + 5,
    )
    r = recs[retried]
    assert r is not None and (r.status, r.error, r.run_at, r.attempts) == (
        "pending",
        "boom",
        T0 + 25,
        1,
    )
    assert r.finished_at is None
    r = recs[failed]
    assert r is not None and (r.status, r.error, r.finished_at) == ("failed", "dead", T0 + 5)
    r = recs[released]
    assert r is not None and (r.status, r.run_at, r.attempts) == ("pending", T0 + 5, 0)


def test_stale_tokens_are_refused_and_change_nothing(backend: SQLiteBackend) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    # a wrong token, an unknown id, and an id that is not a number
    assert ack(
        backend,
        Outcome(job_id, "not-the-token", "completed"),
        Outcome("424242", c.token, "completed"),
        Outcome("x1", c.token, "failed"),
    ) == [job_id, "424242", "x1"]
    assert status(backend, job_id) == "running"
    # the right token works once: the same outcome again is stale (the token was cleared)
    assert ack(backend, Outcome(job_id, c.token, "completed")) == []
    assert ack(backend, Outcome(job_id, c.token, "failed", error="late")) == [job_id]
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.status, rec.error) == ("completed", None)


def test_unknown_outcome_kind_is_refused_before_anything_changes(backend: SQLiteBackend) -> None:
    a, b = insert(backend, new(), new())
    ca, cb = claim(backend)
    with pytest.raises(ValueError, match="unknown outcome"):
        ack(backend, Outcome(a, ca.token, "completed"), Outcome(b, cb.token, "explode"))  # type: ignore[arg-type]
    assert status(backend, a) == status(backend, b) == "running"


def test_an_error_text_with_lone_surrogates_is_stored_escaped(backend: SQLiteBackend) -> None:
    (job_id,) = insert(backend, new())
    (c,) = claim(backend)
    assert ack(backend, Outcome(job_id, c.token, "failed", error="bad \udcff bytes")) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None and rec.error == "bad \\udcff bytes"


def test_a_rescued_job_fences_out_its_first_worker(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    # given a job whose first worker stopped renewing its lease
    (job_id,) = insert(backend, new(lease=10))
    (first,) = claim(backend, worker="paused")
    clock.advance(11)
    assert [(r.id, r.status) for r in reap(backend)] == [(job_id, "pending")]
    clock.advance(1.0)  # past the backoff of attempt 1 (the default policy: at most 1 s)
    (second,) = claim(backend, worker="rescuer")
    assert second.attempts == 2 and second.token != first.token
    # when the first worker wakes up, its renewals and its outcome are refused
    renewed = backend.leases_renew(LeasesRenewParams("paused", [(job_id, first.token)]))
    assert renewed.lost == [job_id]
    assert ack(backend, Outcome(job_id, first.token, "completed", result='"first"')) == [job_id]
    # and the rescuer's outcome stands
    assert ack(backend, Outcome(job_id, second.token, "completed", result='"second"')) == []
    rec = backend.jobs_get(job_id)
    assert rec is not None and (rec.result, rec.worker_id, rec.attempts) == (
        '"second"',
        "rescuer",
        2,
    )


# --- leases ----------------------------------------------------------------------------------


def test_renew_pushes_the_lease_by_each_jobs_own_lease(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    short, long_ = insert(backend, new(lease=10), new(lease=100))
    c = {j.id: j for j in claim(backend)}
    clock.advance(8)
    assert backend.leases_renew(
        LeasesRenewParams("w1", [(short, c[short].token), (long_, c[long_].token), ("x", "t")])
    ).lost == ["x"]
    clock.advance(9)  # 17s after the claim, 9s after the renewal: both still held
    assert reap(backend) == []
    clock.advance(2)  # 11s after the renewal: the short lease lapsed
    assert [r.id for r in reap(backend)] == [short]


def test_reap_fails_jobs_without_attempts_left_and_at_most_once_jobs(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    again, spent, once = insert(
        backend, new(lease=5), new(lease=5, max_attempts=1), new(lease=5, delivery="at_most_once")
    )
    claim(backend)
    clock.advance(5)
    assert reap(backend) == []  # not lapsed at exactly the deadline
    clock.advance(1)
    reaped = reap(backend, 2)
    reaped += reap(backend, 2)
    assert sorted((r.id, r.status) for r in reaped) == sorted(
        [(again, "pending"), (spent, "failed"), (once, "failed")]
    )
    recs = {i: backend.jobs_get(i) for i in (again, spent, once)}
    r = recs[again]
    assert r is not None and (r.error, r.attempts, r.finished_at) == (LEASE_LOST_ERROR, 1, None)
    assert T0 + 6.5 <= r.run_at <= T0 + 7  # after the default backoff of attempt 1, jittered
    r = recs[spent]
    assert r is not None and (r.error, r.finished_at) == (LEASE_LOST_ERROR, T0 + 6)
    r = recs[once]
    assert r is not None and (r.error, r.finished_at) == (AT_MOST_ONCE_LOST_ERROR, T0 + 6)
    assert reap(backend) == []


# --- get, list, cancel, retry, purge -----------------------------------------------------------


def test_get_of_ids_that_cannot_exist_is_none(backend: SQLiteBackend) -> None:
    insert(backend, new())
    for job_id in ("", "abc", "1.0", " 1", "-1", "1e3", "٣", "9" * 40):
        assert backend.jobs_get(job_id) is None
    assert backend.jobs_get("1") is not None


def test_list_filters_and_pages_newest_first(backend: SQLiteBackend) -> None:
    ids = insert(
        backend, new(name="a"), new(name="b"), new(queue="r", name="a"), new(name="a"), new()
    )
    claim(backend, limit=1)  # ids[0] runs
    assert [r.id for r in backend.jobs_list(JobsListParams())] == ids[::-1]
    assert [r.id for r in backend.jobs_list(JobsListParams(name="a", queue="q"))] == [
        ids[3],
        ids[0],
    ]
    assert [r.id for r in backend.jobs_list(JobsListParams(status="running"))] == [ids[0]]
    assert [r.id for r in backend.jobs_list(JobsListParams(limit=2, offset=1))] == [ids[3], ids[2]]


def test_cancel_pending_jobs_and_ask_running_ones(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    running, pending = insert(backend, new(priority=1), new())
    assert [c.id for c in claim(backend, limit=1)] == [running]
    clock.advance(3)
    rec = backend.jobs_cancel(JobsCancelParams(pending, "me"))
    assert (rec.id, rec.status, rec.finished_at) == (pending, "cancelled", T0 + 3)
    assert (rec.cancel_requested_at, rec.cancelled_by) == (T0 + 3, "me")
    with pytest.raises(InvalidTransition, match="running"):
        backend.jobs_cancel(JobsCancelParams(running, pending_only=True))
    asked = backend.jobs_cancel(JobsCancelParams(running))
    assert (asked.status, asked.cancel_requested_at, asked.cancelled_by) == (
        "running",
        T0 + 3,
        None,
    )
    with pytest.raises(InvalidTransition, match="cancelled"):
        backend.jobs_cancel(JobsCancelParams(pending))
    for missing in ("999", "nope"):
        with pytest.raises(JobNotFound):
            backend.jobs_cancel(JobsCancelParams(missing))


def test_retry_redrives_finished_jobs_and_keeps_the_error(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    (job_id,) = insert(backend, new(max_attempts=1))
    (c,) = claim(backend)
    ack(backend, Outcome(job_id, c.token, "failed", error="boom"))
    clock.advance(7)
    rec = backend.jobs_retry(job_id)
    assert (rec.status, rec.attempts, rec.run_at, rec.finished_at, rec.error) == (
        "pending",
        0,
        T0 + 7,
        None,
        "boom",
    )
    with pytest.raises(InvalidTransition, match="pending"):
        backend.jobs_retry(job_id)
    with pytest.raises(JobNotFound):
        backend.jobs_retry("12345")
    # a cancelled job comes back too
    backend.jobs_cancel(JobsCancelParams(job_id))
    assert backend.jobs_retry(job_id).status == "pending"


def test_retry_refuses_a_key_held_by_another_job(backend: SQLiteBackend) -> None:
    (old,) = insert(backend, new(idempotency_key="k"))
    backend.jobs_cancel(JobsCancelParams(old))
    (holder,) = insert(backend, new(idempotency_key="k"))
    assert holder != old
    with pytest.raises(DuplicateJob, match=holder):
        backend.jobs_retry(old)
    assert status(backend, old) == "cancelled"


def test_purge_deletes_finished_jobs_by_age_status_and_queue(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    old_done, old_other, pending = insert(backend, new(), new(queue="r"), new(priority=-1))
    for c in claim(backend, limit=2, queues=("q", "r")):
        ack(backend, Outcome(c.id, c.token, "completed"))
    clock.advance(100)
    (new_cancel,) = insert(backend, new())
    backend.jobs_cancel(JobsCancelParams(new_cancel))
    with pytest.raises(ValueError, match="finished"):
        backend.jobs_purge(JobsPurgeParams(statuses=("completed", "pending")))
    assert backend.jobs_purge(JobsPurgeParams(statuses=())) == 0
    assert backend.jobs_purge(JobsPurgeParams(older_than=50, queue="q")) == 1
    assert backend.jobs_get(old_done) is None and backend.jobs_get(old_other) is not None
    assert backend.jobs_purge(JobsPurgeParams(statuses=("failed",))) == 0
    assert backend.jobs_purge(JobsPurgeParams()) == 2
    assert [r.id for r in backend.jobs_list(JobsListParams())] == [pending]


# --- corrupt rows --------------------------------------------------------------------------------


def test_corrupt_payloads_are_returned_as_text_never_raised(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    # given rows whose payload is not JSON, and one that is not even UTF-8
    not_json, not_utf8 = insert(backend, new(), new())
    raw.execute("UPDATE jobs SET payload = 'not json {' WHERE id = ?", (int(not_json),))
    raw.execute("UPDATE jobs SET payload = CAST(x'7b80ff' AS TEXT) WHERE id = ?", (int(not_utf8),))
    raw.execute("UPDATE jobs SET error = CAST(x'ff' AS TEXT) WHERE id = ?", (int(not_utf8),))
    # then every read hands them over as text
    rec = backend.jobs_get(not_json)
    assert rec is not None and rec.payload == "not json {"
    rec = backend.jobs_get(not_utf8)
    assert rec is not None and rec.payload == "{\ufffd\ufffd" and rec.error == "\ufffd"
    assert len(backend.jobs_list(JobsListParams())) == 2
    payloads = {c.id: c.payload for c in claim(backend)}
    assert payloads == {not_json: "not json {", not_utf8: "{\ufffd\ufffd"}


# --- queues, workers, stats --------------------------------------------------------------------


def test_queues_configure_replaces_the_whole_row(backend: SQLiteBackend) -> None:
    backend.queues_configure(QueueConfig("b", max_concurrency=2, max_pending=9, paused=True))
    backend.queues_configure(QueueConfig("a", max_attempts=3, backoff="{}"))
    backend.queues_configure(QueueConfig("b", max_concurrency=5))
    assert backend.queues_list() == [
        QueueConfig("a", max_attempts=3, backoff="{}"),
        QueueConfig("b", max_concurrency=5),
    ]


def test_workers_beat_registers_refreshes_forgets_and_removes(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    def info(wid: str) -> WorkerInfo:
        return WorkerInfo(wid, "host", 42, ("q", "r"), 8, T0, last_seen=0.0)

    backend.workers_beat(WorkersBeatParams(info("w1")))
    clock.advance(30)
    backend.workers_beat(WorkersBeatParams(info("w2")))
    assert [(w.id, w.last_seen, w.queues) for w in backend.workers_list()] == [
        ("w1", T0, ("q", "r")),
        ("w2", T0 + 30, ("q", "r")),
    ]
    clock.advance(40)  # w1 silent for 70s
    backend.workers_beat(WorkersBeatParams(info("w2")))
    assert [w.id for w in backend.workers_list()] == ["w2"]
    backend.workers_beat(WorkersBeatParams(info("w2"), stopping=True))
    assert backend.workers_list() == []


def test_stats_count_every_status_per_queue(backend: SQLiteBackend, clock: FrozenClock) -> None:
    backend.queues_configure(QueueConfig("idle"))
    insert(backend, *(new() for _ in range(4)), new(queue="r"))
    c = claim(backend, limit=3)
    ack(backend, Outcome(c[0].id, c[0].token, "completed"))
    clock.advance(61)
    ack(backend, Outcome(c[1].id, c[1].token, "completed"))
    stats = {s.queue: s for s in backend.stats_get(StatsParams())}
    assert list(stats) == ["idle", "q", "r"]
    assert stats["q"].counts == {
        "waiting": 0,
        "pending": 1,
        "running": 1,
        "completed": 2,
        "failed": 0,
        "cancelled": 0,
    }
    assert stats["q"].completed_last_minute == 1
    assert stats["idle"].counts == dict.fromkeys(stats["q"].counts, 0)
    assert [s.queue for s in backend.stats_get(StatsParams(queues=("r", "nope")))] == ["r"]


# --- threads and lifecycle ----------------------------------------------------------------------


def test_threads_claiming_together_never_share_a_job(
    backend: SQLiteBackend, clock: FrozenClock
) -> None:
    ids = insert(backend, *(new() for _ in range(300)))
    got: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def work(slot: int) -> None:
        start.wait(timeout=10)
        while batch := claim(backend, limit=3, worker=f"t{slot}"):
            got[slot].extend(c.id for c in batch)
            ack(backend, *(Outcome(c.id, c.token, "completed") for c in batch))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    claimed = [i for part in got for i in part]
    assert sorted(claimed, key=int) == ids
    assert sum(1 for part in got if part) > 1  # the threads really did share the work


def test_close_is_idempotent_and_final(backend: SQLiteBackend) -> None:
    insert(backend, new())
    backend.close()
    backend.close()
    with pytest.raises(JobyardError, match="closed"):
        backend.jobs_get("1")


def test_a_thread_that_ends_leaves_no_open_connection(backend: SQLiteBackend) -> None:
    def use() -> None:
        backend.jobs_get("1")

    for _ in range(5):
        t = threading.Thread(target=use)
        t.start()
        t.join()
    backend.jobs_get("1")  # opening nothing new: this thread's connection exists
    t = threading.Thread(target=use)  # a new thread's connection closes the dead ones'
    t.start()
    t.join()
    assert len(backend._conns._all) <= 2
