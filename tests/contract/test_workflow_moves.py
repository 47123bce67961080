"""The state moves behind chains and groups, driven on the Backend directly (base.py):
a step is inserted ``waiting`` on earlier jobs of its batch, and the completion of its last
input releases it to ``pending`` in the same move, exactly once however the completions race."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    Backend,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsListParams,
    NewJob,
    Outcome,
    QueueConfig,
    StatsParams,
)
from jobyard.worker.reaper import reap

from .test_backend import PAYLOAD, claim, insert, new

FLOW = "wf-0001"


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def step(*after: int, queue: str = "q", **kw: object) -> NewJob:
    return new(queue, workflow_id=FLOW, after=after, **kw)


def complete(backend: Backend, *job_ids: str, worker: str = "w1") -> None:
    """Claim the given jobs (by claiming until each is held) and complete them in one ack."""
    wanted = set(job_ids)
    held = {}
    queues = tuple({r.queue for r in backend.jobs_list(JobsListParams(ids=job_ids, limit=100))})
    for c in backend.jobs_claim(JobsClaimParams(worker, queues, 100)):
        held[c.id] = c
    assert wanted <= held.keys(), f"{sorted(wanted - held.keys())} were not claimable"
    outcomes = [Outcome(i, held[i].token, "completed", result=f'"r{i}"') for i in job_ids]
    others = [Outcome(c.id, c.token, "release") for i, c in held.items() if i not in wanted]
    assert backend.jobs_ack(JobsAckParams(outcomes + others)) == []


def status(backend: Backend, job_id: str) -> str:
    rec = backend.jobs_get(job_id)
    assert rec is not None
    return rec.status


def test_a_step_waits_for_its_inputs_and_records_the_links(backend: Backend) -> None:
    # given a chain of three: a -> b -> c
    a, b, c = insert(backend, step(), step(0), step(1))
    # then only the first is pending; the others wait, linked both ways, in one workflow
    assert [status(backend, i) for i in (a, b, c)] == ["pending", "waiting", "waiting"]
    ra, rb, rc = (backend.jobs_get(i) for i in (a, b, c))
    assert ra and rb and rc
    assert (ra.depends_on, ra.dependents) == ((), (b,))
    assert (rb.depends_on, rb.dependents) == ((a,), (c,))
    assert (rc.depends_on, rc.dependents) == ((b,), ())
    assert {ra.workflow_id, rb.workflow_id, rc.workflow_id} == {FLOW}
    # and a claim never hands out a waiting job
    assert [j.id for j in claim(backend)] == [a]


def test_completing_the_input_releases_the_next_step_once(backend: Backend) -> None:
    a, b, c = insert(backend, step(), step(0), step(1))
    complete(backend, a)
    assert (status(backend, b), status(backend, c)) == ("pending", "waiting")
    complete(backend, b)
    assert status(backend, c) == "pending"


def test_a_join_is_released_only_by_its_last_input(backend: Backend) -> None:
    # given a group of three with a join that waits for all of them, in member order
    m1, m2, m3, join = insert(backend, step(), step(), step(), step(2, 0, 1))
    rec = backend.jobs_get(join)
    assert rec is not None and rec.depends_on == (m3, m1, m2)
    complete(backend, m1)
    assert status(backend, join) == "waiting"
    # when the other two complete in one acknowledgement
    complete(backend, m2, m3)
    # then the join is pending
    assert status(backend, join) == "pending"


def test_only_a_completion_releases(backend: Backend) -> None:
    # given a member that fails, one that is cancelled by its handler, one that retries
    m1, m2, m3, join = insert(backend, step(), step(), step(), step(0, 1, 2))
    held = {c.id: c for c in claim(backend)}
    backend.jobs_ack(
        JobsAckParams(
            [
                Outcome(m1, held[m1].token, "failed", error="boom"),
                Outcome(m2, held[m2].token, "cancelled", error="stopped"),
                Outcome(m3, held[m3].token, "retry", error="later"),
            ]
        )
    )
    # then the join still waits
    assert status(backend, join) == "waiting"
    # and re-driving the failed and cancelled members, then completing all, releases it
    backend.jobs_retry(m1)
    backend.jobs_retry(m2)
    complete(backend, m1, m2, m3)
    assert status(backend, join) == "pending"


def settle(backend: Backend, endings: dict[str, str]) -> None:
    """Claim the jobs of ``endings`` and acknowledge each with its ending, in one ack:
    ``completed``, ``failed``, or ``cancelled`` as a handler ends a job whose cancellation
    was requested while it ran."""
    queues = tuple({r.queue for r in backend.jobs_list(JobsListParams(ids=list(endings)))})
    held = {c.id: c for c in backend.jobs_claim(JobsClaimParams("w1", queues, 100))}
    assert endings.keys() == held.keys()
    outcomes = []
    for job_id, ending in endings.items():
        token = held[job_id].token
        if ending == "completed":
            outcomes.append(Outcome(job_id, token, "completed", result='"r"'))
        elif ending == "cancelled":
            asked = backend.jobs_cancel(JobsCancelParams(job_id, by="ops"))
            assert asked.status == "running"  # a request only: the handler honours it
            outcomes.append(Outcome(job_id, token, "cancelled", error="cancelled on request"))
        else:
            outcomes.append(Outcome(job_id, token, "failed", error="boom"))
    assert backend.jobs_ack(JobsAckParams(outcomes)) == []


@pytest.mark.parametrize("step_queue", ["in", "out"], ids=["same-queue", "other-queue"])
@pytest.mark.parametrize(
    "endings",
    [("completed", "failed"), ("completed", "cancelled"), ("failed",), ("cancelled",)],
    ids="+".join,
)
def test_a_step_waits_while_an_input_did_not_complete(
    backend: Backend, endings: tuple[str, ...], step_queue: str
) -> None:
    # given a step waiting on one input per ending, in the inputs' queue or in another one
    # (another hash slot on Redis Cluster, where a completion's release is owed and paid apart)
    *inputs, waiting = insert(
        backend, *[step(queue="in") for _ in endings], step(*range(len(endings)), queue=step_queue)
    )
    # when every input ends, in one acknowledgement, and one of them did not complete
    settle(backend, dict(zip(inputs, endings, strict=True)))
    # then the step still waits: only a completion counts as an input done
    assert status(backend, waiting) == "waiting"
    assert claim(backend, queues=(step_queue,)) == []
    # and once the input that did not complete is re-driven and completes, the step is released
    again = [i for i, ending in zip(inputs, endings, strict=True) if ending != "completed"]
    for job_id in again:
        assert backend.jobs_retry(job_id).status == "pending"
    settle(backend, dict.fromkeys(again, "completed"))
    assert status(backend, waiting) == "pending"


def test_a_stale_completion_releases_nothing(backend: Backend) -> None:
    # given a member whose lease lapsed and was reaped back to pending
    m1, join = insert(backend, step(lease=0.5), step(0))
    (first,) = claim(backend)
    clock = backend.clock
    assert isinstance(clock, jobyard.FrozenClock)
    clock.advance(5)
    reap(backend)
    # when the first worker's late completion arrives
    stale = backend.jobs_ack(JobsAckParams([Outcome(m1, first.token, "completed", result="1")]))
    # then it is refused and the join still waits
    assert stale == [m1]
    assert status(backend, join) == "waiting"


def test_a_step_is_released_no_earlier_than_its_own_run_at(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    a, b = insert(backend, step(), step(0, delay=60))
    complete(backend, a)
    rec = backend.jobs_get(b)
    assert rec is not None
    assert rec.status == "pending"
    assert rec.run_at == pytest.approx(clock.now() + 60, abs=0.01)
    assert claim(backend) == []


def test_waiting_jobs_are_cancelled_at_once_and_listed_and_counted(backend: Backend) -> None:
    a, b, c = insert(backend, step(), step(0), step(1))
    stats = {s.queue: s for s in backend.stats_get(StatsParams())}["q"]
    assert (stats.counts["waiting"], stats.counts["pending"]) == (2, 1)
    waiting = backend.jobs_list(JobsListParams(status="waiting"))
    assert [r.id for r in waiting] == [c, b]
    # cancelling a waiting step finishes it, like a pending one
    rec = backend.jobs_cancel(JobsCancelParams(b, by="ops"))
    assert (rec.status, rec.cancelled_by) == ("cancelled", "ops")
    # and its input's completion then releases nothing
    complete(backend, a)
    assert (status(backend, b), status(backend, c)) == ("cancelled", "waiting")


def test_listing_by_workflow_and_by_ids(backend: Backend) -> None:
    a, b = insert(backend, step(), step(0))
    (other,) = insert(backend, new())
    listed = backend.jobs_list(JobsListParams(workflow_id=FLOW))
    assert [r.id for r in listed] == [b, a]
    by_ids = backend.jobs_list(JobsListParams(ids=[a, other, "424242"]))
    assert sorted(r.id for r in by_ids) == sorted([a, other])
    assert backend.jobs_list(JobsListParams(ids=[])) == []


def queued(backend: Backend, queue: str = "q") -> dict[str, int]:
    (stats,) = [s for s in backend.stats_get(StatsParams()) if s.queue == queue]
    return {st: stats.counts[st] for st in ("waiting", "pending")}


def test_waiting_steps_count_against_max_pending(backend: Backend) -> None:
    # given a queue capped at 3 jobs
    backend.queues_configure(QueueConfig("q", max_pending=3))
    # when a chain of four steps is enqueued (one pending, three waiting)
    with pytest.raises(jobyard.QueueFull):
        insert(backend, step(), step(0), step(1), step(2))
    # then it is refused whole, although only one of its steps would be pending
    assert backend.jobs_list(JobsListParams(queue="q")) == []
    # and a chain of three fills the queue: no plain job fits beside it
    ids = insert(backend, step(), step(0), step(1))
    assert [status(backend, i) for i in ids] == ["pending", "waiting", "waiting"]
    with pytest.raises(jobyard.QueueFull):
        insert(backend, new())
    assert queued(backend) == {"waiting": 2, "pending": 1}


def test_a_released_step_is_never_refused_by_max_pending(backend: Backend) -> None:
    # given a queue capped at 2, holding a chain a -> b whose first step runs
    backend.queues_configure(QueueConfig("q", max_pending=2))
    a, b = insert(backend, step(), step(0))
    (held,) = claim(backend)
    # and a plain job that takes the room a left (b waiting + it pending = 2)
    (plain,) = insert(backend, new())
    # when a completes, b is released to pending although the queue is at its cap
    assert backend.jobs_ack(JobsAckParams([Outcome(a, held.token, "completed")])) == []
    assert (status(backend, b), status(backend, plain)) == ("pending", "pending")
    # and the cap still holds for new work
    with pytest.raises(jobyard.QueueFull):
        insert(backend, new())


def test_a_step_counts_against_its_own_queues_max_pending(backend: Backend) -> None:
    # given a join queue "c" capped at 1, holding one waiting join
    backend.queues_configure(QueueConfig("c", max_pending=1))
    _, join = insert(backend, step(queue="a"), step(0, queue="c"))
    # when another workflow with a join in "c" is enqueued
    with pytest.raises(jobyard.QueueFull, match="'c'"):
        insert(backend, step(queue="a"), step(0, queue="c"))
    # then nothing of it was written, in either queue
    listed = backend.jobs_list(JobsListParams(workflow_id=FLOW, limit=10))
    assert sorted(r.queue for r in listed) == ["a", "c"]
    assert status(backend, join) == "waiting"


def test_steps_across_queues(backend: Backend) -> None:
    # given a join in another queue than its members (another hash slot on Redis Cluster)
    m1, m2, join = insert(backend, step(queue="a"), step(queue="b"), step(0, 1, queue="c"))
    complete(backend, m1)
    assert status(backend, join) == "waiting"
    complete(backend, m2)
    assert status(backend, join) == "pending"
    assert [j.id for j in claim(backend, queues=("c",))] == [join]


def test_racing_completions_release_the_join_exactly_once(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given a group of 40 members and a join, claimed by four workers of their own
    app = make_app()
    backend = app.backend
    n = 40
    ids = insert(backend, *[step() for _ in range(n)], step(*range(n)))
    members, join = ids[:n], ids[n]
    others = [make_app().backend for _ in range(4)]
    held = [b.jobs_claim(JobsClaimParams(f"w{i}", ("q",), 10)) for i, b in enumerate(others)]
    assert sum(len(h) for h in held) == n
    # when they all complete at the same instant, each ack on its own connection
    gate = threading.Barrier(len(others), timeout=30)
    errors: list[BaseException] = []
    refused: list[str] = []

    def ack(b: Backend, claimed: list) -> None:
        try:
            gate.wait()
            for c in claimed:
                outcome = Outcome(c.id, c.token, "completed", result="1")
                refused.extend(b.jobs_ack(JobsAckParams([outcome])))
        except BaseException as exc:  # reported below: an exception in a thread is lost
            errors.append(exc)
            raise

    threads = [
        threading.Thread(target=ack, args=pair, daemon=True)
        for pair in zip(others, held, strict=True)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    # then every acknowledgement ended within the deadline, none raised and none was refused
    assert [t for t in threads if t.is_alive()] == [], "an acknowledgement did not return"
    assert errors == []
    assert refused == []
    # and every member completed and the join is pending, claimable exactly once
    assert {status(backend, i) for i in members} == {"completed"}
    assert status(backend, join) == "pending"
    assert [c.id for c in claim(backend)] == [join]
    assert claim(backend) == []


def test_a_batch_without_workflows_is_unchanged(backend: Backend) -> None:
    (a,) = insert(backend, NewJob(name="t", queue="q", payload=PAYLOAD))
    rec = backend.jobs_get(a)
    assert rec is not None
    assert (rec.workflow_id, rec.depends_on, rec.dependents) == (None, (), ())
