"""Lists and streams that other programs write (seed 003), consumed through the App: entries
pushed by plain Redis clients, the reliable list's watchdog, the refusals at start, stream
groups with takeover of a stopped consumer's entries, and reply jobs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard
from jobyard import testing
from jobyard.backends.redis.backend import RedisBackend
from jobyard.backends.redis.consumers import ListConsumer, StreamConsumer
from tests.conftest import ROOT, running_worker, wait_until
from tests.redis.conftest import T0, url_for


@pytest.fixture
def app(kind: str, clock: jobyard.FrozenClock) -> Iterator[jobyard.App]:
    """An App on a fresh store (one node or cluster) whose clock is frozen."""
    app = jobyard.App(url_for(kind), clock=clock)
    yield app
    app.close()


@pytest.fixture
def key(app: jobyard.App) -> str:
    """A list or stream key that carries a hash tag (so it works on Cluster) and this test's
    prefix (so it is cleaned up with it)."""
    backend: RedisBackend = app.backend  # type: ignore[assignment]
    return "{" + backend.keys.prefix + ":work}"


def raw(app: jobyard.App) -> Any:
    """A plain decoded client, standing for "another program"."""
    backend: RedisBackend = app.backend  # type: ignore[assignment]
    return backend.client


class Recorder:
    """A handler that records what it got and does what the test asks for each value."""

    def __init__(self, act: Callable[[Any], Any] | None = None) -> None:
        self.seen: list[Any] = []
        self.act = act

    def __call__(self, value: Any) -> Any:
        self.seen.append(value)
        return self.act(value) if self.act else None


class Crash(BaseException):
    """Escapes the consumer like a process dying mid-handler: nothing gets settled."""


def drain(consumer: ListConsumer | StreamConsumer) -> int:
    total = 0
    while (n := consumer.run_once()) > 0:
        total += n
    return total


# --- refusals at start -----------------------------------------------------------------------


def test_a_reliable_list_without_min_idle_does_not_start(app: jobyard.App, key: str) -> None:
    with pytest.raises(jobyard.ConfigurationError, match="needs min_idle"):
        app.consume_list(key, Recorder())
    assert app.consumers == []


def test_recovery_ttl_must_outlast_min_idle(app: jobyard.App, key: str) -> None:
    for ttl in (30, 60):
        with pytest.raises(jobyard.ConfigurationError, match="longer than min_idle"):
            app.consume_list(key, Recorder(), min_idle=60, recovery_ttl=ttl)
    app.consume_list(key, Recorder(), min_idle=60, recovery_ttl=61)


def test_cross_slot_keys_refuse_to_start_naming_the_hash_tag() -> None:
    app = jobyard.App(url_for("cluster"))
    try:
        with pytest.raises(jobyard.ConfigurationError) as info:
            app.consume_list("image_processing_queue", Recorder(), min_idle=60)
        assert "{image_processing_queue}" in str(info.value)
        with pytest.raises(jobyard.ConfigurationError, match=r"\{thumbnails\}"):
            app.consume_list("{thumbnails}", Recorder(), min_idle=60, processing="elsewhere")
        app.consume_list("{thumbnails}", Recorder(), min_idle=60)  # one slot: starts
    finally:
        app.close()
    # a single node has no slots: the untagged list of seed 000 is fine there
    single = jobyard.App(url_for("node"))
    try:
        single.consume_list("image_processing_queue", Recorder(), min_idle=60)
    finally:
        single.close()


def test_a_stream_consumer_needs_a_group(app: jobyard.App, key: str) -> None:
    with pytest.raises(jobyard.ConfigurationError, match="group"):
        app.consume_stream(key, Recorder())


# --- reliable lists ----------------------------------------------------------------------------


def test_entries_pushed_by_other_programs_are_handled_in_order(app: jobyard.App, key: str) -> None:
    # given entries LPUSHed by seed 003's producer and RPUSHed by seed 000's
    lpushed, rpushed = key + ".l", key + ".r"
    for n in range(3):
        raw(app).lpush(lpushed, json.dumps({"page": n}))
        raw(app).rpush(rpushed, json.dumps({"image": n}))
    by_lpush, by_rpush = Recorder(), Recorder()
    a = app.consume_list(lpushed, by_lpush, min_idle=60)
    b = app.consume_list(rpushed, by_rpush, min_idle=60, pop="left")
    # when both consumers run, then each entry is handled once, in push order, and acked
    assert drain(a) == 3 and drain(b) == 3
    assert by_lpush.seen == [{"page": n} for n in range(3)]
    assert by_rpush.seen == [{"image": n} for n in range(3)]
    for c in (a, b):
        assert raw(app).llen(c.processing) == 0 and raw(app).zcard(c.recovery) == 0


def test_handler_outcomes_ack_retry_and_drop(app: jobyard.App, key: str) -> None:
    def act(value: Any) -> None:
        if value == "again" and handler.seen.count("again") == 1:
            raise jobyard.Retry()
        if value == "poison":
            raise jobyard.Drop("bad image")
        if value == "boom" and handler.seen.count("boom") == 1:
            raise ValueError("transient")

    handler = Recorder(act)
    for entry in ("ok", "again", "poison", "boom"):
        raw(app).lpush(key, json.dumps(entry))
    raw(app).lpush(key, "{not json")
    consumer = app.consume_list(key, handler, min_idle=60)
    drain(consumer)
    assert sorted(handler.seen) == ["again", "again", "boom", "boom", "ok", "poison"]
    assert (consumer.acked, consumer.retried, consumer.dropped) == (3, 2, 2)
    assert raw(app).lrange(consumer.dead, 0, -1) == ['"poison"', "{not json"]
    assert raw(app).llen(key) == 0 and raw(app).llen(consumer.processing) == 0


def test_the_watchdog_returns_a_stopped_consumers_entry_after_min_idle(
    app: jobyard.App, key: str, clock: jobyard.FrozenClock
) -> None:
    # given a consumer that stopped mid-handler (its entry stays taken)
    def die(value: Any) -> None:
        raise Crash()

    raw(app).lpush(key, json.dumps({"image": "cat.png"}))
    dying = app.consume_list(key, Recorder(die), min_idle=60)
    with pytest.raises(Crash):
        dying.run_once()
    assert raw(app).llen(dying.processing) == 1
    # when another consumer looks before min_idle, the entry is left alone
    survivor = Recorder()
    other = app.consume_list(key, survivor, min_idle=60)
    clock.advance(59)
    assert other.run_once() == 0
    # then after min_idle it is returned and handled, once
    clock.advance(2)
    assert other.run_once() == 1 and other.recovered == 1
    assert survivor.seen == [{"image": "cat.png"}]
    # and an acknowledged entry never comes back
    clock.advance(3600)
    assert other.run_once() == 0 and survivor.seen == [{"image": "cat.png"}]


def test_an_entry_moved_without_a_record_is_recovered_too(
    app: jobyard.App, key: str, clock: jobyard.FrozenClock
) -> None:
    # given a consumer that stopped between its blocking BLMOVE and recording the entry
    consumer = app.consume_list(key, Recorder(), min_idle=60)
    raw(app).lpush(key, json.dumps("orphan"))
    raw(app).lmove(key, consumer.processing, "RIGHT", "LEFT")
    # when the watchdog first sees it, it dates it; after min_idle it comes back
    assert consumer.sweep() == []
    assert raw(app).zscore(consumer.recovery, '"orphan"') == T0 * 1000
    clock.advance(61)
    assert consumer.run_once() == 1 and consumer.recovered == 1


def test_retry_with_a_delay_holds_the_entry_until_then(
    app: jobyard.App, key: str, clock: jobyard.FrozenClock
) -> None:
    def act(value: Any) -> None:
        if len(handler.seen) == 1:
            raise jobyard.Retry(delay=300)

    handler = Recorder(act)
    raw(app).lpush(key, json.dumps("later"))
    consumer = app.consume_list(key, handler, min_idle=60)
    assert consumer.run_once() == 1
    clock.advance(299)
    assert consumer.run_once() == 0
    clock.advance(2)
    assert consumer.run_once() == 1 and handler.seen == ["later", "later"]


def test_recovery_ttl_expires_an_abandoned_recovery_set(app: jobyard.App, key: str) -> None:
    def die(value: Any) -> None:
        raise Crash()

    raw(app).lpush(key, json.dumps(1))
    consumer = app.consume_list(key, Recorder(die), min_idle=60, recovery_ttl=120)
    with pytest.raises(Crash):
        consumer.run_once()
    assert 60_000 < raw(app).pttl(consumer.recovery) <= 120_000


def test_a_blocking_take_records_the_entry(app: jobyard.App, key: str) -> None:
    taken = threading.Event()
    release = threading.Event()
    consumer: ListConsumer

    def act(value: Any) -> None:
        taken.set()
        release.wait(10)

    consumer = app.consume_list(key, Recorder(act), min_idle=60)
    t = threading.Thread(target=lambda: consumer.run_once(block=10))
    t.start()
    wait_until(lambda: raw(app).exists(key) == 0, what="the consumer to block")
    raw(app).lpush(key, json.dumps("late"))
    assert taken.wait(10)
    assert raw(app).zscore(consumer.recovery, '"late"') is not None
    release.set()
    t.join(10)
    assert raw(app).zcard(consumer.recovery) == 0


def test_a_simple_list_loses_the_entry_of_a_stopped_consumer(app: jobyard.App, key: str) -> None:
    def die(value: Any) -> None:
        raise Crash()

    raw(app).lpush(key, json.dumps("warmup"))
    consumer = app.consume_list(key, Recorder(die), reliable=False)
    with pytest.raises(Crash):
        consumer.run_once()
    assert raw(app).llen(key) == 0  # at most once: popped before the handler ran
    with pytest.raises(jobyard.ConfigurationError, match="reliable"):
        app.consume_list(key, Recorder(), reliable=False, min_idle=60)


def test_a_worker_runs_the_apps_consumers(app: jobyard.App, key: str) -> None:
    got = threading.Event()
    consumer = app.consume_list(key, Recorder(lambda v: got.set()), min_idle=60, block=0.2)
    with running_worker(app, queues=["default"], concurrency=1):
        raw(app).lpush(key, json.dumps({"page": "/"}))
        assert got.wait(10)
    assert consumer.acked == 1
    consumer.stop(1.0)  # stopped already by the worker: safe to call again


# --- streams -----------------------------------------------------------------------------------


def test_reply_jobs_arrive_and_entries_are_acknowledged(app: jobyard.App, key: str) -> None:
    @app.job(queue="thumbnails")
    def render(job: dict[str, str]) -> str:
        return job["image"].upper()

    consumer = app.consume_stream(
        key, lambda upload: {"image": upload["image"]}, group="thumbnailer", reply=render
    )
    raw(app).xadd(key, {"image": "cat.png"})
    raw(app).xadd(key, {"image": "dog.png"})
    assert drain(consumer) == 2
    jobs = testing.enqueued(app, "render")
    assert [j.args for j in jobs] == [({"image": "cat.png"},), ({"image": "dog.png"},)]
    assert all((j.idempotency_key or "").startswith(f"stream:{key}:thumbnailer:") for j in jobs)
    assert raw(app).xpending(key, "thumbnailer")["pending"] == 0
    assert testing.drain(app) == 2


def test_a_reply_queue_with_a_ttl_is_re_armed_at_every_push(app: jobyard.App, key: str) -> None:
    @app.job(queue="replies")
    def reply(value: Any) -> None:
        return None

    consumer = app.consume_stream(key, lambda e: e, group="g", reply=reply, reply_ttl=30)
    backend: RedisBackend = app.backend  # type: ignore[assignment]
    alive = backend.keys.queue("replies")[12]
    raw(app).xadd(key, {"n": "1"})
    drain(consumer)
    first = raw(app).pttl(alive)
    assert 0 < first <= 30_000
    wait_until(lambda: raw(app).pttl(alive) < first - 50, what="the ttl to run down a little")
    raw(app).xadd(key, {"n": "2"})
    drain(consumer)
    assert raw(app).pttl(alive) > first - 50


def test_drop_and_undecodable_entries_go_to_the_dead_list(app: jobyard.App, key: str) -> None:
    def act(value: Any) -> None:
        if value == {"bad": True}:
            raise jobyard.Drop("bad upload")

    consumer = app.consume_stream(key, Recorder(act), group="g", field="data")
    raw(app).xadd(key, {"data": json.dumps({"bad": True})})
    raw(app).xadd(key, {"data": "{not json"})
    raw(app).xadd(key, {"other": "x"})
    assert drain(consumer) == 3
    dead = [json.loads(r) for r in raw(app).lrange(consumer.dead, 0, -1)]
    assert [d["id"] for d in dead] == [e[0] for e in raw(app).xrange(key)]
    assert dead[0]["reason"] == "bad upload" and "JSONDecodeError" in dead[1]["reason"]
    assert "KeyError" in dead[2]["reason"] and all(d["group"] == "g" for d in dead)
    assert raw(app).xpending(key, "g")["pending"] == 0


def test_a_failed_entry_stays_pending_and_is_taken_over(app: jobyard.App, key: str) -> None:
    def act(value: Any) -> None:
        if len(handler.seen) == 1:
            raise RuntimeError("flaky")

    handler = Recorder(act)
    consumer = app.consume_stream(key, handler, group="g", min_idle=0.05)
    raw(app).xadd(key, {"n": "1"})
    assert consumer.run_once() == 1 and consumer.retried == 1
    assert raw(app).xpending(key, "g")["pending"] == 1
    wait_until(lambda: consumer.run_once() > 0, what="the entry to be taken over")
    assert handler.seen == [{"n": "1"}, {"n": "1"}] and consumer.acked == 1


def test_a_killed_consumers_entry_is_taken_over(app: jobyard.App, key: str, tmp_path: Path) -> None:
    # given a consumer process that took an entry and was killed mid-handler
    backend: RedisBackend = app.backend  # type: ignore[assignment]
    url = url_for("cluster" if backend.cluster else "node", prefix=backend.keys.prefix)
    raw(app).xgroup_create(key, "g", id="0", mkstream=True)
    raw(app).xadd(key, {"n": "7"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.redis.stream_proc", url, key, "g", str(tmp_path)],
        cwd=ROOT,
    )
    try:
        wait_until(lambda: (tmp_path / "started.7").exists(), what="the entry to be taken")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    (entry,) = raw(app).xpending_range(key, "g", "-", "+", 10)
    assert entry["consumer"] == "doomed"
    # when a live consumer sweeps past min_idle, then it takes the entry over and handles it
    handler = Recorder()
    consumer = app.consume_stream(key, handler, group="g", min_idle=0.1)
    wait_until(lambda: consumer.run_once() > 0, what="the takeover")
    assert handler.seen == [{"n": "7"}] and consumer.recovered == 1
    assert raw(app).xpending(key, "g")["pending"] == 0


def test_start_and_stop_twice(app: jobyard.App, key: str) -> None:
    got = threading.Event()
    consumer = app.consume_stream(key, lambda e: got.set(), group="g", block=0.1)
    consumer.start()
    consumer.start()
    raw(app).xadd(key, {"n": "1"})
    assert got.wait(10)
    consumer.stop(1.0)
    consumer.stop(1.0)
    wait_until(lambda: raw(app).xpending(key, "g")["pending"] == 0, what="the ack")
