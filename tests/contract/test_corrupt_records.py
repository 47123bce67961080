"""A corrupt record fails only itself: a field deleted, of the wrong type or out of range, written
straight into the real store (not through jobyard), must fail that job with the reason, leave
the other jobs of the same claim batch untouched, and never break listing or showing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

import jobyard
from tests.conftest import ROOT, make_store_url, running_worker, wait_until


class _Missing:
    """The field is deleted (Redis only: SQL columns are NOT NULL)."""

    def __repr__(self) -> str:
        return "MISSING"  # a stable test id


MISSING = _Missing()

# store -> (field, value written into the store, what the job's error must say)
RUN_CASES: dict[str, list[tuple[str, Any, str]]] = {
    "redis": [
        ("lease", MISSING, "corrupt job record: field lease missing"),
        ("max_attempts", "x", "corrupt job record: field max_attempts is not an integer"),
        ("priority", "high", "corrupt job record: field priority is not an integer"),
        ("lease", "-5", "corrupt job record: field lease out of range"),
        ("status", "bogus", "corrupt job record: field status is not a status"),
        ("delivery", "twice", "corrupt job record: field delivery is not a delivery"),
    ],
    "sqlite": [
        ("lease", -1.0, "corrupt job record: field lease out of range"),
        ("max_attempts", 0, "corrupt job record: field max_attempts out of range"),
        ("timeout", float("inf"), "corrupt job record: field timeout out of range"),
    ],
    "postgres": [
        ("lease", float("nan"), "corrupt job record: field lease out of range"),
        ("max_attempts", -3, "corrupt job record: field max_attempts out of range"),
        ("delivery", "twice", "corrupt job record: field delivery out of range"),
    ],
}
RUN_CASES["redis_cluster"] = RUN_CASES["redis"]  # every kind: a Cluster has its own paths

# Corruptions of fields only listing and showing read: they must still list and show.
SHOW_CASES: dict[str, list[tuple[str, Any]]] = {
    "redis": [("created_at", "x"), ("run_at", "1e300"), ("attempts", "many"), ("status", MISSING)],
    "sqlite": [("created_at", 1e300), ("run_at", -1e300), ("name", b"\xff\xfe")],
    "postgres": [("created_at", float("inf")), ("run_at", float("nan"))],
}
SHOW_CASES["redis_cluster"] = SHOW_CASES["redis"]


def corrupt(kind: str, url: str, app: jobyard.App, job_id: str, field: str, value: Any) -> None:
    """Write ``value`` into one field of one job, behind jobyard's back."""
    backend: Any = app.backend
    if kind in ("redis", "redis_cluster"):
        queue, number = job_id.rsplit(":", 1)
        key = backend.keys.job(queue, number)
        if value is MISSING:
            backend.client.hdel(key, field)
        else:
            backend.client.hset(key, field, value)
    elif kind == "sqlite":
        with sqlite3.connect(backend.path, isolation_level=None, timeout=10) as conn:
            if isinstance(value, bytes):  # not UTF-8, stored as TEXT
                conn.execute(
                    f"UPDATE jobs SET {field} = CAST(? AS TEXT) WHERE id = ?", [value, job_id]
                )
            else:
                conn.execute(f"UPDATE jobs SET {field} = ? WHERE id = ?", [value, job_id])
    elif kind == "postgres":
        from tests.postgres.support import admin, schema_of

        conn = admin()
        with conn.transaction():
            conn.execute("SELECT set_config('search_path', %s, true)", [schema_of(url)])
            conn.execute(f"UPDATE jobs SET {field} = %s WHERE id = %s", [value, int(job_id)])
    else:
        pytest.skip(f"{kind}: records cannot be written behind the App's back")


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOBYARD_URL": url}
    env.pop("JOBYARD_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "jobyard", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_listable(url: str, app: jobyard.App, job_id: str) -> None:
    """app.jobs / app.get, `jobyard jobs` and `jobyard show` (text and JSON) all answer."""
    assert job_id in [j.id for j in app.jobs(limit=100)]
    app.get(job_id)
    ref = "tests.apps.contract_app:app"
    for args in (["jobs", ref], ["show", ref, job_id], ["show", ref, job_id, "--json"]):
        done = cli(url, *args)
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stderr}"
        assert "Traceback" not in done.stderr
        assert job_id in done.stdout


