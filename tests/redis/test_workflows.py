"""What only the Redis store has of workflows: the release a completion owes to a dependent in
another hash slot on Cluster (recorded by the ack script, paid by ``jobs_ack`` or, if its caller
died in between, by ``leases_reap``; paid once however often), the compact completed record that
keeps a workflow's links and result, and the workflow index that retention cleans up. The
contract of the moves themselves is tests/contract/test_workflow_moves.py."""

from __future__ import annotations

from typing import Any

import pytest

from jobyard.backends.base import (
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsExpireParams,
    JobsInsertParams,
    JobsListParams,
    JobsPurgeParams,
    JobsResumeParams,
    Outcome,
)
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from jobyard.worker.reaper import reap
from tests.redis.conftest import insert, new, url_for

FLOW = "wf-1"


def step(*after: int, queue: str = "q") -> Any:
    return new(queue, workflow_id=FLOW, after=after)


def completed(backend: RedisBackend, queue: str) -> list[Outcome]:
    """Claim every due job of ``queue`` and return their completions (not sent)."""
    held = backend.jobs_claim(JobsClaimParams("w1", (queue,), 100))
    return [Outcome(c.id, c.token, "completed", result=f'"{c.id}"') for c in held]


def status(backend: RedisBackend, job_id: str) -> str:
    rec = backend.jobs_get(job_id)
    assert rec is not None
    return rec.status


def ready(backend: RedisBackend, queue: str) -> list[str]:
    """The pending index of ``queue``: each entry once a job is released (claimable)."""
    key = backend.keys.queue(queue)[3]
    return sorted(backend.client.zrange(key, 0, -1))


@pytest.mark.parametrize("kind", ["cluster"])
def test_a_release_left_owed_by_a_dead_caller_is_paid_once_by_the_reaper(
    backend: RedisBackend,
) -> None:
    # given a join in queue "c" waiting on members in queues "a" and "b" (other slots)
    _, m2, join = insert(backend, step(queue="a"), step(queue="b"), step(0, 1, queue="c"))
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    # when m2's completion runs its script and the caller dies before paying the release
    refused, notes = backend._ack(JobsAckParams(completed(backend, "b")))
    assert refused == [] and [n[1][0] for n in notes] == ["owed"]
    # then m2 is completed, the release is owed in its queue, and the join still waits
    assert status(backend, m2) == "completed"
    assert backend.client.hgetall(backend.keys.owed("b")) == {m2.rsplit(":", 1)[1]: join}
    assert status(backend, join) == "waiting"
    # when the watchdog runs
    assert reap(backend) == []
    # then it paid the release: the join is pending and nothing is owed
    assert status(backend, join) == "pending"
    assert backend.client.hlen(backend.keys.owed("b")) == 0
    # and a second run and a late payer sending the same release change nothing
    reap(backend)
    backend.pay_owed([("b", m2.rsplit(":", 1)[1], join)])
    assert ready(backend, "c") == [join.rsplit(":", 1)[1]]
    assert [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("c",), 10))] == [join]
    assert backend.jobs_claim(JobsClaimParams("w1", ("c",), 10)) == []


@pytest.mark.parametrize("kind", ["cluster"])
def test_a_resumed_step_whose_caller_died_is_checked_by_the_reaper(
    backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given x in queue "a" completed, and its dependent y in queue "b" (another slot) cancelled
    x, y = insert(backend, step(queue="a"), step(0, queue="b"))
    backend.jobs_cancel(JobsCancelParams(y))
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    assert status(backend, y) == "cancelled"
    # when y is resumed and its caller dies after the script, before checking x (its script
    # cannot read x: another slot)
    with monkeypatch.context() as m:
        m.setattr(backend, "_settle", lambda notes: None)
        assert backend.jobs_resume(JobsResumeParams([y])) == [y]
    # then y waits, with the check of x owed in its queue
    assert status(backend, y) == "waiting"
    n = y.rsplit(":", 1)[1]
    assert backend.client.hgetall(backend.keys.owed("b")) == {f"w{n}": x}
    # when the watchdog runs, then it counted x off: y is due and nothing is owed
    reap(backend)
    assert status(backend, y) == "pending"
    assert backend.client.hlen(backend.keys.owed("b")) == 0
    # and a late check and a second run change nothing: y is ready once
    backend._pay_waits([("b", f"w{n}", x)])
    reap(backend)
    assert ready(backend, "b") == [n]
    assert [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("b",), 10))] == [y]


