"""OpenTelemetry, when ``jobyard[otel]`` is installed (opentelemetry-api only; bring your own
SDK and exporter): the producer's trace context travels with each job, in its payload
(``"tc"``: what the globally configured propagator writes, W3C ``traceparent`` by default),
through chains and groups too (every step carries the context of the code that enqueued the
workflow), and the worker runs each attempt in a span that is its child: ``jobyard.job
<name>`` (kind CONSUMER) with the attributes ``jobyard.job.id``, ``.name``, ``.queue``,
``.attempt`` and ``.outcome``, the exception recorded and the status ERROR when it failed.

Imported only by :meth:`jobyard.App.tracing`, and only tries to import OpenTelemetry then:
without the extra (or with ``JOBYARD_TRACING=off``) nothing changes and nothing is imported.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .backends.base import ClaimedJob, Outcome

OFF = ("off", "0", "false", "no")
# Seconds between two looks for an SDK while none is configured: the API's look reads the
# environment (an os.environ lookup), a sixth of a no-op job's Python on the handler's thread
# when made per attempt. A provider set while the worker runs is seen within this time.
LOOK_EVERY = 1.0


def make() -> Tracing | None:
    """A :class:`Tracing` if OpenTelemetry can be imported and tracing is not turned off."""
    if os.environ.get("JOBYARD_TRACING", "").strip().lower() in OFF:
        return None
    try:
        from opentelemetry import context, propagate, trace
    except ImportError:
        return None
    return Tracing(context, propagate, trace)


class Tracing:
    """Writes the caller's context into jobs, and makes each attempt's span."""

    def __init__(self, context: Any, propagate: Any, trace: Any) -> None:
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._tracer = trace.get_tracer("jobyard")
        # What the API hands out until an SDK is configured: spans of it record nothing, so an
        # attempt skips them (a program that has the API only through another library pays
        # one look a second, see LOOK_EVERY). A provider, once set, is set for good.
        self._unset = trace.ProxyTracerProvider
        self._on = False
        self._look_at = 0.0  # monotonic: the next look for a provider while none is set

    def inject(self) -> dict[str, str]:
        """The current trace context as text (empty when there is no span: most enqueues of
        a program that traces nothing pay this one look, not the propagators' work)."""
        carrier: dict[str, str] = {}
        if self._trace.get_current_span().get_span_context().is_valid:
            self._propagate.inject(carrier)
        return carrier

    def attempt(self, job: ClaimedJob, carrier: Any) -> Attempt | None:
        """The span of one attempt of ``job``, the child of the context it carries; None while
        no SDK is configured (nothing would record it)."""
        if not self._on:
            now = time.monotonic()
            if now < self._look_at:
                return None
            if type(self._trace.get_tracer_provider()) is self._unset:
                self._look_at = now + LOOK_EVERY
                return None
            self._on = True
        parent = None
        if isinstance(carrier, dict) and carrier:
            parent = self._propagate.extract({str(k): str(v) for k, v in carrier.items()})
        return Attempt(self, job, parent)


class Attempt:
    """One attempt's span: entered before the handler runs (the handler's own spans are its
    children), ended with the outcome."""

    def __init__(self, tracing: Tracing, job: ClaimedJob, parent: Any) -> None:
        self._tracing = tracing
        self._job = job
        self._parent = parent
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> Attempt:
        t = self._tracing
        job = self._job
        self._span = t._tracer.start_span(
            f"jobyard.job {job.name}",
            context=self._parent,
            kind=t._trace.SpanKind.CONSUMER,
            attributes={
                "jobyard.job.id": job.id,
                "jobyard.job.name": job.name,
                "jobyard.job.queue": job.queue,
                "jobyard.job.attempt": job.attempts,
            },
        )
        self._token = t._context.attach(t._trace.set_span_in_context(self._span))
        return self

    def ended(self, ctx: Any, outcome: Outcome) -> None:
        """Record ``outcome`` (and the exception the handler raised), then end the span."""
        span, t = self._span, self._tracing
        try:
            span.set_attribute("jobyard.job.outcome", outcome.kind)
            raised = getattr(ctx, "_raised", None)
            if raised is not None:
                span.record_exception(raised)
            if outcome.kind in ("failed", "retry"):
                reason = (outcome.error or "").strip().splitlines()
                span.set_status(
                    t._trace.Status(t._trace.StatusCode.ERROR, reason[-1] if reason else "")
                )
        finally:
            t._context.detach(self._token)
            span.end()
