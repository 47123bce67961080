"""How many jobs a worker should hold: its slots, plus a small buffer while its jobs are short.

A handler slot frees when its handler returns; the outcome is acknowledged behind it (the lease
and the fencing token protect a late acknowledgement). While handlers are fast, a slot that frees
should find its next job already claimed, or it idles for a claim round trip: so the worker keeps
a buffer of claimed jobs (at least one per slot) and claims in batches of at least half of it
rather than one job per freed slot. The half still held when a claim is sent must last until it
returns, and a claim round trip varies: so the buffer is sized, as TCP sizes its retransmission
timer, for a round trip four mean deviations above the average (with 1 ms handlers on
PostgreSQL, sizing it for the average alone left the slots waiting for a late claim 3-4 ms at a
time, 0.05 ms per job in all). And the buffer holds at least ``SPAN`` seconds of the slots' work,
so that a claim brings that much at least: a round trip costs the worker's process about 0.15 ms
of CPU on this machine whatever it carries, and the store's server a fixed part too (Redis:
0.04 ms of script a call), and a worker whose handlers call something themselves is short of CPU
and of the interpreter lock (issue 18: with 1 ms handlers on Redis, claims of ~60 jobs instead
of ~33 took a fifth off the worker's and the server's CPU per job).

A buffered job must never wait while other workers idle (the prefetch complaint of Celery users):
the buffer exists only while the average handler takes at most ``FAST`` seconds, and a buffered
job not started within ``hold`` seconds is handed back to pending (its attempt uncounted). After
a hand-back the buffer stays off until a handler finishes fast again. So the buffer never holds
more than the slots finish in half the hold time, at the pace they are seen to finish at (the
handlers' returns as they come): with handlers that compute in Python, the slots take turns on
the interpreter lock, and the pace their run times alone suggest swings up to twice too high.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAST = 0.05  # seconds: handlers slower than this on average get no buffer
HOLD = 0.1  # seconds: a buffered job waiting longer than this is handed back
SPAN = 0.01  # seconds of the slots' work the buffer holds at least (see above)
PER_SLOT = 16  # the buffer's most, per slot
_WEIGHT = 0.1  # of each new sample in the moving averages


@dataclass(slots=True)
class Pace:
    """Moving averages of handler time and claim round trip, and the buffer they call for.

    ``prefetch`` None: the buffer adapts (and is at most ``PER_SLOT * concurrency``); a number: a
    fixed buffer the user chose (0 turns it off), which is never handed back early.
    """

    concurrency: int
    prefetch: int | None = None
    hold: float = HOLD
    run_avg: float | None = None  # seconds per handler call
    gap_avg: float | None = None  # seconds between two handlers' returns, as seen
    claim_avg: float = 0.001  # seconds per claim round trip
    claim_dev: float = 0.0005  # mean deviation of a claim round trip from claim_avg
    cool: bool = False  # a buffered job was handed back: no buffer until a fast finish
    _buffer: int = 0  # buffer() as of the last refresh (it is read once per finished job)
    _finishes: int = 0
    _last: float | None = None  # monotonic: the last return

    def __post_init__(self) -> None:
        self._refresh()

    @property
    def adaptive(self) -> bool:
        """The buffer follows the handlers' pace, and buffered jobs can be handed back."""
        return self.prefetch is None

    def finished(self, seconds: float, now: float | None = None) -> None:
        """A handler returned after ``seconds`` (at monotonic ``now``, if known)."""
        avg = self.run_avg
        self.run_avg = run = seconds if avg is None else avg + _WEIGHT * (seconds - avg)
        if now is not None:
            if self._last is not None:
                # A gap longer than a handler's run is an idle spell, not the pace.
                gap = min(now - self._last, run)
                g = self.gap_avg
                self.gap_avg = gap if g is None else g + _WEIGHT * (gap - g)
            self._last = now
        self._finishes += 1
        if seconds <= FAST and self.cool:
            self.cool = False
            self._refresh()
        elif self._finishes % 8 == 0 or avg is None:
            self._refresh()

    def claimed(self, seconds: float) -> None:
        """A claim round trip took ``seconds``."""
        error = seconds - self.claim_avg
        self.claim_avg += _WEIGHT * error
        self.claim_dev += _WEIGHT * (abs(error) - self.claim_dev)
        self._refresh()

    def handed_back(self) -> None:
        """A buffered job waited too long and was handed back."""
        self.cool = True
        self._refresh()

    def buffer(self) -> int:
        """Jobs to hold beyond the slots."""
        return self._buffer

    def _refresh(self) -> None:
        self._buffer = self._depth()

    def _depth(self) -> int:
        if self.prefetch is not None:
            return self.prefetch
        avg = self.run_avg
        if self.cool or avg is None or avg > FAST:
            return 0
        pace = self.concurrency / max(avg, 1e-4)  # jobs/s the slots finish when full
        # What they were seen to finish, if less: handlers that hold the interpreter lock take
        # turns on it, and a job's run time then swings between its own and the turns it
        # waited for, so that c / run_avg overstates the pace (with 0.5 ms of pure Python per
        # job, up to 2-10 times) and jobs buffered for it wait past the hold time.
        seen = pace if self.gap_avg is None else min(pace, 1 / max(self.gap_avg, 1e-6))
        # The half held back while a claim is out lasts a slow round trip; and at least one job
        # per slot: slots that started together free together, and each burst finds jobs ready.
        slow_claim = self.claim_avg + 4 * self.claim_dev
        depth = max(math.ceil(2 * pace * slow_claim) + 1, self.concurrency, math.ceil(pace * SPAN))
        # Never more than the slots finish in half the hold time, so a buffered job starts in time.
        return max(1, min(depth, PER_SLOT * self.concurrency, int(seen * self.hold / 2)))

    def threshold(self) -> int:
        """The smallest claim worth a round trip: half the buffer (1 when there is none)."""
        return max(1, (self._buffer + 1) // 2)
