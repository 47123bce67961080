"""The Django Tasks backend: every ``@task`` of a project enqueued on jobyard, on any store.

A Django task is a jobyard job named by the task's import path (``orders.tasks.send_receipt``),
its arguments the job's payload. The framework's terms map onto jobyard's one to one:
``priority`` (higher runs first, both), ``queue_name`` (the queue), ``run_after`` (``run_at``);
a result's id is the job's id and its status is read from the job's
(pending and waiting: READY; running: RUNNING; completed: SUCCESSFUL; failed and cancelled:
FAILED), with the job's latest error as a ``TaskError`` and its JSON result as the return value.
"""

from __future__ import annotations

import inspect
import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections, transaction
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules, import_string

from ..app import App, load_app
from ..errors import ConfigurationError, JobyardError
from ..job import Job, JobFunction, Status
from ..worker.executor import current_job
from . import _compat as fw

ALIAS_VARIABLE = "JOBYARD_DJANGO_BACKEND"  # the TASKS entry a worker runs (``jobyard_worker``)
OPTIONS = ("url", "app", "database", "transactional", "max_attempts", "backoff", "timeout")
READY = {Status.WAITING, Status.PENDING}
FAILED = {Status.FAILED, Status.CANCELLED}
# The last line of a traceback: the exception's dotted name (builtins have none), then its text.
EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobyardTask(fw.Task):  # type: ignore[misc]
    """The backend's task class: a Django task with jobyard's retry policy and time limit of
    its own, given to the decorator (Django 6.1, the backport):
    ``@task(max_attempts=8, backoff="linear", timeout=30)``. Unset, the backend's OPTIONS
    apply, else the queue's settings, else 4 attempts with exponential backoff."""

    max_attempts: int | None = None
    backoff: str | None = None
    timeout: float | None = None

    def jobyard_options(self) -> dict[str, Any]:
        """The options this task sets, for ``JobFunction.options``."""
        given: dict[str, Any] = {
            "max_attempts": self.max_attempts,
            "backoff": self.backoff,
            "timeout": self.timeout,
        }
        return {k: v for k, v in given.items() if v is not None}


