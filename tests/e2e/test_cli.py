"""The ``jobyard`` command driven as a user drives it: ``python -m jobyard ...`` in a subprocess,
on a temporary SQLite store, against ``tests.e2e.cli_app:app``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import jobyard
from jobyard.backends.base import STATUSES, JobsClaimParams, LeasesRenewParams, Progress

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.e2e.cli_app:app"


class Cli:
    """Runs ``python -m jobyard`` with ``JOBYARD_URL`` set to this test's store."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.env = {**os.environ, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"}
        self.env.pop("JOBYARD_DEBUG", None)
        self.env.pop("COLUMNS", None)
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobyard", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str) -> str:
        """Run a command that must succeed; its stdout."""
        done = self(*args)
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stderr}"
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def enqueue(self, name: str, *options: str) -> str:
        job_id = self.ok("enqueue", APP, name, *options).strip()
        assert job_id and "\n" not in job_id
        return job_id

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A long-running command (a worker), its output in a log file; killed at teardown."""
        log = (self.logs / f"proc-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobyard", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(f"sqlite:///{tmp_path}/x.db", tmp_path)
    yield runner
    runner.kill_all()


@pytest.fixture
def app(cli: Cli) -> Iterator[jobyard.App]:
    """The same store opened in the test's process, to wait on conditions."""
    store = jobyard.App(cli.url)
    yield store
    store.close()


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Bad input: one line on stderr starting with ``error:``, exit code 2, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


# --- producing and inspecting ---------------------------------------------------------------------


def test_help_lists_the_commands(cli: Cli) -> None:
    out = cli.ok("--help")
    for command in ("worker", "enqueue", "status", "jobs", "show", "retry", "cancel", "purge"):
        assert command in out
    assert "migrate" in out and "demo" in out
    assert "-q, --queue" in cli.ok("worker", "--help")


def test_enqueue_prints_the_id_and_show_prints_every_field(cli: Cli) -> None:
    # given a job enqueued with every option
    job_id = cli.enqueue(
        "greet",
        "--args",
        '["ada"]',
        "--kwargs",
        '{"punctuation": "?"}',
        "--priority",
        "5",
        "--delay",
        "1h",
        "--idempotency-key",
        "greet-ada",
    )

    # when it is shown
    out = cli.ok("show", APP, job_id)
    data = cli.json("show", APP, job_id)

    # then every field of the job is there
    for field in ("id", "name", "queue", "status", "priority", "attempts", "run_at", "created_at"):
        assert field in out
    assert "greet-ada" in out and '["ada"]' in out and '{"punctuation": "?"}' in out
    assert data["id"] == job_id
    assert data["name"] == "greet" and data["queue"] == "mail" and data["status"] == "pending"
    assert data["priority"] == 5 and data["attempts"] == 0 and data["max_attempts"] == 4
    assert data["args"] == ["ada"] and data["kwargs"] == {"punctuation": "?"}
    assert data["idempotency_key"] == "greet-ada"
    expected = {
        "id", "name", "queue", "status", "priority", "attempts", "max_attempts", "run_at",
        "created_at", "started_at", "finished_at", "worker_id", "result", "error", "parent_id",
        "idempotency_key", "args", "kwargs", "delivery",
    }  # fmt: skip
    assert expected <= set(data)


def test_enqueue_with_a_held_idempotency_key_returns_the_existing_job(cli: Cli) -> None:
    first = cli.enqueue("greet", "--args", '["bob"]', "--idempotency-key", "k1")

    again = cli("enqueue", APP, "greet", "--args", '["bob"]', "--idempotency-key", "k1")

    assert again.returncode == 0
    assert again.stdout.strip() == first
    assert "k1" in again.stderr and "no new job" in again.stderr


def test_enqueue_on_conflict_replace_gives_the_pending_holder_the_new_arguments(cli: Cli) -> None:
    first = cli.enqueue("greet", "--args", '["bob"]', "--idempotency-key", "k2", "--key", "t:1")

    again = cli(
        "enqueue", APP, "greet", "--args", '["ann"]', "--idempotency-key", "k2",
        "--on-conflict", "replace",
    )  # fmt: skip

    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == first
    assert "took these arguments" in again.stderr
    shown = cli.json("show", APP, first)
    assert shown["args"] == ["ann"]
    assert shown["key"] == "t:1"
    # keep (the default) leaves them
    cli.ok("enqueue", APP, "greet", "--args", '["cy"]', "--idempotency-key", "k2")
    assert cli.json("show", APP, first)["args"] == ["ann"]


def test_on_conflict_without_an_idempotency_key_is_a_usage_error(cli: Cli) -> None:
    done = cli("enqueue", APP, "greet", "--args", '["bob"]', "--on-conflict", "replace")

    assert done.returncode == 2
    assert "--on-conflict needs --idempotency-key" in done.stderr
    assert "Traceback" not in done.stderr