def _cases(table: dict[str, list[Any]]) -> list[Any]:
    return [pytest.param(k, *c, id=f"{k}-{c[0]}-{c[1]!r}") for k, cs in table.items() for c in cs]


@pytest.mark.parametrize(("kind", "field", "value", "reason"), _cases(RUN_CASES))
def test_a_corrupt_job_fails_alone_and_its_batch_runs(
    kind: str, field: str, value: Any, reason: str, tmp_path: Any
) -> None:
    # given: three due jobs that one claim takes together, the middle one corrupted in the store
    url = make_store_url(kind, tmp_path)
    app = jobyard.App(url)
    try:

        @app.job(max_attempts=1)
        def echo(i: int) -> int:
            return i

        first, bad, last = (echo.enqueue(i) for i in range(3))
        corrupt(kind, url, app, bad.id, field, value)

        # when: a worker claims them in one batch
        with running_worker(app, concurrency=4):
            # then: the healthy jobs ran once, the corrupt one failed with the reason
            assert first.result(timeout=15) == 0
            assert last.result(timeout=15) == 2
            wait_until(lambda: app.get(bad.id).status == "failed", what="the corrupt job failed")
        for h in (first, last):
            job = app.get(h.id)
            assert (job.status, job.attempts) == ("completed", 1)
        failed = app.get(bad.id)
        assert reason in (failed.error or ""), failed.error
        # nothing left behind: the store counts no job as pending or running
        counts = {s.queue: s.counts for s in app.stats()}["default"]
        assert counts.get("pending", 0) == 0 and counts.get("running", 0) == 0, counts
        assert_listable(url, app, bad.id)
    finally:
        app.close()


@pytest.mark.parametrize(("kind", "field", "value"), _cases(SHOW_CASES))
def test_a_corrupt_record_still_lists_and_shows(
    kind: str, field: str, value: Any, tmp_path: Any
) -> None:
    url = make_store_url(kind, tmp_path)
    app = jobyard.App(url)
    try:
        handles = [app.enqueue("echo", i) for i in range(2)]
        corrupt(kind, url, app, handles[0].id, field, value)
        assert_listable(url, app, handles[0].id)
        assert [j.id for j in app.jobs(limit=10)] == [h.id for h in reversed(handles)]
    finally:
        app.close()


def corrupt_schedule(kind: str, url: str, app: jobyard.App, name: str) -> None:
    """Write text that is not JSON over one stored schedule's job, behind jobyard's back."""
    backend: Any = app.backend
    if kind in ("redis", "redis_cluster"):
        queue = backend.client.hget(backend.keys.schedules, name)
        backend.client.hset(backend.keys.schedule(queue, name), "job", "{not json")
    elif kind == "sqlite":
        with sqlite3.connect(backend.path, isolation_level=None, timeout=10) as conn:
            conn.execute("UPDATE schedules SET job = '{not json' WHERE name = ?", [name])
    elif kind == "postgres":
        from tests.postgres.support import admin, schema_of

        conn = admin()
        with conn.transaction():
            conn.execute("SELECT set_config('search_path', %s, true)", [schema_of(url)])
            conn.execute("UPDATE recurring_jobs SET job = '{not json' WHERE name = %s", [name])
    else:
        pytest.skip(f"{kind}: records cannot be written behind the App's back")


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis", "redis_cluster"])
def test_a_corrupt_schedule_is_left_out_and_the_others_still_tick(
    kind: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from jobyard.worker import recurring

    url = make_store_url(kind, tmp_path)
    clock = jobyard.FrozenClock(1_800_000_000.0)
    app = jobyard.App(url, clock=clock)
    try:

        @app.job
        def ping() -> None:
            pass

        app.schedule("* * * * *", ping, name="good")
        app.schedule("* * * * *", ping, name="bad")
        app.sync_schedules()
        corrupt_schedule(kind, url, app, "bad")

        # listing leaves the corrupt one out, with a warning naming why
        assert [s.name for s in app.stored_schedules()] == ["good"]
        assert any("corrupt schedule record" in r.getMessage() for r in caplog.records)
        # and the worker's ticks still fire the healthy one
        clock.advance(61)
        assert recurring.tick(app.backend) == ["good"]
        assert [j.name for j in app.jobs(limit=10)] == ["ping"]
    finally:
        app.close()
