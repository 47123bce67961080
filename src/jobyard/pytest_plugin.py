"""The pytest plugin (entry point ``pytest11``, shipped with jobyard): fixtures for testing the
code that enqueues and runs jobs. It adds nothing to a test that does not ask for it.

- ``jobyard_app``: an App on ``memory://`` with a :class:`jobyard.FrozenClock`, fresh for each
  test. With ``jobyard_app = myproject.jobs:app`` in the ini file, it is *your* App (its jobs
  registered) moved onto that store for the test and back afterwards, so the code under test
  enqueues on it unchanged.
- ``jobyard_drain``: run due jobs in the test's own thread (``jobyard.testing.drain``).
- ``jobyard_enqueued``: what is pending, oldest first (``jobyard.testing.enqueued``), to assert
  what a piece of code enqueued.
- ``@pytest.mark.jobyard_stores``: run the test once on each store configured, with
  ``--jobyard-store URL`` (repeatable) or the ``jobyard_stores`` ini list (one URL a line;
  ``{tmp_path}`` is replaced by the test's temporary directory). Without any, on ``memory://``.
  A store named by a fixed URL is emptied before each test (pending jobs cancelled, finished
  ones purged): name stores meant for tests only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

MARKER = "jobyard_stores"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--jobyard-store URL`` and the ``jobyard_stores`` / ``jobyard_app`` ini settings."""
    group = parser.getgroup("jobyard")
    group.addoption(
        "--jobyard-store",
        action="append",
        default=[],
        metavar="URL",
        help="a store for tests marked jobyard_stores (repeatable)",
    )
    parser.addini("jobyard_stores", "stores for tests marked jobyard_stores", type="linelist")
    parser.addini("jobyard_app", "module:attribute of the App jobyard_app stands in for")


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``jobyard_stores`` marker."""
    config.addinivalue_line(
        "markers", f"{MARKER}: run the test on every store configured (--jobyard-store)"
    )


def _stores(config: pytest.Config) -> list[str]:
    # The command line replaces the ini list; neither: memory:// alone.
    given: list[str] = list(config.getoption("jobyard_store") or [])
    return given or list(config.getini("jobyard_stores")) or ["memory://"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A marked test that uses ``jobyard_app``: once per configured store."""
    if metafunc.definition.get_closest_marker(MARKER) is None:
        return
    if "jobyard_app" not in metafunc.fixturenames:
        return
    from ._secrets import mask_url

    urls = _stores(metafunc.config)
    metafunc.parametrize("jobyard_store", urls, ids=[mask_url(u) for u in urls])


@pytest.fixture
def jobyard_store() -> str:
    """The URL ``jobyard_app`` is on: ``memory://`` unless the test is marked
    ``jobyard_stores``."""
    return "memory://"


@pytest.fixture
def jobyard_app(
    request: pytest.FixtureRequest, jobyard_store: str, tmp_path: Path
) -> Iterator[Any]:
    """An App on ``jobyard_store`` with a FrozenClock (``jobyard_app.clock.advance(s)``)."""
    import jobyard
    from jobyard.testing import clear, store_swapped

    url = jobyard_store.replace("{tmp_path}", str(tmp_path))
    clock = jobyard.FrozenClock()
    ref = request.config.getini("jobyard_app")
    if ref:
        from jobyard.app import load_app

        with store_swapped(load_app(str(ref)), url, clock) as app:
            yield from _on_store(app, url, jobyard_store, clear)
        return
    app = jobyard.App(url, clock=clock)
    try:
        yield from _on_store(app, url, jobyard_store, clear)
    finally:
        app.close()


def _on_store(app: Any, url: str, given: str, clear: Callable[[Any], None]) -> Iterator[Any]:
    shared = not url.startswith("memory:") and url == given  # not a fresh store of this test
    app.migrate()
    if shared:  # before, not after: a run that died half-way leaves no job to the next
        clear(app)
    yield app


@pytest.fixture
def jobyard_drain(jobyard_app: Any) -> Callable[..., int]:
    """``jobyard_drain(queues=None, raise_errors=False)``: run due jobs of ``jobyard_app`` here,
    until none is due; how many attempts ran."""
    from jobyard.testing import drain

    def run(queues: Any = None, *, raise_errors: bool = False) -> int:
        return drain(jobyard_app, queues, raise_errors=raise_errors)

    return run


@pytest.fixture
def jobyard_enqueued(jobyard_app: Any) -> Callable[..., list[Any]]:
    """``jobyard_enqueued(name=None, queue=None)``: the pending jobs, oldest first."""
    from jobyard.testing import enqueued

    def pending(name: str | None = None, *, queue: str | None = None) -> list[Any]:
        return enqueued(jobyard_app, name, queue=queue)

    return pending
