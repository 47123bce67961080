"""Prometheus metrics (prometheus-client): ``/metrics`` on the dashboard, and ``jobyard worker
--metrics-port 9108``.

Two sources, read at each scrape:

- the counters and histograms of this process (or, for ``--processes N``, the sum of its
  processes): :meth:`jobyard.App.metrics`, a tally of the events of ``jobyard.events``. By
  queue and job name: ``jobyard_jobs_enqueued_total``, ``_completed_total``,
  ``_retried_total``, ``_failed_total`` (into the dead letter), ``_cancelled_total``,
  ``_released_total``, ``_lease_lost_total`` (lapsed leases this process's reaper found);
  ``jobyard_job_run_seconds`` (each attempt's handler) and ``jobyard_job_wait_seconds`` (from
  the job being due to its handler starting: the enqueue-to-start latency); and
  ``jobyard_worker_events_total{event}`` (claims, renew_failed, handed_back, tick_fired, ...).
- the store, the same for every scraper: ``jobyard_jobs{queue,status}``,
  ``jobyard_queue_oldest_pending_age_seconds{queue}`` (what KEDA or an HPA scales on),
  ``jobyard_queue_paused{queue}``, ``jobyard_workers_live``, and of each limited scope (a
  queue's own limits, ``job=""``, or a job name's): ``jobyard_limit_running{queue,job}``,
  ``jobyard_limit_rate_used{queue,job}``, and the jobs each limit holds back now,
  ``jobyard_limit_held_back{queue,limit}`` (a queue's own) and
  ``jobyard_job_limit_held_back{queue,job,limit}`` (a job name's; see :func:`held_back`);
  read through the App (a few store calls, kept ``cache`` seconds so many scrapers cost the
  store no more).

Nothing in the core imports this module or prometheus-client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .. import views
from .._tally import COUNTERS, Metrics
from ..app import App
from ..backends.base import LIMITS_WALK, LimitStats
from ..errors import ConfigurationError

log = logging.getLogger("jobyard.web")

STATUSES = ("waiting", "pending", "running", "completed", "failed", "cancelled")
_HELP = {
    "enqueued": "Jobs this process enqueued (created, not found by their idempotency key).",
    "completed": "Attempts that completed.",
    "retried": "Attempts that failed and will run again.",
    "failed": "Jobs that entered the dead letter (failed).",
    "cancelled": "Jobs that ended cancelled.",
    "released": "Attempts handed back to pending at shutdown, uncounted.",
    "lease_lost": "Lapsed leases the reaper found (the worker stopped renewing them).",
}


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the store tells at one scrape."""

    counts: dict[str, dict[str, int]]  # queue -> status -> jobs
    oldest: dict[str, float]  # queue -> seconds its oldest due pending job has waited
    paused: dict[str, bool]
    workers: int
    limits: tuple[LimitStats, ...] = ()  # every limited scope (``App.limits``)
    held: dict[tuple[str, str, str], int] = field(default_factory=dict)  # see held_back


_COUNTED = (
    f"Counted among the first {LIMITS_WALK:,} pending jobs of the queue the store reads (the "
    "next to be claimed; Redis: the oldest): a lower bound past that"
)
HELD_BACK_HELP = (
    "Due pending jobs a limit of the queue's own stops now, by limit: max_concurrency at its "
    "cap and rate admitting no start hold back the queue's due pending jobs; key_concurrency "
    f"those of the keys at their cap. {_COUNTED}, where max_concurrency and rate count the "
    "queue's whole pending backlog (due or not) instead. key_rate is not counted. A job "
    "stopped by two limits counts under each."
)
JOB_HELD_BACK_HELP = (
    "Due pending jobs of a job name that a limit declared on that name stops now, by limit: "
    "rate admitting no start holds back the name's due pending jobs in the queue; "
    "key_concurrency those of its keys at their cap (running jobs of that name and key). "
    f"{_COUNTED}. key_rate is not counted. A job stopped by two limits counts under each."
)


