"""OpenTelemetry (``jobyard[otel]``): the producer's trace context travels with its jobs, through
chains and groups, and each attempt runs in a span that is its child; without the extra nothing
is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobyard
from tests.conftest import ROOT, running_worker

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the first test of the process sets it up
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.name == name), key=lambda s: s.attributes["jobyard.job.attempt"]
    )


@pytest.mark.parametrize("store", ["memory", "sqlite"], indirect=True)
def test_each_attempt_is_a_child_of_the_producers_span(
    make_app: Callable[..., jobyard.App], spans: InMemorySpanExporter
) -> None:
    # given a chain fetch -> double (async, fails its first attempt) -> publish (which makes a
    # span of its own), and a group whose join sums its members
    app = make_app()
    tracer = trace.get_tracer("test")
    failed_once: list[int] = []

    @app.job(queue="t")
    def fetch(n: int) -> int:
        return n

    @app.job(queue="t", backoff=jobyard.Backoff("fixed", base=0.0, jitter=False))
    async def double(n: int) -> int:
        if not failed_once:
            failed_once.append(1)
            raise RuntimeError("first attempt fails")
        return 2 * n

    @app.job(queue="t")
    def publish(n: int) -> int:
        with tracer.start_as_current_span("inner"):
            return n + 1

    @app.job(queue="t")
    def total(values: list[int]) -> int:
        return sum(values)

    # when a producer enqueues both inside spans of its own, and a worker runs them
    with tracer.start_as_current_span("produce chain") as chain_span:
        flow = jobyard.chain(fetch.s(3), double.s(), publish.s()).enqueue()
    with tracer.start_as_current_span("produce group") as group_span:
        fan = jobyard.group(fetch.s(1), fetch.s(2)).then(total.s()).enqueue()
    with running_worker(app, queues=["t"], concurrency=2):
        assert flow.result(timeout=20) == 7
        assert fan.result(timeout=20) == 3

    # then every attempt's span is a child of the span that enqueued its workflow
    done = list(spans.get_finished_spans())
    chain_ctx, group_ctx = chain_span.get_span_context(), group_span.get_span_context()
    jobs = [s for s in done if s.name.startswith("jobyard.job ")]
    assert len(jobs) == 3 + 1 + 3  # fetch, double twice, publish; two members and the join
    for s in jobs:
        assert s.parent is not None
        assert s.kind == trace.SpanKind.CONSUMER
    chain_jobs = [s for s in jobs if s.parent.span_id == chain_ctx.span_id]
    group_jobs = [s for s in jobs if s.parent.span_id == group_ctx.span_id]
    assert len(chain_jobs) == 4 and len(group_jobs) == 3
    assert {s.context.trace_id for s in chain_jobs} == {chain_ctx.trace_id}
    assert {s.context.trace_id for s in group_jobs} == {group_ctx.trace_id}
    # with the job's id, name, queue and attempt; the failed attempt records its exception
    first, second = by_name(done, "jobyard.job double")
    step = app.get(flow.ids[1])
    assert first.attributes["jobyard.job.id"] == step.id
    assert (first.attributes["jobyard.job.name"], first.attributes["jobyard.job.queue"]) == (
        "double",
        "t",
    )
    assert (first.attributes["jobyard.job.attempt"], second.attributes["jobyard.job.attempt"]) == (
        1,
        2,
    )
    assert first.status.status_code == trace.StatusCode.ERROR
    (event,) = [e for e in first.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "RuntimeError"
    assert second.status.status_code != trace.StatusCode.ERROR and not second.events
    # and the handler's own span is a child of its attempt's
    (inner,) = [s for s in done if s.name == "inner"]
    (pub,) = by_name(done, "jobyard.job publish")
    assert inner.parent is not None and inner.parent.span_id == pub.context.span_id


BLOCKED = textwrap.dedent(
    """
    import sys

    class NoOtel:  # as if jobyard[otel] were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(name)
            return None

    sys.meta_path.insert(0, NoOtel())
    import jobyard, jobyard.testing
    app = jobyard.App("memory://")

    @app.job
    def add(a, b):
        return a + b

    h = add.enqueue(1, 2)
    jobyard.testing.drain(app)
    w = app.worker()
    w.start()
    h2 = add.enqueue(2, 3)
    assert h2.result(timeout=10) == 5
    w.stop()
    assert app.get(h.id).result == 3
    assert '"tc"' not in app.backend.jobs_get(h.id).payload
    print(sorted(m for m in sys.modules if "opentelemetry" in m))
    """
)


def test_without_the_extra_nothing_is_imported() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKED],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tracing_off_imports_nothing() -> None:
    code = BLOCKED.replace("sys.meta_path.insert(0, NoOtel())", "")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "JOBYARD_TRACING": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_context_is_carried_in_the_payload(
    make_app: Callable[..., jobyard.App], spans: Any
) -> None:
    app = make_app()
    with trace.get_tracer("test").start_as_current_span("p") as span:
        h = app.enqueue("anything", 1)
    payload = app.backend.jobs_get(h.id)
    assert payload is not None
    assert f"{span.get_span_context().trace_id:032x}" in payload.payload
    assert app.get(h.id).args == (1,)
