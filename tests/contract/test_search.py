"""``jobs_search``: pages of jobs newest first by the store's own cursor, on every store; each
filter; and a bounded walk (``scan``) that says where the next page starts."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    Backend,
    JobRecord,
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsPage,
    JobsSearchParams,
    NewJob,
    Outcome,
)


def new(queue: str, name: str = "task", key: str | None = None, **kwargs: object) -> NewJob:
    payload = json.dumps({"args": [], "kwargs": kwargs}, separators=(",", ":"))
    return NewJob(name=name, queue=queue, payload=payload, idempotency_key=key)


@pytest.fixture
def backend(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> Backend:
    return make_app(clock).backend


def insert(backend: Backend, *jobs: NewJob) -> list[str]:
    return [i.id for i in backend.jobs_insert(JobsInsertParams(list(jobs)))]


def every_page(backend: Backend, **filters: object) -> tuple[list[str], list[JobsPage]]:
    """Every page of a search, following ``next`` until it is None."""
    pages: list[JobsPage] = []
    before = None
    for _ in range(100):
        page = backend.jobs_search(JobsSearchParams(before=before, **filters))  # type: ignore[arg-type]
        pages.append(page)
        if page.next is None:
            break
        before = page.next
    return [j.id for p in pages for j in p.jobs], pages


def test_pages_follow_the_cursor_newest_first_and_end(backend: Backend) -> None:
    # given 7 jobs in two queues
    ids = insert(backend, *(new("a" if i % 2 else "b", n=i) for i in range(7)))
    # when they are paged 3 at a time
    got, pages = every_page(backend, limit=3)
    # then every job shows once, newest first, and the last page says nothing is left
    assert got == list(reversed(ids))
    assert [len(p.jobs) for p in pages][:3] == [3, 3, 1] and pages[-1].next is None
    assert all(isinstance(j, JobRecord) for p in pages for j in p.jobs)
    # a page is the same after newer jobs arrive (a cursor, not an offset)
    second = backend.jobs_search(JobsSearchParams(before=pages[0].next, limit=3))
    insert(backend, new("a"), new("a"))
    again = backend.jobs_search(JobsSearchParams(before=pages[0].next, limit=3))
    assert [j.id for j in again.jobs] == [j.id for j in second.jobs]


def test_each_filter(backend: Backend) -> None:
    # given jobs of two queues and names, keyed, with arguments, some failed
    a1 = insert(backend, new("a", "mail", customer_id=42, note="hello world"))[0]
    a2 = insert(backend, new("a", "mail", key="order-7", customer_id=7))[0]
    b1 = insert(backend, new("b", "sms", customer_id=42))[0]
    b2 = insert(backend, new("b", "sms", customer_id=420))[0]
    claimed = backend.jobs_claim(JobsClaimParams("w", ["b"], 2))
    errors = {b1: "Traceback...\nValueError: no such customer 42", b2: "RuntimeError: down"}
    backend.jobs_ack(
        JobsAckParams([Outcome(c.id, c.token, "failed", error=errors[c.id]) for c in claimed])
    )

    def ids(**filters: object) -> list[str]:
        return every_page(backend, **filters)[0]

    # then each filter alone, and together, finds exactly its jobs, newest first
    assert ids(queue="a") == [a2, a1]
    assert ids(status="failed") == [b2, b1]
    assert ids(status="pending") == [a2, a1]
    assert ids(name="sms") == [b2, b1]
    assert ids(idempotency_key="order-7") == [a2]
    assert ids(idempotency_key="order-8") == []
    assert ids(contains='"customer_id":42') == [b2, b1, a1]  # a substring of the JSON text
    assert ids(contains="hello wor") == [a1]
    assert ids(error_contains="no such customer") == [b1]
    assert ids(status="failed", queue="b", name="sms", error_contains="down") == [b2]
    assert ids(queue="a", status="failed") == []
    assert ids(queue="nope") == []


def test_the_walk_is_bounded_and_goes_on_where_it_stopped(backend: Backend) -> None:
    # given one match among many jobs, the oldest
    target = insert(backend, new("a", "rare"))[0]
    insert(backend, *(new("a", "common") for _ in range(25)))
    # when a page may walk only 10 jobs
    page = backend.jobs_search(JobsSearchParams(name="rare", scan=10))
    # then it finds nothing yet, says how far it looked, and where to go on (Redis shares the
    # budget between the indexes it walks)
    assert page.jobs == [] and 0 < page.scanned <= 10 and page.next is not None
    # and following the cursor finds the match, then the end
    got, pages = every_page(backend, name="rare", scan=10)
    assert got == [target] and all(p.scanned <= 10 for p in pages) and pages[-1].next is None
    assert sum(p.scanned for p in pages) == 26


def test_a_cursor_the_store_did_not_make_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError):
        backend.jobs_search(JobsSearchParams(before="not a cursor"))
    with pytest.raises(ValueError):
        JobsSearchParams(status="bogus")


def test_a_purge_by_ids_deletes_only_those_jobs(backend: Backend) -> None:
    from jobyard.backends.base import JobsPurgeParams, StatsParams

    # given four failed jobs in two queues and a completed one
    ids = insert(backend, new("a"), new("a"), new("b"), new("b"), new("a"))
    claimed = backend.jobs_claim(JobsClaimParams("w", ["a", "b"], 5))
    kinds = {ids[4]: "completed"}
    backend.jobs_ack(
        JobsAckParams([Outcome(c.id, c.token, kinds.get(c.id, "failed")) for c in claimed])
    )
    # when a batch of ids is purged (one unknown, one completed, one of another status filter)
    unknown = ids[0][:-1] + "9999"
    purged = backend.jobs_purge(JobsPurgeParams(("failed",), ids=[ids[0], ids[3], ids[4], unknown]))
    # then only the failed jobs among them are gone, and the counts follow
    assert purged == 2
    left = {j.id for j in every_page(backend)[1][0].jobs}
    assert left == {ids[1], ids[2], ids[4]}
    counts = {s.queue: s.counts["failed"] for s in backend.stats_get(StatsParams())}
    assert counts == {"a": 1, "b": 1}
    # and a queue filter beside the ids still applies
    assert backend.jobs_purge(JobsPurgeParams(("failed",), queue="a", ids=[ids[2]])) == 0
    assert backend.jobs_purge(JobsPurgeParams(("failed",), ids=[])) == 0


def fail_all(backend: Backend, queue: str, errors: list[str], name: str = "task") -> list[str]:
    ids = insert(backend, *(new(queue, name) for _ in errors))
    claimed = {c.id: c for c in backend.jobs_claim(JobsClaimParams("w", [queue], len(ids)))}
    backend.jobs_ack(
        JobsAckParams(
            [
                Outcome(i, claimed[i].token, "failed", error=e)
                for i, e in zip(ids, errors, strict=True)
            ]
        )
    )
    return ids


def test_the_dead_letter_groups_by_queue_name_and_last_line(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    from jobyard.backends.base import DeadGroup, DeadGroupsParams, error_line

    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\n{}\n\n  \r\n'
    # given failures of two names in two queues, errors ending in the same and other lines
    a = fail_all(backend, "a", [tb.format("KeyError: 'x'")] * 3)
    clock.advance(10)
    b = fail_all(backend, "a", [tb.format("KeyError: 'x'"), "plain  "], name="other")
    clock.advance(10)
    c = fail_all(backend, "b", ["\t ValueError: é  \r\n", "ValueError: é"])
    t0 = 1_800_000_000.0
    # when the dead letter is grouped
    got = backend.dead_groups(DeadGroupsParams())
    # then each group has its count, its newest and oldest finish and its newest job
    assert got.complete and got.scanned == 7
    assert got.groups == [
        DeadGroup("a", "task", "KeyError: 'x'", 3, t0, t0, got.groups[0].sample_id),
        DeadGroup("b", "task", "ValueError: é", 2, t0 + 20, t0 + 20, got.groups[1].sample_id),
        DeadGroup("a", "other", "KeyError: 'x'", 1, t0 + 10, t0 + 10, b[0]),
        DeadGroup("a", "other", "plain", 1, t0 + 10, t0 + 10, b[1]),
    ]
    assert got.groups[0].sample_id == a[-1] and got.groups[1].sample_id == c[-1]  # the newest
    assert error_line(tb.format("KeyError: 'x'")) == "KeyError: 'x'"
    # one queue only, and a walk cut short says it is not complete
    only_b = backend.dead_groups(DeadGroupsParams(queue="b"))
    assert [(g.queue, g.count) for g in only_b.groups] == [("b", 2)]
    short = backend.dead_groups(DeadGroupsParams(queue="a", scan=2))
    assert not short.complete and short.scanned == 2
    assert sum(g.count for g in short.groups) == 2


def test_every_way_into_the_dead_letter_groups_by_the_error_it_left(
    backend: Backend, clock: jobyard.FrozenClock
) -> None:
    from jobyard.backends.base import LEASE_LOST_ERROR, DeadGroupsParams, error_line
    from jobyard.worker.reaper import reap

    def groups() -> dict[tuple[str, str], int]:
        got = backend.dead_groups(DeadGroupsParams(queue="q"))
        assert got.complete and got.scanned == sum(g.count for g in got.groups)
        return {(g.name, g.error_line): g.count for g in got.groups}

    # given a job failed by its handler, and one whose lease lapsed with no attempt left
    acked = fail_all(backend, "q", ["Traceback ...\n  ValueError: one \n"])[0]
    (lost,) = insert(backend, NewJob(name="lost", queue="q", payload="{}", max_attempts=1, lease=5))
    assert [c.id for c in backend.jobs_claim(JobsClaimParams("w", ["q"], 1))] == [lost]
    clock.advance(6)
    assert [r.status for r in reap(backend)] == ["failed"]
    # then each is grouped by the line of the error it left
    lapsed = error_line(LEASE_LOST_ERROR)
    assert groups() == {("task", "ValueError: one"): 1, ("lost", lapsed): 1}
    # when the first is retried and fails again with another error
    backend.jobs_retry(acked)
    claimed = backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    assert [c.id for c in claimed] == [acked]
    out = Outcome(acked, claimed[0].token, "failed", error="KeyError: 'two'\r\n")
    assert backend.jobs_ack(JobsAckParams([out])) == []
    # then it moved to the new error's group, and the old group is gone
    assert groups() == {("task", "KeyError: 'two'"): 1, ("lost", lapsed): 1}
    # and a retried job leaves its group at once
    backend.jobs_retry(lost)
    assert groups() == {("task", "KeyError: 'two'"): 1}


def test_short_walks_over_many_queues_miss_no_job_and_repeat_none(backend: Backend) -> None:
    # given jobs of three queues, unevenly interleaved, some of them matching
    jobs = [new("abc"[i % 3] if i % 5 else "a", "hit" if i % 4 else "miss") for i in range(40)]
    ids = insert(backend, *jobs)
    hits = [i for i, j in zip(ids, jobs, strict=True) if j.name == "hit"]
    for scan, limit in ((3, 50), (50, 4), (2, 3)):
        # when every page may walk only a few jobs (of each queue's index, on Redis)
        got, pages = every_page(backend, name="hit", scan=scan, limit=limit)
        # then every match shows exactly once, newest first, whatever the page boundaries
        assert got == list(reversed(hits)), (scan, limit)
        assert all(len(p.jobs) <= limit for p in pages)
