"""The internal event stream: what the worker's parts, the enqueue step and the consumers did,
for whoever subscribed (``jobyard.web.metrics``, a user's own exporter).

One :class:`Events` bus per App (``app.events``). Emitters guard each event with the bus's
``active`` flag, a plain attribute, so with nobody subscribed an event costs one attribute read
and no object is built: the worker's hot path pays nothing for a stream nobody reads.
Subscribers run on the emitting thread (a handler thread, the completer, the heartbeat, the
event loop), so they must be quick and must not block; one that raises is logged and skipped,
never changing a job's outcome. This module imports nothing of jobyard, so every layer (the
stores included, for their own events) may use it; nothing here knows Prometheus.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("jobyard.events")


@dataclass(frozen=True, slots=True)
class Enqueued:
    """Jobs just stored by this process (``created``: not found by their idempotency key).
    ``jobs`` are ``(name, queue)`` pairs, one per job created."""

    jobs: Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim round trip brought ``count`` jobs to ``worker_id``."""

    worker_id: str
    count: int


@dataclass(frozen=True, slots=True)
class Started:
    """A handler is about to run. ``waited``: seconds from the job being due to this start, when
    the store told (None: unknown)."""

    id: str
    name: str
    queue: str
    attempt: int
    worker_id: str
    waited: float | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """An attempt's outcome was decided: ``outcome`` is the lifecycle word of ``jobyard.hooks``
    (completed, retry, failed, dead, released, cancelled); ``duration`` the seconds the handler
    ran (None: it did not run). ``source`` is ``"job"`` for a job of the store, ``"list"`` or
    ``"stream"`` for an entry of a foreign Redis list or stream (its ``queue`` is the key)."""

    id: str
    name: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    outcome: str
    duration: float | None
    error: str | None = None
    source: str = "job"


@dataclass(frozen=True, slots=True)
class Acked:
    """The store wrote ``written`` outcomes in one round trip, ``refused`` of them turned down
    (their lease was lost)."""

    written: int
    refused: int


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """This worker learned that an attempt of its lost its lease (``where``: ``"renew"``, the
    heartbeat was told; ``"ack"``, its outcome was refused)."""

    id: str
    name: str
    queue: str
    attempt: int
    where: str


@dataclass(frozen=True, slots=True)
class Reaped:
    """The reaper found a lapsed lease (its worker stopped renewing) and moved the job on:
    ``status`` is what it is now (pending again, or failed once its attempts are spent)."""

    id: str
    name: str
    queue: str
    status: str


@dataclass(frozen=True, slots=True)
class WorkerNote:
    """One of the worker's other happenings, counted by ``kind``: ``renew_failed`` (a renewal
    round trip failed, ``count`` leases in it), ``handed_back`` (``count`` buffered jobs went
    back unstarted), ``tick_fired`` / ``tick_skipped`` (a schedule's tick, ``detail`` its
    name), ``unsure`` (a Redis call whose reply was lost, not repeated; ``detail`` the call)."""

    kind: str
    count: int = 1
    detail: str = ""


Event = Enqueued | Claimed | Started | Finished | Acked | LeaseLost | Reaped | WorkerNote
Subscriber = Callable[[Any], object]


class Events:
    """A bus of events. :meth:`subscribe` a function of one event; emitters check
    :attr:`active` first and call :meth:`emit` only then."""

    __slots__ = ("_lock", "_subscribers", "active")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: tuple[Subscriber, ...] = ()
        # Read without the lock by every emitter: a plain attribute, replaced whole.
        self.active = False

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(event)`` for every event from now on; returns the function that stops it."""
        if not callable(fn):
            raise TypeError(f"an event subscriber must be callable, got {fn!r}")
        with self._lock:
            self._subscribers = (*self._subscribers, fn)
            self.active = True

        def unsubscribe() -> None:
            with self._lock:
                subs = list(self._subscribers)
                if fn in subs:
                    subs.remove(fn)
                self._subscribers = tuple(subs)
                self.active = bool(subs)

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every subscriber; one that raises is logged and the rest still run."""
        for fn in self._subscribers:
            try:
                fn(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", fn, type(event).__name__)
