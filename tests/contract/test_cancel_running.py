"""Cancelling a running job and reading its progress, with a real worker on every store: the
request reaches the worker at its next lease renewal (a short lease here, so renewals come
every half second), an async handler is cancelled, a sync one sees ``cancel_requested``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import Renewed

from ..conftest import running_worker, wait_until

LEASE = 1.5  # a renewal every 0.5 s: the worker learns a request within about that


def finished(app: jobyard.App, job_id: str) -> jobyard.Job | None:
    job = app.get(job_id)
    return job if job.status.finished else None


def test_an_async_handler_is_cancelled_and_the_job_ends_cancelled(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given an async handler that would run for a minute
    app = make_app()
    started = threading.Event()

    @app.job(lease=LEASE)
    async def crawl() -> str:
        started.set()
        await asyncio.sleep(60)
        return "done"

    handle = crawl.enqueue()
    with running_worker(app):
        assert started.wait(15)
        # when someone asks to cancel it
        asked = app.cancel(handle.id, by="alice")
        assert asked.status == "running"
        job = wait_until(lambda: finished(app, handle.id), what="the job to finish")
    # then it ends cancelled, saying who asked and when
    assert job.status == "cancelled"
    assert job.cancelled_by == "alice"
    assert job.cancel_requested_at == asked.cancel_requested_at
    assert job.finished_at is not None and job.finished_at >= job.cancel_requested_at
    assert job.error is not None and "cancelled on request" in job.error
    with pytest.raises(jobyard.JobCancelled):
        handle.result(timeout=1)


def test_a_sync_handler_sees_the_request_and_stops(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    started = threading.Event()
    outcomes: list[str | None] = []
    app.after_job(lambda event: outcomes.append(event.outcome))

    @app.job(lease=LEASE)
    def resize(n: int) -> int:
        job = jobyard.current_job()
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            job.raise_if_cancelled()  # a cooperating handler stops here
            time.sleep(0.01)
        return n

    handle = resize.enqueue(3)
    with running_worker(app):
        assert started.wait(15)
        app.cancel(handle.id, by="bob")
        job = wait_until(lambda: finished(app, handle.id), what="the job to finish")
    assert (job.status, job.cancelled_by) == ("cancelled", "bob")
    assert job.attempts == 1  # not retried
    # what the after_job hooks hear (they run just after the outcome is queued for the store)
    wait_until(lambda: outcomes == ["cancelled"], what="the after_job hook")


def test_a_handler_that_ignores_the_request_keeps_its_outcome(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given a sync handler that waits until it is asked to stop, then finishes anyway, and an
    # async one that swallows its cancellation
    app = make_app()

    @app.job(lease=LEASE)
    def stubborn() -> str:
        job = jobyard.current_job()
        wait_until(lambda: job.cancel_requested, timeout=30, what="the request")
        return "finished anyway"

    @app.job(lease=LEASE)
    async def shrugs() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "caught it"
        return "slept"

    sync_job, async_job = stubborn.enqueue(), shrugs.enqueue()
    with running_worker(app):
        for handle in (sync_job, async_job):
            wait_until(lambda h=handle: app.get(h.id).status == "running", what="a start")
            app.cancel(handle.id, by="carol")
        # then each completes with what it returned; who asked stays visible
        assert sync_job.result(timeout=20) == "finished anyway"
        assert async_job.result(timeout=20) == "caught it"
    for handle in (sync_job, async_job):
        job = app.get(handle.id)
        assert (job.status, job.cancelled_by) == ("completed", "carol")


def test_progress_is_readable_while_the_job_runs_and_costs_no_round_trip_per_call(
    make_app: Callable[..., jobyard.App],
) -> None:
    # given a handler reporting progress in a tight loop, then waiting
    app = make_app()
    release = threading.Event()
    reported = threading.Event()
    renewals: list[Renewed] = []
    renew = app.backend.leases_renew

    def counted(params):  # type: ignore[no-untyped-def]
        out = renew(params)
        renewals.append(out)
        return out

    app.backend.leases_renew = counted  # type: ignore[method-assign]

    @app.job  # the default lease: its own renewals come every 10 s
    def resize(n: int) -> None:
        job = jobyard.current_job()
        for i in range(n):
            job.progress((i + 1) / n, f"resized {i + 1} of {n}")
        reported.set()
        release.wait(30)

    handle = resize.enqueue(20_000)
    with running_worker(app):
        assert reported.wait(15)
        t0 = time.monotonic()
        # when it is read while the handler still runs
        job = wait_until(
            lambda: (j := app.get(handle.id)).progress == 1.0 and j,
            what="the progress to show",
        )
        took = time.monotonic() - t0
        assert (job.status, job.progress_note) == ("running", "resized 20000 of 20000")
        # then 20,000 calls cost a renewal or so, not 20,000 round trips
        assert len(renewals) <= 3 + took
        release.set()
        handle.result(timeout=15)
