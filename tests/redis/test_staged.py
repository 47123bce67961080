"""Batches written in several calls (``_insert.py``): a large batch, and on Cluster any batch that
spans queues, is staged slice by slice and hidden from every reader until it is published whole;
one abandoned before its commit leaves nothing visible and is deleted (by its producer, or by the
reaper once its deadline passed); one committed is finished by the reaper. Slices are made small
here (10 jobs) so that small batches take several calls."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

import jobyard
from jobyard.backends.base import (
    Inserted,
    JobsAckParams,
    JobsCancelParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsListParams,
    NewJob,
    Outcome,
    QueueConfig,
    QueueLimits,
    StatsParams,
)
from jobyard.backends.redis import _insert
from jobyard.backends.redis.backend import RedisBackend
from jobyard.clock import FrozenClock
from jobyard.worker.reaper import reap
from tests.conftest import ROOT, wait_until
from tests.redis import support
from tests.redis.conftest import cluster_client, insert, new

SLICE = 10


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten jobs a script: a batch of a few dozen is written in several calls."""
    monkeypatch.setattr(_insert, "SLICE_JOBS", SLICE)


def step(*after: int, queue: str = "a", flow: str = "wf-1") -> NewJob:
    return new(queue, workflow_id=flow, after=after)


def group_and_join(members: int, queue: str = "a", join_queue: str = "b") -> list[NewJob]:
    return [*(step(queue=queue) for _ in range(members)), step(*range(members), queue=join_queue)]


def stage(backend: RedisBackend, jobs: Sequence[NewJob]) -> tuple[Any, list[Inserted]]:
    """Open a batch and write every slice of it, as ``jobs_insert`` does, without committing:
    the state a producer that stops here leaves."""
    jobs = list(jobs)
    queues = list(dict.fromkeys(j.queue for j in jobs))
    batch = _insert._Batch.open(backend.core, jobs, queues)
    ids = [f"{j.queue}:{batch.lo + i}" for i, j in enumerate(jobs)]
    links = _insert.links(jobs, ids)
    out: list[Inserted | None] = [None] * len(jobs)
    parts = list(_insert._slices(backend.core, jobs, queues))
    assert len(parts) > 1  # several calls
    for part in parts:
        for i, got in zip(part, batch._stage(jobs, links, part), strict=True):
            out[i] = got
    return batch, [i for i in out if i is not None]


def visible(backend: RedisBackend, ids: Sequence[str]) -> dict[str, Any]:
    """Everything a reader can see of these jobs (and of the queues a and b)."""
    counts = {s.queue: s.counts for s in backend.stats_get(StatsParams())}
    return {
        "get": [i for i in ids if backend.jobs_get(i) is not None],
        "ids": backend.jobs_list(JobsListParams(ids=list(ids), limit=1000)),
        "listed": backend.jobs_list(JobsListParams(limit=1000)),
        "pending": backend.jobs_list(JobsListParams(status="pending", limit=1000)),
        "waiting": backend.jobs_list(JobsListParams(status="waiting", limit=1000)),
        "workflow": backend.jobs_list(JobsListParams(workflow_id="wf-1", limit=1000)),
        "counted": sum(c["waiting"] + c["pending"] for c in counts.values()),
    }


NOTHING = {
    "get": [],
    "ids": [],
    "listed": [],
    "pending": [],
    "waiting": [],
    "workflow": [],
    "counted": 0,
}


def stored_jobs(backend: RedisBackend) -> list[str]:
    """Every job hash of the store, found by key (what a reader cannot see too)."""
    return [
        k
        for k in backend.client.scan_iter(match=backend.keys.pattern(), count=1000)
        if ":job:" in k
    ]


