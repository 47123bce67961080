"""The WAL is checkpointed by the workers' maintenance (``store_tidy``), off the hot path: while
one runs, the store's connections do not checkpoint inside a claim's or an ack's commit
(bench/sqlite_checkpoints.py has the figures), and once it stops they do again."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

import jobyard
from jobyard.backends.base import StoreTidyParams, as_tidying
from jobyard.backends.sqlite import _connection
from jobyard.backends.sqlite.backend import SQLiteBackend
from tests.conftest import wait_until


def autocheckpoint(backend: SQLiteBackend) -> int:
    """What this thread's connection of the store does by itself (0: never)."""
    return int(backend._conns.get().execute("PRAGMA wal_autocheckpoint").fetchone()[0])


def test_a_running_worker_takes_the_checkpoints_off_the_hot_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_connection, "CHECKPOINTER_GONE", 1.0)
    app = jobyard.App(f"sqlite:///{tmp_path}/jobs.db")

    @app.job(queue="q")
    def noop() -> None: ...

    backend = app.backend
    assert isinstance(backend, SQLiteBackend)
    try:
        # given a store no worker tidies: its connections checkpoint by themselves
        assert autocheckpoint(backend) == _connection.AUTO_CHECKPOINT_PAGES
        # when a worker runs (its maintenance tidies the store every 0.2 s)
        worker = app.worker(queues=["q"], reap_interval=0.2, poll_interval=0.2)
        worker.start()
        try:
            noop.enqueue_many([((), {})] * 2000)
            wait_until(
                lambda: app.stats()[0].counts["completed"] == 2000, timeout=30, what="the drain"
            )

            # then the connections of every thread leave the checkpoints to it (from its first
            # tidy on, which a short drain may beat)
            def left_to_it() -> bool:
                seen: list[int] = []
                other = threading.Thread(target=lambda: seen.append(autocheckpoint(backend)))
                other.start()
                other.join()
                return seen == [0] and autocheckpoint(backend) == 0

            wait_until(left_to_it, timeout=10, what="the checkpoints left to the maintenance")
        finally:
            worker.stop(grace=2)
        # and once no maintenance has checkpointed for a while, they do it themselves again
        wait_until(
            lambda: autocheckpoint(backend) == _connection.AUTO_CHECKPOINT_PAGES,
            timeout=10,
            what="the auto-checkpoint back",
        )
    finally:
        app.close()


def test_a_checkpoint_from_maintenance_keeps_the_wal_from_growing(tmp_path: Path) -> None:
    # given a store whose connections leave checkpoints to maintenance, and 20 MB of writes
    app = jobyard.App(f"sqlite:///{tmp_path}/jobs.db")

    @app.job(queue="q")
    def blob(text: str) -> None: ...

    tidying = as_tidying(app.backend)
    assert tidying is not None
    try:
        wal = tmp_path / "jobs.db-wal"
        lines: list[str] = []
        for _ in range(20):
            lines += tidying.store_tidy(StoreTidyParams())
            blob.enqueue_many([(("x" * 10_000,), {})] * 100)  # 1 MB
        # when maintenance tidies once more
        lines += tidying.store_tidy(StoreTidyParams())
        # then each tidy checkpointed the WAL and it was reused from its start: it holds about
        # what one second's writes wrote, never all of them (20 MB without a checkpoint)
        assert wal.stat().st_size < 8_000_000, wal.stat().st_size
        assert all(line.startswith("checkpointed the WAL") for line in lines)
    finally:
        app.close()


def test_a_worker_tidies_once_an_interval(tmp_path: Path) -> None:
    app = jobyard.App(f"sqlite:///{tmp_path}/jobs.db")
    backend = app.backend
    assert isinstance(backend, SQLiteBackend)
    # a spy on this store's own method (the store itself runs): when each tidy came
    stamps: list[float] = []
    tidy = backend.store_tidy

    def spied(params: StoreTidyParams) -> list[str]:
        stamps.append(time.monotonic())
        return tidy(params)

    backend.store_tidy = spied  # type: ignore[method-assign]
    try:
        # when a worker runs with a tidy interval of 0.5 s (jittered by up to 20 %)
        worker = app.worker(queues=["q"], reap_interval=0.5, poll_interval=0.2)
        worker.start()
        try:
            wait_until(lambda: len(stamps) >= 3, timeout=10, what="three tidies")
        finally:
            worker.stop(grace=2)
        # then they came an interval apart (0.4-0.6 s), not more often
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert min(gaps[:2]) >= 0.35, gaps
    finally:
        app.close()
