"""Every value from a job reaches the page as text: a crawler over every page reachable from the
root, with hostile text in every field a job has, on every store; and no store credential on any
page."""

from __future__ import annotations

from collections import deque
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import pytest

import jobyard
import jobyard.testing

from ..conftest import make_store_url, running_worker, wait_until
from . import board_app
from .board_app import HOSTILE, open_gate

CRAWL_MAX = 400  # pages; the board's store has a few dozen
SCRIPT = "/static/app.js"


class Page(HTMLParser):
    """What a crawler checks in a page: links, scripts, inline handlers and styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.problems: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"inline handler {name}={value!r} on <{tag}>")
            if name == "style":
                self.problems.append(f"inline style on <{tag}>")
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith(
                "javascript:"
            ):
                self.problems.append(f"javascript: URL on <{tag}>")
        if tag == "script" and values.get("src") != SCRIPT:
            self.problems.append(f"a script other than {SCRIPT}: {attrs}")
        if tag in ("style", "iframe", "object", "embed", "img", "base"):
            self.problems.append(f"unexpected <{tag}> {attrs}")
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def hostile_store(app: jobyard.App, sink: Path) -> dict[str, str]:
    """Hostile text in every field a job can carry: arguments, keyword names, results, errors,
    idempotency keys, who cancelled, progress notes, a workflow, a schedule."""
    fn = app.registry["hostile"]
    done = fn.enqueue(HOSTILE, mode="return")
    fn.options(max_attempts=1).enqueue({HOSTILE: [HOSTILE]}, mode="fail")
    jobyard.testing.drain(app)
    later = fn.options(idempotency_key=HOSTILE, delay=3600).enqueue(HOSTILE)
    fn.options(key=HOSTILE, delay=3600).enqueue("keyed")  # a top key of the overview's limits
    held = fn.enqueue({"x": HOSTILE}, mode="hold")
    flow = jobyard.group(fn.s(HOSTILE), fn.s([HOSTILE])).then(fn.s()).enqueue()
    app.schedule(every=3600, job=fn, args=[HOSTILE], name="hostile-schedule")
    app.sync_schedules()
    return {"done": done.id, "later": later.id, "held": held.id, "join": flow.ids[-1]}


def crawl(client: Any, start: str = "/") -> dict[str, str]:
    """Every page of the dashboard reachable from ``start`` by links (and each live part):
    path -> HTML."""
    seen: dict[str, str] = {}
    todo = deque([start])
    while todo and len(seen) < CRAWL_MAX:
        path = todo.popleft()
        if path in seen:
            continue
        r = client.get(path)
        assert r.status_code in (200, 303, 404), (path, r.status_code)
        if r.status_code == 303:
            target = urlsplit(r.headers["location"])
            todo.append(target.path + (f"?{target.query}" if target.query else ""))
            seen[path] = ""
            continue
        seen[path] = r.text
        page = Page()
        page.feed(r.text)
        for href in page.links:
            url = urlsplit(urljoin("http://testserver" + path, href))
            if url.netloc != "testserver" or url.path.startswith("/static/"):
                continue
            todo.append(unquote(url.path) + (f"?{url.query}" if url.query else ""))
        if "data-live=" in r.text:
            todo.append(path + ("&" if "?" in path else "?") + "fragment=live")
    assert not todo or len(seen) >= CRAWL_MAX
    return seen


def check_page(path: str, html: str) -> None:
    page = Page()
    page.feed(html)
    page.close()
    assert page.problems == [], (path, page.problems)
    for raw in ("<script>alert", "<img src=x", "\u202e", "\x1b"):
        assert raw not in html, (path, raw)


def test_a_hostile_job_is_text_on_every_page(
    board: jobyard.App, client_for: Any, sink: Path
) -> None:
    ids = hostile_store(board, sink)
    with running_worker(board, queues=["hostile"], concurrency=2):
        wait_until(
            lambda: board.get(ids["held"]).progress_note is not None, what="the progress note"
        )
        board.cancel(ids["held"], by=HOSTILE)
        client = client_for(board)
        pages = crawl(client)
        pages.update(crawl(client, f"/jobs/{ids['held']}"))
        pages.update(crawl(client, "/jobs?arg=" + HOSTILE[:8]))
        pages.update(crawl(client, "/dead?contains=" + HOSTILE[:8]))
        open_gate(sink, "hostile")
    visited = {p for p, html in pages.items() if html}
    for expected in ("/", "/jobs", "/dead", "/workers", "/schedules", "/enqueue"):
        assert expected in visited, expected
    assert f"/jobs/{ids['done']}" in visited and f"/jobs/{ids['join']}" in visited
    for path, html in pages.items():
        check_page(path, html)
    shown = "".join(Page_text(pages[f"/jobs/{ids['held']}"]))
    assert "<script>alert(1)</script>" in shown  # the text itself, as typed
    assert "\\u202e" in shown and "\\x1b[31m" in shown  # written visibly
    assert f"by {HOSTILE[:20]}" in shown.replace("\\u202e", "\u202e")[:100_000] or (
        "by <script>alert(1)</script>" in shown
    )
    limits = pages["/"].split('aria-label="limits"', 1)[1].split("</section>", 1)[0]
    assert "<script>alert(1)</script>" in "".join(Page_text(limits))  # the key, as text
    schedule_page = "".join(Page_text(pages["/schedules"]))
    assert "hostile-schedule" in schedule_page


def Page_text(html: str) -> list[str]:
    page = Page()
    page.feed(html)
    return page.text


def test_autoescape_is_on_for_every_template() -> None:
    from jobyard.web._render import environment

    env = environment()
    html = env.get_template("error.html").render(
        root="",
        page="",
        nav=(),
        can_act=False,
        signed_in=False,
        read_only=False,
        csrf="",
        store={"url": "memory://"},
        now=0.0,
        refresh_ms=3000,
        flash=None,
        here="/",
        title=HOSTILE,
        message=HOSTILE,
    )
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html
    templates = Path(board_app.__file__).resolve().parents[2] / "src/jobyard/web/templates"
    for path in templates.glob("*.html"):
        assert "|safe" not in path.read_text(), path.name
        assert "autoescape false" not in path.read_text(), path.name


@pytest.mark.parametrize("secret_at", ["userinfo", "query"])
def test_no_store_credential_on_any_page(
    client_for: Any, sink: Path, tmp_path: Path, secret_at: str
) -> None:
    # PostgreSQL's trust authentication takes a password and ignores it: a store with a
    # credential in its URL that the suite can open.
    secret = "hunter2-s3cret-pw"
    url = make_store_url("postgres", tmp_path)
    url = (
        url.replace("postgres@", f"postgres:{secret}@")
        if secret_at == "userinfo"
        else url + f"&password={secret}"
    )
    app = board_app.build(url, sink)
    try:
        app.registry["flaky"].enqueue("x")
        jobyard.testing.drain(app)
        pages = crawl(client_for(app))
    finally:
        app.close()
    assert len([p for p in pages.values() if p]) >= 6
    for path, html in pages.items():
        assert secret not in html, path
    assert "***" in pages["/"]


def test_a_store_that_fails_is_a_page_without_its_password(client_for: Any, sink: Path) -> None:
    secret = "hunter2-s3cret-pw"
    app = board_app.build(f"postgresql://postgres:{secret}@127.0.0.1:1/test", sink)
    try:
        r = client_for(app).get("/")
    finally:
        app.close()
    assert r.status_code == 503
    assert secret not in r.text and "unreachable" in r.text