@pytest.mark.parametrize("kind", ["cluster"])
def test_an_owed_release_paid_twice_counts_its_input_once(backend: RedisBackend) -> None:
    # given a join in "c" waiting on two members of "a"
    m1, m2, join = insert(backend, step(queue="a"), step(queue="a"), step(0, 1, queue="c"))
    held = completed(backend, "a")
    # when only m1 completes, and its owed release is paid by both the ack and a repeat
    first = [o for o in held if o.id == m1]
    _, notes = backend._ack(JobsAckParams(first))
    backend._settle(notes)
    backend.pay_owed([("a", m1.rsplit(":", 1)[1], join)])
    # then the join still waits for m2
    assert status(backend, join) == "waiting"
    # and m2's completion releases it
    backend.jobs_ack(JobsAckParams([o for o in held if o.id == m2]))
    assert status(backend, join) == "pending"
    assert backend.client.hlen(backend.keys.owed("a")) == 0


@pytest.mark.parametrize("kind", ["cluster"])
def test_an_owed_release_keeps_its_input_from_a_purge(backend: RedisBackend) -> None:
    # given a release owed by a caller that died: its completed input waits to be paid
    first, join = insert(backend, step(queue="b"), step(0, queue="a"))
    backend._ack(JobsAckParams(completed(backend, "b")))
    # then a purge keeps the input: the join, which has not run, still needs its result
    purged = backend.jobs_purge(JobsPurgeParams(statuses=("completed",)))
    assert (int(purged), purged.kept) == (0, 1)
    # when the watchdog runs, it pays the release
    reap(backend)
    assert status(backend, join) == "pending"
    assert backend.client.hlen(backend.keys.owed("b")) == 0
    # and once the join completed (its hold paid across slots too), the purge takes both
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    assert backend.client.hlen(backend.keys.owed("a")) == 0
    assert int(backend.jobs_purge(JobsPurgeParams(statuses=("completed",)))) == 2
    assert backend.jobs_get(first) is None


@pytest.mark.parametrize("kind", ["cluster"])
def test_no_counted_inputs_outlive_their_step(backend: RedisBackend) -> None:
    # given a step in "a" waiting on x (queue "b", counted through an owed release) and y ("a")
    _, _, join = insert(backend, step(queue="b"), step(queue="a"), step(0, 1, queue="a"))
    backend.jobs_ack(JobsAckParams(completed(backend, "b")))
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    # then once released, the step's set of counted inputs is gone
    n = join.rsplit(":", 1)[1]
    assert status(backend, join) == "pending"
    assert not backend.client.exists(f"{backend.keys.tag('a')}:inputs:{n}")


def test_a_completed_step_keeps_its_result_and_links(backend: RedisBackend) -> None:
    # given a chain a -> b whose first step completed (the completed record is compacted)
    a, b = insert(backend, step(), step(0))
    backend.jobs_ack(JobsAckParams(completed(backend, "q")))
    backend.jobs_ack(JobsAckParams(completed(backend, "q")))
    # then both completed records keep what a join reads: result, workflow and links
    ra, rb = backend.jobs_get(a), backend.jobs_get(b)
    assert ra is not None and rb is not None
    assert (ra.status, ra.result, ra.workflow_id) == ("completed", f'"{a}"', FLOW)
    assert (ra.depends_on, ra.dependents) == ((), (b,))
    assert (rb.status, rb.result, rb.depends_on, rb.dependents) == ("completed", f'"{b}"', (a,), ())
    # and the counter of inputs is gone with the wait
    assert backend.client.hget(backend.keys.job("q", b.rsplit(":", 1)[1]), "waits") is None


def test_a_plain_job_writes_no_workflow_field_or_key(backend: RedisBackend) -> None:
    (a,) = insert(backend, new())
    backend.jobs_ack(JobsAckParams(completed(backend, "q")))
    h = backend.client.hgetall(backend.keys.job("q", a.rsplit(":", 1)[1]))
    assert not {"workflow_id", "depends_on", "dependents", "waits"} & h.keys()
    assert backend.client.exists(backend.keys.queue("q")[15]) == 0  # the workflows hash


