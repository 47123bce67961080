"""What the backends of one process share per database file: the in-process half of the push
signal, and the lock that queues this process's writers.

Push signal: producers and workers that share a process share one :class:`Shared` per database
file; a commit that may make a job due bumps a counter and wakes every waiter at once, with no
polling. Other processes cannot see this object: the same notify rings their doorbell
(``_doorbell``), and they confirm through ``PRAGMA data_version`` (see
``SQLiteBackend.jobs_wait``).

Writer lock: SQLite's own wait for its write lock is a busy handler that sleeps 1, 2, 5, 10...
ms between attempts, so a thread that finds the lock taken by a sibling thread (the completer
acking while the producer claims) would sleep a millisecond or more for a transaction that
lasts tens of microseconds. Queueing the threads of one process on a lock of our own wakes the
next one the moment the previous one commits; SQLite's busy handler is left to arbitrate
between processes only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence

from ._doorbell import Bell

ANY = "*"  # a change that may concern every queue (an ack, a reap)


class Shared:
    """Per-queue change counters guarded by one condition variable, and the writer lock."""

    def __init__(self, path: str) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.bell = Bell(path)  # the same signal to waiters in other processes
        self.writer = threading.Lock()
        self._seq: dict[str, int] = {}

    def notify(self, queues: Iterable[str] | None = None) -> None:
        """Record a change in ``queues`` (``None``: possibly any queue) and wake all waiters."""
        with self.cond:
            for queue in (ANY,) if queues is None else queues:
                self._seq[queue] = self._seq.get(queue, 0) + 1
            self.cond.notify_all()
        self.bell.ring()

    def snapshot(self, queues: Sequence[str]) -> tuple[int, ...]:
        """The counters a waiter on ``queues`` compares against. Call with ``cond`` held."""
        seq = self._seq
        return (seq.get(ANY, 0), *(seq.get(q, 0) for q in queues))


_registry: dict[tuple[int, str], Shared] = {}
_registry_lock = threading.Lock()


def shared_for(path: str) -> Shared:
    """The shared state of the database file at ``path`` (absolute, resolved) in this process.

    Keyed by pid as well: a child forked while a parent thread held a lock must not inherit that
    locked lock.
    """
    key = (os.getpid(), path)
    with _registry_lock:
        shared = _registry.get(key)
        if shared is None:
            shared = _registry[key] = Shared(path)
        return shared


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the registry lock at fork time; the child has only
    # the forking thread, so nobody would ever release it.
    global _registry_lock
    _registry_lock = threading.Lock()
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
