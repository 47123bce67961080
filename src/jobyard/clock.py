"""Where "now" comes from.

Library code never reads the host's wall clock to make a decision the store has to agree with.
A :class:`Clock` returns ``None`` to mean "use the store's own clock" (PostgreSQL ``now()``, Redis
``TIME``, SQLite's ``julianday('now')``); a frozen clock returns a fixed instant that tests move
forward, and every backend passes it into its SQL or Lua as ``coalesce(:now, <store clock>)``.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Source of "now" for a backend: epoch seconds, or ``None`` for the store's clock."""

    def now(self) -> float | None:
        """Return the frozen instant in epoch seconds, or ``None`` to use the store's clock."""
        ...


class SystemClock:
    """The production clock: defers to the store's clock."""

    def now(self) -> float | None:
        """Always ``None``: the store decides what time it is."""
        return None

    def __repr__(self) -> str:
        return "SystemClock()"


class FrozenClock:
    """A clock that stands still until a test moves it; leases, delays and backoff obey it."""

    def __init__(self, start: float | datetime | None = None) -> None:
        if start is None:
            start = time.time()
        self._now = start.timestamp() if isinstance(start, datetime) else float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The frozen instant, in epoch seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new instant."""
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float | datetime) -> None:
        """Move the clock to ``when``."""
        with self._lock:
            self._now = when.timestamp() if isinstance(when, datetime) else float(when)

    def __repr__(self) -> str:
        return f"FrozenClock({datetime.fromtimestamp(self.now(), UTC).isoformat()})"


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def to_datetime(epoch: float | None) -> datetime | None:
    """Epoch seconds to an aware UTC datetime (``None`` stays ``None``).

    Never raises: a time a datetime cannot hold (``1e300``, infinity, NaN: a record written by
    something other than jobyard) is clamped to the earliest or latest datetime, so listing a
    store never fails because of one record."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, ValueError, OSError):
        return _LATEST if epoch > 0 else _EARLIEST
