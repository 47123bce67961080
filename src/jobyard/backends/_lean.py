"""Which calls a store sends through its lean statement or script, and which straight to the
general one.

The common enqueue (one plain job) and the common claim (queues whose gates are open) have a
lean form on Redis and PostgreSQL: it does what the general form would, in a fraction of the
server's time, and when it meets what it does not handle (a fair queue, a max_pending, a limit)
it writes nothing and says so, and the store sends the general form. So that a queue it does
not handle does not pay that round trip on every call, the store remembers such a queue for a
while, then tries the lean form again (a queue's settings rarely change, and the general form
is always right).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

# Seconds a call that the lean form handed over goes straight to the general form.
LEAN_AGAIN = 60.0


class Lean:
    """The calls (any hashable key: the form and its queues) handed to the general form lately.
    Thread-safe."""

    def __init__(self) -> None:
        self._until: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def ok(self, key: Hashable) -> bool:
        """Whether to try the lean form for ``key``."""
        until = self._until.get(key)
        if until is None:
            return True
        if until > time.monotonic():
            return False
        with self._lock:
            self._until.pop(key, None)
        return True

    def handed_over(self, key: Hashable) -> None:
        """The lean form handed ``key``'s call to the general one (having written nothing)."""
        with self._lock:
            self._until[key] = time.monotonic() + LEAN_AGAIN
