"""Lifecycle hooks: code of the user's that runs when a job is enqueued, starts and ends.

Register with ``app.on_enqueue(fn)``, ``app.before_job(fn)``, ``app.after_job(fn)`` and
``app.on_dead(fn)`` (each returns ``fn``, so they work as decorators). Hooks are plain functions
of one event; they run in the process that enqueues (``on_enqueue``) or in the worker, on the
thread (or, for async handlers, the event loop) of the job they see, so they should be quick.
A hook that raises is logged and skipped: it never changes a job's outcome or stops a worker.
Metrics, structured logs and tracing are built on these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("jobyard.hooks")

# completed: the handler returned. retry: it failed and will run again. failed: it ended in the
# dead letter before its attempts were spent (Drop, at_most_once, a corrupt record). dead: it
# ended in the dead letter after its last attempt. released: a graceful shutdown gave it back
# to pending, its attempt uncounted. cancelled: it stopped on a cancellation request.
JobOutcome = Literal["completed", "retry", "failed", "dead", "released", "cancelled"]


@dataclass(frozen=True, slots=True)
class EnqueueEvent:
    """A job just stored (``on_enqueue``)."""

    id: str
    name: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A job starting (``before_job``: ``outcome`` is None) or ending (``after_job``,
    ``on_dead``)."""

    id: str
    name: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    outcome: JobOutcome | None = None
    duration: float | None = None  # seconds the handler ran
    error: str | None = None  # the traceback or reason, for anything but completed
    result: Any = field(default=None, repr=False)  # a completed job's return value (as JSON)


Hook = Callable[[Any], object]


class Hooks:
    """The hooks of one App, by kind."""

    KINDS = ("on_enqueue", "before_job", "after_job", "on_dead")

    def __init__(self) -> None:
        self._hooks: dict[str, list[Hook]] = {kind: [] for kind in self.KINDS}

    def add(self, kind: str, fn: Hook) -> None:
        """Register ``fn`` to run at ``kind``."""
        if not callable(fn):
            raise TypeError(f"a {kind} hook must be callable, got {fn!r}")
        self._hooks[kind].append(fn)

    def __bool__(self) -> bool:
        return any(self._hooks.values())

    def wants(self, kind: str) -> bool:
        """True when some hook of ``kind`` is registered (so its event is worth building)."""
        return bool(self._hooks[kind])

    def run(self, kind: str, event: EnqueueEvent | JobEvent) -> None:
        """Call every hook of ``kind``; one that raises is logged and the rest still run."""
        for fn in self._hooks[kind]:
            try:
                fn(event)
            except Exception:  # a hook must not change the job's outcome or stop the worker
                log.exception("%s hook %s failed for job %s", kind, _name(fn), event.id)


def _name(fn: Hook) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
