"""What the pages show and what their actions do, on every store, through the test client; and
that each page makes a bounded number of store calls however many jobs the store holds."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jobyard
import jobyard.testing

from .conftest import csrf_of
from .support import Counting


def test_jobs_filter_by_queue_status_name_and_argument(board: jobyard.App, client_for: Any) -> None:
    flaky = board.registry["flaky"]
    ids = [flaky.enqueue(f"t{i}", customer_id=40 + i).id for i in range(4)]
    jobyard.testing.drain(board)
    pending = board.registry["tick"].enqueue("p").id
    client = client_for(board)
    failed = client.get("/jobs?status=failed").text
    assert all(f">{i}<" in failed for i in ids) and f">{pending}<" not in failed
    one = client.get("/jobs?arg=args.customer_id+%3D+42").text
    assert f">{ids[2]}<" in one and f">{ids[1]}<" not in one
    assert f">{ids[3]}<" in client.get("/jobs?arg=t3").text
    assert f">{pending}<" in client.get("/jobs?queue=pausable").text
    assert "No job matches" in client.get("/jobs?name=canary").text
    r = client.get(f"/jobs?find={ids[0]}")
    assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs/{ids[0]}")
    assert client.get("/jobs?status=bogus").status_code == 400


def test_jobs_page_by_cursor_newest_first(board: jobyard.App, client_for: Any) -> None:
    ids = [h.id for h in board.registry["tick"].enqueue_many([((f"{i}",), {}) for i in range(60)])]
    client = client_for(board)
    first = client.get("/jobs").text
    shown = re.findall(r'class="id"><a href="[^"]+">([^<]+)<', first)
    assert shown == list(reversed(ids))[:50]
    older = re.search(r'href="(\?cursor=[^"]+)" rel="next"', first)
    assert older is not None
    second = client.get("/jobs" + older.group(1).replace("&amp;", "&")).text
    rest = re.findall(r'class="id"><a href="[^"]+">([^<]+)<', second)
    assert rest == list(reversed(ids))[50:]
    assert 'rel="next"' not in second


def test_a_failed_job_shows_its_traceback_and_retry(board: jobyard.App, client_for: Any) -> None:
    job_id = board.registry["flaky"].enqueue("tb").id
    jobyard.testing.drain(board)
    client = client_for(board)
    page = client.get(f"/jobs/{job_id}").text
    assert "Traceback (most recent call last)" in page
    assert "RuntimeError: not fixed yet: tb" in page
    assert 'action="/actions/retry"' in page
    assert "1 of 1" in page


def test_a_failed_workflow_is_resumed_from_a_jobs_page_and_completes(
    board: jobyard.App, client_for: Any, sink: Path
) -> None:
    # given a chain whose first step failed (its join was cancelled with it)
    flow = jobyard.chain(board.registry["flaky"].s("wf"), board.registry["tick"].s()).enqueue()
    jobyard.testing.drain(board)
    assert board.workflow(flow.id).status == "failed"
    client = client_for(board)
    first, last = flow.ids[0], flow.ids[-1]
    page = client.get(f"/jobs/{first}").text
    assert 'action="/actions/resume-workflow"' in page
    # when its cause is fixed and the workflow is resumed from the page
    (sink / "fixed.wf").write_text("yes")
    r = client.post(
        "/actions/resume-workflow",
        data={"csrf": csrf_of(client), "workflow": flow.id, "next": f"/jobs/{first}"},
    )
    assert r.status_code == 303
    assert "job(s) resumed" in client.get(r.headers["location"]).text
    jobyard.testing.drain(board)
    # then every step completed, the last with the first's result, and no resume is offered
    assert board.workflow(flow.id).status == "completed"
    assert board.get(last).result == "fixed wf"
    assert 'action="/actions/resume-workflow"' not in client.get(f"/jobs/{first}").text


def test_dead_letter_groups_and_retries_a_group_after_saying_how_many(
    board: jobyard.App, client_for: Any, sink: Path
) -> None:
    flaky = board.registry["flaky"]
    for tag in ("a", "a", "a", "b"):
        flaky.enqueue(tag)
    jobyard.testing.drain(board)
    client = client_for(board)
    page = client.get("/dead").text
    assert re.search(r'class="num strong">3<.*?not fixed yet: a', page, re.S)
    assert re.search(r'class="num strong">1<.*?not fixed yet: b', page, re.S)
    confirm = client.get(
        "/dead/confirm?action=retry&queue=flaky&name=flaky&error=RuntimeError%3A+not+fixed+yet%3A+a"
    ).text
    assert 'data-count="3"' in confirm
    r = client.post(
        "/actions/dead",
        data={
            "csrf": csrf_of(client),
            "op": "retry",
            "queue": "flaky",
            "name": "flaky",
            "error": "RuntimeError: not fixed yet: a",
            "expected": "3",
        },
    )
    assert r.status_code == 303
    statuses = sorted(j.status.value for j in board.jobs(name="flaky"))
    assert statuses == ["failed", "pending", "pending", "pending"]
    assert "Retried 3 failed job(s)" in client.get("/dead").text  # the message after it


def test_purge_of_the_dead_letter_says_how_many_first(board: jobyard.App, client_for: Any) -> None:
    for tag in ("a", "b"):
        board.registry["flaky"].enqueue(tag)
    jobyard.testing.drain(board)
    client = client_for(board)
    assert 'data-count="2"' in client.get("/dead/confirm?action=purge&queue=flaky").text
    # a group (name and last error line) or a filter is purged alone, a batch of ids at a time
    line = "RuntimeError: not fixed yet: a"
    group = f"/dead/confirm?action=purge&name=flaky&error={line.replace(' ', '+')}"
    assert 'data-count="1"' in client.get(group).text
    assert 'data-count="1"' in client.get("/dead/confirm?action=purge&contains=yet:+b").text
    form = {"csrf": csrf_of(client), "op": "purge", "name": "flaky", "error": line}
    assert client.post("/actions/dead", data=form).status_code == 303
    assert [j.args for j in board.jobs(status="failed")] == [("b",)]
    r = client.post("/actions/dead", data={"csrf": csrf_of(client), "op": "purge", "queue": ""})
    assert r.status_code == 303
    assert board.jobs(status="failed") == []


def test_queue_pause_resume_and_max_concurrency_keep_the_rest(
    board: jobyard.App, client_for: Any
) -> None:
    board.configure_queue("pausable", max_pending=100, max_attempts=2)
    client = client_for(board)
    csrf = csrf_of(client)
    client.post("/actions/queue", data={"csrf": csrf, "queue": "pausable", "op": "pause"})
    client.post(
        "/actions/queue",
        data={"csrf": csrf, "queue": "pausable", "op": "concurrency", "value": "3"},
    )
    cfg = {q.name: q for q in board.queues()}["pausable"]
    assert (cfg.paused, cfg.max_concurrency, cfg.max_pending, cfg.max_attempts) == (True, 3, 100, 2)
    assert "paused" in client.get("/").text
    r = client.post(
        "/actions/queue",
        data={"csrf": csrf, "queue": "pausable", "op": "concurrency", "value": "lots"},
    )
    assert r.status_code == 400 and "whole number" in r.text
    client.post("/actions/queue", data={"csrf": csrf, "queue": "pausable", "op": "resume"})
    cfg = {q.name: q for q in board.queues()}["pausable"]
    assert (cfg.paused, cfg.max_concurrency, cfg.max_pending) == (False, 3, 100)


def test_enqueue_checks_the_signature_and_keeps_what_was_typed(
    board: jobyard.App, client_for: Any
) -> None:
    client = client_for(board)
    csrf = csrf_of(client)
    r = client.post(
        "/actions/enqueue",
        data={"csrf": csrf, "job": "flaky", "args": '["x"]', "kwargs": '{"nope": 1}'},
    )
    assert r.status_code == 400 and "do not fit" in r.text and "nope" in r.text
    assert board.jobs(name="flaky") == []
    r = client.post("/actions/enqueue", data={"csrf": csrf, "job": "flaky", "args": "[x"})
    assert r.status_code == 400 and "not JSON" in r.text
    r = client.post(
        "/actions/enqueue",
        data={"csrf": csrf, "job": "flaky", "args": '["x"]', "kwargs": '{"customer_id": 7}'},
    )
    assert r.status_code == 303
    (job,) = board.jobs(name="flaky")
    assert job.args == ("x",) and job.kwargs == {"customer_id": 7}
    assert r.headers["location"].endswith(f"/jobs/{job.id}")


def test_schedules_pause_resume_and_run_now(board: jobyard.App, client_for: Any) -> None:
    board.schedule(every=3600, job=board.registry["tick"], args=["s"], name="hourly")
    board.sync_schedules()
    client = client_for(board)
    csrf = csrf_of(client)
    assert "hourly" in client.get("/schedules").text
    client.post("/actions/schedule", data={"csrf": csrf, "name": "hourly", "op": "pause"})
    assert board.stored_schedules()[0].paused
    r = client.post("/actions/schedule", data={"csrf": csrf, "name": "hourly", "op": "run"})
    assert r.status_code == 303
    (job,) = board.jobs(name="tick")
    assert job.args == ("s",) and job.status == "pending"
    client.post("/actions/schedule", data={"csrf": csrf, "name": "hourly", "op": "resume"})
    assert not board.stored_schedules()[0].paused


def test_each_page_makes_the_same_few_store_calls_however_many_jobs(
    board: jobyard.App, client_for: Any
) -> None:
    def calls_per_page(extra_jobs: int) -> dict[str, int]:
        flaky = board.registry["flaky"]
        flaky.enqueue_many([((f"n{i}",), {"customer_id": i}) for i in range(extra_jobs)])
        jobyard.testing.drain(board)
        wf = jobyard.group(board.registry["tick"].s("g")).then(board.registry["join"].s())
        flow = wf.enqueue()
        job_id = board.jobs(name="flaky", limit=1)[0].id
        counting = Counting(board.backend)
        board._backend = counting  # type: ignore[assignment]
        client = client_for(board)
        client.app.state.jobyard_site.cache.ttl = 0.0  # count every read, none shared
        out = {}
        try:
            for path in (
                "/", "/jobs", "/jobs?status=failed", f"/jobs/{job_id}", f"/jobs/{flow.ids[-1]}",
                "/dead", "/workers", "/schedules", "/enqueue", "/?fragment=live",
            ):  # fmt: skip
                counting.calls.clear()
                assert client.get(path).status_code == 200, path
                out[path.replace(job_id, "J").replace(flow.ids[-1], "W")] = len(counting.calls)
        finally:
            board._backend = counting._backend
        return out

    few = calls_per_page(3)
    many = calls_per_page(60)
    assert few == many
    assert max(many.values()) <= 6, many
    # The overview's budget, deliberately six: stats, queue settings, workers, the clock, the
    # throughput history, and the limits' state (limits_stats, one call for every scope).
    assert many["/"] == many["/?fragment=live"] == 6, many


def test_overview_charts_the_stored_history_and_the_oldest_pending_wait(
    board: jobyard.App, client_for: Any, store: tuple[str, str]
) -> None:
    from jobyard.web import _data

    # given jobs that completed and failed, and a pending one
    board.registry["tick"].enqueue_many([((f"{i}",), {}) for i in range(3)])
    board.registry["flaky"].enqueue("never")
    jobyard.testing.drain(board)
    board.registry["canary"].enqueue("waits")
    # when a new App on the same store (a restarted dashboard) reads the overview
    again = board if store[0] == "memory" else jobyard.App(store[1])
    try:
        data = _data.overview(again, None, 3600.0, 60)
        page = client_for(again).get("/").text
    finally:
        if again is not board:
            again.close()
    # then the chart holds the stored minutes: 60 buckets, the jobs in the latest ones
    assert data.has_history and len(data.history) == 60
    assert sum(b.completed for b in data.history) == 3
    assert sum(b.failed for b in data.history) == 1
    rows = {q.name: q for q in data.queues}
    assert sum(b.completed for b in rows["pausable"].history) == 3
    assert rows["flaky"].failed_last_minute == 1 and rows["pausable"].failed_last_minute == 0
    assert rows["pausable"].completed_last_minute == 3  # from the history, not a count of jobs
    # and the queue with a due pending job tells how long it has waited; the others none
    assert rows["canary"].oldest_pending_age is not None and rows["canary"].oldest_pending_age < 60
    assert rows["pausable"].oldest_pending_age is None
    assert "keeps no throughput history" not in page and '<svg class="chart"' in page
    # and the day's chart has 96 buckets of 15 minutes
    day = _data.overview(board, "pausable", 86400.0, 900)
    assert len(day.history) == 96 and sum(b.completed for b in day.history) == 3


def test_a_live_refresh_in_flight_leaves_an_actions_message_to_the_page(
    board: jobyard.App, client_for: Any
) -> None:
    # given an action done: its message waits in a cookie for the page it redirects to
    client = client_for(board)
    csrf = csrf_of(client)
    done = client.post("/actions/queue", data={"csrf": csrf, "queue": "pausable", "op": "pause"})
    assert done.status_code == 303
    # when the old page's live refresh reaches the dashboard before the redirected page does
    assert client.get("/?fragment=live").status_code == 200
    # then the page still shows the message (the refresh, which shows none, did not take it)
    assert "Queue pausable paused" in client.get(done.headers["location"]).text


class _Rows(HTMLParser):
    """The rows of a table's body: each cell's text, its whitespace folded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._body = True
        elif self._body and tag == "tr":
            self.rows.append([])
        elif self._body and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tbody":
            self._body = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table_rows(html: str) -> list[list[str]]:
    """The text of each cell of each body row of the tables in ``html``."""
    parser = _Rows()
    parser.feed(html)
    return parser.rows


