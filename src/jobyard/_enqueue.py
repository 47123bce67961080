"""The one way a job goes down to the store: a job function builds the :class:`NewJob` rows, this
step hands them to the store and runs the ``on_enqueue`` hooks for the jobs it created, and the
job function turns what comes back into handles.

Nothing below this step calls back up: it knows the store (opened lazily, through the callable
the App gives it) and nothing of the App, its registry or its handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ._codec import decode_payload
from .backends.base import Backend, Inserted, JobsInsertParams, NewJob, as_transactional
from .hooks import EnqueueEvent, Hooks

TRANSACTIONAL_ENQUEUE = "a transactional enqueue (connection=...)"


class Enqueue:
    """Insert jobs, on the store's own connection or inside a caller's transaction."""

    def __init__(self, store: Callable[[], Backend], hooks: Hooks) -> None:
        self._store = store
        self._hooks = hooks

    def insert(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Inserted]:
        """Insert ``jobs`` in one round trip (all or nothing); ``connection``: the caller's
        transaction, on a store that can join it."""
        if not jobs:
            return []
        store = self._store()
        if connection is not None:
            store = as_transactional(store, TRANSACTIONAL_ENQUEUE)
        inserted = store.jobs_insert(JobsInsertParams(jobs, connection))
        self._enqueued(jobs, inserted)
        return inserted

    async def insert_async(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Inserted]:
        """:meth:`insert` for async code: on a thread; with a ``connection``, the store's own
        async insert (on an async connection it joins that transaction on the event loop)."""
        if connection is None or not jobs:
            return await asyncio.to_thread(self.insert, jobs)
        store = as_transactional(self._store(), TRANSACTIONAL_ENQUEUE)
        inserted = await store.jobs_insert_async(JobsInsertParams(jobs, connection))
        self._enqueued(jobs, inserted)
        return inserted

    def _enqueued(self, jobs: Sequence[NewJob], inserted: Sequence[Inserted]) -> None:
        """Run the ``on_enqueue`` hooks for the jobs that were created (not found by key)."""
        if not self._hooks.wants("on_enqueue"):
            return
        for new, got in zip(jobs, inserted, strict=True):
            if got.created:
                payload = decode_payload(new.payload)
                event = EnqueueEvent(
                    got.id, new.name, new.queue, tuple(payload.args), payload.kwargs
                )
                self._hooks.run("on_enqueue", event)
