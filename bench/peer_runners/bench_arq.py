"""arq (asyncio, Redis). Worker: ``arq bench_arq.WorkerSettings`` with ``max_jobs = 8`` and arq's
other defaults (results kept for an hour; an idle worker polls the queue every ``poll_delay`` =
0.5 s and reads at most 100 jobs per poll, which is what its idle latency and its drain show).
No bulk enqueue API: n/a."""

from __future__ import annotations

import os
from typing import Any

from _harness import send_stamp
from arq.connections import RedisSettings


async def noop(ctx: dict[str, Any]) -> None:
    pass


async def stamp(ctx: dict[str, Any], i: int) -> None:
    send_stamp(i)


class WorkerSettings:
    functions = [noop, stamp]
    # never a default store: the driver sets $BENCH_URL before the worker imports this
    redis_settings = RedisSettings.from_dsn(os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "8"))


def main() -> None:
    import asyncio

    from _harness import Harness
    from arq import create_pool
    from arq.constants import default_queue_name
    from redis import Redis

    h = Harness("arq")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(h.url)))
    loop.run_until_complete(h.enqueue_async(lambda: pool.enqueue_job("noop")))
    h.enqueue_many(None)

    async def rest() -> None:
        for _ in range(h.n):
            await pool.enqueue_job("noop")

    loop.run_until_complete(rest())
    total = 2 * h.n
    redis = Redis.from_url(h.url)
    h.start_worker(
        ["arq", "bench_arq.WorkerSettings"], env={"BENCH_CONCURRENCY": str(h.concurrency)}
    )

    def poll() -> tuple[int, int]:
        left = redis.zcard(default_queue_name)  # a job leaves the queue when it finishes
        return total - left, total - left

    try:
        h.drain(
            total,
            poll,
            f"max_jobs {h.concurrency}",
            purge=lambda: redis.delete(default_queue_name),
        )
        # arq polls every 0.5 s: spread the enqueues over its cycle, fewer samples
        h.args.latency_samples = min(h.args.latency_samples, 100)
        h.latency(lambda i: pool.enqueue_job("stamp", i), max_gap=0.5)
    finally:
        h.stop_worker()
        loop.run_until_complete(pool.aclose())


if __name__ == "__main__":
    main()
