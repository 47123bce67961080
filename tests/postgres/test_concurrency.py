"""Several processes (and threads) against one schema: idempotency keys, claims, concurrency
limits and racing state changes hold as they do for one caller."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from jobyard.backends.base import (
    LEASE_LOST_ERROR,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    LeasesLapsedParams,
    LeasesRenewParams,
    Outcome,
    QueueConfig,
)
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.clock import FrozenClock
from jobyard.worker.reaper import reap
from tests.postgres import _procs
from tests.postgres._procs import run_processes
from tests.postgres.conftest import insert, new


@pytest.mark.parametrize("target", [_procs.enqueue_keys, _procs.enqueue_batch])
def test_one_key_enqueued_by_four_processes_is_one_job(
    url: str, backend: PostgresBackend, target: Callable[..., None]
) -> None:
    keys = [f"order-{i}" for i in range(100)]
    reports = run_processes(target, url, keys)
    for key in keys:
        answers = {report[key] for report in reports}
        ids = {job_id for job_id, _ in answers}
        assert len(ids) == 1, (key, answers)  # every process was told the same job
        assert sum(created for _, created in answers) == 1  # and exactly one created it
    jobs = backend.jobs_list(JobsListParams(limit=1000))
    assert len(jobs) == len(keys)
    assert Counter(j.idempotency_key for j in jobs) == Counter(keys)


def test_four_claimers_never_share_a_job(
    url: str, open_backend: Callable[..., PostgresBackend]
) -> None:
    backend = open_backend()  # the children's clock: the database's
    total = 2000
    for _ in range(total // 500):
        insert(backend, *[new() for _ in range(500)])
    reports = run_processes(_procs.claim_until_empty, url, 7, True)
    claimed = [job_id for report in reports for job_id in report]
    assert len(claimed) == total and len(set(claimed)) == total
    recs = backend.jobs_list(JobsListParams(status="completed", limit=total))
    assert len(recs) == total and {r.attempts for r in recs} == {1}


def test_max_concurrency_holds_across_processes(
    url: str, open_backend: Callable[..., PostgresBackend]
) -> None:
    backend = open_backend()
    backend.queues_configure(QueueConfig("q", max_concurrency=3))
    insert(backend, *[new() for _ in range(50)])
    reports = run_processes(_procs.claim_until_empty, url, 2, False)
    assert sum(len(r) for r in reports) == 3  # held, never acknowledged: the limit is full
    assert backend.jobs_claim(JobsClaimParams("w", ["q"], 10)) == []


def test_racing_settlement_and_reaping_agree(
    open_backend: Callable[..., PostgresBackend], clock: FrozenClock
) -> None:
    """Acks and the reaper race for the same jobs: the status changes move rows between
    partitions under each other (serialization failures, retried inside the backend). Each job
    ends as exactly one of them decided, and the loser is told."""
    acker, reaper = open_backend(clock), open_backend(clock)
    total = 300
    insert(acker, *[new(lease=5) for _ in range(total)])
    jobs = acker.jobs_claim(JobsClaimParams("w", ["q"], total))
    clock.advance(6)
    refused: list[str] = []
    reaped: list[str] = []
    start = threading.Barrier(2)

    def ack() -> None:
        # From the newest claim back, while the reaper takes the oldest lapsed first: the two
        # meet somewhere in the middle, on the same rows, wherever that is.
        start.wait()
        backwards = jobs[::-1]
        for i in range(0, total, 10):
            batch = [Outcome(j.id, j.token, "completed", result="1") for j in backwards[i : i + 10]]
            refused.extend(acker.jobs_ack(JobsAckParams(batch)))

    def reaping() -> None:
        start.wait()
        # A tick may move nothing while acks hold its jobs (SKIP LOCKED): go on while any
        # lease is still lapsed, not while ticks move something.
        while reaper.leases_lapsed(LeasesLapsedParams(1)):
            reaped.extend(r.id for r in reap(reaper, 7))

    threads = [threading.Thread(target=ack), threading.Thread(target=reaping)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert reaped, "the reaper moved nothing: no race was run"
    assert sorted(refused) == sorted(reaped)
    for j in jobs:
        rec = acker.jobs_get(j.id)
        assert rec is not None
        if j.id in reaped:
            assert (rec.status, rec.error) == ("pending", LEASE_LOST_ERROR)
        else:
            assert (rec.status, rec.result) == ("completed", "1")


def test_racing_cancel_and_claim_agree(open_backend: Callable[..., PostgresBackend]) -> None:
    """A cancel that meets a claim in flight retries on the moved row and is refused."""
    producer, claimer = open_backend(), open_backend()
    ids = insert(producer, *[new() for _ in range(200)])
    claimed: list[str] = []
    cancelled: list[str] = []
    refused: list[str] = []
    start = threading.Barrier(2)

    def claim() -> None:
        start.wait()
        while jobs := claimer.jobs_claim(JobsClaimParams("w", ["q"], 3)):
            claimed.extend(j.id for j in jobs)

    def cancel() -> None:
        import jobyard

        start.wait()
        for job_id in ids:
            try:
                params = JobsCancelParams(job_id, pending_only=True)
                cancelled.append(producer.jobs_cancel(params).id)
            except jobyard.InvalidTransition:
                refused.append(job_id)

    threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(claimed + cancelled, key=int) == ids
    assert sorted(refused, key=int) == sorted(claimed, key=int)


def test_a_batch_repeating_keys_across_queues(backend: PostgresBackend) -> None:
    out = backend.jobs_insert(
        JobsInsertParams(
            [
                new("a", idempotency_key="k"),
                new("b", idempotency_key="k"),
                new("a", idempotency_key="k"),
            ]
        )
    )
    assert [i.created for i in out] == [True, True, False]
    assert out[2].id == out[0].id and out[1].id != out[0].id


def race_renewals_with_settlements(heart: PostgresBackend, completer: PostgresBackend) -> None:
    """Claim 400 jobs; renew 4 of them at a time (in descending id order) until 200-job
    settlements have completed them all."""
    import random

    insert(heart, *[new() for _ in range(400)])
    jobs = heart.jobs_claim(JobsClaimParams("w", ["q"], 400))
    pairs = [(j.id, j.token) for j in jobs]
    start = threading.Barrier(2)
    done = threading.Event()
    refused: list[str] = []  # checked here, not in the thread (where a failed assert is lost)
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            start.wait()
            while not done.is_set():
                sample = sorted(random.sample(pairs, 4), key=lambda p: -int(p[0]))
                heart.leases_renew(LeasesRenewParams("w", sample))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    def settle() -> None:
        try:
            start.wait()
            for i in range(0, len(jobs), 200):
                batch = [Outcome(j.id, j.token, "completed") for j in jobs[i : i + 200]]
                refused.extend(completer.jobs_ack(JobsAckParams(batch)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=beat), threading.Thread(target=settle)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (a deadlock?)"
    assert errors == []
    assert refused == []


def test_heartbeats_and_settlements_never_deadlock(
    open_backend: Callable[..., PostgresBackend], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's heartbeat and its completer lock overlapping jobs at once. Small renewals
    (their rows locked in the order given) racing large settlements (locked in table order)
    would deadlock if renewals waited for locks; they skip locked rows instead."""
    import logging

    caplog.set_level(logging.DEBUG, logger="jobyard.postgres")
    heart, completer = open_backend(), open_backend()
    for _ in range(3):
        race_renewals_with_settlements(heart, completer)
    assert "DeadlockDetected" not in caplog.text
    assert len(completer.jobs_list(JobsListParams(status="completed", limit=2000))) == 1200


