"""LISTEN/NOTIFY wake-ups for ``jobs_wait``, on one dedicated connection per backend.

Every statement that makes a job due sends ``pg_notify('jobyard', '<schema>:<queue>')`` (one per
queue per statement, delivered at commit). A thread of this module LISTENs on its own
connection and bumps a counter per queue; ``jobs_wait`` sleeps on a condition until a counter of
its queues moves.

A notification sent while the listener is reconnecting is lost, so:

- while disconnected, waiters return after at most :data:`POLL_WHILE_DOWN` seconds, as a slow
  poll (their caller claims, finds whatever is due, and waits again);
- every (re)connection wakes every waiter once, to look for what was missed meanwhile;
- the waiter's own ``timeout`` bounds the cost of anything else missed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import select
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

from ._connect import Settings
from ._sql import Q

log = logging.getLogger("jobyard.postgres")
_rng = random.Random()  # jitter without touching the global random state

CHANNEL = "jobyard"
POLL_WHILE_DOWN = 1.0  # seconds: how often waiters poll while the listener is disconnected
IDLE_PING = 15.0  # seconds of silence after which the listener checks its connection
BACKOFF_START = 0.05
BACKOFF_MAX = 5.0


class Listener:
    """Wakes waiters when a job becomes due in one of their queues. Thread-safe; started by
    the first :meth:`wait` (a producer that never waits opens no LISTEN connection)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._cond = threading.Condition()
        self._counts: dict[str, int] = {}  # queue -> notifications seen
        self._epoch = 0  # bumped on every connect and disconnect: wakes every waiter
        self._connected = False
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._wake_r, self._wake_w = -1, -1
        self._seen = threading.local()  # per waiting thread: what its last wait returned on
        # per named waiter (a worker's waiting claims), the same: guarded by _cond
        self._waiters: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {}

    # lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the listening thread (safe to call twice)."""
        with self._cond:
            if self._thread is not None or self._stopping:
                return
            self._wake_r, self._wake_w = os.pipe()
            self._thread = threading.Thread(
                target=self._run, name="jobyard-pg-listener", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connection (safe to call twice)."""
        with self._cond:
            self._stopping = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is None:
            return
        with self._cond:  # the thread closes the pipe as it exits: never write to a reused fd
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
        thread.join(timeout)

    @property
    def connected(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._connected

    # waiting -----------------------------------------------------------------------------------

    def wait(self, queues: Sequence[str], timeout: float, waiter: str | None = None) -> bool:
        """Block until a notification for one of ``queues`` arrives, or ``timeout`` passes;
        True if woken (possibly spuriously). A notification that arrived after this waiter's
        previous wait returned counts too: it may have come between that wait and the claim
        that preceded this one, so it is not missed. The waiter is this thread, or ``waiter``
        (a worker's id: its waiting claims are made by whichever of its threads is idle)."""
        self.start()
        deadline = time.monotonic() + max(timeout, 0.0)
        names = tuple(dict.fromkeys(queues))
        with self._cond:
            mark = self._mark(names)
            previous = self._previous(waiter)
            if previous is not None and previous[0] == names and previous[1] != mark:
                self._remember(waiter, names, mark)
                return True
            down_since = None if self._connected else time.monotonic()
            while True:
                now = time.monotonic()
                current = self._mark(names)
                if current != mark:
                    self._remember(waiter, names, current)
                    return True
                if self._stopping or now >= deadline:
                    self._remember(waiter, names, current)
                    return False
                if not self._connected:
                    down_since = down_since or now
                    if now - down_since >= POLL_WHILE_DOWN:
                        self._remember(waiter, names, current)
                        return True  # poll: notifications are being lost
                    self._cond.wait(min(deadline, down_since + POLL_WHILE_DOWN) - now)
                else:
                    down_since = None
                    self._cond.wait(deadline - now)

    def poke(self, queues: Sequence[str], waiter: str) -> None:
        """Wake the waiters of ``queues`` in this process as a notification would; the next
        wait of ``waiter`` returns at once even if it was not waiting yet (its remembered
        mark is one no count equals)."""
        names = tuple(dict.fromkeys(queues))
        with self._cond:
            self._waiters[waiter] = (names, (-1,))
            for queue in names:
                self._counts[queue] = self._counts.get(queue, 0) + 1
            self._cond.notify_all()

    def _previous(self, waiter: str | None) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
        if waiter is None:
            return getattr(self._seen, "mark", None)
        return self._waiters.get(waiter)

    def _remember(self, waiter: str | None, names: tuple[str, ...], mark: tuple[int, ...]) -> None:
        if waiter is None:
            self._seen.mark = (names, mark)
        else:
            self._waiters[waiter] = (names, mark)

    def _mark(self, names: tuple[str, ...]) -> tuple[int, ...]:
        return (self._epoch, *(self._counts.get(n, 0) for n in names))

    def _notified(self, payload: str, schema: str) -> None:
        prefix, sep, queue = payload.partition(":")
        if not sep or prefix != schema:
            return  # another schema of the same database
        with self._cond:
            self._counts[queue] = self._counts.get(queue, 0) + 1
            self._cond.notify_all()

    def _on_notify(self, schema: str, note: psycopg.Notify) -> None:
        # Notifications that arrive while a statement runs on the connection (the ping).
        self._notified(note.payload, schema)

    def _set_connected(self, connected: bool) -> None:
        with self._cond:
            self._connected = connected
            self._epoch += 1
            self._cond.notify_all()

    # the listening thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._listen()
        finally:
            with self._cond:
                for fd in (self._wake_r, self._wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self._wake_r, self._wake_w = -1, -1

    def _listen(self) -> None:
        delay = BACKOFF_START
        while not self._stopping:
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = psycopg.connect(self._settings.conninfo, **self._settings.kwargs)
                row = conn.execute(Q.current_schema).fetchone()
                schema = str(row[0]) if row and row[0] is not None else ""
                conn.add_notify_handler(functools.partial(self._on_notify, schema))
                conn.execute(Q.listen)
                self._set_connected(True)
                delay = BACKOFF_START
                self._pump(conn, schema)
            except Exception as exc:  # noqa: BLE001 - whatever broke, listen again
                if not self._stopping:
                    log.warning(
                        "LISTEN connection lost (%s: %s); reconnecting in %.2fs",
                        type(exc).__name__,
                        " ".join(str(exc).split()),  # libpq's messages span lines
                        delay,
                    )
            finally:
                if self._connected:
                    self._set_connected(False)
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
            if self._stopping or self._sleep(delay):
                return
            delay = min(delay * 2, BACKOFF_MAX) * _rng.uniform(0.8, 1.0)

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stopped; True if stopped."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        return bool(poller.poll(seconds * 1000)) or self._stopping

    def _pump(self, conn: psycopg.Connection[Any], schema: str) -> None:
        """Read notifications until stopped; raise when the connection breaks."""
        pgconn = conn.pgconn
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping:
            events = poller.poll(IDLE_PING * 1000)
            if any(fd == self._wake_r for fd, _ in events):
                return
            if not events:
                conn.execute(Q.ping)  # silence for long: prove the connection is alive
                continue
            pgconn.consume_input()  # raises OperationalError once the server is gone
            while (note := pgconn.notifies()) is not None:
                self._notified(note.extra.decode("utf-8", "replace"), schema)
            if pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError("the LISTEN connection was closed")
