"""Procrastinate (PostgreSQL). Worker: ``procrastinate --app=bench_procrastinate.app worker
--queues bench --concurrency 8`` with its defaults (LISTEN/NOTIFY wake-ups, jobs kept after they
finish). Async tasks and the async API (Procrastinate's native side). Bulk API:
``Task.batch_defer_async``."""

from __future__ import annotations

import os

import procrastinate
from _harness import send_stamp

# never a default store: the driver sets $BENCH_URL before the worker imports this
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_URL", "postgresql://127.0.0.1:1/none")
    )
)


@app.task(name="noop", queue="bench")
async def noop() -> None:
    pass


@app.task(name="stamp", queue="bench")
async def stamp(i: int) -> None:
    send_stamp(i)


def main() -> None:
    import asyncio

    import psycopg
    from _harness import Harness

    h = Harness("procrastinate")
    import bench_procrastinate as tasks  # by module name, as the worker sees it

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(tasks.app.open_async())
    loop.run_until_complete(tasks.app.schema_manager.apply_schema_async())
    loop.run_until_complete(h.enqueue_async(lambda: tasks.noop.defer_async()))
    loop.run_until_complete(
        h.enqueue_many_async(
            lambda size: tasks.noop.batch_defer_async(*({} for _ in range(size))),
            "Task.batch_defer_async",
        )
    )
    total = 2 * h.n
    conn = psycopg.connect(h.url, autocommit=True)
    h.start_worker(
        [
            "procrastinate",
            "--app=bench_procrastinate.app",
            "worker",
            "--queues",
            "bench",
            "--concurrency",
            str(h.concurrency),
        ]
    )

    def poll() -> tuple[int, int]:
        rows = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status"
            ).fetchall()
        )
        finished = rows.get("succeeded", 0) + rows.get("failed", 0)
        return total - rows.get("todo", 0), finished

    try:
        h.drain(
            total,
            poll,
            f"concurrency {h.concurrency}",
            purge=lambda: conn.execute("DELETE FROM procrastinate_jobs WHERE status = 'todo'"),
        )
        h.latency(lambda i: tasks.stamp.defer_async(i=i))
    finally:
        h.stop_worker()
        conn.close()
        loop.run_until_complete(tasks.app.close_async())


if __name__ == "__main__":
    main()
