"""``/metrics`` on the dashboard, on every store: parsed with prometheus-client's own parser,
its values checked against what ran (an in-process worker; the worker's own ``--metrics-port``
with real processes is in tests/e2e/test_observability.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobyard
from tests.conftest import running_worker, wait_until

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (sample name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[Any, float], sample: str, /, **labels: str) -> float:
    return samples.get((sample, tuple(sorted(labels.items()))), 0.0)


def test_metrics_match_what_ran(
    make_app: Callable[..., jobyard.App], client_for: Callable[..., Any]
) -> None:
    # given an app whose dashboard counts from the start, three jobs that complete, two that
    # fail twice (one retry, then the dead letter) and one left pending on a queue no worker
    # serves
    app = make_app()

    @app.job(queue="obs")
    def ok(n: int) -> int:
        return n

    @app.job(queue="obs", max_attempts=2, backoff=jobyard.Backoff("fixed", base=0.0, jitter=False))
    def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    client = client_for(app)
    for n in range(3):
        ok.enqueue(n)
    boom.enqueue_many([((n,), {}) for n in range(2)])
    app.by_name("ok", queue="idle").enqueue(9)

    # when a worker runs them all
    def settled() -> bool:
        (st,) = app.stats(["obs"])
        return st.counts.get("completed") == 3 and st.counts.get("failed") == 2

    with running_worker(app, queues=["obs"], concurrency=2):
        wait_until(settled, what="the jobs to settle")
        wait_until(lambda: app.metrics().total("failed") == 2, what="the last outcome counted")
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        samples = scrape(response.text)

    # then the counters say what ran, by queue and job name
    assert value(samples, "jobyard_jobs_enqueued_total", queue="obs", name="ok") == 3
    assert value(samples, "jobyard_jobs_enqueued_total", queue="obs", name="boom") == 2
    assert value(samples, "jobyard_jobs_enqueued_total", queue="idle", name="ok") == 1
    assert value(samples, "jobyard_jobs_completed_total", queue="obs", name="ok") == 3
    assert value(samples, "jobyard_jobs_retried_total", queue="obs", name="boom") == 2
    assert value(samples, "jobyard_jobs_failed_total", queue="obs", name="boom") == 2
    assert value(samples, "jobyard_jobs_completed_total", queue="obs", name="boom") == 0
    # the histograms count every attempt that ran, and every start
    assert value(samples, "jobyard_job_run_seconds_count", queue="obs", name="ok") == 3
    assert value(samples, "jobyard_job_run_seconds_count", queue="obs", name="boom") == 4
    started = value(samples, "jobyard_job_wait_seconds_count", queue="obs", name="ok")
    assert started + value(samples, "jobyard_job_wait_seconds_count", queue="obs", name="boom") == 7
    inf = value(samples, "jobyard_job_run_seconds_bucket", queue="obs", name="ok", le="+Inf")
    assert inf == 3
    # the store's gauges: jobs by queue and status, the oldest pending job's age, live workers
    assert value(samples, "jobyard_jobs", queue="obs", status="completed") == 3
    assert value(samples, "jobyard_jobs", queue="obs", status="failed") == 2
    assert value(samples, "jobyard_jobs", queue="idle", status="pending") == 1
    age = value(samples, "jobyard_queue_oldest_pending_age_seconds", queue="idle")
    assert 0 < age < 120
    assert value(samples, "jobyard_queue_oldest_pending_age_seconds", queue="obs") == 0
    assert value(samples, "jobyard_workers_live") == 1
    assert value(samples, "jobyard_store_up") == 1
    # and app.metrics() holds the same counters, as plain data
    snap = app.metrics()
    assert snap.counters["completed"] == {("obs", "ok"): 3}
    assert snap.counters["failed"] == {("obs", "boom"): 2}
    assert snap.to_dict()["counters"]["retried"] == [{"queue": "obs", "name": "boom", "value": 2}]


def test_metrics_keep_the_dashboards_token(
    make_app: Callable[..., jobyard.App], client_for: Callable[..., Any]
) -> None:
    app = make_app()
    client = client_for(app, token="s3cret-token")
    assert client.get("/metrics").status_code in (303, 401, 403)
    ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and "jobyard_store_up 1.0" in ok.text


def test_metrics_gauge_each_limit_and_the_jobs_it_holds_back(
    board: jobyard.App, client_for: Callable[..., Any], sink: Path
) -> None:
    from .support import limited_queue

    # given a queue held full by its limits: 2 running of max_concurrency=2, one per key
    # (key_concurrency=1), 3 more jobs of one key and 1 of the other pending, all due
    client = client_for(board)
    with limited_queue(board, sink):
        samples = scrape(client.get("/metrics").text)
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}

    # then the running jobs and the rate used of the queue's own limits (job "")
    assert value(samples, "jobyard_limit_running", queue="hostile", job="") == 2
    used = samples[("jobyard_limit_rate_used", (("job", ""), ("queue", "hostile")))]
    assert 0 <= used < 1  # two starts of a 6000/m burst (10)
    # and the jobs held back by each limit: the whole due backlog by the full max_concurrency,
    # none by the rate (room left), the pending jobs of both keys at their key_concurrency
    held = "jobyard_limit_held_back"
    assert value(samples, held, queue="hostile", limit="max_concurrency") == 4
    assert (held, (("limit", "rate"), ("queue", "hostile"))) in samples
    assert value(samples, held, queue="hostile", limit="rate") == 0
    assert value(samples, held, queue="hostile", limit="key_concurrency") == 4
    # and the HELP text says what "held back" counts
    assert "a lower bound past that" in families[held].documentation
    # and a queue without limits has no such gauges
    assert not [k for k in samples if k[0] == held and ("queue", "pausable") in k[1]]


def test_metrics_count_the_backlog_a_full_rate_holds_back(
    board: jobyard.App, client_for: Callable[..., Any]
) -> None:
    # given a queue allowed one start an hour, and three due jobs of which one has started
    board.configure_queue("canary", rate_limit="1/h")
    board.registry["canary"].enqueue_many([((f"{i}",), {}) for i in range(3)])
    client = client_for(board)
    with running_worker(board, queues=["canary"]):

        def one_done() -> bool:
            (st,) = board.stats(["canary"])
            return st.counts.get("completed") == 1

        wait_until(one_done, what="the one start the rate allows")
        samples = scrape(client.get("/metrics").text)
    # then the rate's burst (one start) is taken, and it holds back the two left
    assert value(samples, "jobyard_limit_rate_used", queue="canary", job="") > 0.99
    assert value(samples, "jobyard_limit_held_back", queue="canary", limit="rate") == 2
    assert value(samples, "jobyard_limit_running", queue="canary", job="") == 0


def test_metrics_count_what_a_job_names_own_limits_hold_back(
    board: jobyard.App, client_for: Callable[..., Any]
) -> None:
    # given one queue with two job names under limits of their own: one allowed one start an
    # hour, one allowed one running job per key (its jobs wait until released)
    release = threading.Event()

    @board.job(queue="notify", rate_limit="1/h")
    def digest(n: int) -> int:
        return n

    @board.job(queue="notify", key_concurrency=1)
    def push(n: int) -> int:
        release.wait(30)
        return n

    digest.enqueue_many([((i,), {}) for i in range(3)])
    for i in range(3):
        push.options(key="customer:1").enqueue(i)
    push.options(key="customer:2").enqueue(9)
    client = client_for(board)
    try:
        with running_worker(board, queues=["notify"], concurrency=4):

            def held() -> bool:
                (st,) = board.stats(["notify"])
                return st.counts.get("completed") == 1 and st.counts.get("running") == 2

            # when one digest has run and each key has one push running
            wait_until(held, what="one digest done, one push per key running")
            text = client.get("/metrics").text
            release.set()
    finally:
        release.set()
    samples = scrape(text)
    families = {f.name: f for f in text_string_to_metric_families(text)}

    # then the rate holds back the digests left, the key cap the pushes of the key at it
    job_held = "jobyard_job_limit_held_back"
    assert value(samples, job_held, queue="notify", job="digest", limit="rate") == 2
    assert value(samples, job_held, queue="notify", job="push", limit="key_concurrency") == 2
    assert value(samples, "jobyard_limit_running", queue="notify", job="push") == 2
    # and each name's figures are under its own limits only
    names = {
        dict(labels)["job"] + ":" + dict(labels)["limit"] for k, labels in samples if k == job_held
    }
    assert names == {"digest:rate", "push:key_concurrency"}
    # and the queue, which has no limit of its own, holds back nothing of its own
    assert not [
        k for k in samples if k[0] == "jobyard_limit_held_back" and ("queue", "notify") in k[1]
    ]
    assert "job name" in families[job_held].documentation