def held_back(
    limits: tuple[LimitStats, ...], pending: dict[str, int]
) -> dict[tuple[str, str, str], int]:
    """(queue, job name or "" for the queue's own, limit) -> the jobs that limit holds back
    now (:func:`jobyard.views.held_back`; ``pending``: each queue's pending count, taken for
    a queue's own max_concurrency and rate past the store's walk): what ``limits_stats`` and
    the counts give, with no other read."""
    out: dict[tuple[str, str, str], int] = {}
    for s in limits:
        for limit, n in views.held_back(s, pending.get(s.queue, 0)).items():
            out[(s.queue, s.job or "", limit)] = n
    return out


def oldest_pending(app: App, pending: dict[str, int], now: float) -> dict[str, float]:
    """Seconds each queue's oldest pending job has waited since it became due.

    The seam for the store's own cheap read (issue 19's store moves, ``QueueStats
    .oldest_pending_at``): used when the store gives it; until then, one listing per queue with
    pending jobs reads its oldest by offset (newest first, so offset = pending - 1), which a
    SQL store pays for with a scan of that queue's pending jobs."""
    ages: dict[str, float] = {}
    for queue, n in pending.items():
        if n <= 0:
            continue
        jobs = app.jobs(queue=queue, status="pending", limit=1, offset=n - 1)
        if jobs:
            job = jobs[0]
            due = max(job.created_at.timestamp(), job.run_at.timestamp())
            ages[queue] = max(now - due, 0.0)
    return ages


def read_store(app: App) -> StoreView:
    """The store's gauges: five reads (stats, queue settings, workers, the clock, the limits'
    state) and the oldest pending read per queue where the stats do not carry it."""
    stats = app.stats()
    counts = {s.queue: dict(s.counts) for s in stats}
    paused = {c.name: c.paused for c in app.queues()}
    workers = len(app.workers())
    now = app.backend.clock_now()
    given = {
        s.queue: at for s in stats if (at := getattr(s, "oldest_pending_at", None)) is not None
    }
    oldest = {q: max(now - at, 0.0) for q, at in given.items()}
    rest = {q: c.get("pending", 0) for q, c in counts.items() if q not in given}
    oldest.update(oldest_pending(app, rest, now))
    limits = tuple(app.limits())
    pending = {q: c.get("pending", 0) for q, c in counts.items()}
    held = held_back(limits, pending)
    return StoreView(counts, oldest, paused, workers, limits, held)


