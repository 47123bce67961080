"""The dashboard driven as an operator drives it, in headless Chromium, on every store: a
failed job found, read and retried; a queue paused; a running job cancelled; a group's tree
filling in; hostile text that runs nothing. memory:// runs its worker in this process, the
shared stores real worker processes. One browser for the session, one dashboard and worker per
store (module scope), a fresh browser context per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobyard

from ..conftest import SHARED, STORES, WorkerProcess, make_store_url, wait_until
from . import board_app
from .board_app import HOSTILE, fixed, open_gate
from .support import serving

TIMEOUT_MS = 15_000

# One worker of a parallel run (`make test`) takes the whole file: one Chromium, and one yard per
# store (module scope), instead of one of each on every worker that gets some of its tests.
pytestmark = pytest.mark.xdist_group("browser")


@dataclass
class Yard:
    """A store, the board app on it, its dashboard and its worker."""

    kind: str
    app: jobyard.App
    url: str  # the dashboard's
    sink: Path


@pytest.fixture(scope="module", params=STORES)
def yard(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Yard]:
    kind: str = request.param
    base = tmp_path_factory.mktemp(f"yard-{kind}")
    sink = base / "sink"
    sink.mkdir()
    url = make_store_url(kind, base)
    app = board_app.build(url, sink)
    worker: Any = None
    if kind in SHARED:
        worker = WorkerProcess(
            url,
            "tests.web.board_app:app",
            ["-c", "4", "--poll-interval", "0.2", "--reap-interval", "0.2"],
            {"JOBYARD_SINK": str(sink)},
        )
    else:
        worker = app.worker(concurrency=4, poll_interval=0.2, reap_interval=0.2)
        worker.start()
    try:
        wait_until(lambda: app.workers(), 30, what="the worker's first beat")
        with serving(jobyard.web.create_app(app, refresh=0.5)) as site:
            yield Yard(kind, app, site, sink)
    finally:
        if kind in SHARED:
            worker.kill()
        else:
            worker.stop(grace=2)
        app.close()


@pytest.fixture
def page(browser: Any, yard: Yard) -> Iterator[Any]:
    """A fresh browser context (cookies of its own) on the yard's dashboard; every dialog
    (a confirmation) accepted and recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    tab.dialogs = []  # type: ignore[attr-defined]

    def accept(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.accept()

    tab.on("dialog", accept)
    yield tab
    context.close()


def tag() -> str:
    return uuid.uuid4().hex[:8]


def test_a_failed_job_is_found_read_and_retried(page: Any, yard: Yard) -> None:
    from playwright.sync_api import expect

    t = tag()
    ids = [yard.app.registry["flaky"].enqueue(t, customer_id=i).id for i in range(3)]
    wait_until(lambda: all(yard.app.get(i).status == "failed" for i in ids), what="failures")
    page.goto(yard.url + "/jobs")
    page.select_option("select[name=status]", "failed")
    page.fill("input[name=arg]", "args.customer_id = 1")
    page.click("button:has-text('Filter')")
    link = page.locator(f"table.jobs a:text-is('{ids[1]}')")
    expect(link).to_be_visible()
    expect(page.locator(f"table.jobs a:text-is('{ids[0]}')")).to_have_count(0)
    link.click()
    expect(page.locator("pre.trace")).to_contain_text("Traceback (most recent call last)")
    expect(page.locator("pre.trace")).to_contain_text(f"RuntimeError: not fixed yet: {t}")
    fixed(yard.sink, t)
    page.click("button:has-text('Retry')")
    expect(page.locator(".flash.ok")).to_contain_text("pending again")
    expect(page.locator(".job-head .status").first).to_have_text("completed")
    expect(page.locator("pre.json").last).to_contain_text(f"fixed {t}")


def test_a_paused_queue_is_not_taken_until_resumed(page: Any, yard: Yard) -> None:
    from playwright.sync_api import expect

    page.goto(yard.url + "/")
    row = page.locator("table.queues tr", has=page.locator("th a:text-is('pausable')"))
    row.locator("button:has-text('Pause')").click()
    expect(page.locator(".flash.ok")).to_contain_text("Queue pausable paused")
    expect(row.locator(".status")).to_have_text("paused")
    held = yard.app.registry["tick"].enqueue(tag()).id
    canary = yard.app.registry["canary"].enqueue(tag()).id
    # The worker took the job enqueued after it, in another queue: it is claiming, and not
    # this queue's.
    wait_until(lambda: yard.app.get(canary).status == "completed", what="the canary")
    assert yard.app.get(held).status == "pending"
    row.locator("button:has-text('Resume')").click()
    expect(page.locator(".flash.ok")).to_contain_text("resumed")
    wait_until(lambda: yard.app.get(held).status == "completed", what="the resumed job")


def test_a_running_job_cancelled_ends_cancelled(page: Any, yard: Yard) -> None:
    from playwright.sync_api import expect

    job_id = yard.app.registry["slow"].enqueue(tag()).id
    wait_until(lambda: yard.app.get(job_id).progress is not None, what="the job running")
    page.goto(yard.url + f"/jobs/{job_id}")
    expect(page.locator(".job-head .status").first).to_have_text("running")
    expect(page.locator("progress").first).to_be_visible()
    page.click(".job-head button:has-text('Cancel')")
    # the page after the action (its dialog is recorded as Playwright delivers it)
    expect(page.locator(".flash.ok")).to_contain_text("cancellation requested")
    assert page.dialogs and job_id in page.dialogs[0]
    expect(page.locator(".job-head .status").first).to_have_text("cancelled")
    assert yard.app.get(job_id).status == "cancelled"
    assert (yard.app.get(job_id).cancelled_by or "").startswith(
        "dashboard: no token from 127.0.0.1"
    )


def test_a_group_tree_fills_in(page: Any, yard: Yard) -> None:
    from playwright.sync_api import expect

    t = tag()
    part, join = yard.app.registry["part"], yard.app.registry["join"]
    handle = jobyard.group(*[part.s(t, n) for n in range(3)]).then(join.s()).enqueue()
    page.goto(yard.url + f"/jobs/{handle.ids[-1]}")
    leaves = page.locator(".tree .leaf")
    expect(leaves).to_have_count(4)
    expect(page.locator(".tree .node.group")).to_have_count(1)
    expect(leaves.last.locator(".status")).to_have_text("waiting")
    open_gate(yard.sink, t)
    for i in range(4):
        expect(leaves.nth(i).locator(".status")).to_have_text("completed")
    expect(page.locator(".job-head .status").first).to_have_text("completed")
    expect(page.locator("pre.json").last).to_have_text("6")
    leaves.first.locator("a").click()
    expect(page).to_have_url(yard.url + f"/jobs/{handle.ids[0]}")


def test_hostile_text_is_shown_and_runs_nothing(page: Any, yard: Yard) -> None:
    from playwright.sync_api import expect

    job_id = yard.app.registry["hostile"].enqueue(HOSTILE, mode="fail").id
    wait_until(lambda: yard.app.get(job_id).status == "failed", what="the hostile job")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(yard.url + f"/jobs/{job_id}")
    expect(page.locator("pre.json").first).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("pre.trace")).to_contain_text("<img src=x onerror=alert(2)>")
    page.goto(yard.url + "/dead")
    page.goto(yard.url + "/jobs?queue=hostile")
    assert page.dialogs == []
    assert page.locator("img").count() == 0
    assert not [e for e in errors if "Content Security Policy" in e], errors
