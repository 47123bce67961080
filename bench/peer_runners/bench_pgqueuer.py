"""PgQueuer (PostgreSQL, asyncpg). Worker: ``pgqueuer.run(create, batch_size=10,
max_concurrent_tasks=20)``, what ``pgq run bench_pgqueuer:create --max-concurrent-tasks 20``
runs (that CLI of pgqueuer 1.6.0 fails on its own log-level option with typer 0.29), with its
other defaults (LISTEN/NOTIFY wake-ups; a finished job moves from the queue table to the log
table). Bulk API: ``Queries.enqueue`` with lists.

``--work-ms``: with ``--async``, the ``awork`` entrypoint awaits ``asyncio.sleep``; PgQueuer
refuses sync entrypoints, so the sync handler is ``time.sleep`` through ``asyncio.to_thread`` (what
its error message advises), on a default executor with one thread per task. With ``--work-ms`` the
batch size is ``--concurrency // 2``, so that ``max_concurrent_tasks`` (>= 2 x batch) equals the
concurrency the other libraries get: with handlers that wait, slots are what is compared.
``--call`` / ``--cpu-ms``: ``awork`` runs ``_calls.ahandle`` (the worker's loop's async clients);
``work`` runs the whole sync body, ``_calls.handle``, in ``asyncio.to_thread``. The payload is
``seconds``, or ``seconds call cpu_ms`` separated by spaces."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from _harness import ahandle, handle, send_stamp


def work_args(payload: bytes | None) -> tuple[float, str, float]:
    """A work job's payload, ``b"seconds"`` or ``b"seconds call cpu_ms"`` (call ``-``: none), as
    ``handle``'s arguments."""
    parts = (payload or b"0").decode().split()
    if len(parts) == 1:
        return float(parts[0]), "", 0.0
    return float(parts[0]), parts[1].strip("-"), float(parts[2])


def payload_of(args: tuple[float] | tuple[float, str, float]) -> bytes:
    """The payload of a work job with ``Harness.work_args``: the plain wait's as before."""
    return " ".join(repr(a) if isinstance(a, float) else a or "-" for a in args).encode()


@contextlib.asynccontextmanager
async def create() -> AsyncIterator[object]:
    """The worker's factory: a PgQueuer with the two entrypoints."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.models import Job

    # never a default store: the driver sets $BENCH_URL before the worker imports this
    conn = await asyncpg.connect(os.environ.get("BENCH_URL", "postgresql://127.0.0.1:1/none"))
    pgq = PgQueuer.from_asyncpg_connection(conn)
    # one thread per task for the sync handler's asyncio.to_thread
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_tasks()))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        pass

    @pgq.entrypoint("work")
    async def work(job: Job) -> None:
        await asyncio.to_thread(handle, *work_args(job.payload))

    @pgq.entrypoint("awork")
    async def awork(job: Job) -> None:
        await ahandle(*work_args(job.payload))

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        send_stamp(int(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await conn.close()


def batch_size(variant: str, concurrency: int, working: bool) -> int:
    """pgqueuer requires max_concurrent_tasks >= 2 x batch size: with its default batch of 10,
    20 tasks is the closest to the others' 8 for no-op jobs (or batch 4 with 8, see --variant
    batch4); jobs that wait get exactly the others' slots (batch concurrency // 2)."""
    if variant == "batch4":
        return 4
    return max(1, concurrency // 2) if working else 10


def max_tasks() -> int:
    """The worker's max_concurrent_tasks, from the driver's environment."""
    batch = int(os.environ.get("BENCH_BATCH", "10"))
    return max(int(os.environ.get("BENCH_CONCURRENCY", "8")), 2 * batch)


def worker() -> None:
    """The worker process: pgqueuer's own supervisor loop, as ``pgq run`` starts it."""
    import pgqueuer

    batch = int(os.environ.get("BENCH_BATCH", "10"))
    asyncio.run(pgqueuer.run(create, max_concurrent_tasks=max_tasks(), batch_size=batch))


def main() -> None:
    import asyncpg
    import psycopg
    from _harness import Harness
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    h = Harness("pgqueuer")
    name, payload = "noop", None
    if h.use_async:
        name, payload = "awork", payload_of(h.work_args)
        h.handler(h.what(True))
    elif h.working:
        name, payload = "work", payload_of(h.work_args)
        h.handler(
            f"{h.what(False)} in asyncio.to_thread, one thread per task",
            "PgQueuer runs only async entrypoints",
        )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    aconn = loop.run_until_complete(asyncpg.connect(h.url))
    queries = Queries(AsyncpgDriver(aconn))
    loop.run_until_complete(queries.install())
    loop.run_until_complete(h.enqueue_async(lambda: queries.enqueue(name, payload)))
    loop.run_until_complete(
        h.enqueue_many_async(
            lambda size: queries.enqueue([name] * size, [payload] * size, [0] * size),
            "Queries.enqueue with lists",
        )
    )
    total = 2 * h.n
    batch = batch_size(h.args.variant, h.concurrency, h.working)
    conn = psycopg.connect(h.url, autocommit=True)
    tasks = max(h.concurrency, 2 * batch)
    h.start_worker(
        [sys.executable, __file__, "--worker"],
        env={
            "BENCH_CONCURRENCY": str(h.concurrency),
            "BENCH_BATCH": str(batch),
            "BENCH_CALL_POOL": str(tasks),
        },
    )

    def poll() -> tuple[int, int]:
        rows = dict(
            conn.execute("SELECT status::text, count(*) FROM pgqueuer GROUP BY status").fetchall()
        )
        left = sum(rows.values())  # finished jobs leave the queue table
        return total - rows.get("queued", 0), total - left

    try:
        h.drain(
            total,
            poll,
            f"batch size {batch}, max_concurrent_tasks {tasks}",
            purge=lambda: conn.execute("DELETE FROM pgqueuer WHERE status = 'queued'"),
            slots=tasks,
        )
        h.latency(lambda i: queries.enqueue("stamp", str(i).encode()))
    finally:
        h.stop_worker()
        conn.close()
        loop.run_until_complete(aconn.close())


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker()
    else:
        main()