def staging_keys(backend: RedisBackend) -> list[str]:
    """Keys of staged batches left in the store: records, stage hashes and levels, segments,
    staged ranges (not the tombstones of aborted stages, which expire: see is_tombstone)."""
    keys = backend.client.scan_iter(match=backend.keys.pattern(), count=1000)
    marks = (":stage", ":batch:", "@")
    left = [k for k in keys if any(m in k for m in marks) and not is_tombstone(backend, k)]
    if backend.client.zcard(backend.keys.batches):
        left.append(backend.keys.batches)
    return sorted(left)


def is_tombstone(backend: RedisBackend, key: str) -> bool:
    if ":stage:" not in key or key.count(":ready:"):
        return False
    ttl = backend.client.ttl(key)
    return bool(backend.client.hget(key, "state") == "aborted" and 0 < ttl <= _insert.TOMBSTONE_TTL)


def reap_after_deadline(backend: RedisBackend, clock: FrozenClock) -> None:
    clock.advance(_insert.STAGE_TTL + 1)
    reap(backend)


# --- hidden until published ------------------------------------------------------------------


def test_a_staged_batch_is_hidden_from_every_reader_until_it_is_published(
    backend: RedisBackend,
) -> None:
    # given a group of 25 in queue "a" joined in queue "b", staged in several calls, not committed
    batch, inserted = stage(backend, group_and_join(25))
    ids = [i.id for i in inserted]
    assert len(stored_jobs(backend)) == 26  # written, every one of them
    # then no reader sees any of it: reads by id, listings, counts, claims, cancel and retry
    assert visible(backend, ids) == NOTHING
    assert backend.jobs_claim(JobsClaimParams("w1", ("a", "b"), 100)) == []
    with pytest.raises(jobyard.JobNotFound):
        backend.jobs_cancel(JobsCancelParams(ids[0]))
    with pytest.raises(jobyard.JobNotFound):
        backend.jobs_retry(ids[0])
    # when it is committed and published
    batch._finish(*batch._commit(""))
    # then all of it is there at once
    seen = visible(backend, ids)
    assert sorted(seen["get"]) == sorted(ids) and seen["counted"] == 26
    assert sorted(r.id for r in seen["workflow"]) == sorted(ids)
    claimed = backend.jobs_claim(JobsClaimParams("w1", ("a", "b"), 100))
    assert sorted(c.id for c in claimed) == sorted(ids[:25])  # the join waits for them
    done = [Outcome(c.id, c.token, "completed", result="1") for c in claimed]
    assert backend.jobs_ack(JobsAckParams(done)) == []
    join = backend.jobs_get(ids[25])
    assert join is not None and join.status == "pending" and join.depends_on == tuple(ids[:25])
    assert staging_keys(backend) == []


def test_a_large_batch_is_published_without_leftovers(backend: RedisBackend) -> None:
    # given a batch of 35 plain jobs, written through jobs_insert in four slices
    ids = insert(backend, *(new(priority=i % 2) for i in range(35)))
    # then every job is claimable, by priority then enqueue order, and no staging key is left
    order = [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))]
    assert order == [i for n, i in enumerate(ids) if n % 2] + [
        i for n, i in enumerate(ids) if not n % 2
    ]
    assert staging_keys(backend) == []


# --- abandoned ---------------------------------------------------------------------------------


def test_a_batch_refused_at_a_later_slice_leaves_nothing(backend: RedisBackend) -> None:
    # given a queue with room for 25 jobs
    backend.queues_configure(QueueConfig("q", max_pending=25))
    # when a batch of 30 is enqueued: its first two slices fit, its third does not
    with pytest.raises(jobyard.QueueFull):
        insert(backend, *(new(idempotency_key=f"k{i}" if i % 3 else None) for i in range(30)))
    # then nothing of it was seen or is left, its keys are free again, and the room is whole
    assert stored_jobs(backend) == []
    assert backend.client.hlen(backend.keys.queue("q")[10]) == 0  # idem
    assert staging_keys(backend) == []
    created = backend.jobs_insert(
        JobsInsertParams([new(idempotency_key=f"k{i}") for i in range(25)])
    )
    assert all(i.created for i in created)