def test_enqueue_by_name_needs_no_handler_and_takes_a_queue_when_forced(cli: Cli) -> None:
    done = cli("enqueue", APP, "not_registered_anywhere", "--queue", "elsewhere", "--force")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    # each reason the job would have been refused is a warning
    warnings = done.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") for w in warnings), warnings
    assert "'not_registered_anywhere'" in warnings[0] and "'elsewhere'" in warnings[1]

    data = cli.json("show", APP, job_id)

    assert data["name"] == "not_registered_anywhere" and data["queue"] == "elsewhere"


def test_forced_arguments_that_do_not_fit_are_sent_with_a_warning(cli: Cli) -> None:
    done = cli("enqueue", APP, "greet", "--args", "[1, 2, 3]", "--force")
    assert done.returncode == 0 and "too many positional arguments" in done.stderr
    assert cli.json("show", APP, done.stdout.strip())["args"] == [1, 2, 3]


def test_an_argument_no_terminal_can_print_is_shown_escaped(cli: Cli, app: jobyard.App) -> None:
    # given a job whose argument holds a lone surrogate (stored as given)
    job_id = app.enqueue("greet", "\ud800").id
    assert app.get(job_id).args == ("\ud800",)
    # then show, show --json and jobs print it escaped
    assert "\\ud800" in cli.ok("show", APP, job_id)
    assert cli.json("show", APP, job_id)["args"] == ["\ud800"]
    assert job_id in cli.ok("jobs", APP)


def test_status_counts_jobs_per_queue(cli: Cli) -> None:
    # given two pending jobs on mail, one cancelled, and one on reports
    cli.enqueue("greet", "--args", '["a"]')
    cli.enqueue("greet", "--args", '["b"]')
    cli.ok("cancel", APP, cli.enqueue("greet", "--args", '["c"]'))
    cli.enqueue("report", "--args", '["2024-05"]')

    # when status is asked for
    out = cli.ok("status", APP)
    data = cli.json("status", APP)

    # then each queue has a row of counts by status, and no worker is live
    assert "store: sqlite:///" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["mail"][: len(STATUSES)] == ["0", "2", "0", "0", "0", "1"]
    assert rows["reports"][: len(STATUSES)] == ["0", "1", "0", "0", "0", "0"]
    assert "workers: none live" in out
    queues = {q["queue"]: q for q in data["queues"]}
    assert queues["mail"]["counts"] == {
        "waiting": 0,
        "pending": 2,
        "running": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 1,
    }
    assert queues["mail"]["completed_last_minute"] == 0
    assert data["workers"] == []


def test_status_shows_a_queue_retention(cli: Cli, app: jobyard.App) -> None:
    # given a queue that keeps its completed jobs an hour
    app.configure_queue("mail", retention=3600)
    cli.enqueue("greet", "--args", '["a"]')
    # then status shows it; the SQLite store keeps the others until purged
    rows = {line.split()[0]: line for line in cli.ok("status", APP).splitlines() if line.strip()}
    assert "keep=1h" in rows["mail"]
    queues = {q["queue"]: q for q in cli.json("status", APP)["queues"]}
    assert queues["mail"]["retention"] == 3600
    assert cli.json("status", APP)["warnings"] == []


def test_jobs_lists_newest_first_with_filters(cli: Cli) -> None:
    a = cli.enqueue("greet", "--args", '["a"]')
    b = cli.enqueue("greet", "--args", '["b"]')
    r = cli.enqueue("report", "--args", '["2024-05"]')
    cli.ok("cancel", APP, b)

    def ids(*options: str) -> list[str]:
        out = cli.ok("jobs", APP, *options)
        rows = [line.split() for line in out.splitlines()]
        return [row[0] for row in rows if row[1:2] == ["greet"] or row[1:2] == ["report"]]

    assert ids() == [r, b, a]
    assert ids("--queue", "mail") == [b, a]
    assert ids("--status", "cancelled") == [b]
    assert ids("--name", "report") == [r]
    assert ids("--limit", "1") == [r]
    assert [j["id"] for j in map(json.loads, cli.ok("jobs", APP, "--json").splitlines())] == [
        r,
        b,
        a,
    ]
    assert "no jobs match" in cli.ok("jobs", APP, "--status", "failed")


def test_cancel_retry_and_purge(cli: Cli) -> None:
    # given a pending job
    job_id = cli.enqueue("greet", "--args", '["a"]')
    keep = cli.enqueue("greet", "--args", '["b"]')

    # when it is cancelled, then it is cancelled; cancelling again is refused
    assert "cancelled" in cli.ok("cancel", APP, job_id)
    assert_one_line_error(cli("cancel", APP, job_id), "cancelled")

    # when it is retried, it is pending again; retrying a pending job is refused
    assert "pending" in cli.ok("retry", APP, job_id)
    assert cli.json("show", APP, job_id)["status"] == "pending"
    assert_one_line_error(cli("retry", APP, keep), "pending")

    # purge deletes finished jobs only, and respects --older-than
    cli.ok("cancel", APP, job_id)
    assert cli.ok("purge", APP, "--older-than", "1h", "--yes").strip() == "purged 0 job(s)"
    assert cli.ok("purge", APP, "--status", "failed", "--yes").strip() == "purged 0 job(s)"
    assert cli.ok("purge", APP, "--status", "cancelled").strip() == "purged 1 job(s)"
    assert_one_line_error(cli("show", APP, job_id), job_id)
    assert cli.json("show", APP, keep)["status"] == "pending"


