"""SAQ (asyncio, Redis). Worker: ``saq bench_saq.settings`` with ``concurrency = 8`` and SAQ's
other defaults (an idle worker blocks on BLMOVE, so pick-up is pushed). No bulk enqueue API
(``Queue.map`` enqueues one by one and waits for the results): n/a. ``--work-ms``: ``work`` is a
sync function sleeping in ``time.sleep``, which SAQ runs in its worker's thread pool (resized at
start-up to ``concurrency`` threads so that every slot has one; SAQ's default pool has
min(32, CPUs + 4)); with ``--async``, ``awork`` awaits ``asyncio.sleep``. ``--call`` /
``--cpu-ms``: ``work`` runs ``_calls.handle`` in that pool, ``awork`` ``_calls.ahandle`` (the
worker's loop's async clients)."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _harness import ahandle, handle, send_stamp
from saq import Queue

CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "8"))

# never a default store: the driver sets $BENCH_URL before the worker imports this
queue = Queue.from_url(os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"), name="bench")


async def noop(ctx: dict[str, Any]) -> None:
    pass


def work(ctx: dict[str, Any], *, seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


async def awork(
    ctx: dict[str, Any], *, seconds: float, call: str = "", cpu_ms: float = 0.0
) -> None:
    await ahandle(seconds, call, cpu_ms)


async def stamp(ctx: dict[str, Any], *, i: int) -> None:
    send_stamp(i)


async def startup(ctx: dict[str, Any]) -> None:
    """One pool thread per slot for the sync ``work`` (SAQ wraps functions per job, with the
    worker's pool of that moment)."""
    ctx["worker"].pool = ThreadPoolExecutor(CONCURRENCY)


settings = {
    "queue": queue,
    "functions": [noop, work, awork, stamp],
    "concurrency": CONCURRENCY,
    "startup": startup,
}


def main() -> None:
    from _harness import Harness

    h = Harness("saq")
    name: str = "noop"
    job_kwargs: dict[str, float | str] = {}
    if h.working:
        name, job_kwargs = ("awork" if h.use_async else "work"), h.work_kwargs
        if h.use_async:
            h.handler(h.what(True))
        else:
            h.handler(f"{h.what(False)} in SAQ's pool, {h.concurrency} threads")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    q = Queue.from_url(h.url, name="bench")
    loop.run_until_complete(q.connect())
    loop.run_until_complete(h.enqueue_async(lambda: q.enqueue(name, **job_kwargs)))
    h.enqueue_many(None, "no bulk API (map enqueues one by one and waits)")

    async def rest() -> None:
        for _ in range(h.n):
            await q.enqueue(name, **job_kwargs)

    loop.run_until_complete(rest())
    total = 2 * h.n
    h.start_worker(["saq", "bench_saq.settings"], env={"BENCH_CONCURRENCY": str(h.concurrency)})

    async def counts() -> tuple[int, int]:
        queued = await q.count("queued")
        incomplete = await q.count("incomplete")
        return total - queued, total - incomplete

    try:
        h.drain(total, lambda: loop.run_until_complete(counts()), f"concurrency {h.concurrency}")
        h.latency(lambda i: q.enqueue("stamp", i=i))
    finally:
        h.stop_worker()
        loop.run_until_complete(q.disconnect())


if __name__ == "__main__":
    main()
