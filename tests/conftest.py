"""Fixtures shared by every suite: one store per test, on every backend, and helpers that wait on
conditions with deadlines instead of sleeping."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard

ROOT = Path(__file__).resolve().parent.parent
# A test that starts "a worker" (and SIGKILLs it) means one process: ``jobyard worker`` runs one
# per CPU by default, which tests/e2e/test_cli.py checks with this variable removed.
os.environ.setdefault("JOBYARD_PROCESSES", "1")
STORES = ["memory", "sqlite", "postgres", "redis", "redis_cluster"]
SHARED = {"sqlite", "postgres", "redis", "redis_cluster"}  # reachable from other processes
SUMMARY_PROPERTY = "chaos summary"  # a test report's user property: a line for the summary


def _support(module: str, backend_module: str) -> Any:
    if importlib.util.find_spec(backend_module) is None:
        pytest.skip(f"{backend_module} is not written yet")
    return importlib.import_module(module)


def make_store_url(kind: str, tmp_path: Path) -> str:
    """A fresh, isolated store of this kind for one test."""
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/jobs.db"
    if kind == "postgres":
        url: str = _support(
            "tests.postgres.support", "jobyard.backends.postgres.backend"
        ).fresh_url()
        return url
    if kind == "redis":
        url = _support("tests.redis.support", "jobyard.backends.redis.backend").fresh_url()
        return url
    if kind == "redis_cluster":
        url = _support("tests.redis.support", "jobyard.backends.redis.backend").cluster_url()
        return url
    raise ValueError(kind)


TERMINAL_VARIABLES = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller: tell each worker the terminal size variables of this
    process's environment (as a rule none). The processes xdist starts inherit the C-level
    environment, where GNU readline, once imported, has set COLUMNS=80 and LINES=24; a worker
    would hand them to every command a test runs, which would then wrap its output at 80
    columns where a serial run's does not."""
    node.workerinput["jobyard_terminal"] = {k: os.environ.get(k) for k in TERMINAL_VARIABLES}


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: the controller's terminal size variables, not readline's."""
    terminal = getattr(config, "workerinput", {}).get("jobyard_terminal")
    for name, value in (terminal or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The chaos runs' summary lines (tests/chaos/harness.py ``report``), read from the tests'
    reports: this runs where the session is reported, the controller of a pytest-xdist run."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == SUMMARY_PROPERTY
    ]
    if lines:
        terminalreporter.section("chaos summary")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(kind, url) of a fresh store, for each backend."""
    kind: str = request.param
    return kind, make_store_url(kind, tmp_path)


@pytest.fixture
def shared_store(store: tuple[str, str]) -> tuple[str, str]:
    """A fresh store that other processes can reach (memory:// is skipped)."""
    if store[0] not in SHARED:
        pytest.skip("memory:// lives inside one process")
    return store


@pytest.fixture
def clock() -> jobyard.FrozenClock:
    """A frozen clock at a fixed instant."""
    return jobyard.FrozenClock(1_800_000_000.0)


@pytest.fixture
def make_app(store: tuple[str, str]) -> Iterator[Callable[..., jobyard.App]]:
    """Build Apps on this test's store; all are closed afterwards. Every App of one memory://
    test shares the first one's store."""
    apps: list[jobyard.App] = []

    def build(clock: jobyard.Clock | None = None) -> jobyard.App:
        app = jobyard.App(store[1], clock=clock)
        if store[0] == "memory" and apps:
            app._backend = apps[0].backend
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.close()


def wait_until(
    predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@contextlib.contextmanager
def running_worker(app: jobyard.App, **options: Any) -> Iterator[jobyard.worker.Worker]:
    """A worker started in this process, stopped when the block ends."""
    options.setdefault("reap_interval", 0.2)
    options.setdefault("poll_interval", 0.2)
    worker = app.worker(**options)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(grace=options.get("grace", 5.0))


class WorkerProcess:
    """A real worker process (``python -m jobyard worker``), killed for good at teardown."""

    def __init__(self, url: str, app_ref: str, args: list[str], env: dict[str, str]) -> None:
        self.log = Path(env["JOBYARD_SINK"]) / f"worker-{time.monotonic_ns()}.log"
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobyard", "worker", app_ref, *args],
            cwd=ROOT,
            env={**os.environ, **env, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


@contextlib.contextmanager
def backends_on(cls: Callable[[str, jobyard.Clock], Any], url: str) -> Iterator[Callable[..., Any]]:
    """A factory of ``cls`` backends on ``url`` (``at=`` for another URL; the system clock
    unless one is given), all closed when the block ends: the per-store suites' fixture."""
    opened: list[Any] = []

    def build(clock: jobyard.Clock | None = None, at: str | None = None) -> Any:
        backend = cls(at or url, clock or jobyard.SystemClock())
        opened.append(backend)
        return backend

    try:
        yield build
    finally:
        for backend in opened:
            backend.close()


@pytest.fixture
def sink(tmp_path: Path) -> Path:
    """A directory where test handlers record each execution as a file."""
    path = tmp_path / "sink"
    path.mkdir()
    return path


@pytest.fixture
def spawn_worker(sink: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real worker processes of ``tests.apps.contract_app:app``; all are killed afterwards."""
    procs: list[WorkerProcess] = []

    def spawn(url: str, *args: str, app_ref: str = "tests.apps.contract_app:app") -> WorkerProcess:
        proc = WorkerProcess(url, app_ref, list(args), {"JOBYARD_SINK": str(sink)})
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
