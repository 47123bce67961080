"""A hook that raises changes nothing else, whatever it raises: every BaseException a hook
raises is logged and skipped, in a worker (sync and async handlers), in ``testing.drain`` and
in the producer, and the job's outcome is the handler's own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import jobyard
from jobyard.testing import drain

from ..conftest import running_worker


class Unusual(BaseException):
    """A BaseException of the user's own."""


RAISED: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt, GeneratorExit, Unusual)
JOB_HOOKS = ("before_job", "after_job", "on_dead")


def _raiser(kind: type[BaseException]) -> Callable[[object], None]:
    def hook(event: object) -> None:
        raise kind(f"hook raised {kind.__name__}")

    hook.__qualname__ = f"raises_{kind.__name__}"
    return hook


def _register(
    app: jobyard.App, kinds: tuple[str, ...], raised: tuple[type[BaseException], ...]
) -> None:
    for kind in kinds:
        for exc in raised:
            getattr(app, kind)(_raiser(exc))


def _handlers(app: jobyard.App) -> dict[str, jobyard.JobFunction[..., Any]]:
    @app.job(max_attempts=1)
    def sync_ok(n: int) -> int:
        return n

    @app.job(max_attempts=1)
    async def async_ok(n: int) -> int:
        return n

    @app.job(max_attempts=1)
    def sync_fails() -> None:
        raise ValueError("the handler's own error")

    @app.job(max_attempts=1)
    async def async_fails() -> None:
        raise ValueError("the handler's own error")

    return {
        "sync_ok": sync_ok,
        "async_ok": async_ok,
        "sync_fails": sync_fails,
        "async_fails": async_fails,
    }


def _enqueue_all(fns: dict[str, jobyard.JobFunction[..., Any]]) -> dict[str, jobyard.JobHandle]:
    return {name: fn.enqueue(*([1] if name.endswith("_ok") else [])) for name, fn in fns.items()}


def _hook_failures(caplog: pytest.LogCaptureFixture) -> dict[str, set[str]]:
    """hook kind -> the exceptions its failures logged."""
    seen: dict[str, set[str]] = {}
    for record in caplog.records:
        if record.name == "jobyard.hooks" and record.exc_info:
            kind = record.getMessage().split()[0]
            exc = record.exc_info[1]
            seen.setdefault(kind, set()).add(type(exc).__name__)
    return seen


def _check_outcomes(app: jobyard.App, handles: dict[str, jobyard.JobHandle]) -> None:
    for name, handle in handles.items():
        job = app.get(handle.id)
        assert job.attempts == 1, name
        if name.endswith("_ok"):
            assert (job.status, job.error) == ("completed", None), name
        else:
            assert job.status == "failed", name
            assert "the handler's own error" in (job.error or ""), name
            assert "hook raised" not in (job.error or ""), name


def test_hooks_raising_any_base_exception_change_nothing_in_a_worker(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    # given hooks of every kind raising each kind of BaseException (on_enqueue's Ctrl-C on the
    # main thread is the one exception: see the test below)
    app = make_app()
    _register(app, JOB_HOOKS, RAISED)
    _register(app, ("on_enqueue",), (SystemExit, GeneratorExit, Unusual))
    fns = _handlers(app)
    with caplog.at_level(logging.ERROR, logger="jobyard.hooks"):
        # when jobs are enqueued and a worker runs them
        handles = _enqueue_all(fns)
        with running_worker(app, concurrency=2):
            for name, handle in handles.items():
                if name.endswith("_ok"):
                    assert handle.result(timeout=20) == 1
                else:
                    with pytest.raises(jobyard.JobFailed, match="the handler's own error"):
                        handle.result(timeout=20)
            # and the worker goes on: no handler thread and no event loop was lost
            late = {name: fns[name].enqueue(1) for name in ("sync_ok", "async_ok")}
            for handle in late.values():
                assert handle.result(timeout=20) == 1
    # then every outcome is the handler's own, each hook's exception was logged
    _check_outcomes(app, handles)
    names = {exc.__name__ for exc in RAISED}
    failures = _hook_failures(caplog)
    assert {kind: failures.get(kind) for kind in JOB_HOOKS} == dict.fromkeys(JOB_HOOKS, names)
    assert failures["on_enqueue"] == {"SystemExit", "GeneratorExit", "Unusual"}


def test_hooks_raising_any_base_exception_change_nothing_in_drain(
    make_app: Callable[..., jobyard.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    _register(app, JOB_HOOKS, RAISED)
    fns = _handlers(app)
    handles = _enqueue_all(fns)
    with caplog.at_level(logging.ERROR, logger="jobyard.hooks"):
        # drain runs on this (the main) thread: a hook's KeyboardInterrupt is skipped here too
        assert drain(app) == 4
    _check_outcomes(app, handles)
    failures = _hook_failures(caplog)
    names = {exc.__name__ for exc in RAISED}
    assert {kind: failures.get(kind) for kind in JOB_HOOKS} == dict.fromkeys(JOB_HOOKS, names)
    # and with raise_errors, only the handlers' own errors reach the test
    again = fns["sync_ok"].enqueue(1)
    assert drain(app, raise_errors=True) == 1
    assert app.get(again.id).status == "completed"


def test_ctrl_c_in_an_on_enqueue_hook_interrupts_only_the_main_thread(
    make_app: Callable[..., jobyard.App],
) -> None:
    """Ctrl-C reaches a Python program as a KeyboardInterrupt on its main thread, wherever it
    happens to be: inside a slow on_enqueue hook it must still stop the program (the job is
    stored by then). On any other thread no signal raises it: the hook's own, skipped."""
    app = make_app()
    called: list[str] = []

    def interrupted(event: jobyard.EnqueueEvent) -> None:
        raise KeyboardInterrupt

    app.on_enqueue(interrupted)
    app.on_enqueue(lambda event: called.append(event.id))

    @app.job
    def noted(n: int) -> int:
        return n

    with pytest.raises(KeyboardInterrupt):
        noted.enqueue(1)
    (stored,) = app.jobs(status=jobyard.Status.PENDING)
    assert stored.args == (1,) and called == []  # stored; the hooks after it skipped

    handles: list[jobyard.JobHandle] = []
    thread = threading.Thread(target=lambda: handles.append(noted.enqueue(2)))
    thread.start()
    thread.join(10)
    (handle,) = handles
    assert called == [handle.id]
    assert app.get(handle.id).args == (2,)
