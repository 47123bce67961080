"""Every store refuses the same moves with the same exception and the same words (the messages
are defined once, in ``jobyard/errors.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsPurgeParams,
    LeasesRenewParams,
    Outcome,
)


@pytest.fixture
def app(make_app: Callable[..., jobyard.App]) -> jobyard.App:
    return make_app()


@pytest.fixture
def work(app: jobyard.App) -> jobyard.JobFunction[..., None]:
    @app.job(queue="q")
    def work() -> None: ...

    return work


def claim(app: jobyard.App) -> str:
    (job,) = app.backend.jobs_claim(JobsClaimParams("w", ["q"], 1))
    return job.token


def test_cancelling_a_running_job_records_a_request(
    app: jobyard.App, work: jobyard.JobFunction
) -> None:
    job_id = work.enqueue().id
    claim(app)

    asked = app.cancel(job_id, by="ops")
    again = app.cancel(job_id, by="someone else")  # the first request stands

    assert (asked.status, asked.cancelled_by) == ("running", "ops")
    assert asked.cancel_requested_at is not None
    assert (again.cancelled_by, again.cancel_requested_at) == ("ops", asked.cancel_requested_at)
    assert app.get(job_id).status == "running"


def test_cancelling_a_finished_job_is_refused(app: jobyard.App, work: jobyard.JobFunction) -> None:
    job_id = work.enqueue().id
    app.cancel(job_id)

    with pytest.raises(jobyard.InvalidTransition) as refused:
        app.cancel(job_id)

    assert str(refused.value) == (
        f"job {job_id} is cancelled: only pending or running jobs can be cancelled"
    )


@pytest.mark.parametrize("status", ["pending", "running"])
def test_retrying_an_unfinished_job_is_refused(
    app: jobyard.App, work: jobyard.JobFunction, status: str
) -> None:
    job_id = work.enqueue().id
    if status == "running":
        claim(app)

    with pytest.raises(jobyard.InvalidTransition) as refused:
        app.retry(job_id)

    assert str(refused.value) == (
        f"job {job_id} is {status}: only failed or cancelled jobs can be retried"
    )
    assert app.get(job_id).status == status


def test_retrying_a_job_whose_key_another_holds_is_refused(
    app: jobyard.App, work: jobyard.JobFunction
) -> None:
    keyed = work.options(idempotency_key="order-7")
    first = keyed.enqueue().id
    app.cancel(first)  # the key is free again...
    second = keyed.enqueue().id  # ...and taken by a new job

    with pytest.raises(jobyard.DuplicateJob) as refused:
        app.retry(first)

    assert str(refused.value) == (
        f"job {first} cannot be retried: job {second} holds its idempotency key"
    )
    assert app.get(first).status == "cancelled"


def test_moving_a_job_that_does_not_exist_is_refused(app: jobyard.App) -> None:
    for move in (app.cancel, app.retry, app.get):
        with pytest.raises(jobyard.JobNotFound) as refused:
            move("no-such-job")
        assert str(refused.value) == "no job with id 'no-such-job'"


def test_a_stale_token_settles_nothing(app: jobyard.App, work: jobyard.JobFunction) -> None:
    job_id = work.enqueue().id
    claim(app)
    stale = "0" * 32

    lost = app.backend.leases_renew(LeasesRenewParams("w", [(job_id, stale)])).lost
    refused = app.backend.jobs_ack(JobsAckParams([Outcome(job_id, stale, "completed", "1")]))

    assert (lost, refused) == ([job_id], [job_id])
    assert app.get(job_id).status == "running"


def test_purging_unfinished_jobs_is_refused() -> None:
    with pytest.raises(ValueError) as refused:
        JobsPurgeParams(("completed", "pending", "running"))

    assert str(refused.value) == (
        "only finished jobs (completed, failed, cancelled) can be purged, "
        "not ['pending', 'running']"
    )


@pytest.mark.parametrize("near", ["{id}\n", " {id}", "{id}.0", "+{id}", "{id}٣", "9" * 30])
def test_only_a_job_id_itself_names_the_job(
    app: jobyard.App, work: jobyard.JobFunction, near: str
) -> None:
    job_id = work.enqueue().id
    lookalike = near.format(id=job_id)

    with pytest.raises(jobyard.JobNotFound):
        app.get(lookalike)
    with pytest.raises(jobyard.JobNotFound):
        app.cancel(lookalike)
    assert app.get(job_id).status == "pending"
