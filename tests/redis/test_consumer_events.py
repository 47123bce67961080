"""The consumers of foreign lists and streams go through the core: the same classification of a
handler's outcome, the same events (and so the same metrics), and reply jobs through the one
enqueue step (its events and on_enqueue hooks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import jobyard
from jobyard.events import Enqueued, Finished, Started
from tests.redis.test_consumers import app, drain, key, raw  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("app")


@pytest.fixture
def seen(app: jobyard.App) -> Iterator[list[Any]]:  # noqa: F811 - the fixture above
    events: list[Any] = []
    stop = app.events.subscribe(events.append)
    yield events
    stop()


def test_list_entries_emit_the_job_events(
    app: jobyard.App,  # noqa: F811
    key: str,  # noqa: F811
    seen: list[Any],
) -> None:
    # given a reliable list holding an entry that succeeds, one the handler drops, one it fails
    # on and one that is not JSON
    def handle(value: Any) -> None:
        if value == "drop":
            raise jobyard.Drop("unwanted")
        if value == "fail":
            raise ValueError("no")

    app.metrics()  # count from here on
    consumer = app.consume_list(key, handle, min_idle=30.0)
    for entry in (json.dumps("fine"), json.dumps("drop"), json.dumps("fail"), "{not json"):
        raw(app).lpush(key, entry)

    # when the consumer takes them (the failing one goes back behind the others)
    assert sum(consumer.run_once() for _ in range(4)) == 4

    # then each is one Finished event of source "list", its outcome classified as a job's
    done = [e for e in seen if isinstance(e, Finished)]
    assert {e.source for e in done} == {"list"} and {e.queue for e in done} == {key}
    assert sorted(e.outcome for e in done) == ["completed", "failed", "failed", "retry"]
    assert len([e for e in seen if isinstance(e, Started)]) == 3  # the undecodable one never ran
    # and the metrics count them by the list's key and the handler's name
    snap = app.metrics()
    assert snap.counters["completed"] == {(key, "handle"): 1}
    assert snap.counters["failed"] == {(key, "handle"): 2}
    assert snap.counters["retried"] == {(key, "handle"): 1}


def test_a_streams_reply_jobs_go_through_the_enqueue_step(
    app: jobyard.App,  # noqa: F811
    key: str,  # noqa: F811
    seen: list[Any],
) -> None:
    @app.job(queue="thumbnails")
    def render(job: dict[str, str]) -> str:
        return job["image"].upper()

    hooked: list[str] = []
    app.on_enqueue(lambda event: hooked.append(event.name))
    consumer = app.consume_stream(
        key, lambda upload: {"image": upload["image"]}, group="g", reply=render
    )
    raw(app).xadd(key, {"image": "cat.png"})
    assert drain(consumer) == 1
    (done,) = [e for e in seen if isinstance(e, Finished)]
    assert (done.source, done.outcome, done.queue) == ("stream", "completed", key)
    (enqueued,) = [e for e in seen if isinstance(e, Enqueued)]
    assert list(enqueued.jobs) == [("render", "thumbnails")]
    assert hooked == ["render"]