def test_cancel_of_a_running_job_is_a_request_shown_with_its_progress(
    cli: Cli, app: jobyard.App
) -> None:
    # given a running job that reported progress (claimed and renewed here, as a worker would)
    job_id = cli.enqueue("greet", "--args", '["a"]')
    (claimed,) = app.backend.jobs_claim(JobsClaimParams("w", ["mail"], 1))
    beat = LeasesRenewParams("w", [(job_id, claimed.token)], [Progress(job_id, 0.4, "4 of 10")])
    app.backend.leases_renew(beat)

    # when it is cancelled from the command line, the request is recorded, not refused
    assert "cancellation requested" in cli.ok("cancel", APP, job_id, "--by", "ops")

    # then show prints who asked, when, and how far the job got
    shown = cli.json("show", APP, job_id)
    assert (shown["status"], shown["cancelled_by"]) == ("running", "ops")
    assert shown["cancel_requested_at"] is not None
    assert (shown["progress"], shown["progress_note"]) == (0.4, "4 of 10")
    text = cli.ok("show", APP, job_id)
    assert "cancelled_by" in text and "4 of 10" in text


def fail_one(cli: Cli, app: jobyard.App) -> str:
    """A job in the dead letter (failed), run by a worker that is gone by the return."""
    bad = cli.enqueue("explode", "--args", '["x"]')
    worker = cli.spawn("worker", APP, "-q", "mail", "--reap-interval", "0.2")
    wait_until(lambda: app.get(bad).status == "failed", what="the job to fail")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    return bad


def test_purge_of_a_stopped_workflow_takes_its_waiting_steps_and_keeps_what_they_need(
    cli: Cli, app: jobyard.App
) -> None:
    from jobyard.testing import drain

    @app.job(queue="mail")
    def ok(x: int = 0) -> int:
        return x + 1

    @app.job(queue="mail", max_attempts=1)
    def boom(x: int) -> int:
        raise RuntimeError("boom")

    # given a chain whose second step failed: the two steps after it wait for ever
    handle = jobyard.chain(ok.s(), boom.s(), ok.s(), ok.s()).enqueue()
    drain(app)
    first = handle.ids[0]
    # when completed jobs are purged, then the first step is kept (boom may be retried), said so
    out = cli.ok("purge", APP, "--status", "completed").strip().splitlines()
    assert out[0] == "purged 0 job(s)"
    assert out[1].startswith("kept 1 completed job(s) whose result a workflow step")
    # a dry run counts the waiting steps a purge of everything would take, and the freed input
    assert cli.ok("purge", APP, "--dry-run").strip() == (
        "would purge 4 job(s): 1 completed, 1 failed, 0 cancelled, 2 waiting"
    )
    # when the dead letter is purged, the steps that could never run go with it, counted
    assert cli.ok("purge", APP, "--status", "failed", "--yes").strip() == (
        "purged 3 job(s), of which 2 waiting workflow step(s) that could never run"
    )
    assert [j.id for j in app.jobs()] == [first]
    # and the first step, no longer needed, goes with the next purge of completed jobs
    assert cli.ok("purge", APP, "--status", "completed").strip() == "purged 1 job(s)"


def test_purge_asks_before_deleting_the_dead_letter(cli: Cli, app: jobyard.App) -> None:
    # given a failed job and a cancelled one
    bad = fail_one(cli, app)
    cli.ok("cancel", APP, cli.enqueue("greet", "--args", '["a"]'))

    # when purge runs with nobody to answer and no --yes, then it refuses and deletes nothing
    done = cli("purge", APP)
    assert_one_line_error(done, "--yes")
    # --dry-run tells what would go, and deletes nothing either
    assert cli.ok("purge", APP, "--dry-run").strip() == (
        "would purge 2 job(s): 0 completed, 1 failed, 1 cancelled"
    )
    assert app.get(bad).status == "failed"

    # when someone at a terminal declines, nothing goes; when they agree, the dead letter goes
    assert "nothing purged" in on_a_terminal(cli, ["purge", APP], answer="n").stderr
    assert app.get(bad).status == "failed"
    agreed = on_a_terminal(cli, ["purge", APP], answer="y")
    assert "delete 1 failed job(s)" in agreed.stderr
    assert agreed.stdout.strip().endswith("purged 2 job(s)")
    with pytest.raises(jobyard.JobNotFound):
        app.get(bad)


