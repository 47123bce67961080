"""Backoff policies: a pure function of the attempt number to a delay in seconds."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Literal

from .backends.base import MAX_DELAY
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
