"""Lifecycle hooks and the one log line per outcome, in the worker and in testing.drain."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard.testing import drain

from ..conftest import running_worker, wait_until


def _recorder(app: jobyard.App) -> dict[str, list[jobyard.JobEvent]]:
    seen: dict[str, list[jobyard.JobEvent]] = {"before": [], "after": [], "dead": []}
    lock = threading.Lock()

    def keep(kind: str) -> Callable[[jobyard.JobEvent], None]:
        def hook(event: jobyard.JobEvent) -> None:
            with lock:
                seen[kind].append(event)

        return hook

    app.before_job(keep("before"))
    app.after_job(keep("after"))
    app.on_dead(keep("dead"))
    return seen


def test_on_enqueue_sees_each_created_job_once(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    events: list[jobyard.EnqueueEvent] = []
    app.on_enqueue(events.append)

    @app.job(queue="hooks")
    def greet(name: str, *, loud: bool = False) -> str:
        return name

    first = greet.options(idempotency_key="k1").enqueue("ada", loud=True)
    again = greet.options(idempotency_key="k1").enqueue("ada", loud=True)
    assert again.id == first.id
    greet.enqueue_many([(("bob",), {}), (("cy",), {})])
    assert [(e.name, e.queue, e.args, e.kwargs) for e in events] == [
        ("greet", "hooks", ("ada",), {"loud": True}),
        ("greet", "hooks", ("bob",), {}),
        ("greet", "hooks", ("cy",), {}),
    ]
    assert events[0].id == first.id


def test_the_worker_reports_every_outcome_to_the_hooks(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    seen = _recorder(app)

    @app.job
    def ok(n: int) -> int:
        return n * 2

    @app.job(max_attempts=2, backoff=jobyard.Backoff("fixed", base=0.0, jitter=False))
    def flaky() -> None:
        raise ValueError("boom")

    @app.job(max_attempts=3)
    def dropped() -> None:
        raise jobyard.Drop("not needed")

    done = ok.enqueue(21)
    bad = flaky.enqueue()
    gone = dropped.enqueue()
    with running_worker(app, concurrency=2):
        assert done.result(timeout=20) == 42
        for handle in (bad, gone):
            with pytest.raises(jobyard.JobFailed):
                handle.result(timeout=20)
        wait_until(lambda: len(seen["after"]) == 4, what="four outcomes")
    outcomes = sorted((e.name, e.attempt, e.outcome) for e in seen["after"])
    assert outcomes == [
        ("dropped", 1, "failed"),
        ("flaky", 1, "retry"),
        ("flaky", 2, "dead"),
        ("ok", 1, "completed"),
    ]
    completed = next(e for e in seen["after"] if e.outcome == "completed")
    assert completed.result == 42 and completed.duration is not None and completed.error is None
    assert sorted(e.name for e in seen["before"]) == ["dropped", "flaky", "flaky", "ok"]
    assert sorted((e.name, e.outcome) for e in seen["dead"]) == [
        ("dropped", "failed"),
        ("flaky", "dead"),
    ]
    assert "boom" in next(e.error or "" for e in seen["dead"] if e.name == "flaky")


def test_a_timeout_is_reported_as_its_outcome(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    seen = _recorder(app)

    @app.job(timeout=0.2, max_attempts=1)
    def stuck() -> None:
        time.sleep(1.0)

    handle = stuck.enqueue()
    with running_worker(app, concurrency=1):
        with pytest.raises(jobyard.JobFailed):
            handle.result(timeout=20)
        wait_until(lambda: seen["dead"], what="the dead-letter hook")
    assert [e.outcome for e in seen["dead"]] == ["dead"]
    assert "timed out" in (seen["dead"][0].error or "")


def test_a_hook_that_raises_is_logged_and_changes_nothing(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    def broken(event: object) -> None:
        raise RuntimeError("hook bug")

    for register in (app.on_enqueue, app.before_job, app.after_job, app.on_dead):
        register(broken)

    @app.job
    def ok() -> str:
        return "fine"

    with caplog.at_level(logging.ERROR, logger="jobyard.hooks"):
        handles = ok.enqueue_many([((), {}) for _ in range(3)])
        with running_worker(app, concurrency=1):
            assert [h.result(timeout=20) for h in handles] == ["fine"] * 3
    failures = [r for r in caplog.records if "hook" in r.getMessage()]
    assert len(failures) >= 3 + 3 + 3  # on_enqueue, before_job and after_job, per job
    assert all("hook bug" in (r.exc_text or "") for r in failures)


def test_drain_runs_the_same_pipeline(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    seen = _recorder(app)

    @app.job(max_attempts=1)
    def fails() -> None:
        raise ValueError("nope")

    @app.job
    async def works() -> str:
        return "yes"

    fails.enqueue()
    works.enqueue()
    assert drain(app) == 2
    assert sorted((e.name, e.outcome) for e in seen["after"]) == [
        ("fails", "dead"),
        ("works", "completed"),
    ]
    assert [e.name for e in seen["dead"]] == ["fails"]


def test_one_log_line_per_outcome(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    @app.job(max_attempts=1)
    def fails() -> None:
        raise ValueError("card declined")

    @app.job
    def works() -> None:
        pass

    failed = fails.enqueue()
    done = works.enqueue()
    with caplog.at_level(logging.DEBUG, logger="jobyard.jobs"):
        assert drain(app) == 2
    lines = {r.levelno: r.getMessage() for r in caplog.records if r.name == "jobyard.jobs"}
    assert set(lines) == {logging.INFO, logging.DEBUG}
    info, debug = lines[logging.INFO], lines[logging.DEBUG]
    assert info.startswith(f"job {failed.id} fails queue=default attempt=1/1 dead in ")
    assert info.endswith(": ValueError: card declined")
    assert debug.startswith(f"job {done.id} works queue=default attempt=1/")
    assert " completed in " in debug