def on_a_terminal(cli: Cli, argv: list[str], answer: str) -> subprocess.CompletedProcess[str]:
    """Run a command whose stdin is a terminal (a pty), answering its question."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobyard", *argv],
            cwd=ROOT,
            env=cli.env,
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(leader, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(leader)
        os.close(follower)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_cancel_every_pending_job_of_a_queue_or_name(cli: Cli, app: jobyard.App) -> None:
    # given pending jobs on two queues, of two names
    greets = [cli.enqueue("greet", "--args", f'["{n}"]') for n in "abc"]
    report = cli.enqueue("report", "--args", '["2024-05"]')

    # when a dry run asks, then it lists them and changes nothing
    done = cli("cancel", APP, "--queue", "mail", "--dry-run")
    assert done.returncode == 0 and sorted(done.stdout.split()) == sorted(greets)
    assert "would cancel 3 pending or waiting job(s) of queue=mail" in done.stderr
    assert {app.get(i).status for i in greets} == {"pending"}

    # when the queue's pending jobs are cancelled, then only they are
    assert sorted(cli.ok("cancel", APP, "--queue", "mail").split()) == sorted(greets)
    assert {app.get(i).status for i in greets} == {"cancelled"}
    assert app.get(report).status == "pending"
    # by name too; nothing left to cancel is not an error
    assert cli.ok("cancel", APP, "--name", "report").split() == [report]
    assert cli.ok("cancel", APP, "--queue", "mail", "--name", "greet").split() == []
    # an ID and a filter at once, or neither, is refused
    assert_one_line_error(cli("cancel", APP), "--queue")
    assert_one_line_error(cli("cancel", APP, greets[0], "--queue", "mail"), "not both")


def test_show_points_to_json_when_it_cuts_a_value(cli: Cli) -> None:
    # given a job whose argument is longer than show prints
    long = "x" * 5000
    job_id = cli.enqueue("greet", "--args", json.dumps([long]))

    # then show cuts it, and says where to read it whole
    out = cli.ok("show", APP, job_id)
    assert long not in out.replace("\n", "")
    assert f"jobyard show {APP} {job_id} --json" in out
    assert cli.json("show", APP, job_id)["args"] == [long]
    # and a short value is neither cut nor followed by the note
    short = cli.enqueue("greet", "--args", '["ada"]')
    assert "--json" not in cli.ok("show", APP, short)


def test_a_bare_number_on_redis_gets_a_hint(cli: Cli) -> None:
    pytest.importorskip("jobyard.backends.redis.backend")
    from tests.redis.support import fresh_url

    done = cli("show", APP, "12", env={"JOBYARD_URL": fresh_url()})
    assert_one_line_error(done, "no job with id '12'", "name their queue", ":12'")
    # SQLite ids are numbers: no hint there
    assert "name their queue" not in cli("show", APP, "12").stderr


def test_help_and_readme_speak_to_users(cli: Cli) -> None:
    texts = [cli.ok("--help"), (ROOT / "README.md").read_text()]
    texts += [cli.ok(command, "--help") for command in ("demo", "worker", "purge", "cancel")]
    for text in texts:
        assert "seed 0" not in text.lower()
    # every command is in the guide's CLI table (docs/operations/cli.md, before its first section)
    table = (ROOT / "docs" / "operations" / "cli.md").read_text().split("\n## ", 1)[0]
    for command in cli_commands():
        assert f"`jobyard {command}" in table, command


def cli_commands() -> list[str]:
    from jobyard.cli import cli as group

    return sorted(group.commands)


RELOADED_APP = """
import jobyard

app = jobyard.App()


@app.job
def version() -> str:
    return {version!r}