class JobyardCollector:
    """A prometheus-client collector of ``counters()`` (this process's tally, or a worker's
    processes summed) and, with ``store``, of the store's gauges (read at most every ``cache``
    seconds)."""

    def __init__(
        self,
        app: App,
        counters: Callable[[], Metrics] | None = None,
        *,
        store: bool = True,
        cache: float = 2.0,
    ) -> None:
        self.app = app
        self.counters = counters or app.metrics
        self.store = store
        self.cache = cache
        self._lock = threading.Lock()
        self._read: tuple[float, StoreView | None] | None = None
        if counters is None:
            app.metrics()  # counting starts now

    def collect(self) -> Iterator[Metric]:
        """The metric families of one scrape."""
        yield from self._counters(self.counters())
        if self.store:
            yield from self._store()

    def describe(self) -> list[Metric]:
        """Nothing: the families are made at each scrape (no store read at registration)."""
        return []

    def _counters(self, snap: Metrics) -> Iterator[Metric]:
        for kind in COUNTERS:
            family = CounterMetricFamily(
                f"jobyard_jobs_{kind}", _HELP[kind], labels=["queue", "name"]
            )
            for (queue, name), n in sorted(snap.counters.get(kind, {}).items()):
                family.add_metric([queue, name], n)
            yield family
        for kind, doc in (
            ("run_seconds", "Seconds each attempt's handler ran."),
            ("wait_seconds", "Seconds from a job being due to its handler starting."),
        ):
            hist = HistogramMetricFamily(f"jobyard_job_{kind}", doc, labels=["queue", "name"])
            for (queue, name), h in sorted(snap.histograms.get(kind, {}).items()):
                buckets = [(_le(bound), float(n)) for bound, n in h.cumulative()]
                hist.add_metric([queue, name], buckets, h.sum)
            yield hist
        notes = CounterMetricFamily(
            "jobyard_worker_events", "The worker's other events, by kind.", labels=["event"]
        )
        for kind, n in sorted(snap.notes.items()):
            notes.add_metric([kind], n)
        yield notes

    def _store(self) -> Iterator[Metric]:
        view = self._store_view()
        up = GaugeMetricFamily("jobyard_store_up", "1 if the store answered this scrape.")
        up.add_metric([], 0.0 if view is None else 1.0)
        yield up
        if view is None:
            return
        jobs = GaugeMetricFamily(
            "jobyard_jobs", "Jobs in the store, by queue and status.", labels=["queue", "status"]
        )
        for queue, by in sorted(view.counts.items()):
            for status in STATUSES:
                jobs.add_metric([queue, status], float(by.get(status, 0)))
        yield jobs
        oldest = GaugeMetricFamily(
            "jobyard_queue_oldest_pending_age_seconds",
            "Seconds the queue's oldest due pending job has waited (0: none pending).",
            labels=["queue"],
        )
        for queue in sorted(view.counts):
            oldest.add_metric([queue], view.oldest.get(queue, 0.0))
        yield oldest
        paused = GaugeMetricFamily(
            "jobyard_queue_paused", "1 if the queue is paused.", labels=["queue"]
        )
        for queue, is_paused in sorted(view.paused.items()):
            paused.add_metric([queue], 1.0 if is_paused else 0.0)
        yield paused
        live = GaugeMetricFamily("jobyard_workers_live", "Live worker processes.")
        live.add_metric([], float(view.workers))
        yield live
        yield from self._limits(view)

    def _limits(self, view: StoreView) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "jobyard_limit_running",
            "Running jobs of each limited scope: a queue's own limits (job empty) or a job "
            "name's in its queue.",
            labels=["queue", "job"],
        )
        rate = GaugeMetricFamily(
            "jobyard_limit_rate_used",
            "How much of the scope's rate burst is taken now, 0 (idle) to 1; the next start "
            "waits once it passes (burst - 1) / burst (any value above 0 for a burst of 1).",
            labels=["queue", "job"],
        )
        for s in view.limits:
            running.add_metric([s.queue, s.job or ""], float(s.running))
            if s.rate_used is not None:
                rate.add_metric([s.queue, s.job or ""], float(s.rate_used))
        yield running
        yield rate
        # A job name's limits in a family of their own: the queue's series keep the labels
        # they always had, so a query of {queue, limit} never sums a name's into its queue's.
        held = GaugeMetricFamily(
            "jobyard_limit_held_back", HELD_BACK_HELP, labels=["queue", "limit"]
        )
        job_held = GaugeMetricFamily(
            "jobyard_job_limit_held_back", JOB_HELD_BACK_HELP, labels=["queue", "job", "limit"]
        )
        for (queue, job, limit), n in sorted(view.held.items()):
            if job:
                job_held.add_metric([queue, job, limit], float(n))
            else:
                held.add_metric([queue, limit], float(n))
        yield held
        yield job_held

    def _store_view(self) -> StoreView | None:
        with self._lock:
            now = time.monotonic()
            if self._read is not None and now - self._read[0] < self.cache:
                return self._read[1]
            try:
                view: StoreView | None = read_store(self.app)
            except Exception as exc:  # noqa: BLE001 - a scrape reports the store down, not a 500
                log.warning("metrics: the store did not answer: %s: %s", type(exc).__name__, exc)
                view = None
            self._read = (now, view)
            return view


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def registry_for(
    app: App, counters: Callable[[], Metrics] | None = None, *, store: bool = True
) -> CollectorRegistry:
    """A registry holding :class:`JobyardCollector` alone (not the default one, so two Apps in
    a process never mix)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobyardCollector(app, counters, store=store))
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text format of one scrape and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve(
    registry: CollectorRegistry, port: int, host: str = "0.0.0.0"
) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` on ``host:port`` from a daemon thread (``jobyard worker
    --metrics-port``); returns the server and its thread."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:  # taken, or not an address of this host: one line, not a traceback
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from None
    return server, thread
