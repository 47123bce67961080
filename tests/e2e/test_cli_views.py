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
    # and the limits table its limit, how full it is (no job runs: 0 of 2)
    limit_rows = [line.split() for line in text.splitlines() if "(queue)" in line]
    assert limit_rows == [["mail", "(queue)", "max_concurrency=2", "0/2"]]
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