def test_the_reaper_deletes_a_batch_abandoned_before_its_commit(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    # given a batch staged by a producer that stopped before its commit
    batch, inserted = stage(backend, group_and_join(25))
    assert len(stored_jobs(backend)) == 26
    # when the reaper runs before the batch's deadline, it leaves it alone
    reap(backend)
    assert len(stored_jobs(backend)) == 26
    # and once the deadline passed, it deletes every staged job and key
    reap_after_deadline(backend, clock)
    assert stored_jobs(backend) == []
    assert staging_keys(backend) == []
    assert visible(backend, [i.id for i in inserted]) == NOTHING
    # and the producer, were it to wake up, can write no more of it, nor commit it
    jobs = group_and_join(25)
    ids = [f"{j.queue}:{batch.lo + i}" for i, j in enumerate(jobs)]
    with pytest.raises(_insert.BatchAbandoned):
        batch._stage(jobs, _insert.links(jobs, ids), [0, 1])
    with pytest.raises(_insert.BatchAbandoned):
        batch._commit("")
    assert stored_jobs(backend) == []


def fair_keys(backend: RedisBackend, queue: str = "q") -> dict[str, int]:
    """The sizes of a fair queue's turn state: its turns, its jobs waiting for one, its keys'
    latest turns."""
    tag, c = backend.keys.tag(queue), backend.client
    return {
        "turns": c.zcard(f"{tag}:turns:0"),
        "unturned": c.zcard(f"{tag}:unturned:0"),
        "latest": c.hlen(f"{tag}:turn"),
    }


def test_a_fair_batch_takes_its_turns_as_it_is_staged(backend: RedisBackend) -> None:
    # given a fair queue and a batch of three keys' jobs, staged (hidden) but not published
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    batch, _ = stage(backend, [new(key=f"t{i // 9}") for i in range(27)])
    # then its jobs have their turns already (no claim gives them one) and no claim sees them
    assert fair_keys(backend) == {"turns": 27, "unturned": 0, "latest": 3}
    assert backend.jobs_claim(JobsClaimParams("w1", ("q",), 100)) == []
    # and once published they are claimed in turns, a round of FAIR_TURN jobs per key
    batch._finish(*batch._commit(""))
    got = backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))
    assert len(got) == 27
    keys = [backend.jobs_get(c.id).key for c in got]  # type: ignore[union-attr]
    assert keys[:12] == ["t0"] * 4 + ["t1"] * 4 + ["t2"] * 4
    assert fair_keys(backend) == {"turns": 0, "unturned": 0, "latest": 0}


def test_an_aborted_fair_batch_leaves_no_turn_behind(backend: RedisBackend) -> None:
    # given a fair queue with a job of its own, and a batch staged behind it
    backend.queues_configure(QueueConfig("q", limits=QueueLimits(fair=True)))
    (mine,) = insert(backend, new(key="t0"))
    batch, _ = stage(backend, [new(key=f"t{i % 3}") for i in range(25)])
    # when the batch is abandoned before its commit
    assert batch._abandon()
    # then only the job of its own keeps a turn, and no key keeps a latest turn the batch gave
    # (t0's next job takes its turn from the round being served, as an idle key's does)
    assert fair_keys(backend) == {"turns": 1, "unturned": 0, "latest": 0}
    (got,) = backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))
    assert got.id == mine
    assert fair_keys(backend) == {"turns": 0, "unturned": 0, "latest": 0}


def test_an_abort_never_deletes_a_published_part(backend: RedisBackend) -> None:
    # given a published batch
    batch, inserted = stage(backend, group_and_join(12))
    batch._finish(*batch._commit(""))
    # when its producer, unsure of its commit, aborts it: it learns the batch landed
    assert not batch._abandon()
    # and even a deletion sent regardless deletes nothing: only a hidden range is deleted
    batch.clean()
    assert [backend.jobs_get(i.id) is not None for i in inserted] == [True] * 13


