"""Procrastinate (PostgreSQL). Worker: ``procrastinate --app=bench_procrastinate.app worker
--queues bench --concurrency 8`` with its defaults (LISTEN/NOTIFY wake-ups, jobs kept after they
finish). Async tasks and the async API (Procrastinate's native side). Bulk API:
``Task.batch_defer_async``. ``--work-ms``: with ``--async``, the ``awork`` task awaits
``asyncio.sleep``; else ``work`` is a sync task sleeping in ``time.sleep``, which Procrastinate runs
in the event loop's default executor: the worker is then started by ``app.run_worker_async``
(what the CLI runs) on a loop whose default executor has ``--concurrency`` threads, so that every
slot has one (asyncio's default is min(32, CPUs + 4)). ``--call`` / ``--cpu-ms``: ``work`` runs
``_calls.handle`` in that executor, ``awork`` ``_calls.ahandle`` (the worker's loop's async
clients)."""

from __future__ import annotations

import asyncio
import os
import sys

import procrastinate
from _harness import ahandle, handle, send_stamp

# never a default store: the driver sets $BENCH_URL before the worker imports this
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_URL", "postgresql://127.0.0.1:1/none")
    )
)


@app.task(name="noop", queue="bench")
async def noop() -> None:
    pass


@app.task(name="work", queue="bench")
def work(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    handle(seconds, call, cpu_ms)


@app.task(name="awork", queue="bench")
async def awork(seconds: float, call: str = "", cpu_ms: float = 0.0) -> None:
    await ahandle(seconds, call, cpu_ms)


@app.task(name="stamp", queue="bench")
async def stamp(i: int) -> None:
    send_stamp(i)


def worker() -> None:
    """The worker for sync tasks: what ``procrastinate worker`` runs, with one default-executor
    thread per slot."""
    from concurrent.futures import ThreadPoolExecutor

    import bench_procrastinate as tasks  # the module the jobs' tasks are registered in

    concurrency = int(os.environ["BENCH_CONCURRENCY"])

    async def run() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(concurrency))
        async with tasks.app.open_async():
            await tasks.app.run_worker_async(queues=["bench"], concurrency=concurrency)

    asyncio.run(run())


def main() -> None:
    import psycopg
    from _harness import Harness

    h = Harness("procrastinate")
    import bench_procrastinate as tasks  # by module name, as the worker sees it

    job, job_kwargs = tasks.noop, {}
    if h.use_async:
        job, job_kwargs = tasks.awork, h.work_kwargs
        h.handler(f"{h.what(True)} in an async task")
    elif h.working:
        job, job_kwargs = tasks.work, h.work_kwargs
        h.handler(f"{h.what(False)} in a sync task, default executor of {h.concurrency} threads")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(tasks.app.open_async())
    loop.run_until_complete(tasks.app.schema_manager.apply_schema_async())
    loop.run_until_complete(h.enqueue_async(lambda: job.defer_async(**job_kwargs)))
    loop.run_until_complete(
        h.enqueue_many_async(
            lambda size: job.batch_defer_async(*(dict(job_kwargs) for _ in range(size))),
            "Task.batch_defer_async",
        )
    )
    total = 2 * h.n
    conn = psycopg.connect(h.url, autocommit=True)
    if h.working and not h.use_async:
        h.start_worker(
            [sys.executable, __file__, "--worker"],
            env={"BENCH_CONCURRENCY": str(h.concurrency)},
        )
    else:
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
    if sys.argv[1:] == ["--worker"]:
        worker()
    else:
        main()