"""


def test_worker_reload_restarts_on_a_source_change(
    cli: Cli, app: jobyard.App, tmp_path: Path
) -> None:
    pytest.importorskip("watchfiles")
    # given an app package of its own, and a reloading worker of it
    package = tmp_path / "src" / "reloaded_shop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(RELOADED_APP.format(version="v1"))
    env = {"PYTHONPATH": f"{tmp_path / 'src'}{os.pathsep}{ROOT}"}
    parent = cli.spawn(
        "worker", "reloaded_shop.tasks:app", "--reload", "--grace", "2",
        "--poll-interval", "0.1", env=env,
    )  # fmt: skip
    assert app.enqueue("version").result(timeout=30) == "v1"

    # when the handler's source changes, then the worker runs the new code
    (package / "tasks.py").write_text(RELOADED_APP.format(version="v2"))

    def new_code_runs() -> bool:
        return bool(app.enqueue("version").result(timeout=30) == "v2")

    wait_until(new_code_runs, timeout=60, what="the reloaded handler")
    log = (cli.logs / "proc-0.log").read_text()
    assert "reloading: tasks.py changed" in log

    # and SIGTERM stops the watcher and its worker, which unregisters
    parent.send_signal(signal.SIGTERM)
    parent.wait(30)
    wait_until(lambda: app.workers() == [], what="the worker to stop and unregister")


def test_migrate_reports_the_schema_state(cli: Cli) -> None:
    # given a new SQLite store (the first use of a SQLite store migrates it)
    # when migrate runs, then it says the schema is current, naming the store
    assert cli.ok("migrate", APP).strip() == f"schema is up to date ({cli.url})"


# --- the worker ---------------------------------------------------------------------------------


def test_worker_runs_jobs_shows_in_status_and_stops_on_sigterm(cli: Cli, app: jobyard.App) -> None:
    # given a job that succeeds and one that fails on its only attempt
    ok = cli.enqueue("greet", "--args", '["ada"]')
    bad = cli.enqueue("explode", "--args", '["on purpose"]')
    other = cli.enqueue("report", "--args", '["2024-05"]')

    # when a worker of the mail queue runs
    worker = cli.spawn(
        "worker", APP, "-q", "mail", "-c", "2", "--grace", "5", "--reap-interval", "0.2",
        "--poll-interval", "0.1", "--log-level", "DEBUG",
    )  # fmt: skip
    wait_until(lambda: app.get(ok).status == "completed", what="the greet job to complete")
    wait_until(lambda: app.get(bad).status == "failed", what="the explode job to fail")

    # then status shows it live, and the jobs' outcomes are visible
    status = wait_until(lambda: cli.json("status", APP)["workers"], what="a live worker")
    assert status[0]["pid"] == worker.pid and status[0]["queues"] == ["mail"]
    # in the one time format of every --json output (ISO 8601, UTC), as jobs --json writes it
    jobs = cli.ok("jobs", APP, "--json", "--name", "greet").splitlines()
    (listed,) = [json.loads(line) for line in jobs]
    for when in (status[0]["last_seen"], status[0]["started_at"], listed["created_at"]):
        assert isinstance(when, str) and when.endswith("+00:00"), when
        assert abs(datetime.fromisoformat(when).timestamp() - time.time()) < 120
    assert str(worker.pid) in cli.ok("status", APP)
    assert cli.json("show", APP, ok)["result"] == "hello ada!"
    shown = cli.ok("show", APP, bad)
    assert "Traceback" in shown and "RuntimeError: kaboom: on purpose" in shown
    assert "kaboom: on purpose" in cli.ok("jobs", APP, "--status", "failed")
    assert app.get(other).status == "pending"  # not a queue this worker serves

    # when it gets SIGTERM, it stops, unregistered, with exit code 0
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert cli.json("status", APP)["workers"] == []

    # and the failed job can be re-driven
    assert "pending" in cli.ok("retry", APP, bad)
    data = cli.json("show", APP, bad)
    assert data["status"] == "pending" and data["attempts"] == 0


def test_worker_with_processes_runs_jobs_and_stops_on_sigterm(cli: Cli, app: jobyard.App) -> None:
    ids = [cli.enqueue("greet", "--args", json.dumps([str(n)])) for n in range(6)]

    worker = cli.spawn("worker", APP, "--processes", "2", "-c", "2", "--grace", "5")

    wait_until(
        lambda: all(app.get(i).status == "completed" for i in ids), what="every job to complete"
    )
    workers = wait_until(lambda: len(app.workers()) == 2 and app.workers(), what="two workers")
    assert {w.pid for w in workers}.isdisjoint({worker.pid})  # children, not the supervisor
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert app.workers() == []


def test_worker_runs_one_process_per_cpu_by_default(cli: Cli, app: jobyard.App) -> None:
    from jobyard.worker._cpu import default_processes

    env = {k: v for k, v in cli.env.items() if k != "JOBYARD_PROCESSES"}
    cli.env = env
    worker = cli.spawn("worker", APP, "-c", "1", "--grace", "5")

    expected = default_processes()
    assert expected == len(os.sched_getaffinity(0))  # no cgroup quota on this machine
    workers = wait_until(
        lambda: len(app.workers()) == expected and app.workers(), what=f"{expected} workers"
    )
    assert len({w.pid for w in workers}) == expected
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_the_process_count_comes_from_jobyard_processes(cli: Cli, app: jobyard.App) -> None:
    worker = cli.spawn("worker", APP, "-c", "1", "--grace", "5", env={"JOBYARD_PROCESSES": "2"})

    wait_until(lambda: len(app.workers()) == 2, what="two workers")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_a_memory_store_refuses_more_than_one_process(cli: Cli) -> None:
    done = cli("worker", APP, "--processes", "2", env={"JOBYARD_URL": "memory://"})

    assert done.returncode == 2
    assert "memory://" in done.stderr and "Traceback" not in done.stderr


def test_cgroup_cpu_quota_caps_the_default(tmp_path: Path) -> None:
    from jobyard.worker._cpu import cgroup_cpus

    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert cgroup_cpus(str(quota)) == 2
    quota.write_text("max 100000\n")
    assert cgroup_cpus(str(quota)) is None
    assert cgroup_cpus(str(tmp_path / "missing")) is None


PINNABLE = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux only"
)


def thread_cpus(pid: int) -> set[str]:
    """The CPU list each thread of process ``pid`` may run on (e.g. {"1"}: all on CPU 1)."""
    lists = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            line = next(x for x in f if x.startswith("Cpus_allowed_list:"))
        lists.add(line.split(":", 1)[1].strip())
    return lists


@PINNABLE
def test_pinned_worker_runs_every_thread_on_one_cpu(cli: Cli, app: jobyard.App) -> None:
    job_id = cli.enqueue("greet", "--args", json.dumps(["pinned"]))

    cli.spawn("worker", APP, "-c", "3", "--pin")

    wait_until(lambda: app.get(job_id).status == "completed", what="the job to complete")
    (info,) = wait_until(lambda: app.workers(), what="the worker")
    allowed = {str(c) for c in os.sched_getaffinity(0)}
    cpus = thread_cpus(info.pid)
    assert len(cpus) == 1 and cpus <= allowed, cpus  # handlers, producer, completer: one CPU


@PINNABLE
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pinned_worker_processes_spread_over_cpus(cli: Cli, app: jobyard.App) -> None:
    supervisor = cli.spawn("worker", APP, "--processes", "2", "-c", "2", "--pin")

    workers = wait_until(lambda: len(app.workers()) == 2 and app.workers(), what="two workers")
    pinned = [thread_cpus(w.pid) for w in workers]
    assert all(len(c) == 1 for c in pinned), pinned
    assert pinned[0] != pinned[1]  # one CPU each, not both on the first
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(20) == 0


def test_worker_processes_stop_when_their_supervisor_is_killed(cli: Cli, app: jobyard.App) -> None:
    # given: a supervisor and its two worker processes, each in a process group of its own
    supervisor = cli.spawn("worker", APP, "--processes", "2", "-c", "2", "--grace", "5")
    workers = wait_until(lambda: len(app.workers()) == 2 and app.workers(), what="two workers")

    # when: the supervisor dies without passing any signal on
    supervisor.kill()
    supervisor.wait(10)

    # then: the children notice, stop as on SIGTERM and unregister (no orphan runs on)
    wait_until(lambda: app.workers() == [], timeout=20, what="the orphaned workers to stop")
    for w in workers:
        wait_until(lambda pid=w.pid: not _alive(pid), timeout=10, what=f"process {w.pid} to exit")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:  # a zombie (exited, not reaped yet) is gone too
            return not any(line.startswith("State:") and "Z" in line for line in f)
    except FileNotFoundError:
        return False


@PINNABLE
def test_worker_refuses_a_cpu_it_may_not_use(app: jobyard.App) -> None:
    with pytest.raises(jobyard.ConfigurationError, match="CPU 100000 is not one"):
        app.worker(cpu=100000)


# --- bad input ----------------------------------------------------------------------------------

BAD_INPUT = [
    pytest.param(["status", "no_colon_here"], ["module:attribute"], id="app-without-colon"),
    pytest.param(["status", "tests.e2e.no_such_module:app"], ["no_such_module"], id="no-module"),
    pytest.param(["status", "tests.e2e.cli_app:missing"], ["missing"], id="no-attribute"),
    pytest.param(["status", "tests.e2e.cli_app:not_an_app"], ["not a jobyard.App"], id="not-app"),
    pytest.param(["worker", "tests.e2e.cli_app:greet"], ["not a jobyard.App"], id="job-as-app"),
    pytest.param(["show", APP, "424242"], ["424242"], id="unknown-id-show"),
    pytest.param(["cancel", APP, "424242"], ["424242"], id="unknown-id-cancel"),
    pytest.param(["retry", APP, "424242"], ["424242"], id="unknown-id-retry"),
    pytest.param(["purge", APP, "--older-than", "7x"], ["7x"], id="bad-duration"),
    pytest.param(["enqueue", APP, "greet", "--args", "[oops"], ["--args"], id="args-not-json"),
    pytest.param(["enqueue", APP, "greet", "--args", '{"a": 1}'], ["array"], id="args-not-list"),
    pytest.param(["enqueue", APP, "greet", "--kwargs", "[1]"], ["object"], id="kwargs-not-dict"),
    pytest.param(["enqueue", APP, "greet", "--delay", "soon"], ["soon"], id="bad-delay"),
    pytest.param(
        ["enqueue", APP, "greet", "--args", '["a"]', "--delay", "3000000d"],
        ["delay", "100 years"],
        id="delay-too-long",
    ),
    pytest.param(
        ["enqueue", APP, "greet", "--args", '["a"]', "--delay", "99999999999999999999d"],
        ["delay", "100 years"],
        id="delay-absurd",
    ),
    pytest.param(["enqueue", APP, "greet", "--args", "[NaN, Infinity]"], ["NaN"], id="args-nan"),
    pytest.param(
        ["enqueue", APP, "greet", "--kwargs", '{"name": -Infinity}'],
        ["-Infinity"],
        id="kwargs-infinity",
    ),
    pytest.param(
        ["enqueue", APP, "greet", "--args", '["a"]', "--priority", "99999999999999999999"],
        ["--priority", "2147483647"],
        id="priority-out-of-range",
    ),
    pytest.param(["enqueue", APP, "nosuch"], ["'nosuch'", "--force"], id="unknown-job"),
    pytest.param(
        ["enqueue", APP, "greet", "--args", '["a"]', "--queue", "reportz"],
        ["'reportz'", "mail, reports", "--force"],
        id="unused-queue",
    ),
    pytest.param(
        ["enqueue", APP, "greet", "--args", "[1, 2, 3]"],
        ["greet(name, punctuation='!')", "too many positional arguments"],
        id="args-do-not-fit",
    ),
    pytest.param(
        ["enqueue", APP, "greet", "--kwargs", '{"nom": "a"}'],
        ["missing a required argument: 'name'"],
        id="kwargs-do-not-fit",
    ),
    pytest.param(["jobs", APP, "--status", "sleeping"], ["sleeping"], id="bad-status"),
    pytest.param(["worker", APP, "-c", "0"], ["concurrency"], id="bad-concurrency"),
    pytest.param(["worker", APP, "-q", "bad queue!"], ["queue"], id="bad-queue-name"),
    pytest.param(["frobnicate"], ["frobnicate"], id="unknown-command"),
]


@pytest.mark.parametrize(("argv", "needles"), BAD_INPUT)
def test_bad_input_is_one_line_with_exit_code_2(
    cli: Cli, argv: list[str], needles: list[str]
) -> None:
    assert_one_line_error(cli(*argv), *needles)


def test_unknown_url_scheme_lists_the_supported_ones_and_hides_the_password(cli: Cli) -> None:
    done = cli("status", APP, env={"JOBYARD_URL": "mysql://admin:hunter2@db.example/shop"})

    line = assert_one_line_error(done, "sqlite://", "postgresql://", "redis://")
    assert "hunter2" not in done.stdout + done.stderr
    assert "admin:***@db.example" in line


def test_an_unreachable_store_is_one_line_without_the_password(cli: Cli) -> None:
    pytest.importorskip("jobyard.backends.redis.backend")
    url = "redis://:hunter2@127.0.0.1:1/0?retry_for=0.5"  # nothing listens on port 1

    done = cli("status", APP, env={"JOBYARD_URL": url})

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "hunter2" not in done.stdout + done.stderr
    assert "redis://:***@127.0.0.1:1/0" in done.stderr


DOWN = [
    pytest.param("redis://127.0.0.1:1/0", "connection refused at 127.0.0.1:1", id="redis-refused"),
    pytest.param(
        "redis://nosuchuser:pw@127.0.0.1:6379/0", "authentication failed", id="redis-credentials"
    ),
    pytest.param(
        "postgresql://127.0.0.1:1/test", "port 1 failed: Connection refused", id="pg-port"
    ),
    pytest.param(
        "postgresql://127.0.0.1/jobyard_no_such_db",
        'database "jobyard_no_such_db" does not exist',
        id="pg-database",
    ),
    pytest.param(
        "postgresql://jobyard_no_such_role:pw@127.0.0.1/test",
        'role "jobyard_no_such_role" does not exist',
        id="pg-role",
    ),
]


@pytest.mark.alone  # within 5 s, a subprocess start included: not under parallel load
@pytest.mark.parametrize("command", ["status", "migrate"])
@pytest.mark.parametrize(("url", "cause"), DOWN)
def test_a_store_that_is_down_fails_fast_with_the_real_cause(
    cli: Cli, url: str, cause: str, command: str
) -> None:
    pytest.importorskip(
        "jobyard.backends.redis.backend" if url.startswith("redis") else "psycopg_pool"
    )
    # given a store URL whose server refuses us, when a one-shot command runs against it
    started = time.monotonic()
    done = cli(command, APP, env={"JOBYARD_URL": url})
    took = time.monotonic() - started

    # then it fails within 5 s (a subprocess start included) on one line naming the cause,
    # without the pool's reconnect warnings or a PoolTimeout that hides the cause
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: store ") and len(done.stderr.splitlines()) == 1
    assert cause in done.stderr
    assert "PoolTimeout" not in done.stderr and "up to date" not in done.stdout
    assert took < 5.0, took


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("at postgresql://admin:hunter2@db:5432/x failed", "postgresql://admin:***@db:5432/x"),
        ("redis://:hunter2@h:6379/0 and rediss://u:p@h2/1", "redis://:***@h:6379/0"),
        ("no url here", "no url here"),
    ],
)
def test_error_lines_mask_url_passwords(message: str, shown: str) -> None:
    from jobyard._secrets import scrub as _scrub

    assert shown in _scrub(message)
    assert "hunter2" not in _scrub(message) and ":p@" not in _scrub(message)


# --- the demo -----------------------------------------------------------------------------------


def test_demo_runs_to_the_closing_table(cli: Cli, tmp_path: Path) -> None:
    done = cli("demo", "--orders", "40", env={"TMPDIR": str(tmp_path)}, timeout=60)

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for word in ("queue", "completed", "retried", "failed", "jobs/s"):
        assert word in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    for queue in ("emails", "invoices", "thumbnails"):
        jobs, completed, _retried, failed = map(int, rows[queue][:4])
        assert jobs == 40 and completed + failed == 40
    assert int(rows["thumbnails"][3]) >= 1  # the corrupt image's job is in the dead letter
    assert int(rows["all"][2]) >= 1  # some jobs needed a retry
    assert "cannot decode" in out and "exit codes 0, 0" in out
    assert not list(tmp_path.glob("jobyard-demo-*"))  # the temporary store is gone


SLOW_START = """
import os, sys, time
marker = os.environ.get("JOBYARD_TEST_SLOW_START")
if marker and "worker" in sys.orig_argv:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))  # the first worker starts at once
    except FileExistsError:
        time.sleep(4)  # the others are still starting when the first has done every job
