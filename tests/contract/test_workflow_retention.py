"""Workflows and the moves that drop finished jobs (base.py: JobsAckParams, JobsPurgeParams,
JobsExpireParams), on every store:

- a completed job is *held* while a dependent exists that has not completed (waiting, pending,
  running, or failed or cancelled and so re-drivable): no purge, retention or expiry drops it;
  once every dependent completed or was deleted it goes by its own finished_at;
- deleting a job takes the waiting steps downstream of it along (they can never run), in the
  same move, counted apart; the inputs they held are freed.

Steps sit in three queues so that on Redis Cluster every link crosses a hash slot."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import jobyard
from jobyard import chain, group
from jobyard.backends.base import (
    Backend,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsListParams,
    JobsPurgeParams,
    Outcome,
    Purged,
    QueueConfig,
    StatsParams,
    WorkerInfo,
    as_expiring,
)
from jobyard.testing import drain
from jobyard.worker.maintenance import Maintenance

from .test_backend import insert, new

FLOW = "wf-keep"
QUEUES = ("a", "b", "c")


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def step(queue: str, *after: int) -> Any:
    return new(queue, workflow_id=FLOW, after=after)


def settle(backend: Backend, job_id: str, kind: str = "completed") -> None:
    """Claim ``job_id`` (it must be due) and settle it as ``kind``; other jobs claimed on the
    way go back."""
    queue = job_id.rsplit(":", 1)[0] if ":" in job_id else None
    queues = (queue,) if queue in QUEUES else QUEUES
    held = {c.id: c for c in backend.jobs_claim(JobsClaimParams("w1", queues, 100))}
    assert job_id in held, f"{job_id} was not claimable"
    mine = held.pop(job_id)
    outcomes = [Outcome(job_id, mine.token, kind, result=f'"r{job_id}"', error="boom")]
    outcomes += [Outcome(c.id, c.token, "release") for c in held.values()]
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


def status(backend: Backend, job_id: str) -> str | None:
    rec = backend.jobs_get(job_id)
    return None if rec is None else rec.status


def purge(backend: Backend, *statuses: str, older_than: float = 10.0) -> Purged:
    return backend.jobs_purge(JobsPurgeParams(statuses or ("completed",), older_than=older_than))


def retention(backend: Backend) -> None:
    """What a worker's maintenance drops: the store's own expiry, then the queues' retention."""
    if (expiring := as_expiring(backend)) is not None:
        expiring.jobs_expire(JobsExpireParams())
    info = WorkerInfo("w-test", "host", 1, QUEUES, 1, 0.0, 0.0)
    Maintenance(backend, info, reap_interval=1.0, retention=10.0, tidy=None).apply_retention()


def waiting_count(backend: Backend) -> int:
    return sum(s.counts["waiting"] for s in backend.stats_get(StatsParams()))