@pytest.mark.parametrize("kind", ["node"])
def test_one_node_releases_across_queues_in_the_ack_itself(backend: RedisBackend) -> None:
    _, join = insert(backend, step(queue="a"), step(0, queue="c"))
    refused, notes = backend._ack(JobsAckParams(completed(backend, "a")))
    assert (refused, notes) == ([], [])
    assert status(backend, join) == "pending"
    assert backend.client.exists(backend.keys.owed("a")) == 0


def test_purging_a_workflow_drops_its_index(backend: RedisBackend, clock: FrozenClock) -> None:
    # given a completed chain, listed by its workflow
    a, b = insert(backend, step(), step(0))
    backend.jobs_ack(JobsAckParams(completed(backend, "q")))
    backend.jobs_ack(JobsAckParams(completed(backend, "q")))
    assert [r.id for r in backend.jobs_list(JobsListParams(workflow_id=FLOW))] == [b, a]
    # when its jobs are purged
    clock.advance(10)
    assert backend.jobs_purge(JobsPurgeParams(older_than=1, statuses=("completed",))) == 2
    # then the workflow's index and its job -> workflow entries are gone
    tag = backend.keys.tag("q")
    assert backend.client.exists(f"{tag}:wf:{FLOW}", backend.keys.queue("q")[15]) == 0
    assert backend.jobs_list(JobsListParams(workflow_id=FLOW)) == []


def job_ttl(backend: RedisBackend, job_id: str) -> int:
    queue, n = job_id.rsplit(":", 1)
    return int(backend.client.ttl(backend.keys.job(queue, n)))


def test_a_held_input_gets_no_key_ttl_until_freed(kind: str, clock: FrozenClock) -> None:
    # given a store that keeps completed jobs a second, and a chain a -> b across queues
    backend = RedisBackend(url_for(kind, result_ttl=1), clock)
    try:
        a, b = insert(backend, step(queue="a"), step(0, queue="b"))
        backend.jobs_ack(JobsAckParams(completed(backend, "a")))
        # then a, whose result b still needs, has no TTL and is in no index retention walks
        assert job_ttl(backend, a) == -1
        assert backend.client.zcard(backend.keys.queue("a")[7]) == 0  # done:completed
        assert backend.client.zcard(f"{backend.keys.tag('a')}:held") == 1
        # when b completes (its hold paid across slots on Cluster), a is freed: a TTL, indexed
        backend.jobs_ack(JobsAckParams(completed(backend, "b")))
        assert 0 < job_ttl(backend, a) <= 1 and 0 < job_ttl(backend, b) <= 1
        assert backend.client.zcard(f"{backend.keys.tag('a')}:held") == 0
        assert backend.client.zcard(backend.keys.queue("a")[7]) == 1
        assert backend.client.hget(backend.keys.job("a", a.rsplit(":", 1)[1]), "holds") is None
    finally:
        backend.close()


def test_failed_workflow_jobs_expire_with_their_waiting_steps(
    kind: str, clock: FrozenClock
) -> None:
    # given failed jobs kept 60 s: a plain one, and the middle step of a -> boom -> b
    backend = RedisBackend(url_for(kind, failed_ttl=60), clock)
    try:
        (plain,) = insert(backend, new(queue="b"))
        a, boom, b = insert(backend, step(queue="a"), step(0, queue="b"), step(1, queue="c"))
        backend.jobs_ack(JobsAckParams(completed(backend, "a")))
        held = backend.jobs_claim(JobsClaimParams("w1", ("b",), 10))
        backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "failed") for c in held]))
        # then the plain one expires by its key TTL; the workflow step has none: only
        # jobs_expire may drop it, and must take b along
        assert 0 < job_ttl(backend, plain) <= 60 and job_ttl(backend, boom) == -1
        clock.advance(120)
        assert backend.jobs_expire(JobsExpireParams()) == 3
        assert [backend.jobs_get(i) for i in (plain, boom, b)] == [None, None, None]
        # and a, held by boom until then, is freed for its retention
        assert status(backend, a) == "completed" and job_ttl(backend, a) > 0
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["cluster"])
def test_holds_and_drops_left_owed_by_a_dead_caller_are_paid_by_the_reaper(
    backend: RedisBackend,
) -> None:
    # given a -> boom -> b -> c across three queues (three slots)
    a, boom, b, c = insert(
        backend, step(queue="a"), step(0, queue="b"), step(1, queue="c"), step(2, queue="a")
    )
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    held = backend.jobs_claim(JobsClaimParams("w1", ("b",), 10))
    backend.jobs_ack(JobsAckParams([Outcome(h.id, h.token, "failed") for h in held]))
    # when a purge of queue "b" runs its script and its caller dies before paying what it owes
    args = [backend.core.now(), "1", "0", "100", "0", backend.keys.prefix, "", "", "failed"]
    reply = backend.core.run("jobs_purge", backend.keys.queue("b"), args)
    assert [int(x) for x in reply[:4]] == [1, 0, 0, 0]
    assert sorted(e[2][:1] for e in reply[4:]) == ["d", "f"]
    assert status(backend, b) == "waiting" and status(backend, a) == "completed"
    # then the watchdog pays it: b and c (which b's drop owes in turn) are gone, a is freed
    reap(backend)
    assert [backend.jobs_get(i) for i in (boom, b, c)] == [None, None, None]
    assert {q: backend.client.hlen(backend.keys.owed(q)) for q in "abc"} == dict.fromkeys("abc", 0)
    assert int(backend.jobs_purge(JobsPurgeParams(statuses=("completed",)))) == 1
    # and paying the same again changes nothing
    backend._settle([("b", ["owed", 1, e[2], e[3]]) for e in reply[4:]])
    assert backend.jobs_list(JobsListParams(workflow_id=FLOW)) == []


