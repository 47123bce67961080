"""Resuming a stopped workflow (``app.resume_workflow``, the store move ``jobs_resume``): what
ended failed or cancelled runs again, each job at once if its inputs have completed, else once
they have, so a cancelled or failed chain or group completes; on every store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

import jobyard
from jobyard import chain, group
from jobyard.backends.base import (
    Backend,
    JobsAckParams,
    JobsCancelManyParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsPurgeParams,
    JobsResumeParams,
    Outcome,
    StatsParams,
)

from ..conftest import running_worker, wait_until
from .test_backend import insert, new
from .test_workflow_moves import complete, status

FLOW = "wf-resume"


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def counts(backend: Backend, queue: str) -> dict[str, int]:
    (row,) = backend.stats_get(StatsParams(queues=[queue]))
    return {k: v for k, v in row.counts.items() if v}


def test_a_cancelled_workflow_is_resumed_job_by_job_on_its_inputs(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given x -> y (another queue) -> z, and a join w of x and y, with x completed and the
    # rest cancelled, and a plain job holding a key cancelled too
    x, y, z, w = insert(
        backend,
        new("q", workflow_id=FLOW),
        new("q2", workflow_id=FLOW, after=(0,)),
        new("q", workflow_id=FLOW, after=(1,)),
        new("q", workflow_id=FLOW, after=(0, 1)),
    )
    (keyed,) = insert(backend, new("q", idempotency_key="k"))
    complete(backend, x)
    assert status(backend, y) == "pending"
    backend.jobs_cancel_many(JobsCancelManyParams([w, z, y, keyed], by="ops"))
    assert counts(backend, "q") == {"completed": 1, "cancelled": 3}
    clock.advance(10)

    # when the workflow's stopped jobs are resumed (later steps first), with a completed job,
    # an unknown id, a malformed one and the keyed job among them
    ids = [w, z, y, x, keyed, "999999", "not-an-id"]
    changed = backend.jobs_resume(JobsResumeParams(ids))

    # then each stopped workflow job changed, in the given order; the others were skipped
    assert changed == [w, z, y]
    # y's input had completed: it is due now; z and w wait for y again
    assert [status(backend, i) for i in (x, y, z, w, keyed)] == [
        "completed",
        "pending",
        "waiting",
        "waiting",
        "cancelled",
    ]
    for i in (y, z, w):
        rec = backend.jobs_get(i)
        assert rec is not None
        assert (rec.attempts, rec.finished_at, rec.cancelled_by, rec.cancel_requested_at) == (
            0,
            None,
            None,
            None,
        )
    ry = backend.jobs_get(y)
    assert ry is not None and ry.run_at == pytest.approx(clock.now(), abs=0.01)
    assert counts(backend, "q") == {"completed": 1, "cancelled": 1, "waiting": 2}
    assert counts(backend, "q2") == {"pending": 1}
    # and once y completes, both its dependents are released (w's other input had completed)
    complete(backend, y)
    assert [status(backend, i) for i in (z, w)] == ["pending", "pending"]
    complete(backend, z, w)
    assert counts(backend, "q") == {"completed": 3, "cancelled": 1}
    # a second resume finds nothing left to move
    assert backend.jobs_resume(JobsResumeParams([x, y, z, w])) == []


def test_a_failed_step_resumes_with_its_attempts_reset_and_its_error_kept(
    backend: Backend,
) -> None:
    # given a chain whose second step failed its last attempt, the third still waiting
    a, b, c = insert(
        backend,
        new("q", workflow_id=FLOW),
        new("q", workflow_id=FLOW, after=(0,), max_attempts=1),
        new("q", workflow_id=FLOW, after=(1,)),
    )
    complete(backend, a)
    (claimed,) = backend.jobs_claim(JobsClaimParams("w1", ("q",), 10))
    assert claimed.id == b
    backend.jobs_ack(JobsAckParams([Outcome(b, claimed.token, "failed", error="boom")]))
    # when it is resumed
    assert backend.jobs_resume(JobsResumeParams([c, b])) == [b]  # c is waiting: skipped
    # then it is due with its attempts reset and its error kept for history, c still waits
    rb = backend.jobs_get(b)
    assert rb is not None and (rb.status, rb.attempts, rb.error) == ("pending", 0, "boom")
    assert status(backend, c) == "waiting"
    assert counts(backend, "q") == {"completed": 1, "pending": 1, "waiting": 1}
    complete(backend, b)
    assert status(backend, c) == "pending"


def test_a_step_resumed_while_its_input_runs_is_released_by_its_completion_once(
    backend: Backend,
) -> None:
    # given pairs x -> y with every x running and every y cancelled alone (a running input
    # asked to stop, say, that then completed anyway), in two queues
    pairs = []
    for i in range(40):
        qx, qy = ("q", "q2") if i % 2 else ("q2", "q")
        x, y = insert(
            backend,
            new(qx, workflow_id=f"{FLOW}-{i}"),
            new(qy, workflow_id=f"{FLOW}-{i}", after=(0,)),
        )
        backend.jobs_cancel(JobsCancelParams(y))
        pairs.append((x, y))
    running = {c.id: c for c in backend.jobs_claim(JobsClaimParams("w1", ("q", "q2"), 100))}
    assert {x for x, _ in pairs} <= running.keys()
    errors: list[BaseException] = []

    def acks() -> None:
        try:
            for x, _ in pairs:
                c = running[x]
                backend.jobs_ack(JobsAckParams([Outcome(x, c.token, "completed", result="1")]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    # when the inputs complete while their steps are resumed, racing
    acker = threading.Thread(target=acks)
    acker.start()
    for _, y in reversed(pairs):
        assert backend.jobs_resume(JobsResumeParams([y])) == [y]
    acker.join(30)
    assert not acker.is_alive() and not errors, errors
    # then every step was released exactly once: none is left waiting for a completed input
    assert [status(backend, y) for _, y in pairs] == ["pending"] * len(pairs)
    total = {
        k: counts(backend, "q").get(k, 0) + counts(backend, "q2").get(k, 0)
        for k in ("pending", "waiting")
    }
    assert total == {"pending": len(pairs), "waiting": 0}


def test_a_workflow_whose_needed_input_was_purged_cannot_be_resumed(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def step(x: int = 0) -> int:
        return x + 1

    # given a chain cancelled before it ran, whose first job was then purged (the cancelled
    # second step is kept: only waiting steps go with a purged input)
    handle = chain(step.s(), step.s(), step.s()).enqueue()
    a, b, _ = handle.ids
    app.cancel(b)
    handle.cancel()
    app.backend.jobs_purge(JobsPurgeParams(statuses=("cancelled",), ids=[a]))
    # when it is resumed, then it is refused, naming the purged job, and nothing moved
    with pytest.raises(jobyard.JobNotFound, match="cannot be resumed") as refused:
        app.resume_workflow(handle.id)
    assert a in str(refused.value)
    assert {j.status for j in app.workflow(handle.id).jobs} == {jobyard.Status.CANCELLED}


def test_a_cancelled_chain_resumes_and_completes(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    started = threading.Event()
    block = threading.Event()

    @app.job(lease=1.5)
    async def crawl() -> str:
        if not block.is_set():  # the first run waits to be cancelled
            started.set()
            await asyncio.sleep(60)
        return "page"

    @app.job(queue="other")
    def parse(x: str) -> str:
        return x + "+parsed"

    @app.job
    def store(x: str) -> str:
        return x + "+stored"

    handle = chain(crawl.s(), parse.s(), store.s()).enqueue()
    with running_worker(app, queues=["default", "other"]):
        # given a chain cancelled while its first step ran, so every job ended cancelled
        assert started.wait(15)
        handle.cancel(by="ops")
        wait_until(
            lambda: app.workflow(handle.id).jobs[0].status == "cancelled", what="crawl cancelled"
        )
        assert {j.status for j in app.workflow(handle.id).jobs} == {jobyard.Status.CANCELLED}
        # when it is resumed in one call
        block.set()
        flow = app.resume_workflow(handle.id)
        # then nothing is left cancelled, and it completes
        assert jobyard.Status.CANCELLED not in {j.status for j in flow.jobs}
        assert handle.result(timeout=15) == "page+parsed+stored"
    assert [app.get(i).cancelled_by for i in handle.ids] == [None, None, None]


def test_a_group_stopped_by_a_failed_member_and_a_cancel_resumes_its_join(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    broken = threading.Event()
    broken.set()

    @app.job
    def square(x: int) -> int:
        return x * x

    @app.job(max_attempts=1)
    def flaky(x: int) -> int:
        if broken.is_set():
            raise RuntimeError("down")
        return x

    @app.job
    def total(xs: list[int]) -> int:
        return sum(xs)

    # given a group whose one member failed, then cancelled: the join cancelled, the other
    # members completed
    handle = group(square.s(2), flaky.s(10), square.s(3)).then(total.s()).enqueue()
    with running_worker(app):
        wait_until(lambda: app.workflow(handle.id).status == "failed", what="the member to fail")
        wait_until(
            lambda: [j.status.value for j in app.workflow(handle.id).jobs].count("completed") == 2,
            what="the other members",
        )
        handle.cancel()
        assert app.workflow(handle.id).jobs[-1].status == "cancelled"
        # when it is resumed through its handle
        broken.clear()
        handle.resume()
        # then the failed member runs again and the join gets every result in member order
        assert handle.result(timeout=15) == 4 + 10 + 9
    squares = [app.get(i) for i in handle.ids if app.get(i).name.endswith("square")]
    assert [j.attempts for j in squares] == [1, 1]  # the completed members did not run again
    # and resuming a completed workflow changes nothing
    assert app.resume_workflow(handle.id).status == "completed"
