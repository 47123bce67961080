"""Side tasks every worker runs: lease heartbeats and handler timeouts (fast ticks), the lease
reaper, worker registration and retention (slow ticks), and the store's own housekeeping (a
vacuum of PostgreSQL's hot partitions, on a thread of its own so a long one never delays the
reaper). No separate process is needed."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from ..backends.base import (
    Backend,
    JobsExpireParams,
    JobsPurgeParams,
    QueuesNamesParams,
    StoreTidyParams,
    WorkerInfo,
    WorkersBeatParams,
    as_expiring,
    as_tidying,
)
from ..events import Events, Reaped
from . import recurring
from .reaper import reap

log = logging.getLogger("jobyard.worker")
BEAT_EVERY = 5.0  # seconds between registry beats (rounded to whole maintenance ticks)
GONE_MARGIN = 4.0  # missed beats after which a worker counts as gone
MIN_FORGET_AFTER = 15.0  # never sooner: a busy host may delay a beat by seconds


class Ticker:
    """A daemon thread calling ``tick()`` every ``interval`` seconds until stopped; a failing
    tick is logged and retried at the next one (the store may be down for a while)."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None]) -> None:
        self.name = name
        self.interval = interval
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start ticking (safe to call twice)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop ticking (safe to call twice)."""
        self._stop.set()
        if self._thread is not None:
            if self._thread is not threading.current_thread():
                self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - keep ticking through store outages
                log.warning("%s: %s: %s", self.name, type(exc).__name__, exc)


class Maintenance:
    """The slow side tasks: reap lapsed leases, keep the worker registered, apply retention,
    keep the store tidy (``tidy``: its thresholds, None to leave it to the store's own
    housekeeping, e.g. a PostgreSQL autovacuum that keeps up)."""

    def __init__(
        self,
        backend: Backend,
        info: WorkerInfo,
        reap_interval: float,
        retention: float | None,
        schedules: bool = False,
        tidy: StoreTidyParams | None = StoreTidyParams(),  # noqa: B008 - frozen, shared safely
        events: Events | None = None,
    ) -> None:
        self.backend = backend
        self.events = events if events is not None else Events()
        self.info = info
        self.retention = retention
        self.schedules = schedules
        self._beats = 0
        # Jitter spreads the reapers of many workers so they do not all scan at once.
        interval = reap_interval * random.uniform(0.8, 1.2)
        self.ticker = Ticker("jobyard-maintenance", interval, self.tick)
        self._every = max(round(BEAT_EVERY / interval), 1)  # register about every 5 s
        # A worker silent for GONE_MARGIN beats is shown as gone and dropped from the registry.
        self.forget_after = max(self._every * interval * GONE_MARGIN, MIN_FORGET_AFTER)
        # Optional duties (base.py): only a store with a retention of its own expires jobs, only
        # one with dead rows is tidied; the others are never called for nothing.
        self.expiring = as_expiring(backend)
        self.tidying = as_tidying(backend)
        self.tidy_params = tidy if self.tidying is not None else None
        self.tidier = Ticker("jobyard-tidy", interval, self.tidy)

    def start(self) -> None:
        """Register the worker and start the ticks."""
        self.backend.workers_beat(WorkersBeatParams(self.info, forget_after=self.forget_after))
        self.ticker.start()
        if self.tidy_params is not None:
            self.tidier.start()

    def stop(self) -> None:
        """Stop ticking and unregister the worker (safe to call twice). A vacuum in flight is
        not waited for: it ends on its own, and its connection goes back to the pool."""
        self.ticker.stop()
        self.tidier.stop(timeout=0.0)
        try:
            self.backend.workers_beat(WorkersBeatParams(self.info, stopping=True))
        except Exception as exc:  # noqa: BLE001 - it ages out of the registry anyway
            log.warning("could not unregister worker %s: %s", self.info.id, exc)

    def tick(self) -> None:
        """One round of maintenance."""
        for job in reap(self.backend):
            # All the store knows: the lease was not renewed in time. Its worker may be dead,
            # or alive but stalled (paused, starved, cut off); it will be refused if it wakes.
            log.warning(
                "job %s: lease lapsed (the worker running it stopped renewing it); now %s",
                job.id,
                job.status,
            )
            if self.events.active:
                self.events.emit(Reaped(job.id, job.name, job.queue, job.status))
        if self.expiring is not None:
            expired = self.expiring.jobs_expire(JobsExpireParams())
            if expired:
                log.debug("retention: %d jobs expired", expired)
        if self.schedules:
            recurring.tick(self.backend, self.events)
        self._beats += 1
        if self._beats % self._every == 0:
            self.backend.workers_beat(WorkersBeatParams(self.info, forget_after=self.forget_after))
            self.apply_retention()

    def apply_retention(self) -> None:
        """Purge completed jobs past their queue's retention (``configure_queue``), and, with
        the worker's own ``retention``, those of the queues that set none."""
        own = {q.name: q.retention for q in self.backend.queues_list() if q.retention}
        plan: list[tuple[str | None, float]] = sorted(own.items())
        if self.retention is not None:
            if own:
                names = set(self.backend.queues_names(QueuesNamesParams(("completed",))))
                plan += [(q, self.retention) for q in sorted(names - set(own))]
            else:
                plan.append((None, self.retention))  # every queue in one statement
        for queue, seconds in plan:
            purged = self.backend.jobs_purge(
                JobsPurgeParams(("completed",), older_than=seconds, queue=queue)
            )
            if purged:
                log.info("retention: purged %d completed jobs of %s", purged, queue or "all queues")

    def tidy(self) -> None:
        """Keep the store's hot tables small (a vacuum when they pass the threshold)."""
        if self.tidy_params is None or self.tidying is None:
            return
        for line in self.tidying.store_tidy(self.tidy_params):
            log.info("store: %s", line)
