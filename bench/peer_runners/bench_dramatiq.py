"""Dramatiq with its Redis broker and default middleware. Worker: ``dramatiq bench_dramatiq
--processes 1 --threads 8 --queues bench``. Messages are acknowledged after the actor ran. No bulk
enqueue API (``group`` sends one message per actor call): n/a. An idle consumer polls the store
with a growing back-off (Dramatiq's design), which is what its idle latency shows."""

from __future__ import annotations

import os

import dramatiq
from _harness import send_stamp
from dramatiq.brokers.redis import RedisBroker

# never a default store: the driver sets $BENCH_URL before this module is imported
broker = RedisBroker(url=os.environ.get("BENCH_URL", "redis://127.0.0.1:1/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop() -> None:
    pass


@dramatiq.actor(queue_name="bench")
def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    from _harness import Harness
    from redis import Redis

    h = Harness("dramatiq")  # sets $BENCH_URL
    import bench_dramatiq as tasks  # by module name, as the worker sees it

    redis = Redis.from_url(h.url)
    h.enqueue(lambda: tasks.noop.send())
    h.enqueue_many(None, "no bulk API (group sends one message per call)")
    for _ in range(h.n):
        tasks.noop.send()
    total = 2 * h.n
    h.start_worker(
        [
            "dramatiq",
            "bench_dramatiq",
            "--processes",
            "1",
            "--threads",
            str(h.concurrency),
            "--queues",
            "bench",
        ]
    )

    def poll() -> tuple[int, int]:
        pipe = redis.pipeline(transaction=False)
        pipe.llen("dramatiq:bench")
        pipe.hlen("dramatiq:bench.msgs")
        waiting, unacked = pipe.execute()
        return total - waiting, total - unacked

    try:
        h.drain(total, poll, "1 process, 8 threads", purge=lambda: redis.delete("dramatiq:bench"))
        h.latency(lambda i: tasks.stamp.send(i))
    finally:
        h.stop_worker()


if __name__ == "__main__":
    main()
