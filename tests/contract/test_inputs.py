"""Inputs users and other programs control, fuzzed on every backend: each one is stored and
given back exactly, or refused with a clear error; nothing else breaks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobyard
from jobyard import testing
from jobyard.backends.base import (
    MAX_DELAY,
    MAX_RUN_AT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    JobsClaimParams,
    NewJob,
)

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    database=None,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture
def echo_app(make_app: Callable[..., jobyard.App]) -> jobyard.App:
    app = make_app()

    @app.job(max_attempts=1)
    def echo(*args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    return app


@FUZZ
@given(
    args=st.lists(json_values, max_size=3),
    kwargs=st.dictionaries(st.text(max_size=10), json_values, max_size=3),
)
def test_json_arguments_round_trip(
    echo_app: jobyard.App, args: list[Any], kwargs: dict[str, Any]
) -> None:
    h = echo_app.enqueue("echo", *args, **kwargs)
    job = echo_app.get(h.id)
    assert (list(job.args), job.kwargs) == (args, kwargs)
    testing.drain(echo_app)
    assert h.result(timeout=0) == [args, kwargs]


def test_odd_values(echo_app: jobyard.App) -> None:
    odd = ["\x00nul", "\ud800 lone surrogate", "emoji \U0001f680", "\u2028", "x" * 1_000_000]
    h = echo_app.enqueue("echo", *odd)
    assert list(echo_app.get(h.id).args) == odd
    testing.drain(echo_app)
    assert h.result(timeout=0) == [odd, {}]


def test_deep_and_not_json_values_are_refused(echo_app: jobyard.App) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    for bad, label in ((deep, "argument 0"), (float("nan"), "argument 0"), ({1, 2}, "argument 0")):
        with pytest.raises(TypeError, match=label):
            echo_app.enqueue("echo", bad)
    with pytest.raises(TypeError, match="argument 'x'"):
        echo_app.enqueue("echo", x=float("inf"))
    assert echo_app.jobs() == []


def test_a_result_that_is_not_json_fails_the_job(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job(max_attempts=1)
    def weird() -> object:
        return object()

    h = weird.enqueue()
    testing.drain(app)
    with pytest.raises(jobyard.JobFailed, match="not JSON serializable"):
        h.result(timeout=0)


@FUZZ
@given(
    key=st.text(
        st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=200,
    )
)
def test_any_idempotency_key_works(echo_app: jobyard.App, key: str) -> None:
    fn = echo_app.by_name("echo")
    a = fn.options(idempotency_key=key).enqueue(1)
    b = fn.options(idempotency_key=key).enqueue(2)
    assert a.id == b.id and a.created and not b.created
    assert echo_app.get(a.id).idempotency_key == key
    echo_app.cancel(a.id)


def test_idempotency_key_length_is_checked(echo_app: jobyard.App) -> None:
    with pytest.raises(jobyard.ConfigurationError, match="idempotency_key"):
        echo_app.by_name("echo").options(idempotency_key="k" * 201).enqueue()
    with pytest.raises(jobyard.ConfigurationError, match="idempotency_key"):
        echo_app.by_name("echo").options(idempotency_key="").enqueue()
    for bad in ("a\x00b", "\ud800"):
        with pytest.raises(jobyard.ConfigurationError, match="without NUL or lone surrogates"):
            echo_app.by_name("echo").options(idempotency_key=bad).enqueue()


# A fixed table, not the code's own pattern: a change to the rule must fail here.
VALID_NAMES = ["a", "0", "x" * 100, "emails", "reports.daily", "a:b", "a-b_c", "...", ":", "-_"]
INVALID_NAMES = [
    "",
    "x" * 101,
    "task\n",
    "mail\n",
    "\nmail",
    "a\r",
    "a b",
    " a",
    "a\tb",
    "a{b}",
    "a/b",
    "a*",
    "a\x00",
    "é",
    "日本",
    "a\u200b",
    "\ud800",
]


def test_queue_names_are_valid_or_refused(echo_app: jobyard.App) -> None:
    fn = echo_app.by_name("echo")
    for name in VALID_NAMES:
        h = fn.options(queue=name).enqueue(name)
        assert echo_app.get(h.id).queue == name
        assert echo_app.cancel(h.id).status == "cancelled"
    for name in INVALID_NAMES:
        with pytest.raises(jobyard.ConfigurationError, match="invalid queue name"):
            fn.options(queue=name).enqueue(name)


def test_job_names_are_valid_or_refused(echo_app: jobyard.App) -> None:
    for name in VALID_NAMES:
        assert echo_app.get(echo_app.enqueue(name).id).name == name
    for name in INVALID_NAMES:
        with pytest.raises(jobyard.ConfigurationError, match="invalid job name"):
            echo_app.enqueue(name)


@settings(max_examples=200, deadline=None, database=None)
@given(
    ref=st.one_of(
        st.text(max_size=40),
        st.builds(
            lambda a, b: f"no_such_module_{a}:{b}", st.text(max_size=10), st.text(max_size=10)
        ),
        st.sampled_from(
            ["json:dumps", "json:nope", "tests.apps.contract_app:record", ":app", "x:"]
        ),
    )
)
def test_app_paths_give_a_configuration_error(ref: str) -> None:
    from jobyard.app import load_app

    if ":" in ref and not ref.split(":", 1)[0].startswith(("json", "tests", "no_such_module_")):
        return  # never import arbitrary modules by fuzzing their names
    with pytest.raises(jobyard.ConfigurationError):
        load_app(ref)


def test_payload_is_plain_json_text(echo_app: jobyard.App) -> None:
    h = echo_app.enqueue("echo", {"a": 1})
    rec = echo_app.backend.jobs_get(h.id)
    assert rec is not None and json.loads(rec.payload) == {"args": [{"a": 1}], "kwargs": {}}


# --- bad values refused at the door ----------------------------------------------------------

LATE = datetime(9999, 12, 31, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"delay": float("inf")}, id="delay-inf"),
        pytest.param({"delay": float("nan")}, id="delay-nan"),
        pytest.param({"delay": 1e12}, id="delay-1e12"),
        pytest.param({"delay": MAX_DELAY + 1}, id="delay-just-too-long"),
        pytest.param({"delay": -1}, id="delay-negative"),
        pytest.param({"run_at": LATE}, id="run_at-year-9999-end"),
        pytest.param({"run_at": 1e300}, id="run_at-1e300"),
        pytest.param({"run_at": float("nan")}, id="run_at-nan"),
        pytest.param({"priority": PRIORITY_MAX + 1}, id="priority-too-high"),
        pytest.param({"priority": PRIORITY_MIN - 1}, id="priority-too-low"),
        pytest.param({"priority": 10**20}, id="priority-huge"),
        pytest.param({"priority": 1.5}, id="priority-float"),
    ],
)
def test_out_of_range_options_are_refused_and_nothing_is_stored(
    echo_app: jobyard.App, options: dict[str, Any]
) -> None:
    with pytest.raises(jobyard.ConfigurationError) as refused:
        echo_app.by_name("echo").options(**options).enqueue()
    if "delay" in options:
        assert "3153600000 (100 years)" in str(refused.value)
    # a store is never handed one either, whoever builds the job
    field, value = next(iter(options.items()))
    raw = {"run_at": value.timestamp()} if isinstance(value, datetime) else {field: value}
    if value != -1:  # a store may be asked for a job due in the past
        with pytest.raises(jobyard.ConfigurationError):
            NewJob(name="echo", queue="default", payload="{}", **raw)
    assert echo_app.jobs() == []


def test_the_bounds_themselves_are_stored_ordered_and_listed(echo_app: jobyard.App) -> None:
    # given the extreme priorities and the longest delay
    fn = echo_app.by_name("echo")
    low = fn.options(priority=PRIORITY_MIN).enqueue("low")
    high = fn.options(priority=PRIORITY_MAX).enqueue("high")
    later = fn.options(delay=MAX_DELAY).enqueue("later")
    last = fn.options(run_at=MAX_RUN_AT).enqueue("last")
    # then they list and show, and the due ones run highest first
    assert {j.id for j in echo_app.jobs()} == {low.id, high.id, later.id, last.id}
    assert echo_app.get(high.id).priority == PRIORITY_MAX
    assert echo_app.get(low.id).priority == PRIORITY_MIN
    assert echo_app.get(last.id).run_at.year == 9999
    claimed = echo_app.backend.jobs_claim(JobsClaimParams("w", ["default"], 10))
    assert [c.id for c in claimed] == [high.id, low.id]


def test_dict_keys_that_are_not_strings_are_refused(echo_app: jobyard.App) -> None:
    with pytest.raises(TypeError, match="argument 0 is not JSON: dict key 1 is not a string"):
        echo_app.enqueue("echo", {1: "a", "1": "b"})
    with pytest.raises(TypeError, match="argument 'k' is not JSON: dict key None"):
        echo_app.enqueue("echo", k=[{"ok": {None: 1}}])
    with pytest.raises(TypeError, match="dict key"):
        echo_app.by_name("echo").enqueue_many([((), {}), (({2.5: 1},), {})])
    assert echo_app.jobs() == []


def test_a_result_with_non_string_keys_fails_its_job(make_app: Callable[..., jobyard.App]) -> None:
    app = make_app()

    @app.job(max_attempts=1)
    def counts() -> dict[int, str]:
        return {1: "a", 2: "b"}

    h = counts.enqueue()
    testing.drain(app)
    with pytest.raises(jobyard.JobFailed, match="dict key 1 is not a string"):
        h.result(timeout=0)


def test_a_lone_surrogate_is_stored_and_given_back(echo_app: jobyard.App) -> None:
    h = echo_app.enqueue("echo", "\ud800", k="a\udfffb")
    job = echo_app.get(h.id)
    assert job.args == ("\ud800",) and job.kwargs == {"k": "a\udfffb"}
    assert [j.id for j in echo_app.jobs()] == [h.id]
    testing.drain(echo_app)
    assert h.result(timeout=0) == [["\ud800"], {"k": "a\udfffb"}]


def test_arguments_that_do_not_fit_the_handler_raise_at_enqueue(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def one(x: int) -> int:
        return x

    with pytest.raises(TypeError, match=r"one\(x\): too many positional arguments"):
        one.enqueue(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        app.enqueue("one", 1, y=2)
    with pytest.raises(TypeError, match="missing a required argument"):
        one.options(priority=3).enqueue_many([((1,), {}), ((), {})])
    with pytest.raises(TypeError, match="missing a required argument"):
        asyncio.run(one.enqueue_async())  # type: ignore[call-arg]
    assert app.jobs() == []
    assert one.enqueue(7).result is not None  # a fitting call still goes
