"""Huey with its Redis storage (``RedisHuey``: the consumer blocks on BRPOP, so pick-up is
pushed). Worker: ``huey_consumer bench_huey.huey -k thread -w 8`` (one process, 8 worker threads)
with Huey's other defaults; a message leaves the Redis list when a worker pops it (Huey acks
nothing: at most once). No bulk enqueue API (``Task.map`` enqueues one by one): n/a.
``--work-ms``: ``work`` sleeps in ``time.sleep``; Huey runs no ``async def`` task, so ``--async``
runs that same sync task (and says so). The drain counts a job done when it has left the queue
(Huey keeps no count of running jobs), so the last 8 may still be running at the end: an error of
8 jobs in 2N. ``--call`` / ``--cpu-ms``: ``work`` runs ``_calls.handle``, its clients shared by
the consumer's worker threads."""

from __future__ import annotations

import os

from _harness import handle, send_stamp
from huey import RedisHuey

# never a default store: the driver sets $BENCH_URL before the worker imports this
huey = RedisHuey("bench", url=os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))


@huey.task()
def noop() -> None:
    pass


@huey.task()
def work(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


@huey.task()
def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    from _harness import Harness

    h = Harness("huey")  # sets $BENCH_URL
    import bench_huey as tasks  # by module name, as the consumer sees it

    job, job_args = tasks.noop, ()
    if h.working:
        job, job_args = tasks.work, h.work_args
        ran = f"{h.what(False)} in a sync task (thread workers)"
        h.handler(ran, "Huey runs no async def task" if h.use_async else "")
    h.enqueue(lambda: job(*job_args))
    h.enqueue_many(None, "no bulk API (Task.map enqueues one by one)")
    for _ in range(h.n):
        job(*job_args)
    total = 2 * h.n
    h.start_worker(
        [
            "huey_consumer",
            "bench_huey.huey",
            "-k",
            "thread",
            "-w",
            str(h.concurrency),
            "--no-periodic",
            "--quiet",
        ]
    )

    def poll() -> tuple[int, int]:
        left = tasks.huey.pending_count()
        return total - left, total - left

    try:
        h.drain(
            total,
            poll,
            f"{h.concurrency} thread workers",
            purge=lambda: tasks.huey.flush(),
        )
        h.latency(lambda i: tasks.stamp(i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
