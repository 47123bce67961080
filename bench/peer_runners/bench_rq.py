"""RQ on Redis. Worker: ``rq worker bench`` (one job at a time, its design); ``--variant simple``
uses ``rq.worker.SimpleWorker`` (no fork per job), the default ``rq.Worker`` forks a work horse for
every job. Bulk API: ``Queue.enqueue_many``."""

from __future__ import annotations

from _harness import send_stamp


def noop() -> None:
    pass


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
    h.enqueue(lambda: q.enqueue(tasks.noop))

    def many(size: int) -> None:
        q.enqueue_many([Queue.prepare_data(tasks.noop) for _ in range(size)])

    h.enqueue_many(many, "Queue.enqueue_many")
    total = 2 * h.n
    finished_reg = FinishedJobRegistry(queue=q)
    failed_reg = FailedJobRegistry(queue=q)
    worker_class = "rq.worker.SimpleWorker" if h.args.variant == "simple" else "rq.Worker"
    h.start_worker(["rq", "worker", "--url", h.url, "--worker-class", worker_class, "-q", "bench"])

    def poll() -> tuple[int, int]:
        pending = q.count
        return total - pending, finished_reg.count + failed_reg.count

    try:
        h.drain(total, poll, f"worker class {worker_class}", purge=q.empty)
        h.latency(lambda i: q.enqueue(tasks.stamp, i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
