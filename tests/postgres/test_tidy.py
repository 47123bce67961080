"""The store keeps its hot partitions small itself: every move of a job leaves a dead row in
the partition it left, and the server here runs with autovacuum off. ``store_tidy`` (run by
every worker's maintenance) vacuums a churning table past its threshold, one worker at a time,
without blocking the moves of jobs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import jobyard
from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    Outcome,
    StatsParams,
    StoreTidyParams,
)
from jobyard.backends.postgres.backend import PostgresBackend
from tests.conftest import running_worker, wait_until
from tests.postgres.conftest import new

EAGER = StoreTidyParams(min_dead=100, dead_fraction=0.0)
HOT = ("jobs_pending", "jobs_running")


def churn(backend: PostgresBackend, n: int) -> None:
    """n jobs through pending -> running -> completed: n dead rows in each hot partition."""
    backend.jobs_insert(JobsInsertParams([new() for _ in range(n)]))
    jobs = backend.jobs_claim(JobsClaimParams("w1", ["q"], n))
    backend.jobs_ack(JobsAckParams([Outcome(j.id, j.token, "completed") for j in jobs]))


def dead_rows(sql: Callable[..., list[tuple[Any, ...]]], table: str) -> int:
    rows = sql("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass(%s)", [table])
    return int(rows[0][0])


def vacuums(sql: Callable[..., list[tuple[Any, ...]]], table: str) -> int:
    """The server's own count of the vacuums of ``table`` (pg_stat_user_tables.vacuum_count):
    the vacuuming session reports it as its VACUUM ends; the snapshot of this one is cleared
    first, so each read sees the server's counts of now."""
    sql("SELECT pg_stat_clear_snapshot()")
    query = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = to_regclass(%s)"
    return int(sql(query, [table])[0][0])


def test_churned_partitions_are_vacuumed_past_the_threshold(
    backend: PostgresBackend, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    # given fewer dead rows than the threshold: nothing is done
    churn(backend, 50)
    assert backend.store_tidy(EAGER) == []
    # when the churn passes it (the server's statistics arrive within a second or so)
    churn(backend, 300)
    done: list[str] = []

    def tidied() -> bool:
        done.extend(backend.store_tidy(EAGER))
        return all(any(line.startswith(f"vacuumed {t} (") for line in done) for t in HOT)

    wait_until(tidied, timeout=20, interval=0.2, what="a vacuum of both hot partitions")
    # then the hot partitions were vacuumed, and said so
    # (the server counts them itself; dead-row figures are flushed late, so not compared)
    for table in HOT:
        assert vacuums(sql, table) >= 1


def test_tidy_neither_waits_for_open_transactions_nor_runs_twice_at_once(
    backend: PostgresBackend,
    connect: Callable[..., psycopg.Connection[Any]],
    sql: Callable[..., list[tuple[Any, ...]]],
    schema: str,
) -> None:
    churn(backend, 300)

    def flushed() -> bool:
        # a session reports its counts at the end of a transaction (at most once a second),
        # or after 10 s idle: keep the backend's pooled sessions busy meanwhile
        backend.stats_get(StatsParams())
        return dead_rows(sql, "jobs_running") >= 300

    wait_until(flushed, timeout=20, interval=0.2, what="the dead rows counted")
    # given another worker tidying (it holds the lock): this one skips its turn at once
    other = connect(autocommit=True)
    other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [f"jobyard:tidy:{schema}"])
    assert backend.store_tidy(EAGER) == []
    other.execute("SELECT pg_advisory_unlock_all()")
    # given a transaction that holds rows of both hot partitions, uncommitted
    busy = connect()
    busy.execute(
        "INSERT INTO jobs_pending (id, status, max_attempts, run_at, created_at,"
        " lease, queue, name, payload) VALUES (-1, 'pending', 1, 0, 0, 30, 'z', 't', '')"
    )
    busy.execute("SELECT id FROM jobs_running FOR UPDATE").fetchall()
    # when the store is tidied meanwhile, and a worker claims and settles jobs alongside
    result: list[list[str]] = []
    tidy = threading.Thread(target=lambda: result.append(backend.store_tidy(EAGER)))
    tidy.start()
    churn(backend, 20)
    tidy.join(timeout=20)
    # then it finished without waiting for that transaction
    assert not tidy.is_alive(), "store_tidy waited for an open transaction"
    assert any("jobs_running" in line for line in result[0])
    busy.rollback()


