"""Lifecycle hooks: code of the user's that runs when a job is enqueued, starts and ends.

Register with ``app.on_enqueue(fn)``, ``app.before_job(fn)``, ``app.after_job(fn)`` and
``app.on_dead(fn)`` (each returns ``fn``, so they work as decorators). Hooks are plain functions
of one event; they run in the process that enqueues (``on_enqueue``) or in the worker, on the
thread (or, for async handlers, the event loop) of the job they see, so they should be quick.
A hook that raises is logged and skipped, whatever it raises (``SystemExit``, ``KeyboardInterrupt``
and every other ``BaseException`` included): it never changes a job's outcome or stops a worker.
One exception: a ``KeyboardInterrupt`` in an ``on_enqueue`` hook on the main thread is logged
and raised again, since there it is the user pressing Ctrl-C in the program that enqueues (the
job is stored by then; only the hooks after it are skipped). Metrics, structured logs and
tracing are built on these.
"""

from __future__ import annotations

import logging
import threading
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
        self._count = 0  # hooks of every kind: asked once per job run, so kept, not counted

    def add(self, kind: str, fn: Hook) -> None:
        """Register ``fn`` to run at ``kind``."""
        if not callable(fn):
            raise TypeError(f"a {kind} hook must be callable, got {fn!r}")
        self._hooks[kind].append(fn)
        self._count += 1

    def __bool__(self) -> bool:
        return self._count > 0

    def wants(self, kind: str) -> bool:
        """True when some hook of ``kind`` is registered (so its event is worth building)."""
        return bool(self._hooks[kind])

    def run(self, kind: str, event: EnqueueEvent | JobEvent) -> None:
        """Call every hook of ``kind``; one that raises is logged and the rest still run."""
        for fn in self._hooks[kind]:
            try:
                fn(event)
            except BaseException as exc:  # a hook changes no outcome and stops no worker
                if _interrupted(kind, exc):
                    log.warning("%s hook %s interrupted for job %s", kind, _name(fn), event.id)
                    raise
                log.exception("%s hook %s failed for job %s", kind, _name(fn), event.id)


def _interrupted(kind: str, exc: BaseException) -> bool:
    """True for Ctrl-C in the program that enqueues: a ``KeyboardInterrupt`` in an
    ``on_enqueue`` hook on the main thread, where Python delivers SIGINT. Swallowing it would
    leave that program unable to stop while a slow hook runs. Everywhere else (a worker's
    threads and event loop, where no signal raises it, and ``testing.drain``, which records a
    handler's own ``KeyboardInterrupt`` as its job's outcome) it is the hook's own doing."""
    return (
        kind == "on_enqueue"
        and isinstance(exc, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
    )


def _name(fn: Hook) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
