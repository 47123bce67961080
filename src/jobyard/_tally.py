"""The counters ``app.metrics()`` returns and ``/metrics`` exposes: one tally of the events of
``jobyard.events``, kept in plain dictionaries (no Prometheus here; ``jobyard.web.metrics``
reads a snapshot at each scrape).

Counters are by (queue, job name) and count what this process saw: jobs it enqueued, attempts
its workers finished by outcome, lapsed leases its reaper found. Histograms are of the run time
of each attempt and of the time from a job being due to its handler starting. A worker run with
``--processes`` sums its children's snapshots (``merge``), which each child writes to a file
(``write_snapshot``) about once a second.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import Claimed, Enqueued, Event, Finished, LeaseLost, Reaped, Started, WorkerNote

# Prometheus's default buckets, in seconds, then +Inf (implied by ``count``).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
COUNTERS = ("enqueued", "completed", "retried", "failed", "cancelled", "released", "lease_lost")
HISTOGRAMS = ("run_seconds", "wait_seconds")
# An attempt's outcome word (jobyard.hooks.JobOutcome) -> the counter it adds to. "failed" and
# "dead" both put the job in the dead letter.
_BY_OUTCOME = {
    "completed": "completed",
    "retry": "retried",
    "failed": "failed",
    "dead": "failed",
    "cancelled": "cancelled",
    "released": "released",
}
_BY_REAPED = {"failed": "failed", "cancelled": "cancelled"}

Key = tuple[str, str]  # (queue, job name)


@dataclass(slots=True)
class Histogram:
    """Observations of one (queue, name): ``counts[i]`` fell at or below ``BUCKETS[i]`` and
    above the bucket before it (not cumulative); ``count`` and ``sum`` of all of them."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    count: int = 0
    sum: float = 0.0

    def observe(self, value: float) -> None:
        """Count one observation of ``value`` seconds."""
        i = bisect.bisect_left(BUCKETS, value)
        if i < len(BUCKETS):
            self.counts[i] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket, +Inf last: Prometheus's form."""
        out, running = [], 0
        for bound, n in zip(BUCKETS, self.counts, strict=True):
            running += n
            out.append((bound, running))
        out.append((float("inf"), self.count))
        return out


