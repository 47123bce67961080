"""Counts by status stay exact through every move, on every store.

PostgreSQL and SQLite keep the counts of finished jobs with the moves instead of counting the
finished jobs at each ``stats_get`` (PostgreSQL 0004_counts.sql, SQLite 0005_counts.sql): here
each move is followed by a comparison with the jobs as they are listed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    FINISHED,
    STATUSES,
    Backend,
    ForeignQueueBackend,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    JobsPurgeParams,
    NewJob,
    Outcome,
    QueueConfig,
    QueuesNamesParams,
    QueueStats,
    StatsParams,
    StoreTidyParams,
    WorkerInfo,
    as_tidying,
)
from jobyard.worker.maintenance import Maintenance
from jobyard.worker.reaper import reap

PAYLOAD = '{"args":[],"kwargs":{}}'


def new(queue: str, **kw: object) -> NewJob:
    return NewJob(name="task", queue=queue, payload=PAYLOAD, **kw)  # type: ignore[arg-type]


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def listed(backend: Backend) -> dict[str, dict[str, int]]:
    """Counts from the jobs themselves, per queue and status."""
    out: dict[str, Counter[str]] = {}
    for rec in backend.jobs_list(JobsListParams(limit=10_000)):
        out.setdefault(rec.queue, Counter())[rec.status] += 1
    return {q: {s: c[s] for s in STATUSES} for q, c in out.items()}


def counted(backend: Backend) -> dict[str, dict[str, int]]:
    return {
        s.queue: dict(s.counts) for s in backend.stats_get(StatsParams()) if any(s.counts.values())
    }


def check(backend: Backend) -> None:
    assert counted(backend) == listed(backend)


def ack(backend: Backend, *outcomes: tuple[object, str]) -> None:
    backend.jobs_ack(
        JobsAckParams([Outcome(job.id, job.token, kind) for job, kind in outcomes])  # type: ignore[attr-defined]
    )


def test_counts_stay_exact_through_every_move(backend: Backend, clock: jobyard.FrozenClock) -> None:
    # given jobs in two queues
    a = [i.id for i in backend.jobs_insert(JobsInsertParams([new("a") for _ in range(8)]))]
    backend.jobs_insert(JobsInsertParams([new("b", lease=1, max_attempts=1) for _ in range(3)]))
    check(backend)

    # when they are claimed and settled every way
    jobs = backend.jobs_claim(JobsClaimParams("w1", ["a"], 5))
    check(backend)
    ack(backend, (jobs[0], "completed"), (jobs[1], "failed"), (jobs[2], "retry"))
    ack(backend, (jobs[3], "release"), (jobs[4], "completed"))
    check(backend)
    # a stale acknowledgement changes nothing
    ack(backend, (jobs[0], "failed"))
    check(backend)

    # cancelled, then re-driven from cancelled and from failed
    backend.jobs_cancel(JobsCancelParams(a[-1]))
    check(backend)
    # a running job asked to cancel stays running (counted once), then ends cancelled
    (asked,) = backend.jobs_claim(JobsClaimParams("w1", ["a"], 1))
    backend.jobs_cancel(JobsCancelParams(asked.id))
    check(backend)
    ack(backend, (asked, "cancelled"))
    check(backend)
    backend.jobs_retry(asked.id)
    backend.jobs_retry(a[-1])
    backend.jobs_retry(jobs[1].id)
    check(backend)

    # the reaper fails jobs whose lease lapsed with their attempts spent
    backend.jobs_claim(JobsClaimParams("w2", ["b"], 2))
    clock.advance(5)
    assert {r.status for r in reap(backend)} == {"failed"}
    check(backend)

    # purge by status and queue, then retention (older than) purges what is old enough
    more = backend.jobs_claim(JobsClaimParams("w1", ["a"], 3))
    ack(backend, *((j, "completed") for j in more))
    assert backend.jobs_purge(JobsPurgeParams(("failed",), queue="b")) == 2
    check(backend)
    clock.advance(100)
    rest = backend.jobs_claim(JobsClaimParams("w1", ["a"], 2))
    ack(backend, *((j, "completed") for j in rest))
    assert backend.jobs_purge(JobsPurgeParams(("completed",), older_than=50)) == 5
    check(backend)
    assert backend.jobs_purge(JobsPurgeParams()) >= 2
    check(backend)
    # then the counts of a queue emptied by purge are gone, not negative
    assert all(n >= 0 for per in counted(backend).values() for n in per.values())


def test_store_tidy_is_safe_to_call_on_every_store_that_tidies(backend: Backend) -> None:
    # given a store with churn, when it is tidied, then nothing breaks and each line says what
    tidying = as_tidying(backend)
    if tidying is None:
        pytest.skip("this store has nothing to tidy (see test_capabilities)")
    backend.jobs_insert(JobsInsertParams([new("a") for _ in range(20)]))
    jobs = backend.jobs_claim(JobsClaimParams("w1", ["a"], 20))
    ack(backend, *((j, "completed") for j in jobs))
    lines = tidying.store_tidy(StoreTidyParams(min_dead=0, dead_fraction=0.0))
    assert all(line.startswith(("vacuumed ", "checkpointed the WAL")) for line in lines)
    check(backend)


def test_a_queue_keeps_its_completed_jobs_as_long_as_its_retention(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    # given a queue with a retention of a minute, one without, and a worker's default of 2 min
    app = make_app(clock)
    backend = app.backend
    config = app.configure_queue("short", retention=60)
    assert {q.name: q.retention for q in backend.queues_list()} == {"short": 60.0}
    assert config.retention == 60.0
    for queue in ("short", "long", "other"):
        backend.jobs_insert(JobsInsertParams([new(queue) for _ in range(3)]))
        jobs = backend.jobs_claim(JobsClaimParams("w1", [queue], 3))
        ack(backend, *((j, "completed") for j in jobs))
    app.configure_queue("other", retention=3600)
    maintenance = Maintenance(backend, WorkerInfo("w", "h", 1, ("q",), 1, 0.0, 0.0), 1.0, 120.0)
    # when 90 s pass: only the queue with a minute's retention loses its completed jobs
    clock.advance(90)
    counted = backend.stats_get

    def no_counts(params: StatsParams) -> list[QueueStats]:
        raise AssertionError("retention counted the queues only to learn their names")

    backend.stats_get = no_counts  # type: ignore[method-assign]
    try:
        maintenance.apply_retention()
    finally:
        backend.stats_get = counted  # type: ignore[method-assign]
    done = {s.queue: s.counts["completed"] for s in backend.stats_get(StatsParams())}
    assert (done.get("short", 0), done["long"], done["other"]) == (0, 3, 3)
    check(backend)
    # and past the worker's retention, the queue without its own goes too
    clock.advance(60)
    maintenance.apply_retention()
    done = {s.queue: s.counts["completed"] for s in backend.stats_get(StatsParams())}
    assert (done.get("short", 0), done.get("long", 0), done["other"]) == (0, 0, 3)
    check(backend)


def test_the_queues_holding_finished_jobs_are_named_without_counting(backend: Backend) -> None:
    # given queues with completed jobs, with failed ones, with pending ones only, and a queue
    # that is configured but empty
    for queue, kind in (("done", "completed"), ("dead", "failed"), ("both", "completed")):
        backend.jobs_insert(JobsInsertParams([new(queue), new(queue)]))
        jobs = backend.jobs_claim(JobsClaimParams("w1", [queue], 2))
        ack(backend, *((j, kind) for j in jobs))
    backend.jobs_insert(JobsInsertParams([new("both")]))
    (dead,) = backend.jobs_claim(JobsClaimParams("w1", ["both"], 1))
    ack(backend, (dead, "failed"))
    backend.jobs_insert(JobsInsertParams([new("idle")]))
    backend.queues_configure(QueueConfig("empty"))

    # when the queues holding completed, failed, or finished jobs are asked for
    completed = backend.queues_names(QueuesNamesParams(("completed",)))
    failed = backend.queues_names(QueuesNamesParams(("failed",)))
    finished = backend.queues_names(QueuesNamesParams(FINISHED))

    # then none holding such jobs is left out, in name order (a store may name more: Redis
    # names every queue it knows, which costs an empty purge, never a job kept too long)
    assert {"done", "both"} <= set(completed) and {"dead", "both"} <= set(failed)
    assert {"done", "dead", "both"} <= set(finished)
    assert completed == sorted(completed) and finished == sorted(finished)
    if not isinstance(backend, ForeignQueueBackend):  # the stores that count with the moves
        assert (completed, failed, finished) == (
            ["both", "done"],
            ["both", "dead"],
            ["both", "dead", "done"],
        )
    # and a purge that empties a queue drops its name (the counts kept with the moves agree)
    backend.jobs_purge(JobsPurgeParams(("completed",), queue="done"))
    if not isinstance(backend, ForeignQueueBackend):
        assert backend.queues_names(QueuesNamesParams(("completed",))) == ["both"]
    with pytest.raises(ValueError, match="only finished states"):
        QueuesNamesParams(("pending",))


def test_a_retention_must_be_positive(make_app: Callable[..., jobyard.App]) -> None:
    with pytest.raises(jobyard.ConfigurationError, match="retention"):
        make_app().configure_queue("q", retention=0)


def test_failed_and_cancelled_jobs_list_by_status_newest_first(backend: Backend) -> None:
    # given failed, cancelled and completed jobs, interleaved
    ids = [i.id for i in backend.jobs_insert(JobsInsertParams([new("a") for _ in range(9)]))]
    for job_id in ids[1::3]:
        backend.jobs_cancel(JobsCancelParams(job_id))
    jobs = backend.jobs_claim(JobsClaimParams("w1", ["a"], 10))
    ack(backend, *((j, "failed" if j.id in ids[0::3] else "completed") for j in jobs))

    def listed_ids(status: str, **kw: object) -> list[str]:
        params = JobsListParams(status=status, **kw)  # type: ignore[arg-type]
        return [r.id for r in backend.jobs_list(params)]

    # then each status lists its own jobs only, newest first, paged
    assert listed_ids("failed") == ids[0::3][::-1]
    assert listed_ids("cancelled") == ids[1::3][::-1]
    assert listed_ids("failed", limit=1, offset=1) == [ids[3]]
    assert listed_ids("cancelled", queue="other") == []
