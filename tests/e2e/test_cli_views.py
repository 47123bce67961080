"""What ``jobyard status`` and ``show`` print from the read model (``jobyard.views``), on every
store: each queue's limits and retention (its own, else the store's, as the store tells it),
the store's warnings, and a workflow step's tree. The command runs in this process against the
test's own App (``tests.e2e.hostile_app:current``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import jobyard
from jobyard.cli import main
from tests.e2e import hostile_app

HERE = "tests.e2e.hostile_app:current"


@pytest.fixture
def run(
    make_app: Callable[..., jobyard.App],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., str]:
    monkeypatch.delenv("JOBYARD_DEBUG", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    monkeypatch.setattr(hostile_app, "current", make_app())

    def command(*args: str) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main(list(args))
        out, err = capsys.readouterr()
        assert done.value.code == 0, (args, out, err)
        return out

    return command


def app_of() -> jobyard.App:
    app = hostile_app.current
    assert app is not None
    return app


def test_status_prints_each_queues_limits_and_retention(run: Callable[..., str]) -> None:
    app = app_of()

    @app.job(queue="plain")
    def noop() -> None: ...

    # given a queue with limits and a retention of its own, paused, and one with neither
    app.configure_queue("mail", max_concurrency=2, max_pending=9, retention=3600)
    app.pause_queue("mail")
    noop.enqueue()
    kept = app.store_info().retention  # the store's own: a day on Redis, else until purged

    # when status is printed
    text = run("status", HERE)
    data = json.loads(run("status", HERE, "--json"))

    # then each queue's row says what the store keeps of it, and the store's warnings
    rows: dict[str, str] = {}
    for line in text.splitlines():  # the queues table comes first: its row of each queue
        if line.strip():
            rows.setdefault(line.split()[0], line)
    assert "max_concurrency=2 max_pending=9 paused keep=1h" in rows["mail"]
    # and the limits table its limit, how full it is (no job runs: 0 of 2), its due jobs (none)
    limit_rows = [line.split() for line in text.splitlines() if "(queue)" in line]
    assert limit_rows == [["mail", "(queue)", "max_concurrency=2", "0/2", "0"]]
    assert [(r["queue"], r["job"], r["rules"]) for r in data["limits"]] == [
        ("mail", None, ["max_concurrency=2"])
    ]
    assert ("keep=1d" in rows["plain"]) == (kept == 86400.0)
    queues = {q["queue"]: q for q in data["queues"]}
    assert queues["mail"]["retention"] == 3600 and queues["plain"]["retention"] == kept
    assert queues["plain"]["counts"]["pending"] == 1
    # and how long the oldest due pending job has waited, and whether the queue is paused
    assert (
        queues["plain"]["oldest_pending_age"] >= 0 and queues["mail"]["oldest_pending_age"] is None
    )
    assert queues["mail"]["paused"] is True and queues["plain"]["paused"] is False
    assert rows["plain"].split()[8] in ("<1s", "1s", "2s") and rows["mail"].split()[8] == "-"
    assert data["warnings"] == list(app.store_info().warnings) and data["workers"] == []
    assert list(data) == ["store", "queues", "workers", "warnings", "limits"]


def test_status_prints_what_a_job_names_limits_hold_back(run: Callable[..., str]) -> None:
    from jobyard.backends.base import JobsClaimParams, LimitsSyncParams

    app = app_of()

    # given a job name allowed one start an hour and another allowed one running job per key,
    # their limits stored as a worker stores them
    @app.job(queue="notify", rate_limit="1/h")
    def digest(n: int) -> int:
        return n

    @app.job(queue="notify", key_concurrency=1)
    def push(n: int) -> int:
        return n

    app.backend.limits_sync(LimitsSyncParams(app.job_limits()))
    digest.enqueue_many([((i,), {}) for i in range(3)])
    push.options(key="customer:1").enqueue_many([((i,), {}) for i in range(3)])
    # when a claim starts what the limits let start: one digest, one push
    assert len(app.backend.jobs_claim(JobsClaimParams("w1", ("notify",), 10))) == 2

    text = run("status", HERE)
    data = json.loads(run("status", HERE, "--json"))

    # then each name's row says how full its limits are, its due jobs, and what they hold back
    rows = {tuple(line.split()[:2]): line.split() for line in text.splitlines() if "notify" in line}
    assert rows[("notify", "digest")][2:] == ["rate=1/h", "1", "100%", "2", "rate=2"]
    push = ["key_concurrency=1", "1", "1", "of", "1", "2", "key_concurrency=2"]
    assert rows[("notify", "push")][2:] == push
    limits = {r["job"]: r for r in data["limits"]}
    assert limits["digest"]["held_back"] == {"rate": 2}
    assert (limits["digest"]["due"], limits["digest"]["exact"]) == (2, True)
    assert limits["push"]["held_back"] == {"key_concurrency": 2}
    assert limits["push"]["due_keys_full"] == 2


def test_show_prints_a_steps_workflow(run: Callable[..., str]) -> None:
    app = app_of()

    @app.job
    def first() -> int:
        return 1

    @app.job
    def second(n: int) -> int:
        return n

    handle = jobyard.chain(first.s(), second.s()).enqueue()
    step = handle.ids[1]

    text = run("show", HERE, step)
    data = json.loads(run("show", HERE, step, "--json"))

    a = handle.ids[0]
    assert data["workflow"]["id"] == handle.id and data["workflow"]["status"] == "running"
    assert data["workflow"]["tree"] == [
        "chain",
        f"├─ first #{a} pending",
        f"└─ second #{step} waiting  ◀",
    ]
    assert f"workflow {handle.id} (running, 2 jobs):" in text
    assert f"└─ second #{step} waiting  ◀" in text
