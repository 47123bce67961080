"""What the ``jobyard`` command prints from a store, whoever wrote it: values from jobs as text
(terminal escapes and rich markup shown, never acted on), long values cut, impossible times
printed, never raised. On every store: the command runs in this process against the test's own
App (``tests.e2e.hostile_app:current``), as a plain pipe and in rich's terminal mode; and in a
real pseudo-terminal and a real worker process on the stores other processes can reach."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import tty
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobyard
from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    LeasesRenewParams,
    Outcome,
    Progress,
    Schedule,
    SchedulesSyncParams,
)
from jobyard.cli import SHOW_MAX, main
from tests.conftest import running_worker, wait_until
from tests.e2e import hostile_app
from tests.e2e.hostile_app import C1, ESCAPES, HOSTILE, declare

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.e2e.hostile_app:current"  # the test's App, for the command run in-process
THERE = "tests.e2e.hostile_app:app"  # the same jobs on $JOBYARD_URL, for other processes
KEY = f"{ESCAPES}{C1}"  # an idempotency key
# How the escapes read once printed as text.
SHOWN = "\\x1b[2J\\x1b[31mX\\x1b]0;pwned\\x07"
SHOWN_C1 = "\\x9b2J"
SHOWN_JSON = "\\u001b[2J\\u001b[31mX\\u001b]0;pwned\\u0007"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling, in a terminal


def assert_inert(text: str, terminal: bool = False) -> None:
    """No control character but the newline reaches the reader: none of the job's escapes, no
    C1 code, no BEL; in a terminal only rich's own colours and weights (SGR) may remain."""
    visible = SGR.sub("", text) if terminal else text
    found = sorted(
        {f"U+{ord(c):04X}" for c in visible if unicodedata.category(c) == "Cc" and c != "\n"}
    )
    assert not found, f"control characters {found} in:\n{text[:3000]!r}"
    assert "pwned\x07" not in text and "\x1b[2J" not in text and "\x1b]" not in text


def assert_markup_literal(text: str) -> None:
    """rich markup from a job prints as written: no style, no link, no emoji."""
    assert "[bold red]x[/]" in text
    assert "[link=https://evil.example]y[/link]" in text
    assert ":warning:" in text and "\u26a0" not in text


class InProcess:
    """Runs the ``jobyard`` command in this process against one App, capturing its output."""

    def __init__(
        self, app: jobyard.App, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
    ) -> None:
        self.capsys = capsys
        self.mp = mp
        mp.setattr(hostile_app, "current", app)

    def __call__(self, *args: str, terminal: bool = False, code: int = 0) -> tuple[str, str]:
        # rich's terminal mode, as under a real terminal: TTY_COMPATIBLE=1 is rich's switch
        self.mp.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main(list(args))
        out, err = self.capsys.readouterr()
        assert done.value.code == code, (args, done.value.code, out, err)
        return out, err


