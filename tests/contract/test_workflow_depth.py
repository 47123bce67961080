"""How deep chains and groups may nest: up to ``MAX_DEPTH`` levels a workflow is enqueued, run,
read back and shown; past it the enqueue is refused with one clear error naming the limit, and
nothing that reads a stored workflow back (its tree, a step's feed, a job's payload) ever
raises RecursionError, however deep what the store holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import jobyard
from jobyard import chain, group
from jobyard.backends.base import JobsInsertParams, NewJob
from jobyard.testing import drain
from jobyard.workflow import MAX_DEPTH, Node, build_workflow, feed_value


def nested(f: Any, depth: int) -> Node:
    """``depth`` levels of chains and groups around one signature, alternating, each level
    with a job of its own beside the nested node."""
    node: Node = f.s()
    for level in range(depth):
        node = chain(f.s(), node) if level % 2 else group(node, f.s())
    return node


def test_a_workflow_nested_to_the_limit_runs_and_reads_back(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()

    @app.job
    def f(x: Any = 0) -> int:
        return 1

    # given a workflow nested exactly MAX_DEPTH levels deep
    handle = nested(f, MAX_DEPTH).enqueue()
    assert len(handle.ids) == MAX_DEPTH + 1
    # then it reads back as a tree, runs to the end and yields its result
    lines = handle.get().render()
    assert len(lines) == len(handle.ids) + MAX_DEPTH
    drain(app)
    expected: Any = 1
    for level in range(MAX_DEPTH):
        expected = expected if level % 2 else [expected, 1]  # a group passes a list
    assert handle.result(timeout=5) == expected
    assert all("completed" in line for line in handle.get().render() if "#" in line)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 600, 5000])
def test_nesting_past_the_limit_is_refused_naming_it(
    make_app: Callable[..., jobyard.App], depth: int
) -> None:
    app = make_app()

    @app.job
    def f(x: Any = 0) -> int:
        return 1

    # when a workflow nests deeper than the limit, then one ConfigurationError names it
    with pytest.raises(jobyard.ConfigurationError, match=f"at most {MAX_DEPTH} levels") as err:
        nested(f, depth).enqueue()  # type: ignore[union-attr]
    assert f"this one {depth}" in str(err.value)
    # and nothing was written
    assert app.jobs() == []


def test_a_stored_workflow_of_any_depth_reads_back_without_recursion(
    make_app: Callable[..., jobyard.App],
) -> None:
    app = make_app()
    # given jobs written by something else: a place 3,000 levels deep and a payload nested
    # past what the JSON decoder takes
    deep_place = "/".join(["c0"] * 3000)
    deep_args = "[" * 100_000 + "]" * 100_000
    payloads = [
        json.dumps({"args": [], "kwargs": {}, "at": deep_place}),
        '{"args": ' + deep_args + ', "kwargs": {}, "at": "c1"}',
    ]
    inserted = app.backend.jobs_insert(
        JobsInsertParams([NewJob("f", "default", p, workflow_id="deep") for p in payloads])
    )
    ids = [i.id for i in inserted]
    # then the workflow reads back, each job shown, the over-deep one at the top of the tree
    flow = app.workflow("deep")
    assert sorted(j.id for j in flow.jobs) == sorted(ids)
    lines = flow.render()
    assert lines[0] == "chain" and len(lines) == 3
    assert all(line.startswith(("├─ ", "└─ ")) for line in lines[1:])
    # and the undecodable payload is shown as corrupt, not raised
    assert "<corrupt payload>" in app.get(ids[1]).kwargs


def test_deep_trees_and_feeds_are_walked_without_recursion() -> None:
    # given a tree 20,000 levels deep (places as no store of this version writes them)
    app = jobyard.App("memory://")

    @app.job
    def f() -> None: ...

    (one,) = app.backend.jobs_insert(JobsInsertParams([NewJob("f", "q", "{}")]))
    job = app.get(one.id)
    depth = 20_000
    place = "/".join(["c0"] * (depth - 1) + ["g0"])
    flow = build_workflow("w", [job], {job.id: place})
    # then it is built (the over-deep place goes to the top) and rendered
    assert flow.render()[1].startswith("└─ f #")
    # and a feed nested 20,000 deep is filled in without recursion
    feed: Any = 0
    for _ in range(depth):
        feed = [feed, 1]
    value = feed_value(feed, ["a", "b"])
    for _ in range(depth):
        assert value[1] == "b"
        value = value[0]
    assert value == "a"
    app.close()
