"""Which Django Tasks framework is installed: Django 6's own ``django.tasks``, else the
``django-tasks`` backport (``django_tasks``) on Django 5.2. Everything the integration takes from
the framework comes through here, so the two are one code path.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from .._extras import require


def _framework() -> str:
    require("django", "django")
    if importlib.util.find_spec("django.tasks") is not None:
        return "django.tasks"  # Django >= 6.0
    require("django", "django_tasks")  # the backport, on Django 5.2
    return "django_tasks"


FRAMEWORK = _framework()
_root = importlib.import_module(FRAMEWORK)
_base = importlib.import_module(f"{FRAMEWORK}.base")
_exceptions = importlib.import_module(f"{FRAMEWORK}.exceptions")
_signals = importlib.import_module(f"{FRAMEWORK}.signals")

BaseTaskBackend: Any = importlib.import_module(f"{FRAMEWORK}.backends.base").BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
# A task the backend refuses: InvalidTaskError in the backport, InvalidTask in Django.
InvalidTask: Any = getattr(_exceptions, "InvalidTaskError", None) or _exceptions.InvalidTask
task_backends: Any = _root.task_backends
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