@pytest.fixture
def run(
    make_app: Callable[..., jobyard.App],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> InProcess:
    monkeypatch.delenv("JOBYARD_DEBUG", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return InProcess(declare(make_app()), capsys, monkeypatch)


def app_of(run: InProcess) -> jobyard.App:
    app = hostile_app.current
    assert app is not None
    return app


def field_row(shown: str, field: str) -> str:
    """The row of ``field`` in the table ``jobyard show`` prints."""
    return next(ln for ln in shown.splitlines() if ln.strip().startswith(f"{field} "))


def held_job(app: jobyard.App, note: str) -> str:
    """A job running on a worker of this test's own (claimed and renewed here), with a note."""
    job_id = app.by_name("echo", queue="held").enqueue("x").id
    (claimed,) = app.backend.jobs_claim(JobsClaimParams("w", ["held"], 1))
    beat = LeasesRenewParams("w", [(job_id, claimed.token)], [Progress(job_id, 0.5, note)])
    app.backend.leases_renew(beat)
    return job_id


# --- 1. values from jobs print as text ---------------------------------------------------------


def test_values_from_jobs_print_as_text(run: InProcess, caplog: pytest.LogCaptureFixture) -> None:
    # given jobs whose error, key, result, cancel-by, progress note and workflow step carry
    # terminal escapes and rich markup (an error quoting its input, over two lines)
    app = app_of(run)
    boom, echo = app.registry["boom"], app.registry["echo"]
    failed = boom.options(idempotency_key=KEY).enqueue().id
    returned = echo.enqueue(HOSTILE).id
    step = jobyard.chain(boom.s(), echo.s()).enqueue().ids[0]
    held = held_job(app, HOSTILE)
    caplog.set_level(logging.INFO, logger="jobyard.jobs")
    with running_worker(app, queues=["hostile"]):
        wait_until(
            lambda: (
                {app.get(i).status for i in (failed, returned, step)} <= {"failed", "completed"}
            ),
            what="the hostile jobs to finish",
        )
    out, _ = run("cancel", HERE, held, "--by", HOSTILE)
    assert "cancellation requested" in out

    # then the worker's outcome line quotes the error as text, on one line
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobyard.jobs" and f"job {failed} " in r.getMessage()
    ]
    assert_inert(line)
    assert "dead" in line and SHOWN in line and "\n" not in line

    # and every listing prints them as text, piped or in a terminal
    for terminal in (False, True):
        shown, _ = run("show", HERE, failed, terminal=terminal)
        assert_inert(shown, terminal)
        visible = SGR.sub("", shown)
        assert f"{SHOWN}{SHOWN_C1}" in field_row(visible, "idempotency_key")
        assert f"RuntimeError: bad input {SHOWN}" in visible  # the error section, its lines kept
        assert f"\nsecond line {SHOWN}" in visible
        assert_markup_literal(visible)
        if terminal:  # rich did style its own output: the terminal path was taken
            assert SGR.search(shown)
        # text as text; a result as the JSON it is stored as, with JSON's escapes
        for job_id, field, escaped in (
            (returned, "result", (SHOWN_JSON, "\\u009b2J")),
            (held, "cancelled_by", (SHOWN, SHOWN_C1)),
            (held, "progress_note", (SHOWN, SHOWN_C1)),
        ):
            shown, _ = run("show", HERE, job_id, terminal=terminal)
            assert_inert(shown, terminal)
            row = field_row(SGR.sub("", shown), field)
            assert all(e in row for e in escaped), row
            assert_markup_literal(row)
        shown, _ = run("show", HERE, step, terminal=terminal)
        assert_inert(shown, terminal)
        (tree_line,) = [ln for ln in SGR.sub("", shown).splitlines() if f"#{step} " in ln]
        assert f"(second line {SHOWN}" in tree_line
        for command in (("jobs", HERE), ("jobs", HERE, "--status", "failed"), ("status", HERE)):
            listed, _ = run(*command, terminal=terminal)
            assert_inert(listed, terminal)
        listed, _ = run("jobs", HERE, "--status", "failed", terminal=terminal)
        assert "\\x1b[2J" in SGR.sub("", listed)  # the error column
        # an error naming a hostile value: one line, as text
        _, err = run("show", HERE, KEY, terminal=terminal, code=2)
        assert_inert(err)
        assert len(err.splitlines()) == 1 and "\\x1b[2J" in err
        # and a command echoing what it was given
        _, err = run("cancel", HERE, "--queue", ESCAPES, terminal=terminal)
        assert_inert(err)
        assert "of queue=\\x1b[2J" in err

    # and --json keeps the values exact, with every control character a JSON escape
    for job_id in (failed, held, step):
        out, _ = run("show", HERE, job_id, "--json")
        assert_inert(out)
    out, _ = run("show", HERE, failed, "--json")
    assert "\\u009b" in out  # C1, which JSON itself leaves raw
    data = json.loads(out)
    assert data["idempotency_key"] == KEY and ESCAPES in data["error"]
    data = json.loads(run("show", HERE, held, "--json")[0])
    assert data["cancelled_by"] == HOSTILE and data["progress_note"] == HOSTILE
    for line in run("jobs", HERE, "--json")[0].splitlines():
        assert_inert(line)
        json.loads(line)


# --- 1, for real: a pseudo-terminal and a worker process ---------------------------------------


def in_terminal(url: str, *args: str) -> str:
    """``python -m jobyard ARGS`` with a pseudo-terminal of 200 columns as its stdout and stderr:
    what a user at a terminal would receive, byte for byte (no newline translation)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    tty.setraw(slave)  # no \n -> \r\n: any control character read back is the command's own
    env = {**os.environ, "JOBYARD_URL": url, "TERM": "xterm-256color"}
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR", "COLUMNS", "JOBYARD_DEBUG"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobyard", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    with contextlib.suppress(OSError):  # EIO once the command exits and the terminal closes
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    os.close(master)
    assert proc.wait(30) == 0, b"".join(chunks)[-2000:]
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(url: str) -> subprocess.Popen[bytes]:
        with (tmp_path / "worker.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobyard", "worker", THERE, "--poll-interval", "0.2"],
                cwd=ROOT,
                env={**os.environ, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_terminal_and_a_worker_log_get_no_escapes(
    shared_store: tuple[str, str],
    worker_process: Callable[[str], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    # given a hostile job run by a real worker process, and a pending one cancelled by a
    # hostile --by from the command line
    url = shared_store[1]
    app = jobyard.App(url)
    try:
        boom = app.by_name("boom", queue="hostile", idempotency_key=KEY, max_attempts=1)
        failed = boom.enqueue().id
        later = app.by_name("echo", queue="later").enqueue("x").id
        worker = worker_process(url)
        wait_until(lambda: app.get(failed).status == "failed", what="the hostile job to fail")
        worker.send_signal(signal.SIGINT)
        assert worker.wait(30) == 0
        in_terminal(url, "cancel", THERE, later, "--by", HOSTILE)
    finally:
        app.close()

    # then the worker's log holds the error as text
    log = (tmp_path / "worker.log").read_text()
    assert_inert(log)
    assert f"job {failed} boom queue=hostile attempt=1/1 dead" in log and SHOWN in log

    # and a terminal receives no escape of the job's, only rich's own styling
    for args, expected in (
        (("show", THERE, failed), f"{SHOWN}{SHOWN_C1}"),
        (("show", THERE, later), SHOWN),
        (("jobs", THERE), "\\x1b[2J"),
    ):
        shown = in_terminal(url, *args)
        assert_inert(shown, terminal=True)
        assert SGR.search(shown), "rich did not take its terminal path"
        assert expected in SGR.sub("", shown)
    assert_markup_literal(SGR.sub("", in_terminal(url, "show", THERE, failed)))


# --- 2. show cuts every long value ---------------------------------------------------------------

BIG = 1_000_000


def test_show_cuts_every_long_value_and_json_prints_them_whole(run: InProcess) -> None:
    # given a failed job with a 1 MB argument and a 1 MB error, and a job with a 1 MB result
    app = app_of(run)
    error = "Traceback (most recent call last):\n" + "e" * BIG + "\nRuntimeError: the end"
    failed = app.by_name("echo", queue="big").enqueue("a" * BIG).id
    returned = app.by_name("echo", queue="big").enqueue("x").id
    claimed = {c.id: c for c in app.backend.jobs_claim(JobsClaimParams("w", ["big"], 2))}
    app.backend.jobs_ack(
        JobsAckParams(
            [
                Outcome(failed, claimed[failed].token, "failed", error=error),
                Outcome(
                    returned, claimed[returned].token, "completed", result='"' + "r" * BIG + '"'
                ),
            ]
        )
    )

    # when show prints them, then each long value is cut, saying how much
    out, _ = run("show", HERE, failed)
    assert len(out) < 10 * SHOW_MAX, len(out)  # table padding included; uncut: 2 MB
    args_len = len(json.dumps(["a" * BIG]))
    assert f"({args_len - SHOW_MAX:,} more characters)" in out
    assert f"… {len(error) - SHOW_MAX:,} characters cut …" in out
    assert out.index("Traceback (most recent") < out.index("characters cut")
    assert out.rstrip().splitlines()[-2].endswith("RuntimeError: the end")  # the exception kept
    assert "prints them whole" in out
    out, _ = run("show", HERE, returned)
    assert len(out) < 10 * SHOW_MAX, len(out)
    assert f"({BIG + 2 - SHOW_MAX:,} more characters)" in out

    # and --json prints everything
    data = json.loads(run("show", HERE, failed, "--json")[0])
    assert data["error"] == error and data["args"] == ["a" * BIG]
    assert json.loads(run("show", HERE, returned, "--json")[0])["result"] == "r" * BIG


# --- 3. a time no datetime can hold prints as text ----------------------------------------------


def test_listings_print_a_time_past_year_9999_as_text(run: InProcess) -> None:
    # given a stored schedule whose next run is past year 9999 (written by something else)
    app = app_of(run)
    job = app.registry["echo"].opts.new_job(["x"], {})
    far = Schedule("far", None, job, next_run_at=1e12, every=60.0)
    app.backend.schedules_sync(SchedulesSyncParams([far]))

    # when the schedules are listed, then the time prints as text, as JSON and in the table
    out, _ = run("cron", HERE, "--json")
    (line,) = [json.loads(ln) for ln in out.splitlines() if '"far"' in ln]
    assert line["next_run_at"] == "not a time: 1000000000000.0"
    out, _ = run("cron", HERE)
    assert "not a time: 1000000000000.0" in out
