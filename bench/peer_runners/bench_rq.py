"""RQ on Redis. Worker: ``rq worker bench`` (one job at a time, its design); ``--variant simple``
uses ``rq.worker.SimpleWorker`` (no fork per job), the default ``rq.Worker`` forks a work horse for
every job. Bulk API: ``Queue.enqueue_many``. ``--work-ms``: ``work`` sleeps in ``time.sleep``;
with ``--async``, ``awork`` awaits ``asyncio.sleep`` (RQ runs a coroutine function's job with
``asyncio.run``, still one job at a time): one slot either way. ``--call`` / ``--cpu-ms``: both
run ``_calls.handle`` / ``ahandle`` with a PostgreSQL pool of one connection (one slot); the
forking worker runs each job in a fresh work horse, so its sync clients are made for each job
(and the CPU loop calibrated in each, about 16 ms: RQ imports the job's module there); every
async job runs in an ``asyncio.run`` of its own, so its async clients live for that job."""

from __future__ import annotations

from _harness import AsyncClients, ahandle, handle, send_stamp


def noop() -> None:
    pass


def work(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


async def awork(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    # asyncio.run per job: clients made on another job's loop cannot serve this one
    async with AsyncClients() as clients:
        await ahandle(seconds, call, cpu_ms, clients)


def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    from _harness import Harness
    from redis import Redis
    from rq import Queue
    from rq.registry import FailedJobRegistry, FinishedJobRegistry

    h = Harness("rq")
    import bench_rq as tasks  # by module name: workers cannot import __main__

    redis = Redis.from_url(h.url)
    q = Queue("bench", connection=redis)
    if h.working:
        job, job_args = (tasks.awork if h.use_async else tasks.work), h.work_args
        how = "asyncio.run, one job at a time" if h.use_async else "one job at a time"
        if h.call and h.args.variant != "simple":
            how += ", clients made in each job's work horse"
        elif h.call and h.use_async:
            how += ", async clients made for each job"
        h.handler(f"{h.what(h.use_async)} ({how})")
    else:
        job, job_args = tasks.noop, ()
    h.enqueue(lambda: q.enqueue(job, *job_args))

    def many(size: int) -> None:
        q.enqueue_many([Queue.prepare_data(job, args=job_args) for _ in range(size)])

    h.enqueue_many(many, "Queue.enqueue_many")
    total = 2 * h.n
    finished_reg = FinishedJobRegistry(queue=q)
    failed_reg = FailedJobRegistry(queue=q)
    worker_class = "rq.worker.SimpleWorker" if h.args.variant == "simple" else "rq.Worker"
    h.start_worker(
        ["rq", "worker", "--url", h.url, "--worker-class", worker_class, "-q", "bench"],
        env={"BENCH_CALL_POOL": "1"},  # one job at a time
    )

    def poll() -> tuple[int, int]:
        pending = q.count
        return total - pending, finished_reg.count + failed_reg.count

    try:
        h.drain(total, poll, f"worker class {worker_class}", purge=q.empty, slots=1)
        h.latency(lambda i: q.enqueue(tasks.stamp, i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
