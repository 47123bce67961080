"""The worker's run ledger: every attempt it holds, from claim until its outcome is acknowledged,
and the counts its claims are paced by.

One lock guards it all (``lock``); the heartbeat, the completer, the producer, the handler
threads and the event loop each take it for a few dictionary moves, never across a store call
or user code. Attempts are held by (id, token): after a stall this worker may claim a job again
while it still holds the attempt whose lease lapsed, and a reply about one attempt (a lost
lease, a refused outcome) must never be applied to the other. The first outcome decided for an
attempt wins (:meth:`mark_settled`): a handler's late return after a timeout or a shutdown
release is discarded by whoever comes second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from ..backends.base import ClaimedJob, Outcome
from ._held import Running
from .executor import JobContext


class Ledger:
    """The attempts one worker holds. ``held``: handed to a thread or task and not yet returned
    from it; ``open``: no outcome decided yet; ``stopping``: the worker stopped claiming (only
    then does anyone wait on :attr:`idle`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.running: dict[tuple[str, str], Running] = {}
        self.held = 0
        self.open = 0
        self.stopping = False

    def add(
        self, jobs: Iterable[ClaimedJob], context: Callable[[ClaimedJob], JobContext], now: float
    ) -> list[Running]:
        """With the lock held: hold the claimed ``jobs`` (monotonic ``now``)."""
        runs = []
        for job in jobs:
            run = Running(
                job, context(job), next_renew=now + job.lease / 3, renewed_at=now, claimed_at=now
            )
            self.running[job.id, job.token] = run
            runs.append(run)
        self.held += len(runs)
        self.open += len(runs)
        return runs

    def begin(self, run: Running, timed: bool) -> bool:
        """Mark a job started unless it was settled while it waited (handed back, or released at
        shutdown); ``timed``: its deadline is kept here (sync handlers)."""
        with self.lock:
            if run.settled:
                return False
            run.started = True
            if timed and run.job.timeout is not None:
                run.deadline = time.monotonic() + run.job.timeout
            return True

    def mark_settled(self, run: Running) -> bool:
        """With the lock held: the first outcome decided for ``run`` wins; True if this is it."""
        if run.settled:
            return False
        run.settled = True
        self.open -= 1
        if self.stopping:  # only stop() waits for the last outcomes (and it polls too)
            self.idle.notify_all()
        return True

    def settle(self, run: Running) -> bool:
        """:meth:`mark_settled`, taking the lock."""
        with self.lock:
            return self.mark_settled(run)

    def hand_back(self, runs: Iterable[Running]) -> list[Outcome]:
        """With the lock held: settle jobs that were claimed but never started as released
        (back to pending now, the attempt uncounted). A thread that picks one up later skips it."""
        back = []
        for run in runs:
            if not run.started and self.mark_settled(run):
                back.append(Outcome(run.job.id, run.job.token, "release"))
        return back

    def unsettled(self) -> list[Running]:
        """With the lock held: the attempts with no outcome yet."""
        return [r for r in self.running.values() if not r.settled]

    def forget(self, outcomes: Iterable[Outcome]) -> list[Running]:
        """With the lock held: the store settled ``outcomes``; drop those attempts (and only
        those), returning what was held of them."""
        gone = []
        for o in outcomes:
            run = self.running.pop((o.id, o.token), None)
            if run is not None:
                gone.append(run)
        self.idle.notify_all()
        return gone

    def wait_open(self, deadline: float, force: threading.Event) -> None:
        """Block until no attempt is open, ``force`` is set or the monotonic ``deadline``."""
        with self.idle:
            while self.open and not force.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.idle.wait(min(left, 0.1))
