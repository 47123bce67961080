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
    # then it finds nothing yet, says how far it looked, and where to go on
    assert page.jobs == [] and page.scanned == 10 and page.next is not None
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