def test_overview_shows_what_a_job_names_limits_hold_back(
    board: jobyard.App, client_for: Any
) -> None:
    from jobyard.backends.base import JobsClaimParams, LimitsSyncParams

    # given a job name allowed one start an hour and another allowed one running job per key,
    # in a queue of no limit of its own, their limits stored as a worker stores them
    @board.job(queue="notify", rate_limit="1/h")
    def digest(n: int) -> int:
        return n

    @board.job(queue="notify", key_concurrency=1)
    def push(n: int) -> int:
        return n

    board.backend.limits_sync(LimitsSyncParams(board.job_limits()))
    digest.enqueue_many([((i,), {}) for i in range(3)])
    push.options(key="customer:1").enqueue_many([((i,), {}) for i in range(3)])
    push.options(key="customer:2").enqueue(9)
    # when a claim starts what the limits let start: one digest, one push per key
    claimed = board.backend.jobs_claim(JobsClaimParams("w1", ("notify",), 10))
    assert len(claimed) == 3
    client = client_for(board)
    client.app.state.jobyard_site.cache.ttl = 0.0
    html = client.get("/").text
    # then each name's row says how full its limits are, its due jobs, and what they hold back
    section = html.split('aria-label="limits"', 1)[1].split("</section>", 1)[0]
    rows = {(r[0], r[1]): r for r in table_rows(section)}
    digest_row, push_row = rows[("notify", "digest")], rows[("notify", "push")]
    assert digest_row[2:5] == ["rate=1/h", "1", "100%"]
    assert digest_row[6:8] == ["2", "rate 2"]
    assert push_row[2:4] == ["key_concurrency=1", "2"]
    assert push_row[5:8] == ["2 of 2", "2", "key_concurrency 2"]
    # and the queue's own row (keys, no limit) holds nothing back
    assert rows[("notify", "(queue)")][6:8] == ["4", "—"]