@pytest.mark.parametrize("kind", ["cluster"])
def test_an_owed_hold_paid_twice_counts_once(backend: RedisBackend) -> None:
    # given x in "a" that two steps need, y in "b" and z in "c"
    x, y, z = insert(backend, step(queue="a"), step(0, queue="b"), step(0, queue="c"))
    backend.jobs_ack(JobsAckParams(completed(backend, "a")))
    # when y completes and the hold it owes x is paid twice (a caller and the watchdog)
    refused, notes = backend._ack(JobsAckParams(completed(backend, "b")))
    assert refused == [] and [n[1][2][:1] for n in notes] == ["f"]
    backend._settle(notes)
    backend._settle(notes)
    # then x is still held for z, which has not run (y, needed by nobody, goes)
    purged = backend.jobs_purge(JobsPurgeParams(statuses=("completed",)))
    assert (int(purged), purged.kept, status(backend, x)) == (1, 1, "completed")
    # and z's completion frees it
    backend.jobs_ack(JobsAckParams(completed(backend, "c")))
    assert int(backend.jobs_purge(JobsPurgeParams(statuses=("completed",)))) == 2
    assert [backend.jobs_get(i) for i in (x, y, z)] == [None, None, None]


def test_a_lapsed_queue_takes_its_waiting_steps_and_those_downstream_along(
    backend: RedisBackend,
) -> None:
    from tests.conftest import wait_until

    # given, in queue "feed": a step released by its completed input a (in "src"), a root
    # step p, and a step w still waiting on b (in "src"); n1 and n2 wait on them in "next"
    a, f1, n1, p, n2, b, w = insert(
        backend,
        step(queue="src"),
        step(0, queue="feed"),
        step(1, queue="next"),
        step(queue="feed"),
        step(3, queue="next"),
        step(queue="src"),
        step(5, queue="feed"),
    )
    backend.jobs_ack(JobsAckParams(completed(backend, "src")[:1]))
    assert [status(backend, i) for i in (a, f1, p, w)] == [
        "completed",
        "pending",
        "pending",
        "waiting",
    ]
    # when "feed" is fed with a time to live, then left unfed past it
    backend.jobs_insert(JobsInsertParams([new("feed")]), queue_ttl=0.2)
    alive = backend.keys.queue("feed")[12]
    wait_until(lambda: backend.client.exists(alive) == 0, what="the queue to lapse")

    # then no claim takes its jobs, and the expiry drops them with their waiting steps:
    # three pending jobs of "feed", its waiting w, and n1 and n2 downstream in "next"
    assert backend.jobs_claim(JobsClaimParams("w1", ("feed",), 10)) == []
    assert backend.jobs_expire(JobsExpireParams()) == 6
    assert [backend.jobs_get(i) for i in (f1, p, w, n1, n2)] == [None] * 5
    assert backend.jobs_list(JobsListParams(queue="feed")) == []
    assert backend.jobs_list(JobsListParams(queue="next")) == []
    # and a, whose only dependent went, is freed for its retention; b (claimed) runs on
    assert status(backend, a) == "completed" and job_ttl(backend, a) > 0
    assert status(backend, b) == "running"
