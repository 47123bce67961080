"""``jobyard retry --all`` and ``jobyard queue`` on every store, run in this process against the
test's own App (``tests.e2e.hostile_app:current``); bad arguments: one line, exit 2."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
import jobyard.testing
from jobyard import _bulk
from jobyard.cli import main
from tests.e2e import hostile_app

HERE = "tests.e2e.hostile_app:current"


@pytest.fixture
def run(
    make_app: Callable[..., jobyard.App],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., tuple[int, str, str]]:
    monkeypatch.delenv("JOBYARD_DEBUG", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    monkeypatch.setattr(hostile_app, "current", make_app())

    def command(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main(list(args))
        out, err = capsys.readouterr()
        code = done.value.code
        return (code if isinstance(code, int) else 0), out, err

    return command


def app_of() -> jobyard.App:
    app = hostile_app.current
    assert app is not None
    return app


def dead_letter(app: jobyard.App) -> dict[str, list[str]]:
    """Given failed jobs: 3 of 'charge' (2 'card declined', 1 'timeout'), 2 of 'mail'."""

    @app.job(queue="pay", max_attempts=1)
    def charge(why: str) -> None:
        raise RuntimeError(why)

    @app.job(queue="post", max_attempts=1)
    def mail(why: str) -> None:
        raise ValueError(why)

    ids = {
        "declined": [charge.enqueue("card declined").id for _ in range(2)],
        "timeout": [charge.enqueue("gateway timeout").id],
        "mail": [mail.enqueue("no such box").id for _ in range(2)],
    }
    jobyard.testing.drain(app)
    assert app.stats() and sum(s.counts["failed"] for s in app.stats()) == 5
    return ids


def statuses(app: jobyard.App, ids: list[str]) -> set[str]:
    return {app.get(i).status.value for i in ids}


def test_retry_all_by_filter_in_batches_and_a_dry_run_first(
    run: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_of()
    ids = dead_letter(app)
    monkeypatch.setattr(_bulk, "BATCH", 1)  # a batch per job: the walk goes on by cursor

    # a dry run counts and moves nothing
    code, out, _ = run(
        "retry", HERE, "--all", "--queue", "pay", "--error-contains", "declined", "--dry-run"
    )
    assert code == 0 and "2 failed jobs would be re-driven; nothing changed" in out
    assert statuses(app, ids["declined"]) == {"failed"}

    # then the same filter re-drives exactly those, batch by batch
    code, out, err = run("retry", HERE, "--all", "--queue", "pay", "--error-contains", "declined")
    assert code == 0 and "re-drove 2 failed jobs" in out
    assert "re-driven 1 so far" in err and "re-driven 2 so far" in err
    assert statuses(app, ids["declined"]) == {"pending"}
    assert statuses(app, ids["timeout"] + ids["mail"]) == {"failed"}

    # by name, then everything that is left
    code, out, _ = run("retry", HERE, "--all", "--name", "mail")
    assert code == 0 and "re-drove 2 failed jobs" in out
    code, out, _ = run("retry", HERE, "--all")
    assert code == 0 and "re-drove 1 failed job" in out
    assert statuses(app, ids["timeout"]) == {"pending"}
    code, out, _ = run("retry", HERE, "--all")
    assert code == 0 and "re-drove 0 failed jobs" in out


def test_queue_pauses_resumes_and_sets_max_concurrency_keeping_the_rest(
    run: Callable[..., tuple[int, str, str]],
) -> None:
    app = app_of()
    app.configure_queue("pay", max_pending=9, retention=60)

    code, out, _ = run("queue", HERE, "pay", "--pause")
    assert code == 0 and out.strip() == "queue pay: paused, max_concurrency=unlimited"
    code, out, _ = run("queue", HERE, "pay", "--max-concurrency", "3")
    assert code == 0 and out.strip() == "queue pay: paused, max_concurrency=3"
    (cfg,) = app.queues()
    assert (cfg.paused, cfg.max_concurrency, cfg.max_pending, cfg.retention) == (True, 3, 9, 60)
    code, out, _ = run("queue", HERE, "pay", "--resume", "--max-concurrency", "none")
    assert code == 0 and out.strip() == "queue pay: active, max_concurrency=unlimited"
    (cfg,) = app.queues()
    assert (cfg.paused, cfg.max_concurrency, cfg.max_pending, cfg.retention) == (False, None, 9, 60)
    # no option: the settings, unchanged
    code, out, _ = run("queue", HERE, "fresh")
    assert code == 0 and out.strip() == "queue fresh: active, max_concurrency=unlimited"
    assert [q.name for q in app.queues()] == ["pay"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("retry", HERE), "give a job ID, or --all"),
        (("retry", HERE, "1", "--all"), "not both"),
        (("retry", HERE, "1", "--queue", "pay"), "not both"),
        (("retry", HERE, "--all", "--error-contains", ""), "--error-contains needs some text"),
        (("retry", HERE, "--all", "--queue", "bad queue!"), "queue"),
        (("queue", HERE, "pay", "--pause", "--resume"), "not both"),
        (("queue", HERE, "pay", "--max-concurrency", "0"), "at least 1"),
        (("queue", HERE, "pay", "--max-concurrency", "lots"), "whole number"),
        (("queue", HERE, "bad queue!", "--pause"), "queue"),
    ],
)
def test_bad_arguments_say_so_in_one_line_and_exit_2(
    run: Callable[..., tuple[int, str, str]], args: tuple[str, ...], says: str
) -> None:
    app = app_of()
    app.configure_queue("pay", max_pending=9)
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err
    # and nothing changed
    assert [(q.name, q.paused, q.max_concurrency) for q in app.queues()] == [("pay", False, None)]