"""


def test_demo_waits_for_a_slow_starting_worker(cli: Cli, tmp_path: Path) -> None:
    # given: worker processes that start at very different speeds (as on a loaded machine)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "JOBYARD_TEST_SLOW_START": str(tmp_path / "first-started")}

    # when: the demo runs a few orders, which the first worker alone could finish quickly
    done = cli("demo", "--orders", "5", "--db", str(tmp_path / "demo.db"), env=env, timeout=90)

    # then: no worker is signalled before it is ready: every one stops cleanly
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exit codes 0, 0" in done.stdout


def test_demo_keeps_the_store_it_is_given(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "kept" / "demo.db"

    done = cli("demo", "--orders", "5", "--db", str(db), timeout=60)

    assert done.returncode == 0, done.stdout + done.stderr
    kept = jobyard.App(f"sqlite:///{db}")
    try:
        assert {s.queue: s.counts.get("completed", 0) for s in kept.stats()} == {
            "emails": 5,
            "invoices": 5,
            "thumbnails": 4,  # order 3's image is corrupt
        }
    finally:
        kept.close()


def test_cron_lists_schedules_and_syncs_them(cli: Cli) -> None:
    before = cli.ok("cron", APP)
    assert "daily-report" in before and "not stored yet" in before
    cli.ok("cron", APP, "--sync")
    (row,) = [json.loads(line) for line in cli.ok("cron", APP, "--json").splitlines()]
    assert (row["name"], row["cron"], row["job"], row["active"]) == (
        "daily-report",
        "0 9 * * 1-5",
        "report",
        True,
    )
    assert datetime.fromisoformat(row["next_run_at"]).timestamp() > time.time()


def test_cron_pauses_and_resumes_a_schedule_across_syncs(cli: Cli) -> None:
    def row() -> dict[str, Any]:
        (only,) = [json.loads(line) for line in cli.ok("cron", APP, "--json").splitlines()]
        return only

    cli.ok("cron", APP, "--sync")
    assert "paused daily-report" in cli.ok("cron", APP, "--pause", "daily-report")
    assert row()["paused"] is True
    cli.ok("cron", APP, "--sync")  # what every worker does when it starts
    assert row()["paused"] is True
    assert "paused" in cli.ok("cron", APP)
    assert "resumed daily-report" in cli.ok("cron", APP, "--resume", "daily-report")
    resumed = row()
    assert resumed["paused"] is False
    assert datetime.fromisoformat(resumed["next_run_at"]).timestamp() > time.time()
    done = cli("cron", APP, "--pause", "nope")
    assert_one_line_error(done, "no stored schedule named 'nope'")


def test_a_bad_cron_expression_is_one_line_with_exit_code_2(cli: Cli) -> None:
    done = cli("cron", "tests.e2e.bad_cron_app:app")
    assert_one_line_error(done, "invalid cron expression '61 * * * *'")


def test_show_prints_a_workflow_as_a_tree_and_cancel_stops_it(cli: Cli, app: jobyard.App) -> None:
    # given a group of two greetings joined by a report, enqueued but not run
    greet, report = app.by_name("greet", queue="mail"), app.by_name("report", queue="reports")
    flow = jobyard.group(greet.s("a"), greet.s("b")).then(report.s()).enqueue()
    first, _, join = flow.ids
    # when a member is shown
    out = cli.ok("show", APP, first)
    # then its workflow is printed as a tree, each step with its status, the member marked
    tree = out[out.index(f"workflow {flow.id}") :].splitlines()
    assert tree[0] == f"workflow {flow.id} (running, 3 jobs):"
    assert tree[1:] == [
        "chain",
        "├─ group",
        f"│  ├─ greet #{first} pending  ◀",
        f"│  └─ greet #{flow.ids[1]} pending",
        f"└─ report #{join} waiting",
    ]
    shown = cli.json("show", APP, join)
    assert (shown["depends_on"], shown["parent_id"]) == ([first, flow.ids[1]], first)
    assert shown["workflow"]["status"] == "running" and len(shown["workflow"]["tree"]) == 5
    # and cancelling the workflow through any of its jobs cancels every step
    said = cli.ok("cancel", APP, join, "--workflow", "--by", "ops")
    assert said.strip() == f"workflow {flow.id}: 3 cancelled"
    assert {app.get(i).status for i in flow.ids} == {"cancelled"}
    # a job outside any workflow is refused in one line
    plain = cli.enqueue("greet", "--args", '["c"]')
    assert_one_line_error(cli("cancel", APP, plain, "--workflow"), "not part of a chain or group")
    # a cancelled step cannot be re-driven alone: the refusal names the resume
    done = cli("retry", APP, join)
    assert done.returncode != 0 and "jobyard retry --workflow" in done.stderr
    # and retry --workflow through any of its jobs resumes it: the members due, the join
    # waiting for them again
    said = cli.ok("retry", APP, first, "--workflow")
    assert said.strip() == (
        f"workflow {flow.id}: resumed 3 failed or cancelled job(s); now 2 pending, 1 waiting"
    )
    assert [app.get(i).status for i in flow.ids] == ["pending", "pending", "waiting"]
    said = cli.ok("retry", APP, join, "--workflow")
    assert said.strip() == f"workflow {flow.id}: nothing to resume; now 2 pending, 1 waiting"
    assert_one_line_error(cli("retry", APP, plain, "--workflow"), "not part of a chain or group")
    assert_one_line_error(cli("retry", APP, "--all", "--workflow"), "--workflow takes a job ID")
