"""Tasks of the Django tests (module level, as the framework requires)."""

from __future__ import annotations

from typing import Any

import jobyard
from jobyard.django._compat import FRAMEWORK

if FRAMEWORK == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task


@task
def add(a: int, b: int = 0) -> int:
    return a + b


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
def drops() -> None:
    raise jobyard.Drop("not worth another try")


@task
def not_json() -> Any:
    return {1, 2}


@task
async def add_async(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def knows_itself(context: Any, tag: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task(max_attempts=1, timeout=5)
def fails_once(message: str) -> None:
    raise ValueError(message)
