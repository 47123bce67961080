"""Chains and groups with real workers, on every store: results flow from step to step, a failed
step stops its chain until it is re-driven, a join runs once after every member, in member order,
whatever the race, and a workflow can be read back as a tree and cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

import jobyard
from jobyard import chain, group

from ..conftest import running_worker, wait_until


def settled(app: jobyard.App, workflow_id: str, status: str) -> jobyard.Workflow | None:
    flow = app.workflow(workflow_id)
    return flow if flow.status == status else None


def test_a_chain_passes_each_result_to_the_next_step(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def add(a: int, b: int) -> int:
        return a + b

    @app.job(queue="other")
    def times(x: int, factor: int) -> int:
        return x * factor

    @app.job
    def show(x: int, prefix: str = "") -> str:
        return f"{prefix}{x}"

    # given a chain across two queues, with arguments of its own at each step
    handle = chain(add.s(1, 2), times.s(10), show.s(prefix="=")).enqueue()
    a, b, c = handle.ids
    # then before any worker runs, the later steps are waiting, linked to their parents
    assert [app.get(i).status for i in handle.ids] == ["pending", "waiting", "waiting"]
    with running_worker(app, queues=["default", "other"]):
        # when it runs, each step gets the previous result first
        assert handle.result(timeout=15) == "=30"
    jb, jc = app.get(b), app.get(c)
    assert (jb.args, jb.parent_id, jb.depends_on, jb.children) == ((10,), a, (a,), (c,))
    assert (jc.parent_id, jc.result) == (b, "=30")
    assert app.get(a).children == (b,) and jb.workflow_id == handle.id


def test_a_released_step_wakes_an_idle_worker(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def first() -> float:
        return time.time()

    @app.job
    def second(started: float) -> float:
        return time.time() - started

    # given a worker that would poll only every 5 s: it must be woken by the release
    with running_worker(app, poll_interval=5.0):
        time.sleep(0.3)  # let the worker go idle on its push signal
        handle = chain(first.s(), second.s()).enqueue()
        assert handle.result(timeout=10) < 2.0


def test_a_failed_step_stops_the_chain_and_retry_resumes_it(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    broken = threading.Event()
    broken.set()

    @app.job
    def first() -> int:
        return 1

    @app.job(max_attempts=1)
    def flaky(x: int) -> int:
        if broken.is_set():
            raise RuntimeError("the mail API is down")
        return x + 1

    @app.job
    def last(x: int) -> int:
        return x * 100

    handle = chain(first.s(), flaky.s(), last.s()).enqueue()
    a, b, c = handle.ids
    with running_worker(app):
        flow = wait_until(lambda: settled(app, handle.id, "failed"), what="the chain to stop")
        # then the failed step is named, and the step after it never started
        assert [j.id for j in flow.failed] == [b]
        assert app.get(c).status == "waiting"
        with pytest.raises(jobyard.JobFailed):
            handle.result(timeout=5)
        # when the failed step is re-driven, the chain resumes from there
        broken.clear()
        app.retry(b)
        assert handle.result(timeout=15) == 200
    assert app.get(a).attempts == 1  # the first step did not run again


def test_a_join_gets_every_result_in_member_order(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def slow_square(x: int) -> int:
        time.sleep(0.01 * (5 - x))  # the first members finish last
        return x * x

    @app.job
    def total(values: list[int]) -> list[int]:
        return values

    handle = group(*[slow_square.s(i) for i in range(5)]).then(total.s()).enqueue()
    with running_worker(app, concurrency=5):
        assert handle.result(timeout=15) == [0, 1, 4, 9, 16]
    join = app.get(handle.ids[-1])
    assert join.depends_on == tuple(handle.ids[:5]) and join.parent_id == handle.ids[0]


def test_a_group_without_a_join_returns_its_results(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def echo(x: str) -> str:
        return x

    handle = group(echo.s("a"), echo.s("b")).enqueue()
    with running_worker(app):
        assert handle.result(timeout=15) == ["a", "b"]


def test_a_failed_member_stops_the_join_and_is_named(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    ran: list[object] = []

    @app.job(max_attempts=1)
    def member(x: int) -> int:
        if x == 2:
            raise ValueError("bad input 2")
        return x

    @app.job
    def join(values: list[int]) -> None:
        ran.append(values)

    handle = group(*[member.s(i) for i in range(4)]).then(join.s()).enqueue()
    with running_worker(app):
        flow = wait_until(lambda: settled(app, handle.id, "failed"), what="the group to fail")
        assert [j.args for j in flow.failed] == [(2,)]
        assert app.get(handle.ids[-1]).status == "waiting"
    assert ran == []


def test_workflows_nest(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def start() -> int:
        return 2

    @app.job
    def inc(x: int) -> int:
        return x + 1

    @app.job
    def double(x: int) -> int:
        return x * 2

    @app.job
    def collect(values: list[object]) -> list[object]:
        return values

    # start -> (inc | double -> inc | (inc, double)) -> collect
    flow = chain(
        start.s(),
        group(inc.s(), chain(double.s(), inc.s()), group(inc.s(), double.s())),
        collect.s(),
    )
    handle = flow.enqueue()
    with running_worker(app, concurrency=4):
        assert handle.result(timeout=15) == [3, 5, [3, 4]]
    lines = handle.get().render()
    assert lines[0] == "chain"
    assert any("group" in line for line in lines)
    assert sum("completed" in line for line in lines) == len(handle.ids) == 7


def test_a_workflow_reads_back_as_a_tree(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def fetch(url: str) -> str:
        return url

    @app.job
    def publish(values: list[str]) -> int:
        return len(values)

    handle = group(fetch.s("a"), fetch.s("b")).then(publish.s()).enqueue()
    flow = app.workflow(app.get(handle.ids[0]).workflow_id or "")
    assert flow.status == "running"
    assert [n.kind for n in flow.tree.children] == ["group", "job"]
    assert [line.split(" #")[0] for line in flow.render()] == [
        "chain",
        "├─ group",
        "│  ├─ fetch",
        "│  └─ fetch",
        "└─ publish",
    ]
    assert flow.render()[-1].endswith("waiting")
    with pytest.raises(jobyard.JobNotFound):
        app.workflow("no-such-workflow")


def test_cancelling_a_workflow_stops_what_runs_and_what_waits(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    started = threading.Event()

    @app.job(lease=1.5)
    async def crawl() -> str:
        started.set()
        await asyncio.sleep(60)
        return "done"

    @app.job
    def after(x: str) -> str:
        return x

    handle = chain(crawl.s(), after.s(), after.s()).enqueue()
    with running_worker(app):
        assert started.wait(15)
        # when the chain is cancelled while its first step runs
        flow = handle.cancel(by="ops")
        # then the waiting steps are cancelled at once and the running one on request
        assert [j.status for j in flow.jobs] == ["running", "cancelled", "cancelled"]
        assert settled(app, handle.id, "cancelled")
        wait_until(lambda: app.get(handle.ids[0]).status == "cancelled", what="crawl cancelled")
    assert {app.get(i).cancelled_by for i in handle.ids} == {"ops"}
    # and a cancelled step whose input did not complete cannot be re-driven on its own: the
    # refusal says how to resume (the whole workflow)
    with pytest.raises(jobyard.InvalidTransition, match="takes the result of job") as refused:
        app.retry(handle.ids[1])
    assert str(refused.value).endswith("(app.resume_workflow, jobyard retry --workflow)")


def test_cancelling_a_running_step_stops_its_chain(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    started = threading.Event()

    @app.job(lease=1.5)  # renewed every half second: the request reaches the handler soon
    async def crawl() -> str:
        started.set()
        await asyncio.sleep(60)
        return "done"

    @app.job(queue="publish")  # another queue: on Redis Cluster another slot, a release owed
    def publish(x: str) -> str:
        return x

    handle = chain(crawl.s(), publish.s(), publish.s()).enqueue()
    first = handle.ids[0]
    with running_worker(app, queues=["default", "publish"]):
        assert started.wait(15)
        # when the running step alone is cancelled (not its workflow) and its handler stops
        assert app.cancel(first, by="ops").status == "running"
        wait_until(lambda: app.get(first).status == "cancelled", what="the step cancelled")
    # then, once the worker has stopped (every outcome it held is written, releases included),
    # the steps after it still wait: a cancelled input releases nothing
    assert [app.get(i).status for i in handle.ids] == ["cancelled", "waiting", "waiting"]
    assert handle.get().status == "cancelled"
    with pytest.raises(jobyard.JobCancelled):
        handle.result(timeout=5)


def test_a_join_runs_once_under_a_race_of_workers(make_app: Callable[..., jobyard.App]) -> None:
    # given a group of 200 members and four workers of their own draining it at once
    apps = [make_app() for _ in range(4)]
    joins: Counter[str] = Counter()
    lock = threading.Lock()
    for app in apps:

        @app.job(name="member")
        def member(x: int) -> int:
            return x

        @app.job(name="join")
        def join(values: list[int]) -> int:
            with lock:
                joins[repr(values)] += 1
            return sum(values)

    handle = group(*[apps[0].by_name("member").s(i) for i in range(200)]).then(
        apps[0].by_name("join").s()
    )
    with contextlib.ExitStack() as stack:
        for app in apps:
            stack.enter_context(running_worker(app, concurrency=8))
        assert handle.enqueue().result(timeout=60) == sum(range(200))
    # then the join ran exactly once, with every result in order
    assert list(joins.values()) == [1]
    assert joins[repr(list(range(200)))] == 1


def test_testing_drain_runs_a_whole_chain(make_app: Callable[..., jobyard.App]) -> None:
    from jobyard.testing import drain

    app = make_app()

    @app.job
    def one() -> int:
        return 1

    @app.job
    def plus(x: int) -> int:
        return x + 1

    handle = chain(one.s(), plus.s(), plus.s()).enqueue()
    drain(app)
    assert handle.result(timeout=1) == 3


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda f: chain(), "at least one step"),
        (lambda f: group(f.s(), "x"), "takes signatures"),
        (lambda f: chain(f.options(idempotency_key="k").s()), "idempotency_key"),
        (lambda f: chain(f.s(), f.s(1, 2, 3)), "argument"),
    ],
)
def test_bad_workflows_are_refused_when_built(
    make_app: Callable[..., jobyard.App], build: Callable[..., object], message: str
) -> None:
    app = make_app()

    @app.job
    def f(x: int = 0) -> int:
        return x

    with pytest.raises((jobyard.ConfigurationError, TypeError), match=message):
        flow = build(f)
        flow.enqueue()  # type: ignore[attr-defined]
    assert app.jobs() == []


def test_a_group_of_ten_thousand_members_joins_once(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def noop() -> None:
        return None

    @app.job
    def count(values: list[None]) -> int:
        return len(values)

    handle = group(*[noop.s() for _ in range(10_000)]).then(count.s()).enqueue()
    with running_worker(app, concurrency=16):
        assert handle.result(timeout=120) == 10_000
    joins = app.jobs(name="count")
    assert [(j.status, j.workflow_id) for j in joins] == [("completed", handle.id)]


def test_a_job_without_its_place_is_still_in_the_tree(make_app: Callable[..., jobyard.App]) -> None:
    from jobyard.workflow import build_workflow

    app = make_app()

    @app.job
    def one(x: int = 0) -> int:
        return x

    handle = chain(one.s(), one.s(), one.s()).enqueue()
    jobs = app.workflow(handle.id).jobs
    # given places as a store might hold them: one lost (a corrupt payload), two the same
    places = {jobs[0].id: "c0", jobs[1].id: "c0"}
    flow = build_workflow(handle.id, jobs, places)
    # then every job is shown, the unplaced ones after the rest
    shown = [line.split("#")[1].split()[0] for line in flow.render()[1:]]
    assert shown == [jobs[0].id, jobs[1].id, jobs[2].id]


def test_result_of_a_purged_workflow_says_so(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def one() -> int:
        return 1

    handle = chain(one.s()).enqueue()
    with running_worker(app):
        assert handle.result(timeout=10) == 1
    app.purge()
    with pytest.raises(jobyard.JobNotFound, match="purged"):
        handle.result(timeout=5)
