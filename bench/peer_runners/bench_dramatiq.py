"""Dramatiq with its Redis broker and default middleware. Worker: ``dramatiq bench_dramatiq
--processes P --threads 8 --queues bench``, P its own default of one process per CPU
(``--variant one``: 1). Messages are acknowledged after the actor ran. No bulk
enqueue API (``group`` sends one message per actor call): n/a. An idle consumer polls the store
with a growing back-off (Dramatiq's design), which is what its idle latency shows.
``--work-ms``: ``work`` sleeps in ``time.sleep``; with ``--async``, ``awork`` is an ``async def``
actor awaiting ``asyncio.sleep`` on the event loop thread of Dramatiq's ``AsyncIO`` middleware
(added to the worker's broker then), each of the 8 worker threads waiting for its coroutine.
``--call`` / ``--cpu-ms``: ``work`` runs ``_calls.handle`` (its clients shared by the worker
threads), ``awork`` ``_calls.ahandle`` (its clients those of the middleware's event loop)."""

from __future__ import annotations

import os

import dramatiq
from _harness import ahandle, handle, send_stamp
from dramatiq.brokers.redis import RedisBroker

# never a default store: the driver sets $BENCH_URL before this module is imported
broker = RedisBroker(url=os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))
if os.environ.get("BENCH_ASYNC"):
    from dramatiq.middleware.asyncio import AsyncIO

    broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop() -> None:
    pass


@dramatiq.actor(queue_name="bench")
def work(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


@dramatiq.actor(queue_name="bench")
async def awork(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    await ahandle(seconds, call, cpu_ms)


@dramatiq.actor(queue_name="bench")
def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    from _harness import Harness
    from redis import Redis

    h = Harness("dramatiq")  # sets $BENCH_URL
    import bench_dramatiq as tasks  # by module name, as the worker sees it

    redis = Redis.from_url(h.url)
    job, job_args = tasks.noop, ()
    if h.working:
        job, job_args = (tasks.awork if h.use_async else tasks.work), h.work_args
        if h.use_async:
            h.handler(f"{h.what(True)} in an async actor (AsyncIO middleware)")
        else:
            h.handler(f"{h.what(False)} in a sync actor")
    h.enqueue(lambda: job.send(*job_args))
    h.enqueue_many(None, "no bulk API (group sends one message per call)")
    for _ in range(h.n):
        job.send(*job_args)
    total = 2 * h.n
    # its own default is one process per CPU; --variant one: a single process
    processes = 1 if h.args.variant == "one" else os.cpu_count() or 1
    h.start_worker(
        [
            "dramatiq",
            "bench_dramatiq",
            "--processes",
            str(processes),
            "--threads",
            str(h.concurrency),
            "--queues",
            "bench",
        ],
        env={"BENCH_ASYNC": "1"} if h.use_async else None,
    )

    def poll() -> tuple[int, int]:
        pipe = redis.pipeline(transaction=False)
        pipe.llen("dramatiq:bench")
        pipe.hlen("dramatiq:bench.msgs")
        waiting, unacked = pipe.execute()
        return total - waiting, total - unacked

    try:
        h.drain(
            total,
            poll,
            f"{processes} process{'es' if processes > 1 else ''}, {h.concurrency} threads each",
            purge=lambda: redis.delete("dramatiq:bench"),
            slots=processes * h.concurrency,
        )
        h.latency(lambda i: tasks.stamp.send(i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