class JobyardBackend(fw.BaseTaskBackend):  # type: ignore[misc]
    """``TASKS = {"default": {"BACKEND": "jobyard.django.JobyardBackend", "OPTIONS": {...}}}``.

    OPTIONS (all optional):

    - ``url``: the jobyard store (else ``$JOBYARD_URL``, else ``sqlite:///jobyard.db``), or
      ``app``: ``"module:attribute"`` of a jobyard App of the project, to share its store, jobs,
      queues and schedules.
    - ``database``: the Django database whose transactions an enqueue follows (``"default"``).
    - ``transactional``: ``False`` (the default) enqueues when the surrounding
      ``transaction.atomic()`` block commits (``on_commit``: a rolled back block enqueues
      nothing); ``True`` writes the job in that transaction itself, on Django's own connection
      (PostgreSQL with psycopg 3, jobyard's tables in the same database): the job exists if and
      only if the transaction commits, and its id is known at once.
    - ``max_attempts``, ``backoff``, ``timeout``: jobyard's retry policy and time limit for every
      task (else the queue's settings, else 4 attempts with exponential backoff).
    """

    task_class = JobyardTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options: dict[str, Any] = dict(self.options)
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"jobyard's are {', '.join(OPTIONS)}"
            )
        if "url" in options and "app" in options:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: give 'url' or 'app', not both"
            )
        self._app_ref: str | None = options.get("app")
        # Django makes a backend per thread (and per task of an async server): they share one
        # App, one store connection pool and one map of tasks per configuration.
        self._shared = _shared(self._app_ref, options.get("url"))
        self._tasks: dict[str, Any] = self._shared.tasks  # job name -> the Task first seen
        self.database: str = options.get("database", DEFAULT_DB_ALIAS)
        self.transactional = bool(options.get("transactional", False))
        self._job_options: dict[str, Any] = {
            k: options[k] for k in ("max_attempts", "backoff", "timeout") if k in options
        }

    # the jobyard side ---------------------------------------------------------------------------

    @property
    def app(self) -> App:
        """The jobyard App behind this backend: its store, and every task as a job of it (use
        it for what Django Tasks has no word for: ``app.cron``, workflows, ``configure_queue``,
        the dashboard)."""
        return self._shared.app()

    def discover(self) -> None:
        """Import every installed app's ``tasks`` module, so that a worker knows each task."""
        autodiscover_modules("tasks")

    def _register(self, task: Any) -> JobFunction[..., Any]:
        name = task.module_path
        app = self.app
        known = app.registry.get(name)
        if known is not None and name in self._tasks:
            return known
        with self._shared.registering:
            self._tasks.setdefault(name, task)
            known = app.registry.get(name)
            if known is None:
                handler = self._handler(name, task.func)
                options: dict[str, Any] = {"queue": task.queue_name, **self._job_options}
                known = app.job(name=name, **options)(handler)
        return known

    def _handler(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """What a worker runs for the task ``name``: the task's function, given its context if
        it takes one, with Django's stale connections closed around it as a request would, and
        the framework's ``task_started`` / ``task_finished`` signals sent around each attempt."""

        def context(args: tuple[Any, ...]) -> tuple[Any, ...]:
            task = self._tasks[name]
            if not task.takes_context:
                return args
            result = self.get_result(current_job().job.id)
            return (fw.TaskContext(task_result=result), *args)

        if inspect.iscoroutinefunction(func):

            async def run_async(*args: Any, **kwargs: Any) -> Any:
                import asyncio

                given = await asyncio.to_thread(context, args)
                attempt = self._started(name, args, kwargs)
                try:
                    value = await func(*given, **kwargs)
                except BaseException as exc:
                    self._finished(attempt, exc=exc)
                    raise
                self._finished(attempt, value=value)
                return value

            run_async.__name__ = run_async.__qualname__ = name
            return run_async

        def run(*args: Any, **kwargs: Any) -> Any:
            close_old_connections()
            try:
                given = context(args)
                attempt = self._started(name, args, kwargs)
                try:
                    value = func(*given, **kwargs)
                except BaseException as exc:
                    self._finished(attempt, exc=exc)
                    raise
                self._finished(attempt, value=value)
                return value
            finally:
                close_old_connections()

        run.__name__ = run.__qualname__ = name
        return run

    def _started(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The running attempt as a task result (from the claim: no store read), once
        ``task_started`` is sent with it."""
        ctx = current_job()
        job = ctx.job
        now = timezone.now()
        result = fw.TaskResult(
            task=self._tasks[name].using(queue_name=job.queue),
            id=job.id,
            status=fw.TaskResultStatus.RUNNING,
            enqueued_at=None,  # not in the claim; get_result has it
            started_at=now,
            finished_at=None,
            last_attempted_at=now,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[ctx.worker_id] * job.attempts,
        )
        fw.task_started.send(type(self), task_result=result)
        return result

    def _finished(
        self, result: Any, *, value: Any = None, exc: BaseException | None = None
    ) -> None:
        """Send ``task_finished`` for an attempt that returned ``value`` or raised ``exc``
        (then FAILED for that attempt, whether or not jobyard tries it again)."""
        object.__setattr__(result, "finished_at", timezone.now())
        if exc is None:
            object.__setattr__(result, "status", fw.TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "_return_value", value)
        else:
            object.__setattr__(result, "status", fw.TaskResultStatus.FAILED)
            path = f"{type(exc).__module__}.{type(exc).__qualname__}"
            text = "".join(traceback.format_exception(exc))
            result.errors.append(fw.TaskError(exception_class_path=path, traceback=text))
        fw.task_finished.send(type(self), task_result=result)

    # the framework's side -----------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """The framework's checks, then the task becomes a jobyard job of :attr:`app`."""
        super().validate_task(task)
        jf = self._register(task)
        if isinstance(task, JobyardTask):
            try:
                jf.options(**task.jobyard_options())
            except (ConfigurationError, ValueError) as exc:
                raise fw.InvalidTask(f"{task.module_path}: {exc}") from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Enqueue ``task``: when the surrounding transaction commits (at once outside one), or
        inside it with ``transactional``. Inside an ``atomic()`` block without
        ``transactional`` the result's id is ``""`` until the block commits, and is set then."""
        self.validate_task(task)
        result = fw.TaskResult(
            task=task,
            id="",
            status=fw.TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),  # the framework's JSON check: a TypeError here, before any commit
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        own = task.jobyard_options() if isinstance(task, JobyardTask) else {}
        jf = self._register(task).options(
            queue=task.queue_name, priority=task.priority, run_at=task.run_after, **own
        )
        if self.transactional:
            conn = connections[self.database]
            conn.ensure_connection()
            self._insert(jf.options(connection=conn.connection), result)
        else:
            transaction.on_commit(lambda: self._insert(jf, result), using=self.database)
        return result

    def _insert(self, jf: JobFunction[..., Any], result: Any) -> None:
        handle = jf.enqueue(*result.args, **result.kwargs)
        object.__setattr__(result, "id", handle.id)
        if self.transactional:  # the store's row is not visible outside the transaction yet
            object.__setattr__(result, "enqueued_at", timezone.now())
        else:  # read back what the store set
            object.__setattr__(result, "enqueued_at", handle.get().created_at)
        fw.task_enqueued.send(type(self), task_result=result)

    def get_result(self, result_id: str) -> Any:
        """The task result of job ``result_id`` as stored now (``TaskResultDoesNotExist`` if
        there is no such job, or it is not a Django task)."""
        try:
            job = self.app.get(str(result_id))
        except JobyardError:  # no such job, or not an id this store could have made
            raise fw.TaskResultDoesNotExist(result_id) from None
        task = self._task_of(job)
        return result_of(job, task, self.alias)

    def _task_of(self, job: Job) -> Any:
        task = self._tasks.get(job.name)
        if task is None:
            try:
                task = import_string(job.name)
            except ImportError:
                task = None
            if not isinstance(task, fw.Task):
                raise fw.TaskResultDoesNotExist(
                    f"job {job.id} ({job.name}) is not a Django task"
                ) from None
        deferred = job.run_at > job.created_at
        return task.using(
            priority=job.priority,
            queue_name=job.queue,
            run_after=job.run_at if deferred else None,
        )

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's system checks: ``transactional`` needs PostgreSQL on psycopg 3, with the
        jobyard store in that same database."""
        errors: list[Any] = []
        if self.transactional:
            conn = connections[self.database]
            if conn.vendor != "postgresql" or not _psycopg3():
                errors.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]: 'transactional' needs a PostgreSQL database "
                        f"on psycopg 3, and {self.database!r} is {conn.vendor}",
                        hint="set 'transactional': False to enqueue on commit instead",
                        id="jobyard.E001",
                    )
                )
            if self._app_ref is None and not self.app.url.startswith(("postgres", "postgresql")):
                errors.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]: 'transactional' needs a PostgreSQL jobyard store",
                        id="jobyard.E002",
                    )
                )
        return errors


class Shared:
    """What every backend of one configuration shares: the App (built once) and the tasks."""

    def __init__(self, app_ref: str | None, url: str | None) -> None:
        self._app_ref = app_ref
        self._app: App | None = None if app_ref else App(url)
        self.tasks: dict[str, Any] = {}
        self.registering = threading.Lock()

    def app(self) -> App:
        """The App, loaded from ``app_ref`` on first use."""
        if self._app is None:
            with _lock:
                if self._app is None:
                    self._app = load_app(str(self._app_ref))
        return self._app


_lock = threading.Lock()
_configurations: dict[tuple[str | None, str | None], Shared] = {}


def _shared(app_ref: str | None, url: str | None) -> Shared:
    with _lock:
        key = (app_ref, url)
        if key not in _configurations:
            _configurations[key] = Shared(app_ref, url)
        return _configurations[key]


def _psycopg3() -> bool:
    """True if Django's PostgreSQL backend runs on psycopg 3."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def status_of(job: Job) -> Any:
    """The framework's status for a jobyard job's."""
    s = fw.TaskResultStatus
    if job.status in READY:
        return s.READY
    if job.status == Status.RUNNING:
        return s.RUNNING
    if job.status == Status.COMPLETED:
        return s.SUCCESSFUL
    return s.FAILED


def error_of(job: Job) -> Any:
    """The job's latest error as a ``TaskError``: the exception's import path read off the
    traceback's last line (a cancel or a drop names jobyard's own)."""
    text = job.error or ""
    if job.status == Status.CANCELLED:
        text = text or f"jobyard.errors.JobCancelled: job {job.id} was cancelled\n"
        path = "jobyard.errors.JobCancelled"
    elif text.startswith("dropped: "):
        path = "jobyard.errors.Drop"
    else:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        found = EXC_LINE.match(lines[-1]) if lines else None
        name = found.group(1) if found else "Exception"
        path = name if "." in name else f"builtins.{name}"
    return fw.TaskError(exception_class_path=path, traceback=text)


def result_of(job: Job, task: Any, alias: str) -> Any:
    """A framework ``TaskResult`` for a jobyard job."""
    started: datetime | None = job.started_at
    result = fw.TaskResult(
        task=task,
        id=job.id,
        status=status_of(job),
        enqueued_at=job.created_at,
        started_at=started,
        finished_at=job.finished_at,
        last_attempted_at=started,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=[error_of(job)] if job.error or job.status == Status.CANCELLED else [],
        # jobyard keeps the latest attempt's worker: one entry per attempt, so that the
        # framework's ``attempts`` (their count) is the job's.
        worker_ids=[job.worker_id or ""] * job.attempts,
    )
    if job.status == Status.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result
