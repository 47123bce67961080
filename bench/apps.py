"""The jobyard app the benchmarks run: ``python -m jobyard worker bench.apps:app -q bench``.

The store comes from ``$JOBYARD_BENCH_URL`` (set by ``bench/throughput.py``).
"""

from __future__ import annotations

import asyncio
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


@app.job(queue="bench")
def work(ms: float) -> None:
    """A sync handler that waits ``ms`` milliseconds on I/O (``time.sleep`` releases the GIL as a
    blocking socket read would): what is measured is how busy the worker keeps its slots."""
    time.sleep(ms / 1000.0)


@app.job(queue="bench")
async def awork(ms: float) -> None:
    """The async twin of ``work``: awaits ``ms`` milliseconds on the event loop."""
    await asyncio.sleep(ms / 1000.0)


@app.job(queue="bench")
def gather(values: list[None]) -> int:
    """The join of the group benchmark: how many member results it received."""
    return len(values)
