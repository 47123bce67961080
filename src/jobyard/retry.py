"""Backoff policies: a pure function of the attempt number to a delay in seconds; and the
reaper's decision on a lapsed lease (:func:`decide_lapsed`), made here with the same policy,
once for every store."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Literal

from .backends.base import (
    AT_MOST_ONCE_LOST_ERROR,
    CANCEL_LOST_ERROR,
    LEASE_LOST_ERROR,
    MAX_DELAY,
    Lapsed,
    ReapMove,
)
from .errors import ConfigurationError

BackoffKind = Literal["fixed", "linear", "exponential"]
KINDS: tuple[str, ...] = ("fixed", "linear", "exponential")
MAX_BACKOFF = MAX_DELAY  # a backoff's cap: the longest delay every store can hold


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before attempt ``n + 1`` after attempt ``n`` failed.

    ``fixed`` waits ``base``; ``linear`` waits ``base * n``; ``exponential`` waits
    ``base * 2 ** (n - 1)``. The wait is capped at ``cap``. With ``jitter`` the wait is drawn
    uniformly from ``[wait / 2, wait]`` ("equal jitter"), so retries of many jobs that failed
    together spread out without ever retrying sooner than half the nominal delay.
    """

    kind: BackoffKind = "exponential"
    base: float = 1.0
    cap: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(
                f"unknown backoff {self.kind!r}: use one of {', '.join(KINDS)} or jobyard.Backoff"
            )
        if not (0 <= self.base < math.inf and 0 <= self.cap <= MAX_BACKOFF):
            raise ConfigurationError(
                f"backoff base must be finite and cap at most {MAX_BACKOFF:.0f} seconds "
                "(100 years), neither negative"
            )

    def nominal(self, attempt: int) -> float:
        """The delay after failed attempt ``attempt`` (1-based), before jitter."""
        n = max(attempt, 1)
        if self.kind == "fixed":
            delay = self.base
        elif self.kind == "linear":
            delay = self.base * n
        else:
            delay = self.base * 2.0 ** min(n - 1, 64)
        return min(delay, self.cap)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay after failed attempt ``attempt``, with jitter when enabled."""
        nominal = self.nominal(attempt)
        if not self.jitter or nominal == 0:
            return nominal
        return (rng or random).uniform(nominal / 2, nominal)

    def to_json(self) -> str:
        """The form stored with a job and a queue."""
        return json.dumps(
            {"kind": self.kind, "base": self.base, "cap": self.cap, "jitter": self.jitter},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> Backoff:
        """Parse :meth:`to_json` output; ``None`` or junk gives the default policy."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            return cls(
                kind=data["kind"],
                base=float(data["base"]),
                cap=float(data["cap"]),
                jitter=bool(data["jitter"]),
            )
        except (ValueError, KeyError, TypeError, ConfigurationError):
            return cls()


def as_backoff(value: str | Backoff | None) -> Backoff | None:
    """Normalise a ``backoff=`` option: a kind name, a :class:`Backoff`, or ``None``."""
    if value is None or isinstance(value, Backoff):
        return value
    if isinstance(value, str):
        return Backoff(kind=value)  # type: ignore[arg-type]  # validated in __post_init__
    raise ConfigurationError(f"backoff must be a kind name or jobyard.Backoff, not {value!r}")


def decide_lapsed(job: Lapsed, rng: random.Random | None = None) -> ReapMove:
    """What becomes of a job whose lease lapsed (its worker stopped renewing it): the lapsed
    attempt counts as failed. Asked to cancel: cancelled, never run again. ``at_most_once``:
    failed, never run twice. Attempts spent: failed (the dead letter). Otherwise another attempt
    after the job's own backoff, as if its handler had raised (River's rescuer does the same).
    The store applies the move fenced (``leases_reap``): a renewal or ack that raced wins."""
    if job.cancel_requested:
        return ReapMove(job.id, job.token, "cancelled", CANCEL_LOST_ERROR)
    if job.delivery == "at_most_once":
        return ReapMove(job.id, job.token, "failed", AT_MOST_ONCE_LOST_ERROR)
    if job.attempts >= job.max_attempts:
        return ReapMove(job.id, job.token, "failed", LEASE_LOST_ERROR)
    delay = min(Backoff.from_json(job.backoff).delay(job.attempts, rng), MAX_DELAY)
    return ReapMove(job.id, job.token, "retry", LEASE_LOST_ERROR, delay)
