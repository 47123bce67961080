"""A handler's progress report never fails its job: out of range it is clamped, not a number it
is ignored, too long a note is cut, each with one warning per attempt however often repeated.
The store's own bound (``base.Progress``) stays the contract's guard."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import MAX_PROGRESS_NOTE, Progress
from jobyard.errors import ConfigurationError
from jobyard.testing import drain

from ..conftest import running_worker, wait_until

CALLS = 2_000  # a tight loop: one warning per kind of problem, not one per call


def _report_badly(job: jobyard.JobContext) -> None:
    for _ in range(CALLS):
        job.progress(float("nan"), "ignored")
        job.progress("half", "ignored")  # type: ignore[arg-type]
        job.progress(-0.5)
        job.progress(1.5, "x" * (MAX_PROGRESS_NOTE + 100))  # the last word: 1.0 and a cut note


def _warnings(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobyard.worker" and r.getMessage().startswith(f"job {job_id}: progress")
    ]


@pytest.mark.alone  # its 1.5 s lease is renewed while a handler spins: not under parallel load
def test_out_of_range_progress_is_kept_in_bounds_and_the_job_completes(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    # given a handler reporting progress out of bounds in a tight loop, then waiting
    app = make_app()
    reported, release = threading.Event(), threading.Event()

    @app.job(lease=1.5, max_attempts=1)  # a renewal every 0.5 s carries the progress
    def resize() -> str:
        _report_badly(jobyard.current_job())
        reported.set()
        release.wait(30)
        return "done"

    handle = resize.enqueue()
    with caplog.at_level(logging.WARNING, logger="jobyard.worker"), running_worker(app):
        try:
            assert reported.wait(15)
            # when it is read while the job runs, then the store holds the last report,
            # brought into bounds
            cut = "x" * (MAX_PROGRESS_NOTE - 1) + "\u2026"
            job = wait_until(
                lambda: (j := app.get(handle.id)).progress == 1.0 and j.progress_note == cut and j,
                what="the last report, in bounds",
            )
            assert job.status == "running"
        finally:
            release.set()
        # and the job's outcome is the handler's own
        assert handle.result(timeout=15) == "done"
    assert app.get(handle.id).attempts == 1
    # with one warning per kind of problem, however often it was repeated
    lines = _warnings(caplog, handle.id)
    assert len(lines) == 4, lines
    assert any("NaN is not a number" in line for line in lines)
    assert any("of type str is not a number" in line for line in lines)
    assert any("-0.5 is outside 0..1; recorded as 0.0" in line for line in lines)
    assert any(f"cut to {MAX_PROGRESS_NOTE}" in line for line in lines)


def test_out_of_range_progress_does_not_fail_a_job_in_drain(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    @app.job(max_attempts=1)
    def resize() -> str:
        _report_badly(jobyard.current_job())
        return "done"

    @app.job(max_attempts=1)
    async def resize_async() -> str:
        _report_badly(jobyard.current_job())
        return "done async"

    handles = [resize.enqueue(), resize_async.enqueue()]
    with caplog.at_level(logging.WARNING, logger="jobyard.worker"):
        assert drain(app, raise_errors=True) == 2
    assert [h.result(timeout=0) for h in handles] == ["done", "done async"]
    assert [len(_warnings(caplog, h.id)) for h in handles] == [4, 4]


def test_the_stores_own_bound_still_refuses_a_progress_out_of_range() -> None:
    """What reaches a store is checked: the contract's guard is kept."""
    with pytest.raises(ConfigurationError):
        Progress("1", 1.5)
    with pytest.raises(ConfigurationError):
        Progress("1", 0.5, "x" * (MAX_PROGRESS_NOTE + 1))
