"""How many jobs a worker should hold: its slots, plus a small buffer while its jobs are short.

A handler slot frees when its handler returns; the outcome is acknowledged behind it (the lease
and the fencing token protect a late acknowledgement). While handlers are fast, a slot that frees
should find its next job already claimed, or it idles for a claim round trip: so the worker keeps
a buffer of claimed jobs (at least one per slot) and claims in batches of at least half of it
rather than one job per freed slot. The half still held when a claim is sent must last until it
returns, and a claim round trip varies: so the buffer is sized, as TCP sizes its retransmission
timer, for a round trip four mean deviations above the average (with 1 ms handlers on
PostgreSQL, sizing it for the average alone left the slots waiting for a late claim 3-4 ms at a
time, 0.05 ms per job in all).

A buffered job must never wait while other workers idle (the prefetch complaint of Celery users):
the buffer exists only while the average handler takes at most ``FAST`` seconds, and a buffered
job not started within ``hold`` seconds is handed back to pending (its attempt uncounted). After
a hand-back the buffer stays off until a handler finishes fast again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAST = 0.05  # seconds: handlers slower than this on average get no buffer
HOLD = 0.1  # seconds: a buffered job waiting longer than this is handed back
_WEIGHT = 0.1  # of each new sample in the moving averages


@dataclass(slots=True)
class Pace:
    """Moving averages of handler time and claim round trip, and the buffer they call for.

    ``prefetch`` None: the buffer adapts (and is at most ``8 * concurrency``); a number: a fixed
    buffer the user chose (0 turns it off), which is never handed back early.
    """

    concurrency: int
    prefetch: int | None = None
    hold: float = HOLD
    run_avg: float | None = None  # seconds per handler call
    claim_avg: float = 0.001  # seconds per claim round trip
    claim_dev: float = 0.0005  # mean deviation of a claim round trip from claim_avg
    cool: bool = False  # a buffered job was handed back: no buffer until a fast finish
    _buffer: int = 0  # buffer() as of the last refresh (it is read once per finished job)
    _finishes: int = 0

    def __post_init__(self) -> None:
        self._refresh()

    @property
    def adaptive(self) -> bool:
        """The buffer follows the handlers' pace, and buffered jobs can be handed back."""
        return self.prefetch is None

    def finished(self, seconds: float) -> None:
        """A handler returned after ``seconds``."""
        avg = self.run_avg
        self.run_avg = seconds if avg is None else avg + _WEIGHT * (seconds - avg)
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
        # The half held back while a claim is out lasts a slow round trip; and at least one job
        # per slot: slots that started together free together, and each burst finds jobs ready.
        slow_claim = self.claim_avg + 4 * self.claim_dev
        depth = max(math.ceil(2 * pace * slow_claim) + 1, self.concurrency)
        # Never more than the slots finish in half the hold time, so a buffered job starts in time.
        return max(1, min(depth, 8 * self.concurrency, int(pace * self.hold / 2)))

    def threshold(self) -> int:
        """The smallest claim worth a round trip: half the buffer (1 when there is none)."""
        return max(1, (self._buffer + 1) // 2)
