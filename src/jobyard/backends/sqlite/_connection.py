"""SQLite URLs and connections: one connection per thread, write transactions, fork safety."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator

from ..._secrets import mask_url
from ...errors import ConfigurationError, JobyardError
from ..base import error_line

PREFIX = "sqlite:///"
BUSY_TIMEOUT = 10.0  # seconds a statement waits for another connection's write lock
# While a maintenance checkpoints the WAL (``store_tidy``), the store's connections do not:
# SQLite's auto-checkpoint runs inside the commit that passes 1,000 WAL pages, a claim's or an
# ack's, fsync included (bench/sqlite_checkpoints.py). Past this many seconds without a
# maintenance checkpoint (the worker stopped), they checkpoint themselves again.
CHECKPOINTER_GONE = 10.0
AUTO_CHECKPOINT_PAGES = 1000  # SQLite's default

_ABANDONED: list[sqlite3.Connection] = []  # inherited over a fork: never used, never closed


def parse_url(url: str) -> str:
    """The absolute path of the database file a ``sqlite:///`` URL names.

    ``sqlite:///jobs.db`` is relative to the working directory, ``sqlite:////var/jobs.db``
    absolute (SQLAlchemy's convention). An in-memory database is refused: it could not be shared
    by the connections of several threads, let alone by worker processes.
    """
    if not url.lower().startswith(PREFIX):
        raise ConfigurationError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path, _, options = url[len(PREFIX) :].partition("?")
    if "\x00" in path:
        raise ConfigurationError(f"invalid SQLite URL {url!r}: a path cannot hold NUL")
    if not path or path.endswith("/"):
        raise ConfigurationError(f"invalid SQLite URL {url!r}: it names no database file")
    if path == ":memory:" or path.startswith("file:"):
        raise ConfigurationError(
            f"unsupported SQLite URL {url!r}: jobyard needs a database file that worker "
            "processes can share, not an in-memory database"
        )
    if options:  # SQLite reads none: a typo in one would pass unnoticed
        raise ConfigurationError(
            f"invalid SQLite URL {mask_url(url)!r}: it takes no options; "
            "name the database file only"
        )
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConfigurationError(f"cannot open SQLite store {url!r}: no directory {folder!r}")
    return path


class Connections:
    """One ``sqlite3`` connection per thread, opened on first use.

    A connection serves one thread at a time, and a thread needs its own to run its own
    transaction, so connections are kept in a ``threading.local``. They are also listed here so
    that :meth:`close` can close all of them and connections of finished threads are closed when
    another thread opens one (``check_same_thread=False`` only permits that bookkeeping; no
    connection is ever used by two threads).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._local = threading.local()
        self._all: list[tuple[weakref.ref[threading.Thread], sqlite3.Connection]] = []
        self._pid = os.getpid()
        self._closed = False
        self._checkpointed_until = 0.0  # monotonic: a maintenance checkpoints until then

    def checkpointing(self) -> None:
        """A maintenance checkpoints the WAL now and again: this process's connections leave
        it to that maintenance for :data:`CHECKPOINTER_GONE` seconds (each at its next use)."""
        self._checkpointed_until = time.monotonic() + CHECKPOINTER_GONE

    def get(self) -> sqlite3.Connection:
        """This thread's connection, its auto-checkpoint off while a maintenance checkpoints."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._pid != os.getpid():
            conn = self._open()
        manual = self._checkpointed_until > 0.0 and time.monotonic() < self._checkpointed_until
        if manual != getattr(self._local, "manual", False):
            pages = 0 if manual else AUTO_CHECKPOINT_PAGES
            conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")  # an int: no injection
            self._local.manual = manual
        return conn

    def _open(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise JobyardError(f"the SQLite store {self.path} is closed")
            if self._pid != os.getpid():
                # A forked child must not use its parent's connections (SQLite forbids carrying
                # them over a fork), nor close them: closing a file descriptor drops every POSIX
                # lock this process holds on the file, those of its new connections included.
                # Keep them referenced, unused, for the life of the child.
                self._pid = os.getpid()
                _ABANDONED.extend(conn for _, conn in self._all)
                self._local = threading.local()
                self._all = []
            self._close_orphans()
            conn = connect(self.path)
            self._all.append((weakref.ref(threading.current_thread()), conn))
            self._local.conn = conn
            self._local.manual = False
            return conn

    def _close_orphans(self) -> None:
        alive = []
        for ref, conn in self._all:
            thread = ref()
            if thread is None or not thread.is_alive():
                conn.close()
            else:
                alive.append((ref, conn))
        self._all = alive

    def close(self) -> None:
        """Close every connection no other live thread holds; later calls raise. Safe to call
        twice. Another thread may be inside a call on its connection at this moment (a
        worker's maintenance finishing its tidy): closing it under that call frees what the
        call is using and crashes the interpreter. That connection is left to its thread: the
        thread's next call raises (the store is closed), and the connection closes once the
        thread lets go of it."""
        with self._lock:
            self._closed = True
            if self._pid == os.getpid():
                me = threading.current_thread()
                for ref, conn in self._all:
                    thread = ref()
                    if thread is None or thread is me or not thread.is_alive():
                        conn.close()
            else:
                _ABANDONED.extend(conn for _, conn in self._all)
            self._all = []
            self._local = threading.local()


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _error_line(error: object) -> str:
    """jobyard_error_line(CAST(text AS BLOB)): bytes decoded leniently, as _lenient_text reads
    text (a TEXT argument that is not UTF-8 would fail the statement before the call)."""
    if isinstance(error, bytes):
        return error_line(error.decode("utf-8", "replace"))
    return error_line(error if isinstance(error, str) else None)


def connect(path: str) -> sqlite3.Connection:
    """Open ``path`` set up for many processes: WAL, NORMAL sync, a busy timeout.

    ``isolation_level=None`` turns off the ``sqlite3`` module's implicit transactions; the
    backend opens each one itself (:func:`write`), so it decides when the write lock is taken.
    """
    try:
        conn = sqlite3.connect(
            path,
            # sqlite3_busy_timeout: a locked database is retried for this long, not failed.
            timeout=BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        # WAL: readers never block the writer nor the writer the readers, which is what lets
        # idle workers poll and the dashboard read while a claim holds the write lock.
        # A TEXT value that is not UTF-8 (written by another program) must not make a whole
        # listing or claim fail: the bad bytes read as U+FFFD.
        conn.text_factory = _lenient_text
        # The dead letter's grouping line (base.error_line), so that dead_groups groups in SQL
        # and hands back one row per group, not one per failed job.
        conn.create_function("jobyard_error_line", 1, _error_line, deterministic=True)
        _wal(conn)
        # NORMAL in WAL mode loses no committed transaction on a process crash, only possibly
        # the last ones on power loss, and saves an fsync per commit.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as exc:
        raise ConfigurationError(f"cannot open SQLite store {path!r}: {exc}") from exc
    return conn


def _wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. On a new file that other processes open at the same moment, the switch
    can answer "database is locked" at once, without waiting out the busy timeout: so it is
    tried again until the timeout has passed."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


@contextlib.contextmanager
def write(conn: sqlite3.Connection, writer: threading.Lock) -> Iterator[sqlite3.Connection]:
    """A write transaction that holds SQLite's write lock from its first statement.

    ``writer`` queues the threads of this process first (see ``_shared``); waiting for it counts
    against the same busy timeout SQLite would apply.

    ``BEGIN IMMEDIATE`` takes SQLite's lock up front (waiting up to the busy timeout for it). A
    plain ``BEGIN`` would read first and try to upgrade later, and in WAL mode a reader whose
    snapshot went stale meanwhile gets SQLITE_BUSY at once, busy timeout or not; a claim's read,
    count and update must also see one state, which only the lock guarantees.
    """
    if not writer.acquire(timeout=BUSY_TIMEOUT):
        raise sqlite3.OperationalError(
            f"database is locked: another thread held the write lock for {BUSY_TIMEOUT}s"
        )
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Whatever failed, never leave the thread's connection inside a transaction: its
            # next BEGIN would fail, and an open write transaction blocks every other writer.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        writer.release()


@contextlib.contextmanager
def read(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read transaction: several SELECTs that see one snapshot. Never waits for writers."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
