"""The push signal across processes: a named pipe (FIFO) beside the database file.

An idle worker in another process than the inserting one used to notice an insert only at its
next look at ``PRAGMA data_version``, 5 ms apart (3 ms of the 3.6 ms idle pick-up). Instead,
waiting workers keep ``<database>-wake`` open for reading and sleep in ``poll()`` on it, and every
commit that may make a job due (the same ones that wake waiters in their own process, see
``_shared``) writes one byte to it. A woken waiter drains the pipe and looks at once, as it would
after its timer: the byte says "look", not which queue, so a commit that makes nothing due for
its queues still does not wake its caller.

Best effort, never in the way: a writer opens the pipe without blocking and skips the ring when
nobody reads it (ENXIO), when the pipe is full (the readers have plenty to wake on) or when the
FIFO cannot be made (a read-only directory, a platform without FIFOs). The 5 ms look stays as the
safety net, and several waiting processes may not all wake for one byte: the first to drain it
does, which is the one that claims the job.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import threading
import time

_CHUNK = 4096
RETRY_OPEN = 0.005  # seconds: as long as a waiter goes without looking at the file by itself


def bell_path(database: str) -> str:
    """The FIFO beside ``database``."""
    return database + "-wake"


class Bell:
    """The writing end, one per database file per process (held by ``_shared.Shared``)."""

    def __init__(self, database: str) -> None:
        self.path = bell_path(database)
        self._fd = -1
        self._lock = threading.Lock()
        self._next_open = 0.0  # monotonic: after a failed open, when to try again

    def ring(self) -> None:
        """Wake the waiting processes, if any (never blocks, never raises)."""
        with self._lock:
            if self._fd < 0:
                now = time.monotonic()
                if now < self._next_open:
                    return
                try:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:
                    # No FIFO yet, or nobody reads it (ENXIO): nobody to wake. Not tried again
                    # for a poll's time (a failed open per insert cost enqueues 5%); a waiter
                    # that starts meanwhile looks at the file by itself that soon.
                    self._next_open = now + RETRY_OPEN
                    return
            try:
                os.write(self._fd, b"\0")
            except BlockingIOError:
                pass  # full: the readers have plenty of bytes to wake on
            except OSError:  # EPIPE: every reader went away; open again next time
                os.close(self._fd)
                self._fd = -1


class Listener:
    """The reading end, one per backend: ``wait(seconds)`` sleeps until a ring or the timeout."""

    def __init__(self, database: str) -> None:
        self.path = bell_path(database)
        self._fd = -1
        self._pid = -1

    def open(self) -> bool:
        """Open (making the FIFO if needed); False where it cannot be, and waits then sleep."""
        if self._fd >= 0 and self._pid == os.getpid():
            return True
        self._fd, self._pid = -1, os.getpid()  # a forked child opens its own
        with contextlib.suppress(FileExistsError):
            try:
                os.mkfifo(self.path)
            except (OSError, AttributeError):  # AttributeError: no mkfifo on this platform
                if not os.path.exists(self.path):
                    return False
        try:
            # Read-write: holding a writing end itself, the reader never sees the hang-up that
            # poll() reports, again and again, once the last other writer has closed.
            fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # something else by that name: leave it
            os.close(fd)
            return False
        self._fd = fd
        return True

    def wait(self, seconds: float) -> bool:
        """Sleep until a ring (True, the pipe drained) or ``seconds`` pass (False)."""
        poller = select.poll()  # one per call: a poll object refuses two threads at once
        poller.register(self._fd, select.POLLIN)
        if not poller.poll(max(seconds, 0.0) * 1000):
            return False
        while True:
            try:
                if len(os.read(self._fd, _CHUNK)) < _CHUNK:
                    return True
            except BlockingIOError:  # another thread drained it first
                return True
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    return True

    def close(self) -> None:
        """Stop listening (safe to call twice)."""
        if self._fd >= 0 and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = -1
