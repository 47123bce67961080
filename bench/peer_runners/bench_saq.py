"""SAQ (asyncio, Redis). Worker: ``saq bench_saq.settings`` with ``concurrency = 8`` and SAQ's
other defaults (an idle worker blocks on BLMOVE, so pick-up is pushed). No bulk enqueue API
(``Queue.map`` enqueues one by one and waits for the results): n/a."""

from __future__ import annotations

import os
from typing import Any

from _harness import send_stamp
from saq import Queue

# never a default store: the driver sets $BENCH_URL before the worker imports this
queue = Queue.from_url(os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"), name="bench")


async def noop(ctx: dict[str, Any]) -> None:
    pass


async def stamp(ctx: dict[str, Any], *, i: int) -> None:
    send_stamp(i)


settings = {
    "queue": queue,
    "functions": [noop, stamp],
    "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "8")),
}


def main() -> None:
    import asyncio

    from _harness import Harness

    h = Harness("saq")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    q = Queue.from_url(h.url, name="bench")
    loop.run_until_complete(q.connect())
    loop.run_until_complete(h.enqueue_async(lambda: q.enqueue("noop")))
    h.enqueue_many(None, "no bulk API (map enqueues one by one and waits)")

    async def rest() -> None:
        for _ in range(h.n):
            await q.enqueue("noop")

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
