"""The Django Tasks backend against what the framework expects of a backend (the behaviours the
django-tasks backport's own suite asks of its backends with a separate worker), on jobyard's
memory store, drained in this thread."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

import jobyard
from jobyard.django import JobyardBackend
from jobyard.django._compat import TaskResultDoesNotExist, TaskResultStatus
from jobyard.testing import drain

from . import tasks

QUEUES = ["default", "emails"]


def run(backend: JobyardBackend) -> int:
    return drain(backend.app, QUEUES)


def test_the_capability_flags_say_what_works(backend: JobyardBackend) -> None:
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert list(backend.check()) == []


def test_an_enqueued_task_is_ready_and_stored_as_a_job(backend: JobyardBackend) -> None:
    result = tasks.add.enqueue(1, b=3)

    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.started_at is None and result.finished_at is None and result.attempts == 0
    assert result.args == [1] and result.kwargs == {"b": 3} and result.task == tasks.add
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    job = backend.app.get(result.id)
    assert (job.name, job.args, job.kwargs) == ("tests.django.tasks.add", (1,), {"b": 3})
    assert backend.get_result(result.id) == result


def test_priority_queue_and_run_after_map_onto_the_job(backend: JobyardBackend) -> None:
    now = jobyard.clock.to_datetime(backend.app.clock.now())
    assert now is not None
    later = now + timedelta(hours=1)
    task = tasks.add.using(priority=7, queue_name="emails", run_after=later)

    result = task.enqueue(2)

    job = backend.app.get(result.id)
    assert (job.priority, job.queue, job.run_at) == (7, "emails", later)
    assert run(backend) == 0  # not before run_after
    assert backend.get_result(result.id).task == task
    backend.app.clock.advance(3600)
    assert run(backend) == 1


def test_a_finished_task_has_its_return_value_times_and_attempt(backend: JobyardBackend) -> None:
    result = tasks.add.enqueue(40, b=2)
    assert run(backend) == 1

    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 42 and result.attempts == 1 and result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_a_raising_task_is_retried_then_failed_with_its_error(backend: JobyardBackend) -> None:
    # The example's settings give every task 3 attempts (OPTIONS max_attempts).
    result = tasks.fails.enqueue("no stock")
    assert run(backend) == 1

    result.refresh()
    assert result.status == TaskResultStatus.READY  # ready to be executed again
    assert result.errors[0].exception_class is ValueError
    assert result.errors[0].traceback.endswith("ValueError: no stock\n")
    for _ in range(2):
        backend.app.clock.advance(3600)
        assert run(backend) == 1

    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 3
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_drop_and_a_result_json_cannot_hold_fail_at_once(backend: JobyardBackend) -> None:
    dropped, odd = tasks.drops.enqueue(), tasks.not_json.enqueue()
    run(backend)
    backend.app.clock.advance(3600)
    run(backend)
    backend.app.clock.advance(3600)
    run(backend)

    dropped.refresh()
    odd.refresh()
    assert dropped.status == TaskResultStatus.FAILED and dropped.attempts == 1
    assert dropped.errors[0].exception_class is jobyard.Drop
    assert odd.status == TaskResultStatus.FAILED
    assert odd.errors[0].exception_class is TypeError


def test_async_tasks_and_tasks_that_take_their_context(backend: JobyardBackend) -> None:
    summed = asyncio.run(tasks.add_async.aenqueue(2, 3))
    knows = tasks.knows_itself.enqueue("x")
    assert run(backend) == 2

    assert backend.get_result(summed.id).return_value == 5
    mine = asyncio.run(backend.aget_result(knows.id))
    assert mine.return_value == {"id": knows.id, "attempt": 1, "tag": "x"}


def test_a_cancelled_job_reads_as_failed(backend: JobyardBackend) -> None:
    result = tasks.add.enqueue(1)
    backend.app.cancel(result.id)

    got = backend.get_result(result.id)

    assert got.status == TaskResultStatus.FAILED
    assert got.errors[0].exception_class is jobyard.JobCancelled


@pytest.mark.parametrize("bad", ["999999", "not-an-id", ""])
def test_an_unknown_id_does_not_exist(backend: JobyardBackend, bad: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(bad)


def test_a_plain_jobyard_job_is_not_a_task_result(backend: JobyardBackend) -> None:
    handle = backend.app.enqueue("send_email", "a@example.com")
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend.get_result(handle.id)


def test_arguments_json_cannot_hold_are_refused_at_enqueue(backend: JobyardBackend) -> None:
    with pytest.raises(TypeError):
        tasks.add.enqueue(object())
    assert backend.app.jobs() == []


def test_inside_atomic_the_job_is_enqueued_only_on_commit(backend: JobyardBackend) -> None:
    with transaction.atomic():
        result = tasks.add.enqueue(1)
        assert result.id == "" and backend.app.jobs() == []  # not before the commit

    assert backend.app.get(result.id).args == (1,)
    assert result.enqueued_at is not None

    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(2)
        raise RuntimeError("rolled back")

    assert [j.args for j in backend.app.jobs()] == [(1,)]


def test_the_transactional_option_is_refused_off_postgresql() -> None:
    backend = JobyardBackend("tx", {"OPTIONS": {"url": "memory://", "transactional": True}})
    ids = {e.id for e in backend.check()}
    assert ids == {"jobyard.E001", "jobyard.E002"}


def test_unknown_options_are_refused_by_name() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="retries"):
        JobyardBackend("x", {"OPTIONS": {"url": "memory://", "retries": 3}})


def test_the_frameworks_signals_are_sent_around_each_attempt(backend: JobyardBackend) -> None:
    from jobyard.django._compat import task_enqueued, task_finished, task_started

    seen: list[tuple[str, str, str]] = []

    def record(kind: str) -> Any:
        def receiver(sender: Any, task_result: Any, **_: Any) -> None:
            seen.append((kind, task_result.id, str(task_result.status)))

        return receiver

    receivers = {"enqueued": record("enqueued"), "started": record("started")}
    receivers["finished"] = record("finished")
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        ok, bad = tasks.add.enqueue(1).id, tasks.fails.enqueue("x").id
        run(backend)
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])

    assert seen == [
        ("enqueued", ok, "READY"),
        ("enqueued", bad, "READY"),
        ("started", ok, "RUNNING"),
        ("finished", ok, "SUCCESSFUL"),
        ("started", bad, "RUNNING"),
        ("finished", bad, "FAILED"),
    ]


def test_a_task_sets_jobyards_own_policy_through_the_decorator(backend: JobyardBackend) -> None:
    from jobyard.django import JobyardTask

    assert isinstance(tasks.fails_once, JobyardTask)
    result = tasks.fails_once.using(priority=3).enqueue("no stock")
    assert run(backend) == 1

    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1  # max_attempts=1
    assert backend.app.get(result.id).max_attempts == 1


def test_a_bad_policy_is_refused_when_the_task_is_defined(backend: JobyardBackend) -> None:
    from jobyard.django._compat import InvalidTask

    with pytest.raises(InvalidTask, match="max_attempts"):
        tasks.task(max_attempts=0)(tasks.add.func)
