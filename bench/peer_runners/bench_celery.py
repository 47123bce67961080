"""Celery with the Redis broker. Worker: ``celery -A bench_celery worker -Q bench --pool threads
-c 8`` (one process; ``--variant prefork`` runs Celery's default prefork pool: 8 child processes).
``task_acks_late``: a message is acknowledged after its task ran, as jobyard does; no result
backend (results ignored, Celery's default). No bulk enqueue API (``group`` publishes one message
per task): n/a. ``--work-ms``: ``work`` sleeps in ``time.sleep``; Celery runs no ``async def``
task, so ``--async`` runs that same sync task (and says so). ``--call`` / ``--cpu-ms``: ``work``
runs ``_calls.handle``, its clients shared by the pool's threads (with ``--variant prefork``, made
in each child process)."""

from __future__ import annotations

import os

from _harness import handle, send_stamp
from celery import Celery

# never a default store: the driver sets $BENCH_URL before this module is imported
app = Celery("bench", broker=os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_default_queue="bench",
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop() -> None:
    pass


@app.task(name="work")
def work(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


@app.task(name="stamp")
def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    from _harness import Harness
    from redis import Redis

    h = Harness("celery")  # sets $BENCH_URL
    import bench_celery as tasks  # by module name, as the worker sees it

    redis = Redis.from_url(h.url)
    pool = ["--pool", "prefork"] if h.args.variant == "prefork" else ["--pool", "threads"]
    job, job_args = tasks.noop, ()
    if h.working:
        job, job_args = tasks.work, h.work_args
        ran = f"{h.what(False)} in a sync task (pool {pool[1]})"
        h.handler(ran, "Celery runs no async def task" if h.use_async else "")
    tasks.noop.delay()  # open the producer connection before timing
    redis.delete("bench")
    h.enqueue(lambda: job.delay(*job_args))
    h.enqueue_many(None, "no bulk API (group publishes one message per task)")
    for _ in range(h.n):
        job.delay(*job_args)
    total = 2 * h.n
    h.start_worker(
        [
            "celery",
            "-A",
            "bench_celery",
            "worker",
            "-Q",
            "bench",
            *pool,
            "-c",
            str(h.concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ]
    )

    def poll() -> tuple[int, int]:
        pipe = redis.pipeline(transaction=False)
        pipe.llen("bench")
        pipe.hlen("unacked")
        waiting, unacked = pipe.execute()
        return total - waiting, total - waiting - unacked

    try:
        h.drain(total, poll, f"pool {pool[1]}, acks_late", purge=lambda: redis.delete("bench"))
        h.latency(lambda i: tasks.stamp.delay(i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
