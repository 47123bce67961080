"""Fixtures of the dashboard's tests: the board app on each store, a client, a browser."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from jobyard.web import create_app

from . import board_app

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def board(store: tuple[str, str], sink: Path) -> Iterator[jobyard.App]:
    """The board app on this test's store (every store)."""
    app = board_app.build(store[1], sink)
    yield app
    app.close()


@pytest.fixture
def client_for() -> Iterator[Callable[..., Any]]:
    """``client_for(app, **create_app options)``: a Starlette test client of the dashboard."""
    from starlette.testclient import TestClient

    clients: list[Any] = []

    def make(app: jobyard.App, **options: Any) -> Any:
        client = TestClient(create_app(app, **options), follow_redirects=False)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


def csrf_of(client: Any, path: str = "/") -> str:
    """The CSRF value a page's forms carry (its cookie, set on the first visit)."""
    client.get(path)
    value = client.cookies.get("jobyard_csrf")
    assert value, "the dashboard set no CSRF cookie"
    return str(value)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Debian chromium for the whole session, driven by Playwright (which never
    downloads a browser here). Missing: skipped, except in CI, where it is a failure."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright is missing (the dev extra installs it)")
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/services installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (make services does)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()
