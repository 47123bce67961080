"""Cancelling many jobs in one move (``jobs_cancel_many``): what ``app.cancel_workflow`` and
``app.cancel_pending`` send, one store call for many jobs rather than one per job; and what
``cancel_pending`` takes: every job of the queue that has not started, waiting steps too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import jobyard
from jobyard import group, testing
from jobyard.backends.base import (
    Backend,
    JobsAckParams,
    JobsCancelManyParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    Outcome,
    StatsParams,
)

from .test_backend import claim, insert, new


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def statuses(backend: Backend, *ids: str) -> list[str | None]:
    return [None if (r := backend.jobs_get(i)) is None else r.status for i in ids]


def test_many_jobs_are_cancelled_in_one_move_and_the_refused_ones_skipped(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    # given a pending job holding a key, a waiting step, two running jobs (one asked to stop
    # already), a completed one, in two queues
    a, b, c, d, done = insert(
        backend,
        new(idempotency_key="k"),
        new(),
        new("r"),
        new("r"),
        new("r"),
    )
    (waiting,) = insert(backend, new("r", workflow_id="w"), new("r", workflow_id="w", after=(0,)))[
        1:
    ]
    running = {j.id: j for j in claim(backend, 10, ("r",))}
    assert set(running) >= {c, d, done}
    backend.jobs_ack(JobsAckParams([Outcome(done, running[done].token, "completed", result="1")]))
    first = backend.jobs_cancel_many(JobsCancelManyParams([d], by="first"))
    assert first == [d]
    clock.advance(5)

    # when they are cancelled together, with an unknown and a malformed id among them
    ids = [waiting, "999999", a, c, done, "not-an-id", d]
    changed = backend.jobs_cancel_many(JobsCancelManyParams(ids, by="ops"))

    # then the waiting and pending ones are cancelled, the running ones asked (the first
    # request kept), the finished and unknown ones skipped; the changed ids in the given order
    assert changed == [waiting, a, c, d]
    assert statuses(backend, waiting, a, c, d, done, b) == [
        "cancelled",
        "cancelled",
        "running",
        "running",
        "completed",
        "pending",
    ]
    recs = {i: backend.jobs_get(i) for i in (waiting, a, c, d)}
    assert all(r is not None for r in recs.values())
    assert [recs[i].cancelled_by for i in (waiting, a, c, d)] == ["ops", "ops", "ops", "first"]  # type: ignore[union-attr]
    assert recs[a].finished_at == pytest.approx(clock.now(), abs=0.01)  # type: ignore[union-attr]
    assert recs[d].cancel_requested_at == pytest.approx(clock.now() - 5, abs=0.01)  # type: ignore[union-attr]
    # the cancelled job's key is free again, and the counts agree with the moves
    (again,) = backend.jobs_insert(JobsInsertParams([new(idempotency_key="k")]))
    assert again.created
    counts = {s.queue: s.counts for s in backend.stats_get(StatsParams())}
    assert (counts["q"]["cancelled"], counts["r"]["cancelled"], counts["r"]["waiting"]) == (1, 1, 0)
    # a second call changes nothing, and pending_only leaves running jobs alone
    assert backend.jobs_cancel_many(JobsCancelManyParams([waiting, a])) == []
    assert backend.jobs_cancel_many(JobsCancelManyParams([b, c], pending_only=True)) == [b]
    assert backend.jobs_cancel_many(JobsCancelManyParams([])) == []
    with pytest.raises(jobyard.ConfigurationError):
        JobsCancelManyParams([a], by="x" * 201)


def test_a_large_batch_across_queues_is_cancelled_whole(backend: Backend) -> None:
    # given more jobs than one Redis script cancels (500), in two queues
    ids = insert(backend, *[new("q" if i % 2 else "r") for i in range(1100)])

    # when all are cancelled
    changed = backend.jobs_cancel_many(JobsCancelManyParams(ids))

    # then every one, in order
    assert changed == ids
    left = backend.jobs_list(JobsListParams(status="pending", limit=10))
    assert left == []


class Calls:
    """Counts the store calls an App makes (a spy on the real store, not a mock)."""

    def __init__(self, backend: Backend, *names: str) -> None:
        self.counts = dict.fromkeys(names, 0)
        for name in names:
            inner = getattr(backend, name)

            def counted(*args: Any, _inner: Any = inner, _name: str = name) -> Any:
                self.counts[_name] += 1
                return _inner(*args)

            setattr(backend, name, counted)


def test_cancel_workflow_is_one_store_call_whatever_its_size(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given a group of 40 members and its join, nothing run
    app = make_app()

    @app.job(queue="q")
    def member(n: int) -> int:
        return n

    @app.job(queue="q")
    def total(ns: list[int]) -> int:
        return sum(ns)

    handle = group(*[member.s(i) for i in range(40)]).then(total.s()).enqueue()
    flow_id = handle.id
    calls = Calls(app.backend, "jobs_cancel", "jobs_cancel_many")

    # when it is cancelled
    flow = app.cancel_workflow(flow_id, by="ops")

    # then every job is cancelled, by one call
    assert {j.status.value for j in flow.jobs} == {"cancelled"} and len(flow.jobs) == 41
    assert calls.counts == {"jobs_cancel": 0, "jobs_cancel_many": 1}


def test_cancel_pending_takes_the_waiting_steps_of_the_queue_too(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given a chain whose first step runs in "fetch" and whose next ones wait in "mail", and a
    # plain pending job in "mail"
    app = make_app()

    @app.job(queue="fetch")
    def fetch() -> str:
        return "x"

    @app.job(queue="mail")
    def send(text: str) -> str:
        return text

    handle = jobyard.chain(fetch.s(), send.s(), send.s()).enqueue()
    flow_id = handle.id
    plain = send.enqueue("y").id
    steps = [j for j in app.workflow(flow_id).jobs if j.queue == "mail"]
    assert [j.status.value for j in steps] == ["waiting", "waiting"]

    # when the queue's jobs that have not started are cancelled (a dry run first)
    preview = app.cancel_pending(queue="mail", dry_run=True)
    cancelled = app.cancel_pending(queue="mail")

    # then the waiting steps went with the pending job: none runs later in that queue once
    # fetch completes; fetch, in another queue, is left alone
    assert sorted(cancelled) == sorted(preview) == sorted([plain, *(j.id for j in steps)])
    assert {app.get(j.id).status.value for j in steps} == {"cancelled"}
    first = next(j for j in app.workflow(flow_id).jobs if j.queue == "fetch")
    assert first.status.value == "pending"
    assert testing.drain(app, ["fetch", "mail"]) == 1
    assert {app.get(j.id).status.value for j in steps} == {"cancelled"}


def test_cancel_pending_leaves_a_running_job_claimed_meanwhile(backend: Backend) -> None:
    # the move cancel_pending sends: a job claimed between its listing and the cancel runs on
    (a,) = insert(backend, new())
    (job,) = backend.jobs_claim(JobsClaimParams("w1", ["q"], 1))
    assert backend.jobs_cancel_many(JobsCancelManyParams([a], pending_only=True)) == []
    assert statuses(backend, a) == ["running"]
    assert job.id == a
