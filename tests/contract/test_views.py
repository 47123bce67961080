"""The read model (``jobyard.views``) on every store: what status, show and cron print and the
dashboard renders, built through the App alone, values raw (escaping is the renderer's)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import jobyard
from jobyard import chain, group, testing, views
from jobyard._secrets import mask_url
from jobyard.backends.base import STATUSES, JobsInsertParams, NewJob

from ..conftest import running_worker, wait_until

HOSTILE = "\x1b[2J<b>&\u202e"  # a terminal escape, HTML and a bidi override: kept as written


def test_a_queue_row_holds_its_counts_config_and_the_stores_retention(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job(queue="mail", max_attempts=1)
    def send(ok: bool) -> None:
        if not ok:
            raise RuntimeError(HOSTILE)

    @app.job(queue="idle")
    def never() -> None: ...

    # given a configured queue with one job in each of pending, completed, failed and cancelled
    app.configure_queue(
        "mail",
        max_concurrency=3,
        max_pending=50,
        max_attempts=2,
        backoff="linear",
        retention=3600,
    )
    send.enqueue(True)
    send.enqueue(False)
    testing.drain(app)
    cancelled = send.enqueue(True)
    app.cancel(cancelled.id)
    send.enqueue(True)
    app.pause_queue("mail")

    # when the status is read
    view = views.status(app)

    # then the queue's row has every status counted, the recent completion and its settings
    rows = {q.name: q for q in view.queues}
    mail = rows["mail"]
    assert list(mail.counts) == list(STATUSES)
    assert mail.counts == {
        "waiting": 0,
        "pending": 1,
        "running": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
    }
    assert mail.completed_last_minute == 1
    assert mail.configured and mail.paused
    assert (mail.max_concurrency, mail.max_pending, mail.max_attempts) == (3, 50, 2)
    assert mail.backoff == jobyard.Backoff("linear")
    assert (mail.retention, mail.kept) == (3600.0, 3600.0)
    info = app.store_info()
    assert mail.default_retention == info.retention
    # the pending job is due: how long it has waited (the store's stats_get tells its run_at)
    assert mail.oldest_pending_age is not None and 0 <= mail.oldest_pending_age < 60
    # a queue only a job of the app uses has a row of zeros and the store's retention
    idle = rows["idle"]
    assert set(idle.counts.values()) == {0} and not idle.configured and not idle.paused
    assert (idle.retention, idle.kept) == (None, info.retention)
    assert [q.name for q in view.queues] == sorted(rows)
    # and the store is named without its credentials, with what it told about itself
    assert view.info == info and view.warnings == info.warnings
    assert view.store == mask_url(app.url)


def test_a_worker_row_holds_the_jobs_it_runs_now(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    started, release = threading.Event(), threading.Event()

    @app.job(queue="slow")
    def hold(tag: str) -> None:
        started.set()
        release.wait(10)

    handle = hold.enqueue(HOSTILE)
    with running_worker(app, queues=["slow"], concurrency=2) as worker:
        try:
            assert started.wait(10), "the job never started"
            # when the status is read with the running jobs
            view = wait_until(
                lambda: (v := views.status(app, running=True)).workers and v,
                what="the worker's first beat",
            )
            plain = views.status(app)
        finally:
            release.set()

    # then the worker's row lists the job it runs, its arguments as given
    (row,) = view.workers
    assert row.id == worker.id and row.queues == ("slow",) and row.concurrency == 2
    assert row.started_at <= row.last_seen
    assert row.running is not None
    assert [(j.id, j.status, j.args) for j in row.running] == [(handle.id, "running", (HOSTILE,))]
    # and without asking, the running jobs are not read
    assert [w.running for w in plain.workers] == [None]


def test_a_job_detail_holds_its_workflow_and_raw_values(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def fetch(url: str) -> str:
        return url

    @app.job
    def join(parts: list[str], sep: str) -> str:
        return sep.join(parts)

    # given a group joined by a step, enqueued
    flow = group(fetch.s("a"), fetch.s(HOSTILE)).then(join.s(sep=",")).enqueue()
    a, b, step = flow.ids

    # when a member's detail is read
    detail = views.job_detail(app, b)

    # then it holds the job, its arguments raw, and the workflow's tree
    assert detail.job.id == b and detail.job.args == (HOSTILE,)
    assert detail.workflow is not None and detail.workflow.id == flow.id
    tree = detail.workflow.tree
    assert tree.kind == "chain"
    members, joined = tree.children
    assert members.kind == "group"
    assert [c.job.id for c in members.children if c.job is not None] == [a, b]
    assert joined.job is not None and joined.job.id == step and joined.job.status == "waiting"
    # and every field of the job, JSON-ready and unescaped
    fields = views.job_fields(app.get(step))
    assert list(fields) == [f for f in jobyard.Job.__dataclass_fields__]
    assert fields["status"] == "waiting" and fields["depends_on"] == [a, b]
    assert fields["kwargs"] == {"sep": ","} and isinstance(fields["created_at"], str)
    # a plain job has no workflow
    assert views.job_detail(app, fetch.enqueue("c").id).workflow is None
    with pytest.raises(jobyard.JobNotFound):
        views.job_detail(app, "999999")
    # a chain's step has one too
    c = chain(fetch.s("x"), fetch.s()).enqueue()
    assert views.job_detail(app, c.ids[1]).workflow is not None


def test_a_job_detail_of_a_corrupt_payload_shows_the_text(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    payloads = ["{not json", "[1]", f'{{"args": ["{HOSTILE}"]}}']
    inserted = app.backend.jobs_insert(
        JobsInsertParams([NewJob(name="x", queue="default", payload=p) for p in payloads])
    )

    for got, payload in zip(inserted, payloads, strict=True):
        detail = views.job_detail(app, got.id)
        assert (detail.job.args, detail.job.kwargs) == ((), {"<corrupt payload>": payload})


def test_schedule_rows_hold_stored_and_declared_schedules(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def report(kind: str) -> None: ...

    app.schedule("0 9 * * 1-5", report, ("daily",), name="daily", timezone="Europe/Berlin")
    app.schedule(every=30, job=report, args=("often",), name="often")
    app.sync_schedules()
    app.pause_schedule("often")
    app.schedule(every=60, job=report, args=("later",), name="later")
    # another version of the app no longer declares "often"
    newer = make_app()
    newer.schedule("0 9 * * 1-5", newer.by_name("report"), ("daily",), name="daily")

    rows = {r.name: r for r in views.schedules(app)}

    assert list(rows) == ["daily", "often", "later"]
    daily, often, later = rows["daily"], rows["often"], rows["later"]
    assert (daily.cron, daily.every, daily.timezone) == ("0 9 * * 1-5", None, "Europe/Berlin")
    assert (daily.job, daily.queue, daily.state) == ("report", "default", "active")
    assert daily.next_run_at is not None and daily.last_run_at is None
    assert (often.cron, often.every, often.state) == (None, 30.0, "paused")
    assert (later.stored, later.declared, later.state) == (False, True, "not stored yet")
    assert later.next_run_at is None
    # once the newer version syncs, the schedule it dropped is inactive, and not in it
    newer.sync_schedules()
    rows = {r.name: r for r in views.schedules(newer)}
    assert (rows["often"].state, rows["often"].declared) == ("inactive", False)
    assert rows["daily"].declared and "later" not in rows
