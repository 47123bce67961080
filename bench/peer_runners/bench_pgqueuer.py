"""PgQueuer (PostgreSQL, asyncpg). Worker: ``pgqueuer.run(create, batch_size=10,
max_concurrent_tasks=20)``, what ``pgq run bench_pgqueuer:create --max-concurrent-tasks 20``
runs (that CLI of pgqueuer 1.6.0 fails on its own log-level option with typer 0.29), with its
other defaults (LISTEN/NOTIFY wake-ups; a finished job moves from the queue table to the log
table). Bulk API: ``Queries.enqueue`` with lists."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator

from _harness import send_stamp


@contextlib.asynccontextmanager
async def create() -> AsyncIterator[object]:
    """The worker's factory: a PgQueuer with the two entrypoints."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.models import Job

    # never a default store: the driver sets $BENCH_URL before the worker imports this
    conn = await asyncpg.connect(os.environ.get("BENCH_URL", "postgresql://127.0.0.1:1/none"))
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        pass

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        send_stamp(int(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await conn.close()


def worker() -> None:
    """The worker process: pgqueuer's own supervisor loop, as ``pgq run`` starts it."""
    import asyncio

    import pgqueuer

    # pgqueuer requires max_concurrent_tasks >= 2 x batch size: with its default batch of 10,
    # 20 is the closest to the others' 8 (or batch 4 with 8, see --variant batch4)
    batch = int(os.environ.get("BENCH_BATCH", "10"))
    concurrency = max(int(os.environ.get("BENCH_CONCURRENCY", "8")), 2 * batch)
    asyncio.run(pgqueuer.run(create, max_concurrent_tasks=concurrency, batch_size=batch))


def main() -> None:
    import asyncio

    import asyncpg
    import psycopg
    from _harness import Harness
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    h = Harness("pgqueuer")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    aconn = loop.run_until_complete(asyncpg.connect(h.url))
    queries = Queries(AsyncpgDriver(aconn))
    loop.run_until_complete(queries.install())
    loop.run_until_complete(h.enqueue_async(lambda: queries.enqueue("noop", None)))
    loop.run_until_complete(
        h.enqueue_many_async(
            lambda size: queries.enqueue(["noop"] * size, [None] * size, [0] * size),
            "Queries.enqueue with lists",
        )
    )
    total = 2 * h.n
    batch = 4 if h.args.variant == "batch4" else 10
    conn = psycopg.connect(h.url, autocommit=True)
    h.start_worker(
        [sys.executable, __file__, "--worker"],
        env={"BENCH_CONCURRENCY": str(h.concurrency), "BENCH_BATCH": str(batch)},
    )

    def poll() -> tuple[int, int]:
        rows = dict(
            conn.execute("SELECT status::text, count(*) FROM pgqueuer GROUP BY status").fetchall()
        )
        left = sum(rows.values())  # finished jobs leave the queue table
        return total - rows.get("queued", 0), total - left

    try:
        tasks = max(h.concurrency, 2 * batch)
        h.drain(
            total,
            poll,
            f"batch size {batch}, max_concurrent_tasks {tasks}",
            purge=lambda: conn.execute("DELETE FROM pgqueuer WHERE status = 'queued'"),
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
