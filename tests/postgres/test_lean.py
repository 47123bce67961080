"""The lean statements (``jobs_insert_one``, ``jobs_claim_open``, and behind the lock
``jobs_claim_whole`` and ``jobs_claim_capped``): one plain job inserted, and
queues whose gates are open claimed, in a fraction of the general statements' server time. They
store and claim exactly what ``jobs_insert`` and ``jobs_claim`` would, and hand over to them,
having written nothing, whatever they do not handle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from jobyard.backends.base import (
    JobLimits,
    JobsClaimParams,
    LimitsSyncParams,
    QueueConfig,
    QueueLimits,
    Rate,
)
from jobyard.backends.postgres._sql import Q
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.clock import FrozenClock
from jobyard.errors import QueueFull
from tests.postgres.conftest import T0, insert, new

NAMES = {
    getattr(Q, name): name
    for name in (
        "jobs_insert",
        "jobs_insert_one",
        "jobs_claim",
        "jobs_claim_open",
        "jobs_claim_whole",
        "jobs_claim_capped",
    )
}
Sql = Callable[..., list[tuple[Any, ...]]]


def spied(backend: PostgresBackend) -> list[str]:
    """The names of the insert and claim statements ``backend`` runs from now on (and of the
    claim statements it sends behind a lock statement)."""
    ran: list[str] = []
    fetch, claim_locked = backend._fetch, backend._claim_locked

    def spy(conn: Any, query: str, params: Any = None) -> Any:
        if query in NAMES:
            ran.append(NAMES[query])
        return fetch(conn, query, params)

    def spy_locked(conn: Any, lock: Any, claim: Any) -> Any:
        ran.append(NAMES[claim[0]])
        return claim_locked(conn, lock, claim)

    backend._fetch = spy  # type: ignore[method-assign]
    backend._claim_locked = spy_locked  # type: ignore[method-assign]
    return ran


def row(sql: Sql, job_id: str) -> dict[str, Any]:
    """A job's row, but its id and token."""
    ((record,),) = sql("SELECT to_jsonb(j) FROM jobs AS j WHERE id = %s", [int(job_id)])
    return {k: v for k, v in record.items() if k not in ("id", "token")}


