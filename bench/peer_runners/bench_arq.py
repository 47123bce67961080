"""arq (asyncio, Redis). Worker: ``arq bench_arq.WorkerSettings`` with ``max_jobs = 8`` and arq's
other defaults (results kept for an hour; an idle worker polls the queue every ``poll_delay`` =
0.5 s and reads at most 100 jobs per poll, which is what its idle latency and its drain show).
No bulk enqueue API: n/a. ``--work-ms``: with ``--async``, ``awork`` awaits ``asyncio.sleep``;
arq runs only coroutine functions, so the sync handler is ``time.sleep`` through
``asyncio.to_thread`` (what arq's documentation advises for blocking code), on a default executor
of ``max_jobs`` threads so that every job slot has a thread (asyncio's default is
min(32, CPUs + 4)). ``--call`` / ``--cpu-ms``: ``awork`` runs ``_calls.ahandle`` (the worker's
loop's async clients); ``work`` runs the whole sync body, ``_calls.handle``, in
``asyncio.to_thread`` (its sync clients shared by those threads)."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _harness import ahandle, handle, send_stamp
from arq.connections import RedisSettings

MAX_JOBS = int(os.environ.get("BENCH_CONCURRENCY", "8"))


async def noop(ctx: dict[str, Any]) -> None:
    pass


async def work(ctx: dict[str, Any], seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    await asyncio.to_thread(handle, seconds, call, cpu_ms)


async def awork(ctx: dict[str, Any], seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    await ahandle(seconds, call, cpu_ms)


async def stamp(ctx: dict[str, Any], i: int) -> None:
    send_stamp(i)


async def startup(ctx: dict[str, Any]) -> None:
    """One thread per job slot for ``work``'s ``asyncio.to_thread``."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(MAX_JOBS))


class WorkerSettings:
    functions = [noop, work, awork, stamp]
    # never a default store: the driver sets $BENCH_URL before the worker imports this
    redis_settings = RedisSettings.from_dsn(os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))
    max_jobs = MAX_JOBS
    on_startup = startup


def main() -> None:
    from _harness import Harness
    from arq import create_pool
    from arq.constants import default_queue_name
    from redis import Redis

    h = Harness("arq")
    name, job_args = "noop", ()
    if h.use_async:
        name, job_args = "awork", h.work_args
        h.handler(h.what(True))
    elif h.working:
        name, job_args = "work", h.work_args
        h.handler(
            f"{h.what(False)} in asyncio.to_thread, {h.concurrency} threads",
            "arq runs only async functions",
        )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(h.url)))
    loop.run_until_complete(h.enqueue_async(lambda: pool.enqueue_job(name, *job_args)))
    h.enqueue_many(None)

    async def rest() -> None:
        for _ in range(h.n):
            await pool.enqueue_job(name, *job_args)

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