@pytest.mark.parametrize("kind", ["cluster"])
def test_the_reaper_publishes_the_rest_of_a_committed_batch(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    # given a workflow over two queues, committed, whose producer published queue "a" only
    batch, inserted = stage(backend, group_and_join(12))
    ids = [i.id for i in inserted]
    assert batch._decide("committed") == "ok"
    keys = backend.core.group_keys(["a"])
    backend.core.run("jobs_publish", keys, [backend.core.now(), batch.id, "", ""])
    assert backend.jobs_get(ids[0]) is not None and backend.jobs_get(ids[12]) is None
    # when the reaper runs past the batch's deadline
    reap_after_deadline(backend, clock)
    # then it published the rest: the whole workflow is there, and the batch is forgotten
    assert sorted(r.id for r in backend.jobs_list(JobsListParams(workflow_id="wf-1"))) == sorted(
        ids
    )
    assert backend.client.zcard(backend.keys.batches) == 0
    assert [j.id for j in backend.jobs_claim(JobsClaimParams("w1", ("b",), 10))] == []


@pytest.mark.parametrize("kind", ["cluster"])
def test_an_input_completed_before_its_steps_queue_is_published_still_counts(
    backend: RedisBackend,
) -> None:
    # given a chain a -> b over two queues, committed, with queue "a" published first; a worker
    # completes the first step before queue "b" is published
    jobs = [step(queue="a"), step(0, queue="b"), *(step(queue="a") for _ in range(10))]
    batch, inserted = stage(backend, jobs)
    first, second = inserted[0].id, inserted[1].id
    assert batch._decide("committed") == "ok"
    publish = [backend.core.now(), batch.id, "", ""]
    backend.core.run("jobs_publish", backend.core.group_keys(["a"]), publish)
    held = [c for c in backend.jobs_claim(JobsClaimParams("w1", ("a",), 20)) if c.id == first]
    assert backend.jobs_ack(JobsAckParams([Outcome(first, held[0].token, "completed")])) == []
    # when queue "b" is published
    backend.core.run("jobs_publish", backend.core.group_keys(["b"]), publish)
    # then the step counted its input: it is due, once, with its links
    rec = backend.jobs_get(second)
    assert rec is not None and (rec.status, rec.depends_on) == ("pending", (first,))
    assert [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("b",), 10))] == [second]
    n = second.rsplit(":", 1)[1]
    assert not backend.client.exists(f"{backend.keys.tag('b')}:inputs:{n}")


# --- idempotency keys --------------------------------------------------------------------------


def test_a_key_repeated_across_slices_maps_to_its_first_job(backend: RedisBackend) -> None:
    jobs = [new(idempotency_key=f"k{i % 15}") for i in range(30)]
    got = backend.jobs_insert(JobsInsertParams(jobs))
    assert [i.created for i in got] == [True] * 15 + [False] * 15
    assert [i.id for i in got[15:]] == [i.id for i in got[:15]]
    assert len(backend.jobs_list(JobsListParams(queue="q", limit=100))) == 15


@pytest.mark.parametrize("outcome", ["committed", "aborted"])
def test_a_key_held_by_a_staged_batch_waits_for_its_outcome(
    make_backend: Any, clock: FrozenClock, outcome: str
) -> None:
    # given a staged batch that took key "k", not committed yet
    backend: RedisBackend = make_backend(clock)
    other: RedisBackend = make_backend(clock)
    batch, inserted = stage(
        backend, [new(idempotency_key=f"k{i}" if i else "k") for i in range(25)]
    )
    # when another producer enqueues a job with key "k"
    got: list[Inserted] = []
    racer = threading.Thread(
        target=lambda: got.extend(other.jobs_insert(JobsInsertParams([new(idempotency_key="k")])))
    )
    racer.start()
    racer.join(0.5)
    # then it waits for the batch's outcome, neither taking the key nor seeing the staged job
    assert racer.is_alive() and got == []
    if outcome == "committed":
        batch._finish(*batch._commit(""))
    else:
        assert batch._abandon()
    racer.join(10)
    # and learns it: the batch's job holds the key, or the key was free and it made its own
    (result,) = got
    if outcome == "committed":
        assert result == Inserted(inserted[0].id, False)
    else:
        assert result.created and result.id != inserted[0].id
        assert [r.id for r in backend.jobs_list(JobsListParams(queue="q"))] == [result.id]


