"""The one way a job goes down to the store: a job function builds the :class:`NewJob` rows, this
step hands them to the store and runs the ``on_enqueue`` hooks for the jobs it created, and the
job function turns what comes back into handles.

Nothing below this step calls back up: it knows the store (opened lazily, through the callable
the App gives it) and nothing of the App, its registry or its handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ._codec import decode_payload, with_trace
from .backends.base import Backend, Inserted, JobsInsertParams, NewJob, as_transactional
from .events import Enqueued, Events
from .hooks import EnqueueEvent, Hooks

TRANSACTIONAL_ENQUEUE = "a transactional enqueue (connection=...)"
# The trace context of the caller, as a propagator writes it (``jobyard._otel``): {} for none.
Inject = Callable[[], dict[str, str]]


class Enqueue:
    """Insert jobs, on the store's own connection or inside a caller's transaction.

    ``events``: the App's bus (an ``Enqueued`` event per insert that created jobs). ``inject``
    (set by the App when tracing is on): the caller's trace context, written into each job's
    payload (``"tc"``) so the worker's span of each attempt is its child."""

    def __init__(
        self, store: Callable[[], Backend], hooks: Hooks, events: Events | None = None
    ) -> None:
        self._store = store
        self._hooks = hooks
        self._events = events if events is not None else Events()
        self.inject: Inject | None = None

    def insert(
        self,
        jobs: Sequence[NewJob],
        connection: Any = None,
        send: Callable[[JobsInsertParams], list[Inserted]] | None = None,
    ) -> list[Inserted]:
        """Insert ``jobs`` in one round trip (all or nothing); ``connection``: the caller's
        transaction, on a store that can join it; ``send``: the store call to make instead of
        ``jobs_insert`` (a stream consumer's reply, with its queue's expiry)."""
        if not jobs:
            return []
        jobs = self._traced(jobs)
        if send is None:
            store = self._store()
            if connection is not None:
                store = as_transactional(store, TRANSACTIONAL_ENQUEUE)
            send = store.jobs_insert
        inserted = send(JobsInsertParams(jobs, connection))
        self._enqueued(jobs, inserted)
        return inserted

    def _traced(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        """``jobs`` carrying the caller's trace context, when tracing is on and there is one."""
        if self.inject is None:
            return jobs
        carrier = self.inject()
        if not carrier:
            return jobs
        return [replace(j, payload=with_trace(j.payload, carrier)) for j in jobs]

    async def insert_async(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Inserted]:
        """:meth:`insert` for async code: on a thread; with a ``connection``, the store's own
        async insert (on an async connection it joins that transaction on the event loop)."""
        if connection is None or not jobs:
            # to_thread copies this task's context: the trace context injected is the caller's.
            return await asyncio.to_thread(self.insert, jobs)
        jobs = self._traced(jobs)
        store = as_transactional(self._store(), TRANSACTIONAL_ENQUEUE)
        inserted = await store.jobs_insert_async(JobsInsertParams(jobs, connection))
        self._enqueued(jobs, inserted)
        return inserted

    def _enqueued(self, jobs: Sequence[NewJob], inserted: Sequence[Inserted]) -> None:
        """Emit ``Enqueued`` and run the ``on_enqueue`` hooks for the jobs that were created
        (not found by key)."""
        if self._events.active:
            made = [(n.name, n.queue) for n, got in zip(jobs, inserted, strict=True) if got.created]
            if made:
                self._events.emit(Enqueued(made))
        if not self._hooks.wants("on_enqueue"):
            return
        for new, got in zip(jobs, inserted, strict=True):
            if got.created:
                payload = decode_payload(new.payload)
                event = EnqueueEvent(
                    got.id, new.name, new.queue, tuple(payload.args), payload.kwargs
                )
                self._hooks.run("on_enqueue", event)