def test_a_limit_configured_between_claims_applies_at_once(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    claimer, admin = open_backend(), open_backend()
    insert(admin, *[new() for _ in range(6)])
    first = claimer.jobs_claim(JobsClaimParams("w", ["q"], 2))  # no limit: one statement
    admin.queues_configure(QueueConfig("q", max_concurrency=2))
    assert claimer.jobs_claim(JobsClaimParams("w", ["q"], 5)) == []
    claimer.jobs_ack(JobsAckParams([Outcome(j.id, j.token, "completed") for j in first]))
    assert len(claimer.jobs_claim(JobsClaimParams("w", ["q"], 5))) == 2
    admin.queues_configure(QueueConfig("q"))  # the limit lifted: no lock needed any more
    assert len(claimer.jobs_claim(JobsClaimParams("w", ["q"], 5))) == 2
    assert claimer._limited == set()


def test_a_queue_with_max_pending_is_learned_and_unlearned(backend: PostgresBackend) -> None:
    import jobyard

    backend.queues_configure(QueueConfig("q", max_pending=2))
    insert(backend, new())  # learns that "q" needs the lock
    assert ("insert", "q") in backend._limited
    insert(backend, new())  # straight behind the lock: one round trip
    with pytest.raises(jobyard.QueueFull):
        insert(backend, new())
    backend.queues_configure(QueueConfig("q"))
    insert(backend, new())  # the lock statement found no limit: back to one statement
    assert ("insert", "q") not in backend._limited
    assert len(insert(backend, new(), new())) == 2