def test_a_slice_sent_again_answers_as_the_first_and_writes_nothing_twice(
    backend: RedisBackend,
) -> None:
    # given a staged batch with keys repeated across its slices
    jobs = [new(idempotency_key=f"k{i % 12}", priority=i % 3) for i in range(25)]
    batch, first = stage(backend, jobs)
    ids = [f"q:{batch.lo + i}" for i in range(25)]
    links = _insert.links(jobs, ids)
    # when every slice is sent again (each reply was lost)
    again: list[Inserted] = []
    for part in _insert._slices(backend.core, jobs, ["q"]):
        again += batch._stage(jobs, links, part)
    # then the answers are the same, and once published the batch holds its jobs once
    assert again == first
    batch._finish(*batch._commit(""))
    (stats,) = backend.stats_get(StatsParams())
    assert stats.counts["pending"] == 12
    assert len(backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))) == 12


# --- ready levels and segments ---------------------------------------------------------------


def test_a_batch_published_beside_a_level_is_claimed_in_order_then_merged(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    # given a queue holding a job due before now and one due later, and a staged batch of jobs
    # due now, all of one priority
    early, later = insert(backend, new(run_at=clock.now() - 5), new(delay=5))
    batch, inserted = stage(backend, [new() for _ in range(25)])
    ids = [i.id for i in inserted]
    # when it is published (its entries go beside the level, as a segment), not merged yet
    due, segmented = batch._commit("")
    assert segmented and any(
        "@" in m for m in backend.client.zrange(backend.keys.queue("q")[1], 0, -1)
    )
    # then a cancelled job of the segment is not claimed, and claims take run_at order across
    # the level and its segment
    backend.jobs_cancel(JobsCancelParams(ids[0]))
    clock.advance(10)
    got = [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("q",), 5))]
    assert got == [early, *ids[1:5]]
    # and once merged, one level is left, which holds the rest in order
    batch._finish(due, segmented)
    assert backend.client.zrange(backend.keys.queue("q")[1], 0, -1) == ["0"]
    got = [c.id for c in backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))]
    assert got == [*ids[5:], later]
    assert backend.client.zcard(backend.keys.batches) == 0


def test_the_reaper_merges_what_a_published_batch_left(
    backend: RedisBackend, clock: FrozenClock
) -> None:
    insert(backend, new())
    batch, _ = stage(backend, [new() for _ in range(25)])
    batch._commit("")  # published; its producer stops before merging the segment
    reap_after_deadline(backend, clock)
    assert backend.client.zrange(backend.keys.queue("q")[1], 0, -1) == ["0"]
    assert backend.client.zcard(backend.keys.batches) == 0
    assert len(backend.jobs_claim(JobsClaimParams("w1", ("q",), 100))) == 26


# --- failures for real ------------------------------------------------------------------------


def node_of(raw: Any, key: str) -> Any:
    return raw.get_node_from_key(key)


class Refusal:
    """Cluster nodes made to refuse writes for real: min-replicas-to-write 1 on a node without
    replicas, so every write there answers NOREPLICAS (reads still work)."""

    def __init__(self) -> None:
        self.nodes: list[redis.Redis] = []

    def refuse(self, port: int) -> None:
        client = redis.Redis(host=support.SHARED_HOST, port=port)
        client.config_set("min-replicas-to-write", 1)
        self.nodes.append(client)

    def restore(self) -> None:
        for client in self.nodes:
            client.config_set("min-replicas-to-write", 0)
            client.close()
        self.nodes.clear()


