"""Bodies of the child processes the multi-process tests start (``spawn``: a clean interpreter,
so these must be importable top-level functions). Each reports one value on ``results``."""

from __future__ import annotations

import os
import sqlite3
import threading
import traceback
from collections.abc import Callable
from typing import Any

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    JobsWaitParams,
    NewJob,
    Outcome,
    QueueConfig,
    SchedulesFireParams,
)
from jobyard.backends.sqlite.backend import SQLiteBackend
from jobyard.clock import FrozenClock, SystemClock
from jobyard.errors import QueueFull

PAYLOAD = '{"args":[],"kwargs":{}}'


def _report(results: Any, body: Callable[[], Any]) -> None:
    try:
        results.put(("ok", os.getpid(), body()))
    except BaseException:  # noqa: BLE001 - the parent test shows the child's traceback
        results.put(("error", os.getpid(), traceback.format_exc()))


def claim_until_empty(url: str, limit: int, start: Any, results: Any) -> None:
    """Claim (and complete) batches until nothing is left; report the ids claimed."""

    def body() -> list[str]:
        backend = SQLiteBackend(url, SystemClock())
        got: list[str] = []
        # A worker does something between claims; a millisecond's pause stands for it, so the
        # processes' transactions interleave instead of one process winning every race (SQLite's
        # lock is not fair: its busy handler sleeps while the holder takes the lock again).
        pause = threading.Event()
        start.wait(30)
        while batch := backend.jobs_claim(JobsClaimParams(f"p{os.getpid()}", ["q"], limit)):
            got.extend(c.id for c in batch)
            backend.jobs_ack(
                JobsAckParams([Outcome(c.id, c.token, "completed", result="1") for c in batch])
            )
            pause.wait(0.001)
        backend.close()
        return got

    _report(results, body)


def claim_under_a_cap(url: str, total: int, start: Any, results: Any) -> None:
    """Claim from a queue with max_concurrency, checking after every claim how many of its jobs
    run (a separate read) until ``total`` jobs are completed; report the highest count seen."""

    def body() -> int:
        backend = SQLiteBackend(url, SystemClock())
        raw = sqlite3.connect(backend.path, isolation_level=None, timeout=10)
        count = "SELECT count(*) FROM jobs WHERE queue = 'capped' AND status = 'running'"
        done = "SELECT count(*) FROM jobs WHERE queue = 'capped' AND status = 'completed'"
        highest = 0
        start.wait(30)
        while raw.execute(done).fetchone()[0] < total:
            batch = backend.jobs_claim(JobsClaimParams(f"p{os.getpid()}", ["capped"], 4))
            if not batch:
                backend.jobs_wait(JobsWaitParams(["capped"], 0.05))
                continue
            highest = max(highest, raw.execute(count).fetchone()[0])
            backend.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "completed") for c in batch]))
        raw.close()
        backend.close()
        return highest

    _report(results, body)


def insert_keys(url: str, keys: list[str], start: Any, results: Any) -> None:
    """Insert one job per key in one batch; report (key, id, created) for each."""

    def body() -> list[tuple[str, str, bool]]:
        backend = SQLiteBackend(url, SystemClock())
        jobs = [NewJob("task", "q", PAYLOAD, idempotency_key=k) for k in keys]
        start.wait(30)
        out = backend.jobs_insert(JobsInsertParams(jobs))
        backend.close()
        return [(k, i.id, i.created) for k, i in zip(keys, out, strict=True)]

    _report(results, body)


def insert_until_full(url: str, attempts: int, start: Any, results: Any) -> None:
    """Insert single jobs into the bounded queue; report how many were accepted."""

    def body() -> int:
        backend = SQLiteBackend(url, SystemClock())
        accepted = 0
        start.wait(30)
        for _ in range(attempts):
            try:
                backend.jobs_insert(JobsInsertParams([NewJob("task", "bounded", PAYLOAD)]))
                accepted += 1
            except QueueFull:
                pass
        backend.close()
        return accepted

    _report(results, body)


def open_store(url: str, start: Any, results: Any) -> None:
    """Open (and so migrate) the store; report the migrations this process applied by hand."""

    def body() -> list[str]:
        start.wait(30)
        backend = SQLiteBackend(url, SystemClock())
        again = backend.schema_migrate()
        backend.schema_check()
        backend.close()
        return again

    _report(results, body)


def fire_tick(url: str, now: float, name: str, fire_at: float, start: Any, results: Any) -> None:
    """Race to fire one schedule tick; report the inserted id or None."""

    def body() -> str | None:
        backend = SQLiteBackend(url, FrozenClock(now))
        start.wait(30)
        inserted = backend.schedules_fire(SchedulesFireParams(name, fire_at, fire_at + 60))
        backend.close()
        return None if inserted is None else inserted.id

    _report(results, body)


def insert_until_stopped(url: str, queue: str, delay: float, stop: Any, results: Any) -> None:
    """Insert a job every 20 ms until told to stop (paced by an Event wait, not a sleep)."""

    def body() -> int:
        backend = SQLiteBackend(url, SystemClock())
        n = 0
        while not stop.wait(0.02):
            backend.jobs_insert(JobsInsertParams([NewJob("task", queue, PAYLOAD, delay=delay)]))
            n += 1
        backend.close()
        return n

    _report(results, body)


def configure_until_stopped(url: str, stop: Any, results: Any) -> None:
    """Commit changes that make no job due (queue settings) every 10 ms until told to stop."""

    def body() -> int:
        backend = SQLiteBackend(url, SystemClock())
        n = 0
        while not stop.wait(0.01):
            n += 1
            backend.queues_configure(QueueConfig("unrelated", max_pending=n))
        backend.close()
        return n

    _report(results, body)
