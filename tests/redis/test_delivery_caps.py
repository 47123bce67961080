"""``max_deliveries`` on consumers of foreign lists and streams: an entry that is delivered that
many times without an acknowledgement (its handler keeps failing, or the worker holding it is
SIGKILLed every time) goes to ``<key>.dead`` with the reason, never delivered again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobyard
from jobyard.backends.redis.backend import RedisBackend
from tests.conftest import WorkerProcess, wait_until
from tests.redis.conftest import url_for


@pytest.fixture
def app(kind: str, clock: jobyard.FrozenClock) -> Iterator[jobyard.App]:
    app = jobyard.App(url_for(kind), clock=clock)
    yield app
    app.close()


def _backend(app: jobyard.App) -> RedisBackend:
    backend: RedisBackend = app.backend  # type: ignore[assignment]
    return backend


@pytest.fixture
def key(app: jobyard.App) -> str:
    return "{" + _backend(app).keys.prefix + ":work}"


def raw(app: jobyard.App) -> Any:
    return _backend(app).client


class Boom(Exception):
    pass


def _always_fails(seen: list[Any]) -> Any:
    def handler(value: Any) -> None:
        seen.append(value)
        raise Boom(f"cannot handle {value!r}")

    return handler


def _drain(consumer: Any) -> None:
    for _ in range(50):  # bounded: an entry redelivered forever fails the test, not hangs it
        if consumer.run_once() == 0:
            return


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "5"])
def test_bad_caps_are_refused_with_the_value(app: jobyard.App, key: str, bad: object) -> None:
    with pytest.raises(jobyard.ConfigurationError, match=f"max_deliveries.*{bad!r}"):
        app.consume_list(key, print, min_idle=60, max_deliveries=bad)
    with pytest.raises(jobyard.ConfigurationError, match=f"max_deliveries.*{bad!r}"):
        app.consume_stream(key, print, group="g", max_deliveries=bad)


@pytest.mark.parametrize("reliable", [True, False])
def test_a_list_entry_whose_handler_always_fails_is_dead_after_the_cap(
    app: jobyard.App, key: str, reliable: bool
) -> None:
    # given a poison entry between two good ones
    seen: list[Any] = []
    for entry in ("ok-1", "poison", "ok-2"):
        raw(app).lpush(key, json.dumps(entry))
    fails = _always_fails(seen)

    def handler(value: Any) -> None:
        if value == "poison":
            fails(value)

    options: dict[str, Any] = {"min_idle": 60} if reliable else {"reliable": False}
    consumer = app.consume_list(key, handler, max_deliveries=3, **options)
    # when the consumer drains the list
    _drain(consumer)
    # then the poison entry was handled 3 times, and is on the dead list with its reason
    assert seen == ["poison"] * 3
    assert raw(app).lrange(consumer.dead, 0, -1) == ['"poison"']
    reason = raw(app).hget(consumer.reasons, '"poison"')
    assert "delivered 3 times (max_deliveries=3)" in reason and "Boom" in reason
    assert raw(app).llen(key) == 0 and raw(app).exists(consumer.deliveries) == 0
    assert (consumer.acked, consumer.dropped, consumer.retried) == (2, 1, 2)


def test_an_acknowledged_entry_forgets_its_count(app: jobyard.App, key: str) -> None:
    seen: list[Any] = []

    def flaky(value: Any) -> None:
        seen.append(value)
        if len(seen) % 3 != 0:  # fails twice, then succeeds
            raise Boom("flaky")

    consumer = app.consume_list(key, flaky, min_idle=60, max_deliveries=3)
    for _ in range(2):  # the same entry twice in a row: each gets 3 deliveries of its own
        raw(app).lpush(key, json.dumps("e"))
        _drain(consumer)
    assert len(seen) == 6 and consumer.acked == 2
    assert raw(app).llen(consumer.dead) == 0 and raw(app).exists(consumer.deliveries) == 0


def test_the_watchdog_counts_deliveries_of_stopped_consumers(
    app: jobyard.App, key: str, clock: jobyard.FrozenClock
) -> None:
    # given consumers that each stop holding the entry (nothing is settled)
    class Crash(BaseException):
        pass

    def die(value: Any) -> None:
        raise Crash()

    raw(app).lpush(key, json.dumps("killer"))
    for _ in range(2):
        consumer = app.consume_list(key, die, min_idle=60, max_deliveries=2)
        with pytest.raises(Crash):
            consumer.run_once()
        clock.advance(61)
    # when the next consumer's watchdog takes the entry back a second time
    survivor: list[Any] = []
    consumer = app.consume_list(key, survivor.append, min_idle=60, max_deliveries=2)
    assert consumer.run_once() == 0
    # then it is dead, with the reason, and never handled again
    assert survivor == [] and raw(app).lrange(consumer.dead, 0, -1) == ['"killer"']
    assert "min_idle" in raw(app).hget(consumer.reasons, '"killer"')
    assert raw(app).llen(consumer.processing) == 0 and raw(app).zcard(consumer.recovery) == 0


def test_a_stream_entry_whose_handler_always_fails_is_dead_after_the_cap(
    app: jobyard.App, key: str
) -> None:
    seen: list[Any] = []
    consumer = app.consume_stream(
        key, _always_fails(seen), group="g", min_idle=0.05, max_deliveries=2
    )
    raw(app).xadd(key, {"n": "1"})
    wait_until(lambda: consumer.run_once() >= 0 and raw(app).llen(consumer.dead), what="dead")
    (record,) = [json.loads(r) for r in raw(app).lrange(consumer.dead, 0, -1)]
    assert seen == [{"n": "1"}] * 2
    assert record["fields"] == {"n": "1"} and "max_deliveries=2" in record["reason"]
    assert raw(app).xpending(key, "g")["pending"] == 0


def _poisoned_workers(app: jobyard.App, kind: str, key: str, sink: Path, cap: int) -> int:
    """Start worker processes one after another until the poison entry is dead; each one that
    takes it is SIGKILLed by its handler. How many were killed."""
    backend = _backend(app)
    url = url_for("cluster" if backend.cluster else "node", prefix=backend.keys.prefix)
    env = {"JOBYARD_SINK": str(sink), "POISON_KIND": kind, "POISON_KEY": key}
    env["POISON_MAX"] = str(cap)
    dead = key + ".dead"

    def settled() -> bool:
        # dead, and (a stream) acknowledged: a stream's consumer pushes the dead record, then
        # XACKs it, so a worker stopped in between would leave it pending (recorded twice later)
        if not raw(app).llen(dead):
            return False
        return kind == "list" or raw(app).xpending(key, "g")["pending"] == 0

    killed = 0
    while not raw(app).llen(dead):
        assert killed <= cap, "the poison entry was delivered past its cap"
        proc = WorkerProcess(url, "tests.redis.poison_app:app", [], env)
        try:
            wait_until(
                lambda: proc.proc.poll() is not None or settled(),  # noqa: B023
                timeout=30,
                what="the worker to take the entry and die, or the entry to be dead and settled",
            )
            if proc.proc.poll() is not None:
                assert proc.proc.returncode == -9, proc.output()
                killed += 1
        finally:
            proc.kill()
    return killed


@pytest.mark.parametrize("source", ["list", "stream"])
def test_an_entry_that_kills_every_worker_is_dead_after_the_cap(
    app: jobyard.App, key: str, source: str, tmp_path: Path
) -> None:
    # given a poison entry whose handler SIGKILLs the worker process holding it
    sink = tmp_path / "sink"
    sink.mkdir()
    if source == "list":
        raw(app).lpush(key, json.dumps({"image": "bomb.png"}))
    else:
        raw(app).xadd(key, {"image": "bomb.png"})
    # when real worker processes keep taking it, then after 2 deliveries it is dead
    assert _poisoned_workers(app, source, key, sink, cap=2) == 2
    assert len(list(sink.glob("delivery.*"))) == 2
    (record,) = raw(app).lrange(key + ".dead", 0, -1)
    if source == "list":
        assert json.loads(record) == {"image": "bomb.png"}
        assert "delivered 2 times" in raw(app).hget(key + ".dead.reasons", record)
        assert raw(app).exists(key + ".deliveries", key + ".processing") == 0
    else:
        assert "max_deliveries=2" in json.loads(record)["reason"]
        assert raw(app).xpending(key, "g")["pending"] == 0
