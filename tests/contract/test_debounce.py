"""Debounce: ``.options(idempotency_key=..., on_conflict="replace")`` gives the pending job that
holds the key the new arguments (and run_at, when the call sets one), on every store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import jobyard
from jobyard.backends.base import JobsClaimParams, JobsInsertParams, NewJob
from jobyard.errors import ConfigurationError

PAYLOAD = '{"args":[],"kwargs":{}}'


@pytest.fixture
def app(make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock) -> jobyard.App:
    return make_app(clock)


def _reindex(app: jobyard.App) -> Any:
    @app.job(queue="idx", priority=3)
    def reindex(doc: int, edit: str = "") -> None: ...

    return reindex


def _stored(app: jobyard.App, job_id: str) -> Any:
    rec = app.backend.jobs_get(job_id)
    assert rec is not None
    return rec


def test_replace_gives_the_pending_holder_the_new_arguments(app: jobyard.App) -> None:
    # given a pending job holding a key
    reindex = _reindex(app)
    first = reindex.options(idempotency_key="reindex:7").enqueue(7, edit="a")
    run_at = _stored(app, first.id).run_at
    # when two more calls with that key replace it
    debounced = reindex.options(idempotency_key="reindex:7", on_conflict="replace")
    second = debounced.enqueue(7, edit="b")
    third = debounced.options(priority=9).enqueue(7, edit="c")
    # then one job holds the last arguments; its run_at and other options are unchanged
    assert first.created and not first.replaced
    assert (second.id, second.created, second.replaced) == (first.id, False, True)
    assert (third.id, third.created, third.replaced) == (first.id, False, True)
    job = app.get(first.id)
    assert (job.args, job.kwargs, job.status) == ((7,), {"edit": "c"}, "pending")
    rec = _stored(app, first.id)
    assert (rec.run_at, rec.priority) == (run_at, 3)
    assert len(app.backend.jobs_list(jobyard.backends.base.JobsListParams(queue="idx"))) == 1
    # and the claim hands a worker the new arguments
    (claimed,) = app.backend.jobs_claim(JobsClaimParams("w1", ["idx"], 5))
    assert claimed.id == first.id and '"c"' in claimed.payload


def test_keep_is_the_default_and_changes_nothing(app: jobyard.App) -> None:
    reindex = _reindex(app)
    first = reindex.options(idempotency_key="k").enqueue(1, edit="a")
    for opts in ({}, {"on_conflict": "keep"}):
        again = reindex.options(idempotency_key="k", **opts).enqueue(1, edit="b")
        assert (again.id, again.created, again.replaced) == (first.id, False, False)
    assert app.get(first.id).kwargs == {"edit": "a"}


def test_a_delay_or_run_at_pushes_the_holder_back(
    app: jobyard.App, clock: jobyard.FrozenClock
) -> None:
    reindex = _reindex(app)
    h = reindex.options(idempotency_key="k", delay=5).enqueue(1)
    assert _stored(app, h.id).run_at == pytest.approx(clock.now() + 5, abs=0.01)
    clock.advance(3)
    reindex.options(idempotency_key="k", on_conflict="replace", delay=5).enqueue(1, edit="x")
    assert _stored(app, h.id).run_at == pytest.approx(clock.now() + 5, abs=0.01)
    # not due yet: the claim finds nothing; once the new run_at passes it takes the job
    assert app.backend.jobs_claim(JobsClaimParams("w1", ["idx"], 5)) == []
    reindex.options(idempotency_key="k", on_conflict="replace", run_at=clock.now() + 60).enqueue(2)
    assert _stored(app, h.id).run_at == pytest.approx(clock.now() + 60, abs=0.01)
    clock.advance(59)
    assert app.backend.jobs_claim(JobsClaimParams("w1", ["idx"], 5)) == []
    clock.advance(2)
    (claimed,) = app.backend.jobs_claim(JobsClaimParams("w1", ["idx"], 5))
    assert claimed.id == h.id and '"args":[2]' in claimed.payload


def test_a_running_holder_is_returned_unchanged(app: jobyard.App) -> None:
    # given the key's job has started
    reindex = _reindex(app)
    h = reindex.options(idempotency_key="k").enqueue(1, edit="a")
    (claimed,) = app.backend.jobs_claim(JobsClaimParams("w1", ["idx"], 5))
    # when a replace comes in
    again = reindex.options(idempotency_key="k", on_conflict="replace", delay=9).enqueue(1, "b")
    # then the running job keeps its arguments and run_at, and no second job is made
    assert (again.id, again.created, again.replaced) == (h.id, False, False)
    job = app.get(h.id)
    assert (job.status, job.kwargs) == ("running", {"edit": "a"})
    assert _stored(app, h.id).payload == claimed.payload
    assert len(app.backend.jobs_list(jobyard.backends.base.JobsListParams(queue="idx"))) == 1


def test_a_finished_holder_frees_the_key_for_a_new_job(app: jobyard.App) -> None:
    reindex = _reindex(app)
    h = reindex.options(idempotency_key="k").enqueue(1)
    app.cancel(h.id)
    again = reindex.options(idempotency_key="k", on_conflict="replace").enqueue(2)
    assert again.created and not again.replaced and again.id != h.id
    assert app.get(again.id).args == (2,) and app.get(h.id).args == (1,)


def test_a_key_repeated_in_one_batch_keeps_the_last_arguments(app: jobyard.App) -> None:
    reindex = _reindex(app)
    debounced = reindex.options(idempotency_key="k", on_conflict="replace")
    handles = debounced.enqueue_many([((i,), {}) for i in range(5)])
    assert len({h.id for h in handles}) == 1
    assert handles[0].created and all(h.replaced for h in handles[1:])
    assert app.get(handles[0].id).args == (4,)
    # a later batch replaces the same pending job
    more = debounced.enqueue_many([((10,), {}), ((11,), {})])
    assert [h.id for h in more] == [handles[0].id] * 2 and all(h.replaced for h in more)
    assert app.get(handles[0].id).args == (11,)


def test_a_racing_burst_leaves_one_pending_job_with_the_last_arguments(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given 6 threads, each with its own App on the store, enqueueing at once
    apps = [make_app() for _ in range(6)]
    fns = [_reindex(a).options(idempotency_key="doc:1", on_conflict="replace") for a in apps]
    start = threading.Barrier(len(fns))
    ids: list[str] = []
    lock = threading.Lock()
    errors: list[Exception] = []

    def burst(t: int) -> None:
        try:
            start.wait()
            for i in range(8):
                h = fns[t].enqueue(1, edit=f"{t}.{i}")
                with lock:
                    ids.append(h.id)
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=burst, args=(t,)) for t in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    # then every call got the one job, which holds one of the burst's arguments
    assert len(ids) == 48 and len(set(ids)) == 1
    params = jobyard.backends.base.JobsListParams(queue="idx")
    (rec,) = apps[0].backend.jobs_list(params)
    assert rec.status == "pending"
    assert apps[0].get(rec.id).kwargs["edit"] in {f"{t}.{i}" for t in range(6) for i in range(8)}
    # and the call made after the burst is the one that stays
    last = fns[0].enqueue(1, edit="last")
    assert last.id == rec.id and last.replaced
    assert apps[0].get(rec.id).kwargs == {"edit": "last"}


def test_bad_on_conflict_values_are_refused(app: jobyard.App) -> None:
    reindex = _reindex(app)
    with pytest.raises(ConfigurationError, match="'merge'"):
        reindex.options(idempotency_key="k", on_conflict="merge")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs an idempotency_key"):
        reindex.options(on_conflict="replace").enqueue(1)
    with pytest.raises(ConfigurationError, match="on_conflict"):
        NewJob("t", "q", PAYLOAD, on_conflict="REPLACE")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="on_conflict"):
        jobyard.chain(reindex.options(on_conflict="replace").s(1), reindex.s()).enqueue()
    # nothing was written by any of them
    assert app.backend.jobs_list(jobyard.backends.base.JobsListParams()) == []


def test_the_store_takes_replace_on_the_protocol(app: jobyard.App) -> None:
    backend = app.backend
    first = NewJob("t", "q", '{"args":[1],"kwargs":{}}', idempotency_key="k")
    (a,) = backend.jobs_insert(JobsInsertParams([first]))
    repl = NewJob("t", "q", '{"args":[2],"kwargs":{}}', idempotency_key="k", on_conflict="replace")
    (b,) = backend.jobs_insert(JobsInsertParams([repl]))
    assert (b.id, b.created, b.replaced) == (a.id, False, True)
    assert _stored(app, a.id).payload == '{"args":[2],"kwargs":{}}'
    # a schedule's stored job text does not change for the default
    assert "on_conflict" not in first.to_json()
    assert NewJob.from_json(repl.to_json()) == repl