@pytest.fixture
def refusal() -> Iterator[Refusal]:
    """Nodes that refuse writes, restored at the end whatever happens."""
    r = Refusal()
    yield r
    r.restore()


@pytest.mark.parametrize("kind", ["cluster"])
def test_a_workflow_whose_second_queues_write_is_refused_leaves_nothing(
    backend: RedisBackend, clock: FrozenClock, refusal: Refusal
) -> None:
    # given queues "a" and a second queue on another node than "a" and the global keys
    raw = cluster_client()
    home = {node_of(raw, backend.keys.tag("a")).port, node_of(raw, backend.keys.seq).port}
    second = next(
        q
        for q in (f"b{i}" for i in range(100))
        if node_of(raw, backend.keys.tag(q)).port not in home
    )
    # when the node of the second queue refuses writes as a workflow over both is enqueued
    refusal.refuse(node_of(raw, backend.keys.tag(second)).port)
    with pytest.raises(redis.exceptions.ResponseError, match="NOREPLICAS"):
        insert(backend, *group_and_join(12, join_queue=second))
    # then nothing of the workflow is there, in either queue
    assert backend.jobs_list(JobsListParams(workflow_id="wf-1")) == []
    assert backend.jobs_claim(JobsClaimParams("w1", ("a", second), 100)) == []
    assert stored_jobs(backend) == []
    # and once the node takes writes again, the reaper forgets the abandoned batch
    refusal.restore()
    reap_after_deadline(backend, clock)
    assert staging_keys(backend) == []
    raw.close()


PRODUCER = """
import sys
import jobyard
app = jobyard.App(sys.argv[1])
@app.job(queue="bulk")
def f(i: int) -> None: ...
f.enqueue_many([((i,), {}) for i in range(int(sys.argv[2]))])
print("done", flush=True)
"""


def test_a_producer_killed_mid_batch_leaves_nothing_visible(make_backend: Any, kind: str) -> None:
    # given a producer process writing a batch of 200,000 jobs (200 slices of 1000)
    url = support.cluster_url() if kind == "cluster" else support.fresh_url()
    backend: RedisBackend = make_backend(at=url)
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, url, "200000"], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        # when it is killed (SIGKILL) once some of its slices landed
        pending = backend.keys.queue("bulk")[3]
        wait_until(lambda: backend.client.zcard(pending) >= 3000, timeout=60, what="slices")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # then none of its jobs is seen, though they are stored
    assert backend.client.zcard(pending) >= 3000
    assert backend.jobs_list(JobsListParams(queue="bulk", limit=5)) == []
    assert backend.stats_get(StatsParams(queues=["bulk"])) == []
    assert backend.jobs_claim(JobsClaimParams("w1", ("bulk",), 10)) == []
    # and a reaper past the batch's deadline deletes them all
    late = make_backend(FrozenClock(backend.clock_now() + _insert.STAGE_TTL + 1), at=url)
    reap(late)
    assert backend.client.zcard(pending) == 0
    assert stored_jobs(backend) == []
    assert backend.client.zcard(backend.keys.batches) == 0


def test_a_staged_batch_refuses_replace_and_writes_nothing(backend: RedisBackend) -> None:
    # given a pending job holding a key
    (held,) = insert(backend, new("a", idempotency_key="k"))
    # when a batch too large for one script would replace it
    jobs = [new("a", idempotency_key="k", on_conflict="replace"), *(new("a") for _ in range(SLICE))]
    with pytest.raises(jobyard.ConfigurationError, match="on_conflict='replace' needs a batch"):
        backend.jobs_insert(JobsInsertParams(jobs))
    # then nothing of it was written, and the holder kept its arguments
    assert [r.id for r in backend.jobs_list(JobsListParams(queue="a"))] == [held]
    rec = backend.jobs_get(held)
    assert rec is not None and rec.payload == new("a").payload