def test_overview_shows_each_limit_how_full_and_its_top_keys_as_text(
    board: jobyard.App, client_for: Any, sink: Path
) -> None:
    from jobyard._printable import printable
    from jobyard.web import _data

    from .board_app import HOSTILE
    from .support import limited_queue

    # given a store with no limit: no limits table
    client = client_for(board)
    client.app.state.jobyard_site.cache.ttl = 0.0
    assert _data.overview(board, None, 3600.0, 60).limits == ()
    assert 'aria-label="limits"' not in client.get("/").text
    # when a queue is held full by its limits, its pending jobs keyed by a hostile key
    with limited_queue(board, sink):
        html = client.get("/").text
    # then the overview has a limits table with the queue's row: rules, running of the cap,
    # the rate used, the keys at their limit, the due jobs and what each limit holds back of
    # them, the top keys with their pending jobs
    section = html.split('aria-label="limits"', 1)[1].split("</section>", 1)[0]
    rows = table_rows(section)
    (row,) = [r for r in rows if r[0] == "hostile"]
    assert row[1] == "(queue)"
    assert row[2] == "max_concurrency=2 rate=6000/m key_concurrency=1"
    assert row[3] == "2 / 2"
    assert row[4].endswith("%")
    assert row[5] == "2 of 2"
    assert row[6] == "4"
    assert row[7] == "max_concurrency 4 key_concurrency 4"
    assert row[8] == f"{printable(HOSTILE)} 3 customer:7 1"
    # and the hostile key reaches the page as text, never as markup
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section