def test_a_completed_input_is_kept_while_its_step_waits(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a chain a -> b -> c whose first step completed long ago, in queues kept 1 s
    for q in QUEUES:
        backend.queues_configure(QueueConfig(q, retention=1))
    a, b, c = insert(backend, step("a"), step("b", 0), step("c", 1))
    settle(backend, a)
    recent = {s.queue: s.completed_last_minute for s in backend.stats_get(StatsParams())}
    assert recent["a"] == 1  # a held job is counted as any completed one
    clock.advance(100)
    # when retention and an explicit purge of completed jobs run
    retention(backend)
    purged = purge(backend)
    # then the input b still needs is kept, and said so
    assert (int(purged), purged.waiting, purged.kept) == (0, 0, 1)
    assert status(backend, a) == "completed"
    # when b completes, a is free: the next purge takes it, by its own finished_at
    settle(backend, b)
    purged = purge(backend)
    assert (int(purged), purged.kept) == (1, 0)
    assert status(backend, a) is None
    # while b is held by c, which still waits... until c completes
    clock.advance(100)
    assert (int(purge(backend)), status(backend, b)) == (0, "completed")
    settle(backend, c)
    clock.advance(100)
    retention(backend)
    assert [status(backend, i) for i in (b, c)] == [None, None]


def test_a_failed_or_cancelled_step_still_holds_its_inputs(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a join on two members: the join failed, and a second chain whose step was cancelled
    m1, m2, join, x, y = insert(
        backend, step("a"), step("b"), step("c", 0, 1), step("a"), step("b", 3)
    )
    for job_id in (m1, m2, x):
        settle(backend, job_id)
    settle(backend, join, "failed")
    backend.jobs_cancel(JobsCancelParams(y))
    clock.advance(100)
    # when completed jobs are purged, then the inputs of both are kept
    purged = purge(backend)
    assert (int(purged), purged.kept) == (0, 3)
    retention(backend)
    assert [status(backend, i) for i in (m1, m2, x)] == ["completed"] * 3
    # and a re-drive reads them again: the join completes, and frees its members
    backend.jobs_retry(join)
    settle(backend, join)
    clock.advance(100)
    assert (int(purge(backend)), status(backend, m1), status(backend, x)) == (3, None, "completed")


def test_purging_a_failed_step_takes_the_steps_that_wait_on_it(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a -> boom -> b -> c, where boom failed: b and c can never run
    a, boom, b, c = insert(backend, step("a"), step("b", 0), step("c", 1), step("a", 2))
    settle(backend, a)
    settle(backend, boom, "failed")
    assert waiting_count(backend) == 2
    clock.advance(100)
    # when the dead letter is purged
    purged = purge(backend, "failed")
    # then the failed step goes with the waiting steps downstream of it, counted apart
    assert (int(purged), purged.waiting, purged.kept) == (3, 2, 0)
    assert [status(backend, i) for i in (boom, b, c)] == [None, None, None]
    assert waiting_count(backend) == 0
    # and its input, held by it until now, is free: the next purge of completed jobs takes it
    assert status(backend, a) == "completed"
    assert (int(purge(backend)), status(backend, a)) == (1, None)


def test_purging_everything_takes_a_stopped_workflow_whole(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a group of three whose second member failed, a join waiting, and a step after it
    m1, m2, m3, join, after = insert(
        backend, step("a"), step("b"), step("c"), step("a", 0, 1, 2), step("b", 3)
    )
    settle(backend, m1)
    settle(backend, m2, "failed")
    settle(backend, m3)
    clock.advance(100)
    # when every finished status is purged at once
    purged = backend.jobs_purge(JobsPurgeParams(older_than=10))
    # then the failed member, the steps after it and the members it freed all go, in one move
    assert (int(purged), purged.waiting, purged.kept) == (5, 2, 0)
    assert [status(backend, i) for i in (m1, m2, m3, join, after)] == [None] * 5
    assert backend.jobs_list(JobsListParams(workflow_id=FLOW)) == []
    assert waiting_count(backend) == 0
    counts = {s.queue: s.counts for s in backend.stats_get(StatsParams())}
    assert {q: (c["completed"], c["failed"]) for q, c in counts.items()} == {
        q: (0, 0) for q in counts
    }


def test_purging_a_cancelled_step_takes_the_steps_after_it(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a -> b -> c where a completed and b was cancelled while it waited
    a, b, c = insert(backend, step("a"), step("b", 0), step("c", 1))
    settle(backend, a)
    backend.jobs_cancel(JobsCancelParams(b))
    clock.advance(100)
    assert (int(purge(backend)), status(backend, a)) == (0, "completed")  # b may be retried
    # when cancelled jobs are purged, then c goes with b, and a is freed
    purged = purge(backend, "cancelled")
    assert (int(purged), purged.waiting) == (2, 1)
    assert [status(backend, i) for i in (b, c)] == [None, None]
    assert int(purge(backend)) == 1


def test_a_purge_that_misses_the_cutoff_keeps_the_steps_and_their_holds(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a -> boom -> b, boom failed just now
    a, boom, b = insert(backend, step("a"), step("b", 0), step("c", 1))
    settle(backend, a)
    settle(backend, boom, "failed")
    # when purges run whose cutoff boom has not passed, or of another queue
    assert int(purge(backend, "failed", older_than=3600)) == 0
    assert int(backend.jobs_purge(JobsPurgeParams(("failed",), queue="a"))) == 0
    clock.advance(100)
    # then nothing moved: boom may still be retried, and a is still held for it
    assert [status(backend, i) for i in (a, boom, b)] == ["completed", "failed", "waiting"]
    assert purge(backend).kept == 1


def test_a_step_waiting_on_a_failed_input_can_be_cancelled(backend: Backend) -> None:
    # given a -> boom -> b, boom failed: b waits for an input that will not complete by itself
    a, boom, b = insert(backend, step("a"), step("b", 0), step("c", 1))
    settle(backend, a)
    settle(backend, boom, "failed")
    # when b is cancelled, then it is cancelled at once, like any waiting step
    rec = backend.jobs_cancel(JobsCancelParams(b, by="ops"))
    assert (rec.status, rec.cancelled_by) == ("cancelled", "ops")
    assert waiting_count(backend) == 0


def test_the_inputs_of_a_running_join_survive_a_queue_retention_of_one_second(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    # the case: a fast member in a queue kept 1 s, a slow one elsewhere, then a join
    app = make_app(clock)
    app.configure_queue("b", retention=1)

    @app.job(queue="b")
    def fast() -> str:
        return "fast"

    @app.job(queue="a")
    def slow() -> str:
        return "slow"

    @app.job(queue="c")
    def join(values: list[str]) -> str:
        return "+".join(values)

    handle = group(fast.s(), slow.s()).then(join.s()).enqueue()
    # when the fast member completes and retention runs long after, while the slow one runs
    drain(app, ["b"])
    clock.advance(3600)
    retention(app.backend)
    # then the join still finds both inputs, and the workflow completes
    drain(app, ["a", "c"])
    assert handle.result(timeout=5) == "fast+slow"
    # and once the join completed, retention takes the fast member by its own finished_at
    retention(app.backend)
    assert status(app.backend, handle.ids[0]) is None


def test_a_workflow_whose_failed_step_was_purged_raises_at_once(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)

    @app.job(queue="a")
    def one(x: int = 0) -> int:
        return x + 1

    @app.job(queue="b", max_attempts=1)
    def boom(x: int) -> int:
        raise RuntimeError("boom")

    # given chain(one, boom, one) whose middle step failed
    handle = chain(one.s(), boom.s(), one.s()).enqueue()
    drain(app, ["a", "b"])
    with pytest.raises(jobyard.JobFailed):
        handle.result(timeout=2)
    # when the dead letter is purged, the step that waited goes with it, counted
    purged = app.purge(["failed"])
    assert (int(purged), purged.waiting) == (2, 1)
    # then the workflow's result says it is gone, at once rather than after the timeout
    with pytest.raises(jobyard.JobNotFound, match="could never run"):
        handle.result(timeout=60)


def test_a_dry_run_counts_what_the_purge_then_does(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)
    backend = app.backend
    # given a group whose second member failed (a join and a step after it wait), and a chain
    # x -> y whose y still waits for a worker
    m1, m2, m3, _, _, x, _ = insert(
        backend,
        step("a"),
        step("b"),
        step("c"),
        step("a", 0, 1, 2),
        step("b", 3),
        step("c"),
        step("a", 5),
    )
    for job_id in (m1, m3, x):
        settle(backend, job_id)
    settle(backend, m2, "failed")
    clock.advance(100)
    # when a purge of everything is previewed, then it counts what the purge then does
    preview = app.purge_preview(older_than=10)
    assert preview == {"completed": 2, "failed": 1, "cancelled": 0, "waiting": 2, "kept": 1}
    purged = app.purge(older_than=10)
    assert (int(purged), purged.waiting, purged.kept) == (5, 2, 1)
    assert app.purge_preview(older_than=10) == {
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "kept": 1,
    }


class _Reader:
    """A workflow as a store might hold one written before purges took waiting steps along:
    step b waits for job boom, which is gone."""

    def __init__(self, jobs: list[jobyard.Job]) -> None:
        self.jobs = {j.id: j for j in jobs}

    def get(self, job_id: str) -> jobyard.Job:
        return self.jobs[job_id]

    def workflow(self, workflow_id: str) -> jobyard.Workflow:
        from jobyard.workflow import build_workflow

        return build_workflow(workflow_id, list(self.jobs.values()), {})

    def cancel_workflow(self, workflow_id: str, *, by: str | None = None) -> jobyard.Workflow:
        raise NotImplementedError

    def results(self, ids: Any) -> dict[str, jobyard.Job]:
        return {i: self.jobs[i] for i in ids if i in self.jobs}


def test_the_result_of_a_stranded_workflow_raises_instead_of_waiting(
    make_app: Callable[..., jobyard.App],
) -> None:
    from jobyard.workflow import WorkflowHandle

    app = make_app()

    @app.job
    def one(x: int = 0) -> int:
        return x

    # given a workflow a -> b whose b waits for a job that is no longer stored
    handle = chain(one.s(), one.s()).enqueue()
    a, b = (app.get(i) for i in handle.ids)
    stranded = dataclasses.replace(b, depends_on=("gone-1",))
    reader = _Reader([a, stranded])
    # then its result names the missing job within the second it reads the whole workflow
    waiting = WorkflowHandle(reader, handle.id, handle.ids, b.id)
    with pytest.raises(jobyard.JobNotFound, match="gone-1"):
        waiting.result(timeout=10)


def test_cancelling_a_workflow_stopped_by_a_failed_step_reaches_its_waiting_steps(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)

    @app.job(queue="a")
    def one(x: int = 0) -> int:
        return x + 1

    @app.job(queue="b", max_attempts=1)
    def boom(x: int) -> int:
        raise RuntimeError("boom")

    # given chain(one, boom, one, one) whose second step failed
    handle = chain(one.s(), boom.s(), one.s(), one.s()).enqueue()
    drain(app, ["a", "b"])
    first, failed, *after = handle.ids
    # when the workflow is cancelled, then the steps that waited are cancelled, the rest stays
    flow = handle.cancel(by="ops")
    assert [j.status.value for j in flow.jobs] == ["completed", "failed", "cancelled", "cancelled"]
    assert {app.get(i).cancelled_by for i in after} == {"ops"}
    # and a purge of the stopped steps leaves nothing waiting, freeing the first step
    clock.advance(100)
    purged = app.purge(["failed", "cancelled"], older_than=10)
    assert (int(purged), purged.waiting) == (3, 0)
    assert [app.get(first).status.value] == ["completed"]
    assert int(app.purge(["completed"], older_than=10)) == 1
    assert app.results([first, failed, *after]) == {}
