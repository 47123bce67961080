"""The public API and an in-process worker, on every backend."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import jobyard
from jobyard import testing
from jobyard.backends.base import JobsClaimParams, JobsInsertParams, NewJob
from tests.conftest import running_worker, wait_until

FAST = jobyard.Backoff("fixed", base=0.0, jitter=False)


def test_enqueue_run_and_result(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job(queue="emails")
    def send_email(to: str, subject: str) -> dict[str, str]:
        return {"to": to, "subject": subject}

    @app.job
    async def resize(image: str) -> str:
        await asyncio.sleep(0)
        return image.upper()

    h = send_email.enqueue("a@example.com", subject="hi")
    r = resize.enqueue("cat.png")
    assert app.get(h.id).status == jobyard.Status.PENDING
    with running_worker(app, queues=["emails", "default"], concurrency=2):
        assert h.result(timeout=10) == {"to": "a@example.com", "subject": "hi"}
        assert r.result(timeout=10) == "CAT.PNG"
    job = app.get(h.id)
    assert (job.status, job.attempts, job.queue, job.name) == (
        "completed",
        1,
        "emails",
        "send_email",
    )
    assert job.args == ("a@example.com",) and job.kwargs == {"subject": "hi"}
    assert job.started_at is not None and job.finished_at is not None and job.worker_id


def test_enqueue_many_and_by_name(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    seen: list[int] = []

    @app.job
    def add(x: int, y: int = 0) -> int:
        seen.append(x)
        return x + y

    handles = add.enqueue_many([((i,), {"y": 1}) for i in range(20)])
    by_name = app.enqueue("add", 100, y=1)
    assert len({h.id for h in handles}) == 20
    assert testing.drain(app) == 21
    assert [h.result(timeout=1) for h in handles] == [i + 1 for i in range(20)]
    assert by_name.result(timeout=1) == 101
    assert seen[:20] == list(range(20))  # enqueue order


def test_whole_seconds_as_ints_run(make_app: Callable[..., jobyard.App]) -> None:
    # given a timeout and a lease written as ints, as users write them (timeout=30)
    app = make_app()

    @app.job(timeout=30, lease=20)
    def quick() -> int:
        return 1

    later = quick.options(timeout=10, lease=15).enqueue()
    h = quick.enqueue()
    # when they run, then they complete: the record is not taken for a corrupt one
    testing.drain(app)
    assert h.result(timeout=1) == 1 and later.result(timeout=1) == 1


def test_enqueue_async(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def noop() -> None:
        return None

    async def produce() -> jobyard.JobHandle:
        return await noop.enqueue_async()

    h = asyncio.run(produce())
    assert app.get(h.id).status == "pending"


def test_non_json_arguments_are_refused_naming_the_argument(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def f(*args: object, **kwargs: object) -> None:
        return None

    with pytest.raises(TypeError, match="argument 1"):
        f.enqueue(1, object())
    with pytest.raises(TypeError, match="argument 'when'"):
        f.enqueue(when=time)
    with pytest.raises(TypeError, match="argument 0"):
        f.enqueue(float("nan"))
    assert app.jobs() == []


def test_failures_retry_with_backoff_then_fail(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)
    calls: list[int] = []

    @app.job(max_attempts=3, backoff=jobyard.Backoff("exponential", base=10, jitter=False))
    def flaky() -> None:
        calls.append(1)
        raise ValueError("payment service down")

    h = flaky.enqueue()
    assert testing.drain(app) == 1
    job = app.get(h.id)
    assert (job.status, job.attempts) == ("pending", 1)
    assert (job.run_at.timestamp() - clock.now()) == pytest.approx(10, abs=0.01)
    assert "ValueError: payment service down" in (job.error or "")
    clock.advance(9)
    assert testing.drain(app) == 0
    clock.advance(1.5)
    assert testing.drain(app) == 1
    assert (app.get(h.id).run_at.timestamp() - clock.now()) == pytest.approx(20, abs=0.01)
    clock.advance(21)
    assert testing.drain(app) == 1
    job = app.get(h.id)
    assert (job.status, job.attempts, len(calls)) == ("failed", 3, 3)
    assert "Traceback" in (job.error or "") and "payment service down" in (job.error or "")
    with pytest.raises(jobyard.JobFailed, match="payment service down"):
        h.result(timeout=0)


def test_drain_can_raise_a_handlers_exception_in_the_test(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    # given a sync and an async handler that raise, one that asks for a retry, one that works
    app = make_app(clock)

    class PaymentDown(Exception):
        pass

    @app.job(queue="pay", max_attempts=2)
    def charge(order: int) -> None:
        raise PaymentDown(f"order {order}")

    @app.job(queue="pay", max_attempts=2)
    async def refund(order: int) -> None:
        raise KeyError(order)

    @app.job(queue="later")
    def later() -> None:
        raise jobyard.Retry(delay=5)

    @app.job(queue="fine")
    def fine() -> int:
        return 1

    # by default, drain records the failure and carries on, as today
    h = charge.enqueue(1)
    assert testing.drain(app, ["pay"]) == 1
    assert app.get(h.id).status == "pending"

    # with raise_errors, the handler's own exception reaches the test, after its outcome
    # was recorded as a worker would have recorded it
    clock.advance(3600)
    with pytest.raises(PaymentDown, match="order 1") as caught:
        testing.drain(app, ["pay"], raise_errors=True)
    assert "raise PaymentDown" in "".join(__import__("traceback").format_tb(caught.tb))
    job = app.get(h.id)
    assert (job.status, job.attempts) == ("failed", 2)

    r = refund.enqueue(7)
    with pytest.raises(KeyError):
        testing.drain(app, ["pay"], raise_errors=True)
    assert app.get(r.id).attempts == 1

    # a Retry is a request, not an error; a job that works raises nothing
    later.enqueue()
    ok = fine.enqueue()
    assert testing.drain(app, ["later", "fine"], raise_errors=True) == 2
    assert app.get(ok.id).result == 1


def test_cancel_pending_by_queue_and_name(make_app: Callable[..., jobyard.App]) -> None:
    # given pending jobs of two names on two queues, and a running one
    app = make_app()

    @app.job(queue="mail")
    def send(n: int) -> None: ...

    @app.job(queue="mail")
    def remind(n: int) -> None: ...

    @app.job(queue="bills")
    def bill(n: int) -> None: ...

    sends = [send.enqueue(i).id for i in range(3)]
    reminders = [remind.enqueue(i).id for i in range(2)]
    bills = [bill.enqueue(i).id for i in range(2)]
    running = app.backend.jobs_claim(JobsClaimParams("w", ["bills"], 1))[0].id

    # a filter is required; a dry run changes nothing
    with pytest.raises(jobyard.ConfigurationError):
        app.cancel_pending()
    assert sorted(app.cancel_pending(name="send", dry_run=True)) == sorted(sends)
    assert {app.get(i).status for i in sends} == {"pending"}

    # by name, by queue and name, by queue: only pending jobs, running ones keep running
    assert sorted(app.cancel_pending(name="send")) == sorted(sends)
    assert app.cancel_pending(queue="mail", name="send") == []
    assert sorted(app.cancel_pending(queue="bills")) == sorted(set(bills) - {running})
    assert {app.get(i).status for i in sends} == {"cancelled"}
    assert {app.get(i).status for i in reminders} == {"pending"}
    assert app.get(running).status == "running"


def test_retry_and_drop_from_a_handler(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)

    @app.job(max_attempts=5)
    def snooze() -> str:
        if jobyard.current_job().attempt == 1:
            raise jobyard.Retry(delay=30)
        return "done"

    @app.job(max_attempts=5)
    def poison() -> None:
        raise jobyard.Drop("bad image")

    s, p = snooze.enqueue(), poison.enqueue()
    testing.drain(app)
    assert (app.get(s.id).run_at.timestamp() - clock.now()) == pytest.approx(30, abs=0.01)
    job = app.get(p.id)
    assert (job.status, job.attempts) == ("failed", 1) and "bad image" in (job.error or "")
    clock.advance(31)
    testing.drain(app)
    assert s.result(timeout=0) == "done" and app.get(s.id).attempts == 2


def test_queue_configuration_applies_where_the_job_sets_none(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)
    app.configure_queue("emails", max_attempts=2, backoff="linear")

    @app.job(queue="emails")
    def send() -> None:
        raise RuntimeError("smtp")

    @app.job(queue="emails", max_attempts=1)
    def once() -> None:
        raise RuntimeError("smtp")

    a, b = send.enqueue(), once.enqueue()
    testing.drain(app)
    assert app.get(a.id).status == "pending" and app.get(a.id).max_attempts == 2
    assert app.get(b.id).status == "failed"
    clock.advance(5)
    testing.drain(app)
    assert app.get(a.id).status == "failed"


def test_options_priority_delay_and_idempotency(
    make_app: Callable[..., jobyard.App], clock: jobyard.FrozenClock
) -> None:
    app = make_app(clock)
    order: list[str] = []

    @app.job
    def step(name: str) -> None:
        order.append(name)

    step.enqueue("low")
    step.options(priority=5).enqueue("high")
    step.options(delay=60).enqueue("later")
    k1 = step.options(idempotency_key="order-7").enqueue("keyed")
    k2 = step.options(idempotency_key="order-7").enqueue("keyed again")
    assert k1.id == k2.id and k1.created and not k2.created
    testing.drain(app)
    assert order == ["high", "low", "keyed"]
    clock.advance(61)
    testing.drain(app)
    assert order[-1] == "later"
    assert step.options(idempotency_key="order-7").enqueue("x").created  # free once done


def test_cancel_and_retry_through_the_app(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    ran: list[int] = []

    @app.job(max_attempts=1)
    def work(n: int) -> int:
        ran.append(n)
        if n == 2 and ran.count(2) == 1:
            raise ValueError("first time fails")
        return n

    c = work.enqueue(1)
    f = work.enqueue(2)
    assert app.cancel(c.id).status == "cancelled"
    with pytest.raises(jobyard.JobCancelled):
        c.result(timeout=0)
    testing.drain(app)
    assert app.get(f.id).status == "failed"
    assert app.retry(f.id).status == "pending"
    assert app.retry(c.id).status == "pending"
    testing.drain(app)
    assert f.result(timeout=0) == 2 and c.result(timeout=0) == 1
    with pytest.raises(jobyard.JobNotFound):
        app.get("987654321")


def test_queue_full(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    app.configure_queue("small", max_pending=2)

    @app.job(queue="small")
    def f(n: int) -> None:
        return None

    f.enqueue(1)
    with pytest.raises(jobyard.QueueFull, match="small"):
        f.enqueue_many([((2,), {}), ((3,), {})])
    assert len(app.jobs(queue="small")) == 1


def test_unknown_job_name_fails_and_the_worker_keeps_going(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def known() -> str:
        return "ok"

    ghost = app.by_name("nobody_knows", max_attempts=1).enqueue()
    after = known.enqueue()
    with running_worker(app, concurrency=1):
        assert after.result(timeout=10) == "ok"
        with pytest.raises(jobyard.JobFailed, match="no handler registered for 'nobody_knows'"):
            ghost.result(timeout=10)


def test_corrupt_payload_fails_that_job_only(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job
    def known() -> str:
        return "ok"

    (bad,) = app.backend.jobs_insert(
        JobsInsertParams([NewJob(name="known", queue="default", payload="{not json")])
    )
    good = known.enqueue()
    with running_worker(app, concurrency=1):
        assert good.result(timeout=10) == "ok"
        wait_until(lambda: app.get(bad.id).status == "failed", what="corrupt job failed")
    job = app.get(bad.id)
    assert job.attempts == 1 and "corrupt payload" in (job.error or "")
    assert "<corrupt payload>" in job.kwargs


def test_timeouts_fail_the_attempt(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    release = threading.Event()

    @app.job(timeout=0.2, max_attempts=1)
    def slow_sync() -> str:
        release.wait(10)
        return "late"

    @app.job(timeout=0.2, max_attempts=1)
    async def slow_async() -> str:
        await asyncio.sleep(10)
        return "late"

    s, a = slow_sync.enqueue(), slow_async.enqueue()
    with running_worker(app, concurrency=2):
        for h in (s, a):
            with pytest.raises(jobyard.JobFailed, match=r"timed out after 0\.2s"):
                h.result(timeout=10)
        release.set()
    assert app.get(s.id).result is None  # the late return was discarded


def test_heartbeat_keeps_a_job_longer_than_its_lease(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    runs: list[int] = []

    @app.job(lease=0.6)
    def long_job() -> int:
        runs.append(jobyard.current_job().attempt)
        time.sleep(2.0)
        return len(runs)

    h = long_job.enqueue()
    with (
        running_worker(app, concurrency=2, reap_interval=0.1),
        running_worker(app, concurrency=2, reap_interval=0.1),
    ):
        assert h.result(timeout=20) == 1
    assert runs == [1] and app.get(h.id).attempts == 1


def test_graceful_stop_releases_unfinished_jobs_uncounted(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    started = threading.Event()
    release = threading.Event()

    @app.job
    def stuck() -> None:
        started.set()
        release.wait(10)

    @app.job
    def quick() -> str:
        return "done"

    s = stuck.enqueue()
    worker = app.worker(concurrency=1, reap_interval=0.2, poll_interval=0.2)
    worker.start()
    try:
        assert started.wait(10)
        worker.stop(grace=0.2)
    finally:
        release.set()
        worker.stop()
    job = app.get(s.id)
    assert (job.status, job.attempts) == ("pending", 0)
    q = quick.enqueue()
    with running_worker(app, concurrency=2):
        assert q.result(timeout=10) == "done"
        wait_until(lambda: app.get(s.id).status == "completed", what="released job ran")
    assert app.get(s.id).attempts == 1


def test_at_most_once_job_runs_once_and_failure_is_final(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job(delivery="at_most_once", max_attempts=5)
    def fire() -> None:
        raise ValueError("nope")

    h = fire.enqueue()
    testing.drain(app)
    job = app.get(h.id)
    assert (job.status, job.attempts) == ("failed", 1)


def test_status_shows_live_workers(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job(queue="emails")
    def noop() -> None:
        return None

    with running_worker(app, concurrency=1) as worker:
        (seen,) = wait_until(app.workers, what="worker registered")
        assert seen.id == worker.id and seen.queues == ("emails",)
    assert app.workers() == []


def test_bad_url_lists_the_supported_schemes() -> None:
    with pytest.raises(jobyard.ConfigurationError, match=r"sqlite://.*postgresql://.*redis://"):
        jobyard.App("mysql://localhost/db")


def test_names_are_validated(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    with pytest.raises(jobyard.ConfigurationError, match="invalid queue name"):
        app.job(name="fine", queue="bad name}")(lambda: None)
    with pytest.raises(jobyard.ConfigurationError, match="invalid queue name"):
        app.configure_queue("x" * 101)


@pytest.mark.parametrize(("prefetch", "held"), [(None, 1), (0, 1), (2, 3)])
def test_prefetch_claims_ahead_of_free_slots(
    make_app: Callable[..., jobyard.App], prefetch: int | None, held: int
) -> None:
    app = make_app()
    release = threading.Event()

    @app.job
    def block() -> None:
        release.wait(10)

    handles = block.enqueue_many([((), {}) for _ in range(5)])
    with running_worker(app, concurrency=1, prefetch=prefetch):
        wait_until(lambda: app.stats()[0].counts["running"] == held, what=f"{held} jobs held")
        assert app.stats()[0].counts["pending"] == 5 - held
        release.set()
        for h in handles:
            h.result(timeout=20)


def test_handlers_that_raise_exit_or_cancel_fail_their_job_and_the_worker_goes_on(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job(max_attempts=1)
    def exits() -> None:
        raise SystemExit(3)

    @app.job(max_attempts=1)
    def interrupts() -> None:
        raise KeyboardInterrupt

    @app.job(max_attempts=1)
    async def cancels() -> None:
        raise asyncio.CancelledError

    @app.job(max_attempts=1)
    async def exits_async() -> None:
        raise SystemExit(4)

    @app.job(max_attempts=1)
    async def own_timeout() -> None:
        raise TimeoutError("socket read timed out")

    @app.job
    async def fine() -> str:
        return "ok"

    bad = [f.enqueue() for f in (exits, interrupts, cancels, exits_async, own_timeout)]
    with running_worker(app, concurrency=2):
        for h in bad:
            with pytest.raises(jobyard.JobFailed):
                h.result(timeout=10)
        assert fine.enqueue().result(timeout=10) == "ok"  # no thread or loop was lost
    errors = [app.get(h.id).error or "" for h in bad]
    assert "SystemExit: 3" in errors[0] and "KeyboardInterrupt" in errors[1]
    assert "CancelledError" in errors[2] and "SystemExit: 4" in errors[3]
    assert "socket read timed out" in errors[4] and "timed out after" not in errors[4]
    assert all(app.get(h.id).attempts == 1 for h in bad)


def test_an_interrupted_at_most_once_job_is_failed_not_released(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    started = threading.Event()
    release = threading.Event()

    @app.job(delivery="at_most_once")
    def charge_card() -> None:
        started.set()
        release.wait(10)

    h = charge_card.enqueue()
    worker = app.worker(concurrency=1, reap_interval=0.2, poll_interval=0.2)
    worker.start()
    try:
        assert started.wait(10)
        worker.stop(grace=0.1)
    finally:
        release.set()
    job = app.get(h.id)
    assert (job.status, job.attempts) == ("failed", 1)
    assert "at_most_once" in (job.error or "")


def test_pausing_a_queue_keeps_its_settings(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()
    app.configure_queue("emails", max_concurrency=3, max_pending=10)
    paused = app.pause_queue("emails")
    assert (paused.paused, paused.max_concurrency, paused.max_pending) == (True, 3, 10)

    @app.job(queue="emails")
    def send() -> str:
        return "sent"

    h = send.enqueue()
    assert testing.drain(app) == 0
    app.pause_queue("emails", paused=False)
    assert testing.drain(app) == 1 and h.result(timeout=0) == "sent"
    (stored,) = app.backend.queues_list()
    assert (stored.paused, stored.max_concurrency) == (False, 3)