OPTIONS: list[dict[str, Any]] = [
    {},
    {"priority": -3, "delay": 30.0, "timeout": 2.5, "lease": 7.0},
    {"max_attempts": 9, "backoff": '{"kind":"fixed","base":2.0}', "delivery": "at_most_once"},
    {"run_at": T0 + 0.125, "parent_id": "7"},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_plain_job_alone_is_stored_and_claimed_as_the_general_statements_do(
    backend: PostgresBackend, clock: FrozenClock, sql: Sql, options: dict[str, Any]
) -> None:
    # given a queue with settings of its own
    backend.queues_configure(QueueConfig("q", max_attempts=3, backoff='{"kind":"linear"}'))
    ran = spied(backend)
    # when a plain job is inserted alone, and its twin with another job
    (one,) = insert(backend, new(**options))
    two, _ = insert(backend, new(**options), new(priority=-10))
    # then the lean statement wrote the first as the general one wrote the second
    assert ran == ["jobs_insert_one", "jobs_insert"]
    assert row(sql, one) == row(sql, two)
    # and claimed, once due, one by the lean claim and one by the general one, they are alike
    clock.advance(60.0)
    (a,) = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    assert ran[-1] == "jobs_claim_open"
    backend._lean.handed_over(("claim", "q"))  # the general claim, for the second
    (b,) = [c for c in backend.jobs_claim(JobsClaimParams("w", ["q"], 5)) if c.id == two]
    assert ran[-1] == "jobs_claim"
    assert a.id == one and row(sql, one) == row(sql, two)
    assert replace(a, id="", token="") == replace(b, id="", token="")


def test_the_lean_claim_takes_what_the_general_claim_would(
    open_backend: Callable[..., PostgresBackend], sql: Sql
) -> None:
    # given jobs of two queues: priorities, a delayed one, and a job that kept a turn from a
    # time its queue was fair (the lowest priority: the last claimed, by the lean claim)
    jobs = [
        new(queue=q, priority=p, delay=d)
        for q, p, d in [
            ("a", 0, 0),
            ("b", 5, 0),
            ("a", 0, 0),
            ("b", 5, 60),
            ("a", -1, 0),
            ("b", 0, 0),
        ]
    ]
    lean, general = open_backend(FrozenClock(T0)), open_backend(FrozenClock(T0))
    lean.queues_configure(QueueConfig("a", max_attempts=5))
    ids = insert(lean, *jobs)
    sql("UPDATE jobs SET turn = 3 WHERE id = %s", [int(ids[4])])
    ran_lean, ran_general = spied(lean), spied(general)
    general._lean.handed_over(("claim", "a", "b"))
    # when they are claimed two at a time, by the lean claim and by the general one in turn
    order = []
    for i in range(3):
        by = lean if i % 2 == 0 else general
        order += [c.id for c in by.jobs_claim(JobsClaimParams("w", ["a", "b"], 2))]
    # then they come in claim order: priority, turn, run_at, id; the delayed job stays
    assert ran_lean == ["jobs_claim_open"] * 2 and ran_general == ["jobs_claim"]
    assert order == [ids[1], ids[0], ids[2], ids[5], ids[4]]
    # and the queue's round moved on to the turn the last job kept
    assert sql("SELECT turn_round FROM queues WHERE name = 'a'") == [(3,)]


def test_the_lean_insert_hands_a_capped_or_fair_queue_to_jobs_insert(
    backend: PostgresBackend, sql: Sql
) -> None:
    backend.queues_configure(QueueConfig("capped", max_pending=1))
    backend.queues_configure(QueueConfig("fair", limits=QueueLimits(fair=True)))
    ran = spied(backend)
    # a queue with a max_pending: the lean statement hands over (then jobs_insert, which hands
    # over to itself behind the queue's lock, sent in a pipeline), and the cap holds
    insert(backend, new("capped"))
    with pytest.raises(QueueFull):
        insert(backend, new("capped"))
    assert ran == ["jobs_insert_one", "jobs_insert"]
    # a fair queue: its job takes its turn
    (job,) = insert(backend, new("fair"))
    assert ran[-2:] == ["jobs_insert_one", "jobs_insert"]
    assert row(sql, job)["turn"] == 1


OPEN, GENERAL = "jobs_claim_open", "jobs_claim"
WHOLE, CAPPED = "jobs_claim_whole", "jobs_claim_capped"


@pytest.mark.parametrize(
    ("config", "first", "then", "count"),
    [
        # paused: the general claim's gate holds both
        (QueueConfig("q", paused=True), [OPEN, GENERAL], [GENERAL], 0),
        # capped as a whole: behind the lock, jobs_claim_whole from then on
        (QueueConfig("q", max_concurrency=1), [OPEN, GENERAL, WHOLE], [WHOLE], 1),
        (
            QueueConfig("q", limits=QueueLimits(rate=Rate(1, 60.0, 1))),
            [OPEN, GENERAL, WHOLE],
            [WHOLE],
            1,
        ),
        # fair alone: an order, which the open claim keeps
        (QueueConfig("q", limits=QueueLimits(fair=True)), [OPEN], [OPEN], 2),
        # a key's count: behind the lock, jobs_claim_capped
        (
            QueueConfig("q", limits=QueueLimits(key_concurrency=1)),
            [OPEN, GENERAL, WHOLE, CAPPED],
            [CAPPED],
            1,
        ),
        # a key's rate, or a job name's limits (None): jobs_claim behind the lock
        (
            QueueConfig("q", limits=QueueLimits(key_rate=Rate(1, 60.0, 1))),
            [OPEN, GENERAL, WHOLE, CAPPED, GENERAL],
            [GENERAL],
            1,
        ),
        (None, [OPEN, GENERAL, WHOLE, CAPPED, GENERAL], [GENERAL], 1),
    ],
)
def test_each_gate_goes_to_the_claim_made_for_it(
    backend: PostgresBackend,
    config: QueueConfig | None,
    first: list[str],
    then: list[str],
    count: int,
) -> None:
    # given two due jobs of one key in a queue whose gate may hold one back
    insert(backend, new(key="a"), new(key="a"))
    if config is None:
        limits = QueueLimits(rate=Rate(1, 60.0, 1))
        backend.limits_sync(LimitsSyncParams([JobLimits("q", "task", limits)]))
    else:
        backend.queues_configure(config)
    ran = spied(backend)
    # when it is claimed, each statement that cannot claim for it hands over, having claimed
    # nothing, and the gate holds
    got = backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert ran == first
    assert len(got) == count
    # and the next claim of that queue goes to the last of them at once
    del ran[:]
    backend.jobs_claim(JobsClaimParams("w", ["q"], 10))
    assert ran == then
