"""TCP ports for the servers the tests start themselves (private Redis and PostgreSQL servers,
the Redis Cluster's nodes, dashboards served by ``jobyard dashboard``).

The suite runs in several processes at once (pytest-xdist, ``make test``). Each process picks
from a slice of 10000-19999 of its own (``PYTEST_XDIST_WORKER`` of
``PYTEST_XDIST_WORKER_COUNT``), so two workers of one run never pick the same port; an offset
port (a cluster node's bus port is its port + 10000) lands in the same slice of 20000-29999.
Both ranges lie below the kernel's ephemeral range (32768 and up), where client connections
take their local ports, so a server stopped and started again on its port finds it free. Each
pick is also checked free on every address (another run on the machine, or another service,
may use a port of the range), and one process never hands out the same port twice while it has
others.
"""

from __future__ import annotations

import os
import random
import socket
import threading

LOW, HIGH = 10000, 20000
OFFSET_LIMIT = 10000  # offsets must stay below this: port + offset stays in 20000-29999

_lock = threading.Lock()
_handed: set[int] = set()


def worker_slice() -> tuple[int, int]:
    """``[low, high)``: the ports of this process's slice of 10000-19999."""
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    name = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... (unset: not xdist)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    width = (HIGH - LOW) // count
    low = LOW + (index % count) * width
    return low, low + width


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port(*offsets: int) -> int:
    """A port of this process's slice, free on every address, and so is ``port + offset`` for
    each offset (0 < offset <= 10000)."""
    if any(not 0 < o <= OFFSET_LIMIT for o in offsets):
        raise ValueError(f"offsets must be in 1..{OFFSET_LIMIT}: {offsets}")
    low, high = worker_slice()
    with _lock:
        for attempt in range(400):
            port = random.randrange(low, high)
            if port in _handed and attempt < 200:
                continue
            if all(_bindable(p) for p in (port, *(port + o for o in offsets))):
                _handed.add(port)
                return port
    raise RuntimeError(f"no free TCP port in {low}-{high - 1}")
