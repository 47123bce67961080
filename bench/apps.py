"""The jobyard app the benchmarks run: ``python -m jobyard worker bench.apps:app -q bench``.

The store comes from ``$JOBYARD_BENCH_URL`` (set by ``bench/throughput.py``); what a handler's
``--call`` talks to from ``$BENCH_CALL_URL`` (see ``bench/_calls.py``).
"""

from __future__ import annotations

import os

import jobyard
from bench._calls import ahandle, handle
from bench._common import send_stamp

app = jobyard.App(os.environ.get("JOBYARD_BENCH_URL", "memory://"))


@app.job(queue="bench")
def noop() -> None:
    """A job that does nothing: what is measured is the queue."""


@app.job(queue="bench")
def stamp(i: int = -1) -> float:
    """Returns the instant its handler started (epoch seconds), for enqueue-to-start latency;
    first sends it with ``i`` to the probe's UDP port when one is set (``_common.Stamps``)."""
    return send_stamp(i)


@app.job(queue="bench")
def work(ms: float, call: str = "", cpu_ms: float = 0.0) -> float | None:
    """A sync handler that waits ``ms`` milliseconds on I/O (``time.sleep`` releases the GIL as a
    blocking socket read would): what is measured is how busy the worker keeps its slots. With
    ``call`` / ``cpu_ms`` (issue 18), it first makes one call on a client of its process's own,
    then holds the GIL for ``cpu_ms`` of pure Python (``bench._calls.handle``), and returns that
    loop's CPU time in ms, which throughput.py reads back as a check."""
    return handle(ms / 1000.0, call, cpu_ms)


@app.job(queue="bench")
async def awork(ms: float, call: str = "", cpu_ms: float = 0.0) -> float | None:
    """The async twin of ``work``: awaits ``ms`` milliseconds on the event loop (after its call
    on the loop's async client and its CPU loop, if asked: ``bench._calls.ahandle``)."""
    return await ahandle(ms / 1000.0, call, cpu_ms)


@app.job(queue="bench")
def gather(values: list[None]) -> int:
    """The join of the group benchmark: how many member results it received."""
    return len(values)