@dataclass(frozen=True, slots=True)
class Metrics:
    """A snapshot of the counters (``app.metrics()``): plain data, for StatsD or any other sink.

    ``counters[kind][(queue, name)]`` for each kind of :data:`COUNTERS`; ``histograms[kind]``
    for ``run_seconds`` (how long each attempt's handler ran) and ``wait_seconds`` (from the
    job being due to its handler starting); ``notes`` counts the worker's other events (claims,
    renew_failed, handed_back, lease_lost_seen, tick_fired, tick_skipped, unsure)."""

    counters: dict[str, dict[Key, int]]
    histograms: dict[str, dict[Key, Histogram]]
    notes: dict[str, int]

    def total(self, kind: str, queue: str | None = None, name: str | None = None) -> int:
        """The sum of counter ``kind`` over the (queue, name) pairs that match."""
        return sum(
            n
            for (q, jn), n in self.counters.get(kind, {}).items()
            if (queue is None or q == queue) and (name is None or jn == name)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"counters": {kind: [{"queue", "name", "value"}]}, "histograms":
        {kind: [{"queue", "name", "counts", "count", "sum"}]}, "notes": {...}}``."""
        return {
            "counters": {
                kind: [{"queue": q, "name": n, "value": v} for (q, n), v in sorted(by.items())]
                for kind, by in self.counters.items()
            },
            "histograms": {
                kind: [
                    {"queue": q, "name": n, "counts": h.counts, "count": h.count, "sum": h.sum}
                    for (q, n), h in sorted(by.items())
                ]
                for kind, by in self.histograms.items()
            },
            "notes": dict(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metrics:
        """The snapshot :meth:`to_dict` wrote."""
        counters: dict[str, dict[Key, int]] = {kind: {} for kind in COUNTERS} | {
            kind: {(r["queue"], r["name"]): int(r["value"]) for r in rows}
            for kind, rows in data.get("counters", {}).items()
        }
        histograms: dict[str, dict[Key, Histogram]] = {kind: {} for kind in HISTOGRAMS}
        for kind, rows in data.get("histograms", {}).items():
            histograms[kind] = {
                (r["queue"], r["name"]): Histogram(
                    [int(c) for c in r["counts"]], int(r["count"]), float(r["sum"])
                )
                for r in rows
                if len(r["counts"]) == len(BUCKETS)
            }
        return cls(counters, histograms, {k: int(v) for k, v in data.get("notes", {}).items()})


def merge(snapshots: Iterable[Metrics]) -> Metrics:
    """The sum of ``snapshots`` (a worker's processes)."""
    counters: dict[str, dict[Key, int]] = {kind: {} for kind in COUNTERS}
    histograms: dict[str, dict[Key, Histogram]] = {kind: {} for kind in HISTOGRAMS}
    notes: dict[str, int] = {}
    for snap in snapshots:
        for kind, by in snap.counters.items():
            into = counters.setdefault(kind, {})
            for key, n in by.items():
                into[key] = into.get(key, 0) + n
        for kind, hby in snap.histograms.items():
            hinto = histograms.setdefault(kind, {})
            for key, h in hby.items():
                got = hinto.setdefault(key, Histogram())
                got.counts = [a + b for a, b in zip(got.counts, h.counts, strict=True)]
                got.count += h.count
                got.sum += h.sum
        for kind, n in snap.notes.items():
            notes[kind] = notes.get(kind, 0) + n
    return Metrics(counters, histograms, notes)


class Tally:
    """Subscribed to an App's events (``App.metrics`` starts it), counts them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Key, int]] = {kind: {} for kind in COUNTERS}
        self._histograms: dict[str, dict[Key, Histogram]] = {kind: {} for kind in HISTOGRAMS}
        self._notes: dict[str, int] = {}

    def _add(self, kind: str, key: Key, n: int = 1) -> None:
        by = self._counters[kind]
        by[key] = by.get(key, 0) + n

    def _observe(self, kind: str, key: Key, value: float) -> None:
        by = self._histograms[kind]
        h = by.get(key)
        if h is None:
            h = by[key] = Histogram()
        h.observe(value)

    def _note(self, kind: str, n: int = 1) -> None:
        self._notes[kind] = self._notes.get(kind, 0) + n

    def __call__(self, event: Event) -> None:
        """Count one event (a subscriber of ``jobyard.events.Events``)."""
        with self._lock:
            if isinstance(event, Finished):
                key = (event.queue, event.name)
                kind = _BY_OUTCOME.get(event.outcome)
                if kind is not None:
                    self._add(kind, key)
                if event.duration is not None:
                    self._observe("run_seconds", key, event.duration)
            elif isinstance(event, Started):
                if event.waited is not None:
                    self._observe("wait_seconds", (event.queue, event.name), event.waited)
            elif isinstance(event, Enqueued):
                for queue_name in event.jobs:
                    self._add("enqueued", (queue_name[1], queue_name[0]))
            elif isinstance(event, Reaped):
                key = (event.queue, event.name)
                self._add("lease_lost", key)
                if (ended := _BY_REAPED.get(event.status)) is not None:
                    self._add(ended, key)
            elif isinstance(event, WorkerNote):
                self._note(event.kind, event.count)
            elif isinstance(event, Claimed):
                self._note("claims")
            elif isinstance(event, LeaseLost):
                self._note("lease_lost_seen")

    def snapshot(self) -> Metrics:
        """A copy of the counts now."""
        with self._lock:
            return Metrics(
                {kind: dict(by) for kind, by in self._counters.items()},
                {
                    kind: {k: Histogram(list(h.counts), h.count, h.sum) for k, h in by.items()}
                    for kind, by in self._histograms.items()
                },
                dict(self._notes),
            )


def write_snapshot(metrics: Metrics, folder: str | Path) -> None:
    """Write this process's snapshot as ``<folder>/<pid>.json``, atomically (a reader never
    sees half of it)."""
    path = Path(folder) / f"{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(metrics.to_dict()))
    os.replace(tmp, path)


def read_snapshots(folder: str | Path) -> Metrics:
    """The sum of every snapshot in ``folder`` (a process that died keeps its last one, so the
    sums never go down when a child is replaced)."""
    snaps = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            snaps.append(Metrics.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours
    return merge(snaps)
