"""The fetch loop: claims as many jobs as the worker wants, in one round trip, and sleeps on the
store's push signal when there is nothing to do. The worker decides how many it wants and when a
claim is worth its round trip (``_slots.py``); it wakes this loop only then."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..backends.base import Backend, Claimed, ClaimedJob, JobsClaimParams, JobsWakeParams

log = logging.getLogger("jobyard.worker")
# Seconds the producer sleeps after handing a woken claim's jobs to idle handler threads: its
# next claim is Python work holding the GIL, which the thread just woken for the first job would
# otherwise wait for (measured: 0.27 -> 0.13 ms from claimed to handler start, idle, Redis).
HAND_OFF = 50e-6
# The shortest wait before a claim a rate limit will admit (Claimed.next_open): a claim that
# waits (JobsClaimParams.wait > 0) rather than one in a tight loop.
MIN_WAIT = 0.001
# While stopping: how often the waiting claim is woken again until the producer has ended.
WAKE_AGAIN = 0.25


class IdleClaim:
    """A waiting claim an idle handler thread makes in the producer's stead: the first job it
    brings starts on that thread, with no hand-off between the wake-up and the handler (on an
    idle 2-core machine, waking another thread cost 0.1 ms at the median, 1 ms at p99). The
    thread hands the other jobs out as the producer would, then sets ``done``."""

    def __init__(self, params: JobsClaimParams) -> None:
        self.params = params
        self.jobs: Claimed = Claimed()
        self.error: Exception | None = None
        self.done = threading.Event()


class Producer:
    """Claims jobs while ``wanted()`` asks for some and hands them to ``dispatch``;
    ``claimed(seconds, count)`` hears how long each claim round trip took (None: it waited for
    a push signal first) and what it brought."""

    def __init__(
        self,
        backend: Backend,
        worker_id: str,
        queues: Sequence[str],
        wanted: Callable[[], int],
        dispatch: Callable[[list[ClaimedJob]], object],
        slot_freed: threading.Event,
        poll_interval: float,
        claimed: Callable[[float | None, int], None] = lambda seconds, count: None,
        delegate: Callable[[JobsClaimParams], IdleClaim | None] = lambda params: None,
    ) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.wanted = wanted
        self.claimed = claimed
        self.dispatch = dispatch
        # Given a waiting claim, an IdleClaim if an idle handler thread will make it (else None).
        self.delegate = delegate
        self.slot_freed = slot_freed
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start fetching (safe to call twice)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="jobyard-producer", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop fetching; returns once no claim is in flight (safe to call twice)."""
        self._stop.set()
        self.slot_freed.set()
        if self._thread is not None:
            # A waiting claim (here, or an idle handler thread's) would sleep out its wait. A
            # wake can land just before that claim starts waiting and be missed by a store
            # whose mark is read first: wake again until the thread is gone.
            deadline = time.monotonic() + timeout
            while True:
                try:
                    self.backend.jobs_wake(JobsWakeParams(self.worker_id, self.queues))
                except Exception as exc:  # noqa: BLE001 - then the wait ends by its timeout
                    log.warning("could not wake the waiting claim: %s: %s", type(exc).__name__, exc)
                left = deadline - time.monotonic()
                self._thread.join(min(WAKE_AGAIN, max(left, 0.0)))
                if not self._thread.is_alive() or left <= WAKE_AGAIN:
                    break
            self._thread = None

    def _run(self) -> None:
        delay = 0.05
        wait = 0.0  # > 0 once a claim came back short: the next one waits for a push signal
        while not self._stop.is_set():
            free = self.wanted()
            if self.backend.claim_max is not None:
                free = min(free, self.backend.claim_max)  # a full claim is followed at once
            if free <= 0:
                # The slots are busy: wait until a claim is worth making, not polling the store.
                self.slot_freed.wait(self.poll_interval)
                self.slot_freed.clear()
                continue
            try:
                t0 = time.monotonic()
                # Waiting, the store sends the claim with its wake-up where it can (one round
                # trip from an enqueue to an idle worker's claimed job, not two).
                params = JobsClaimParams(self.worker_id, self.queues, free, wait)
                idle = self.delegate(params) if wait else None
                if idle is None:
                    jobs = self.backend.jobs_claim(params)
                else:  # a handler thread claims, and hands the jobs out itself
                    idle.done.wait()
                    if idle.error is not None:
                        raise idle.error
                    jobs = idle.jobs
                if jobs:
                    # A waiting claim's time is mostly the wait: not a round trip to learn from.
                    self.claimed(None if wait else time.monotonic() - t0, len(jobs))
                delay = 0.05
            except Exception as exc:  # noqa: BLE001 - a store outage is waited out, not fatal
                log.warning(
                    "claim failed (%s: %s); retrying in %.2fs", type(exc).__name__, exc, delay
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
                continue
            # Fewer than asked for: the queues are drained for now, so the next claim first
            # waits for a push signal instead of paying a round trip to find nothing. All of
            # them: there may be more, claim again at once.
            wait = 0.0 if len(jobs) == free else self.poll_interval
            # A rate limit held jobs back: claim again when it opens, not a poll later (and the
            # jobs stay pending meanwhile: nothing here sleeps holding one).
            opens = getattr(jobs, "next_open", None)
            if opens is not None and wait:
                wait = min(wait, max(opens, MIN_WAIT))
            if jobs and idle is None:
                self.dispatch(jobs)
                if params.wait:
                    time.sleep(HAND_OFF)  # the worker was idle: let its handlers start first
