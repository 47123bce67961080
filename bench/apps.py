"""The jobyard app the benchmarks run: ``python -m jobyard worker bench.apps:app -q bench``.

The store comes from ``$JOBYARD_BENCH_URL`` (set by ``bench/throughput.py``).
"""

from __future__ import annotations

import os
import time

import jobyard

app = jobyard.App(os.environ.get("JOBYARD_BENCH_URL", "memory://"))


@app.job(queue="bench")
def noop() -> None:
    """A job that does nothing: what is measured is the queue."""


@app.job(queue="bench")
def stamp() -> float:
    """Returns the instant its handler started (epoch seconds), for enqueue-to-start latency."""
    return time.time()