def test_a_worker_vacuums_as_it_runs_and_logs_it(
    url: str, caplog: pytest.LogCaptureFixture, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    app = jobyard.App(url)

    @app.job(queue="q")
    def noop() -> None:
        """Nothing."""

    caplog.set_level(logging.INFO, logger="jobyard.worker")
    before = vacuums(sql, "jobs_running")
    try:
        with running_worker(app, queues=["q"], concurrency=4) as worker:
            worker.maintenance.tidy_params = EAGER
            noop.enqueue_many([((), {}) for _ in range(400)])
            # the server's own count of vacuums, not the worker's word for it
            wait_until(
                lambda: vacuums(sql, "jobs_running") > before,
                timeout=30,
                interval=0.2,
                what="the worker's maintenance to vacuum jobs_running",
            )
            # and it said so (its log line follows the VACUUM's end)
            wait_until(lambda: "store: vacuumed jobs_running" in caplog.text, what="the log")
            counts = {s.queue: s.counts for s in app.stats()}
            wait_until(lambda: app.stats()[0].counts["completed"] == 400, timeout=30)
        assert counts["q"]["failed"] == 0
    finally:
        app.close()


def test_status_warns_when_the_servers_autovacuum_is_off(
    backend: PostgresBackend, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    # the server of this suite may run either way: the warning follows its setting
    off = sql("SHOW autovacuum")[0][0] == "off"
    warnings = backend.store_info().warnings
    assert bool(warnings) == off
    assert all("autovacuum is off" in w for w in warnings)


def test_a_partition_that_grew_is_vacuumed_so_the_planner_knows_its_size(
    backend: PostgresBackend, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    # given an empty pending partition, vacuumed (the planner now believes it empty)
    sql("VACUUM jobs_pending")
    # when a backlog arrives, with no claim yet (so no dead rows)
    backend.jobs_insert(JobsInsertParams([new() for _ in range(500)]))
    done: list[str] = []

    def tidied() -> bool:
        done.extend(backend.store_tidy(EAGER))
        return any(line.startswith("vacuumed jobs_pending (") for line in done)

    # then it is vacuumed again, and the planner's idea of its size is the backlog's
    wait_until(tidied, timeout=20, interval=0.2, what="a vacuum of the grown partition")
    assert (
        sql("SELECT reltuples FROM pg_class WHERE oid = to_regclass('jobs_pending')")[0][0] == 500
    )


def test_a_drained_partition_is_vacuumed_past_min_dead_whatever_its_last_vacuum_guessed(
    backend: PostgresBackend, sql: Callable[..., list[tuple[Any, ...]]]
) -> None:
    backlog, steps = 12_000, 6

    def counted(inserted: int, deleted: int) -> bool:
        # the pooled sessions report their counts at the end of a transaction, at most once a
        # second (or after 10 s idle): keep them busy until the server has them all
        backend.stats_get(StatsParams())
        sql("SELECT pg_stat_clear_snapshot()")
        rows = sql(
            "SELECT n_tup_ins, n_tup_del FROM pg_stat_user_tables"
            " WHERE relid = to_regclass('jobs_pending')"
        )
        return (int(rows[0][0]), int(rows[0][1])) == (inserted, deleted)

    # given a backlog drained in steps with a vacuum after each, as the workers' tidy does: a
    # vacuum skips the pages it found all-visible, those the last drain emptied among them, and
    # counts them at the partition's old density
    for _ in range(0, backlog, 1000):
        backend.jobs_insert(JobsInsertParams([new() for _ in range(1000)]))
    sql("VACUUM jobs_pending")
    for step in range(1, steps + 1):
        left = backlog // steps
        while left:
            jobs = backend.jobs_claim(JobsClaimParams("w1", ["q"], min(left, 500)))
            backend.jobs_ack(JobsAckParams([Outcome(j.id, j.token, "completed") for j in jobs]))
            left -= len(jobs)
        done = step * backlog // steps
        wait_until(
            lambda done=done: counted(backlog, done), timeout=30, interval=0.2, what="the counts"
        )
        sql("VACUUM (TRUNCATE false) jobs_pending")
    guessed = sql(
        "SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs_pending')"
    )[0][0]
    assert sql("SELECT count(*) FROM jobs_pending")[0][0] == 0
    assert guessed >= 1000, f"the premise: the server reckons {guessed} live rows"
    # when a few hundred jobs pass through the empty partition
    churn(backend, 300)
    wait_until(lambda: counted(backlog + 300, backlog + 300), timeout=30, interval=0.2)
    # then it is vacuumed past min_dead: its live rows are none, not the last vacuum's guess
    # (which would have set the threshold past a thousand dead rows)
    params = StoreTidyParams(min_dead=100, dead_fraction=1.0)
    assert any(line.startswith("vacuumed jobs_pending (") for line in backend.store_tidy(params))
