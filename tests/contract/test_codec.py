"""One rule says what a payload is (``jobyard._codec``): the worker, ``app.get`` / ``jobyard
show``, a workflow's tree and the ``on_enqueue`` hooks read payloads through it, so a payload the
worker refuses as corrupt is shown as corrupt, on every store."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobyard
from jobyard import chain
from jobyard._codec import (
    CorruptPayload,
    Payload,
    decode_payload,
    decode_result,
    encode_payload,
    encode_result,
    encode_step,
)
from jobyard.backends.base import JobsInsertParams, NewJob

from ..conftest import running_worker, wait_until

# Payloads another program might write: each lacks the args list or the kwargs object.
CORRUPT = {
    "not-json": ("{not json", "corrupt payload: Expecting property name enclosed in double quotes"),
    "a-list": ("[1]", "corrupt payload: list indices must be integers or slices, not str"),
    "no-kwargs": ('{"args": []}', "corrupt payload: 'kwargs'"),
    "args-text": (
        '{"args": "abc", "kwargs": {}}',
        "corrupt payload: args must be a list and kwargs an object",
    ),
    "kwargs-pairs": (
        '{"args": [], "kwargs": [["a", 1]]}',
        "corrupt payload: args must be a list and kwargs an object",
    ),
}


def test_a_payload_is_compact_json_and_reads_back() -> None:
    text = encode_payload((1, "é"), {"to": None})

    assert text == '{"args":[1,"é"],"kwargs":{"to":null}}'
    assert decode_payload(text) == Payload([1, "é"], {"to": None})


def test_a_workflow_steps_payload_adds_its_place_and_feed() -> None:
    plain = encode_payload((), {"sep": ","})

    fed = encode_step(plain, "c1", [0, [1, 2]])
    first = encode_step(plain, "c0/g1")

    # the same text the workflow wrote before the codec held it
    assert fed == '{"args":[],"kwargs":{"sep":","},"at":"c1","feed":[0,[1,2]]}'
    assert first == '{"args":[],"kwargs":{"sep":","},"at":"c0/g1"}'
    assert decode_payload(fed) == Payload([], {"sep": ","}, "c1", [0, [1, 2]])
    assert decode_payload(first) == Payload([], {"sep": ","}, "c0/g1", None)


@pytest.mark.parametrize(("text", "error"), CORRUPT.values(), ids=list(CORRUPT))
def test_a_corrupt_payload_says_why(text: str, error: str) -> None:
    with pytest.raises(CorruptPayload) as raised:
        decode_payload(text)

    assert f"corrupt payload: {raised.value}".startswith(error)
    assert isinstance(raised.value, ValueError)


def test_a_place_that_is_not_text_is_no_place() -> None:
    assert decode_payload('{"args":[],"kwargs":{},"at":7}').at is None


def test_results_round_trip_and_refuse_what_json_cannot_hold() -> None:
    assert decode_result(encode_result({"n": [1, 2.5]})) == {"n": [1, 2.5]}
    assert encode_result(None) == "null" and decode_result(None) is None
    with pytest.raises(TypeError, match="the handler's result is not JSON serializable"):
        encode_result(object())
    with pytest.raises(TypeError, match="dict key 1 is not a string"):
        encode_result({1: "a"})
    with pytest.raises(ValueError):
        decode_result("{nope")


def test_the_worker_and_show_agree_on_a_corrupt_payload(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def known(*args: object, **kwargs: object) -> str:
        return "ran"

    # given jobs whose payloads another program wrote, none of them a payload
    texts = [text for text, _ in CORRUPT.values()]
    inserted = app.backend.jobs_insert(
        JobsInsertParams([NewJob(name="known", queue="default", payload=t) for t in texts])
    )
    ids = [i.id for i in inserted]

    # then they are shown as corrupt, their text as stored, before any worker meets them
    for job_id, text in zip(ids, texts, strict=True):
        job = app.get(job_id)
        assert (job.args, job.kwargs) == ((), {"<corrupt payload>": text})

    # and a worker fails each at once, saying why, and runs none of them
    with running_worker(app, concurrency=1):
        wait_until(lambda: all(app.get(i).status == "failed" for i in ids), what="the corrupt jobs")
    for job_id, (_, error) in zip(ids, CORRUPT.values(), strict=True):
        job = app.get(job_id)
        assert job.attempts == 1 and (job.error or "").startswith(error)
        assert job.result is None


def test_the_enqueue_hook_reads_a_workflow_steps_arguments(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    seen: list[tuple[str, tuple[object, ...], dict[str, object]]] = []
    app.on_enqueue(lambda e: seen.append((e.name, e.args, e.kwargs)))

    @app.job
    def first(n: int) -> int:
        return n

    @app.job
    def then(n: int, plus: int) -> int:
        return n + plus

    # when a chain is enqueued, whose second step's payload holds its place and feed
    handle = chain(first.s(1), then.s(plus=2)).enqueue()

    # then the hook sees each step's own arguments, and a worker reads its feed
    assert seen == [("first", (1,), {}), ("then", (), {"plus": 2})]
    with running_worker(app):
        assert handle.result(timeout=15) == 3
