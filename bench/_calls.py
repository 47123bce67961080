"""What a benchmark handler does besides waiting (issue 18): one call through a real client, and
pure Python work that holds the interpreter lock. jobyard's handlers (``bench/apps.py``) and every
peer runner's (``bench/peer_runners/``) run these same two functions, so every library's job does
the same thing: ``handle`` in a sync handler, ``ahandle`` in an async one.

A job does, in this order: its call (``--call``), its CPU loop (``--cpu-ms``), then its wait
(``--work-ms``: ``time.sleep`` / ``asyncio.sleep``). The calls, each on a client of the handler's
own (never the store's), made once per process (sync) or per event loop (async) and shared by
its threads or coroutines, as a user would write it:

- ``redis``: one ``INCR`` through redis-py (hiredis installed) on a private redis-server the
  benchmark started for the calls; async: ``redis.asyncio``;
- ``postgres``: ``with pool.connection() as c: c.execute("SELECT 1")`` on a psycopg_pool
  ``ConnectionPool`` of ``$BENCH_CALL_POOL`` connections (the slots of the process); as psycopg
  is not in autocommit, that is BEGIN, SELECT 1 and COMMIT: three round trips; async:
  ``AsyncConnectionPool``;
- ``http``: one GET through an ``httpx.Client`` (async: ``httpx.AsyncClient``) to the small
  server of ``bench/_httpd.py`` the benchmark started, the status checked.

The call's target is ``$BENCH_CALL_URL`` (set by the benchmark in the worker's environment, see
``_common.call_target``). The clients are imported when first used, so this module imports with
the standard library alone (the peer runners' drivers import it).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import weakref
from typing import Any

CALLS = ("redis", "postgres", "http")
COUNTER = "bench:calls"  # the key every redis call increments (read back to check the calls)

_lock = threading.Lock()
_clients: dict[str, Any] = {}  # kind -> this process's sync client


def _forget_clients() -> None:
    """In a forked child (RQ's work horse, Celery's prefork pool): the parent's clients, their
    sockets and pool threads are not this process's; it makes its own."""
    global _lock
    _lock = threading.Lock()
    _clients.clear()


os.register_at_fork(after_in_child=_forget_clients)


def _target() -> str:
    return os.environ["BENCH_CALL_URL"]


def _pool_size() -> int:
    return max(1, int(os.environ.get("BENCH_CALL_POOL", "8")))


def _make_sync(kind: str) -> Any:
    if kind == "redis":
        import redis

        return redis.Redis.from_url(_target())
    if kind == "postgres":
        from psycopg_pool import ConnectionPool

        size = _pool_size()
        return ConnectionPool(_target(), min_size=size, max_size=size, open=True)
    if kind == "http":
        return _httpx().Client()
    raise ValueError(f"unknown call {kind!r}; one of {', '.join(CALLS)}")


def _httpx() -> Any:
    """httpx, its per-request INFO log line off: the workers of Dramatiq, SAQ and others log at
    INFO, and a line per call would be a cost of its own, in some libraries and not others."""
    import logging

    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)
    return httpx


def client(kind: str) -> Any:
    """This process's client for ``kind``, made at its first use and shared by its threads."""
    found = _clients.get(kind)
    if found is not None:
        return found
    with _lock:
        if kind not in _clients:
            _clients[kind] = _make_sync(kind)
        return _clients[kind]


def close_clients() -> None:
    """Close this process's sync clients (a benchmark that is done with them)."""
    with _lock:
        for c in _clients.values():
            c.close()
        _clients.clear()


def call(kind: str) -> None:
    """One call of ``kind`` on this process's client; nothing for ``""``."""
    if not kind:
        return
    c = client(kind)
    if kind == "redis":
        c.incr(COUNTER)
    elif kind == "postgres":
        with c.connection() as conn:
            conn.execute("SELECT 1")
    else:
        c.get(_target()).raise_for_status()


class AsyncClients:
    """The async clients of one event loop (a redis.asyncio client, an AsyncConnectionPool, an
    httpx.AsyncClient), each made at its first use. ``ahandle`` keeps one per running loop;
    ``async with AsyncClients()`` makes clients that live for one block (RQ runs every async
    job in an ``asyncio.run`` of its own, so a loop lives for one job)."""

    def __init__(self) -> None:
        self._made: dict[str, asyncio.Task[Any]] = {}

    async def get(self, kind: str) -> Any:
        """The client for ``kind``; coroutines that ask at once share the one being made."""
        task = self._made.get(kind)
        if task is None:
            task = self._made[kind] = asyncio.ensure_future(self._make(kind))
        return await task

    async def _make(self, kind: str) -> Any:
        if kind == "redis":
            import redis.asyncio

            return redis.asyncio.Redis.from_url(_target())
        if kind == "postgres":
            from psycopg_pool import AsyncConnectionPool

            size = _pool_size()
            pool = AsyncConnectionPool(_target(), min_size=size, max_size=size, open=False)
            await pool.open()
            return pool
        if kind == "http":
            return _httpx().AsyncClient()
        raise ValueError(f"unknown call {kind!r}; one of {', '.join(CALLS)}")

    async def call(self, kind: str) -> None:
        """One call of ``kind``; nothing for ``""``."""
        if not kind:
            return
        c = await self.get(kind)
        if kind == "redis":
            await c.incr(COUNTER)
        elif kind == "postgres":
            async with c.connection() as conn:
                await conn.execute("SELECT 1")
        else:
            (await c.get(_target())).raise_for_status()

    async def aclose(self) -> None:
        """Close every client made."""
        for kind, task in self._made.items():
            c = await task
            if kind == "redis":
                await c.aclose()
            elif kind == "postgres":
                await c.close()
            else:
                await c.aclose()
        self._made.clear()

    async def __aenter__(self) -> AsyncClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClients] = (
    weakref.WeakKeyDictionary()
)


def loop_clients() -> AsyncClients:
    """The async clients of the running event loop (one loop per worker process in every library
    but RQ)."""
    loop = asyncio.get_running_loop()
    found = _loops.get(loop)
    if found is None:
        found = _loops[loop] = AsyncClients()
    return found


# --- the CPU loop ----------------------------------------------------------------------------

# iterations of _spin per millisecond of a thread's CPU time, once calibrated; a forked child
# keeps its parent's (the same CPUs)
_per_ms = 0.0
_checked_ms = 0.0  # what the check after the calibration measured for its loop


def _spin(n: int) -> int:
    """Pure Python, holding the interpreter lock throughout (no call that releases it)."""
    x = 0
    for i in range(n):
        x ^= i
    return x


def _cpu_ms(n: int) -> float:
    t0 = time.thread_time()
    _spin(n)
    return (time.thread_time() - t0) * 1000.0


def calibrate(check_ms: float = 0.5) -> tuple[float, float]:
    """Iterations of the loop per millisecond of CPU, measured on this thread's CPU clock: the
    fastest of 7 runs of 1-2 ms, then checked: the fastest of 7 loops of ``check_ms`` must take
    ``check_ms`` within 10%, else it is measured again (3 tries; then the last is kept and a
    warning goes to stderr, the worker's log). Once per process (a forked child keeps its
    parent's); returns (the rate, the check's ms).

    The fastest, not the median, because on this shared VM the same loop's CPU time swings by
    up to 2x within a second (fresh processes calibrated 26,000-52,000 iterations/ms in 10 s;
    a worker that calibrated on the median at its busy start then ran 0.30 ms loops for 0.5 ms
    asked): the loop is the work of ``check_ms`` on a core running at full speed, and the
    per-job figures show what the machine made of it (throughput.py's ``# cpu loop:`` line).
    Since each process calibrates in its own moment, two processes can size the loop 2x apart:
    ``$BENCH_CPU_PER_MS`` (``--cpu-per-ms``) gives every process the same rate instead, which
    each still checks (a warning if it is off, the rate kept)."""
    global _per_ms, _checked_ms
    with _lock:
        if _per_ms:
            return _per_ms, _checked_ms
        given = float(os.environ.get("BENCH_CPU_PER_MS") or 0)
        for _ in range(1 if given else 3):
            per_ms = given
            if not per_ms:
                probe = 20_000
                while _cpu_ms(probe) < 1.0:  # a run long enough for the clock's resolution
                    probe *= 2
                per_ms = probe / min(_cpu_ms(probe) for _ in range(7))
            n = max(1, round(per_ms * check_ms))
            got = min(_cpu_ms(n) for _ in range(7))
            if abs(got - check_ms) <= 0.1 * check_ms:
                break
        else:
            how = "given" if given else "measured"
            print(
                f"bench: the CPU loop is off: {check_ms:g} ms asked, {got:.3f} ms taken at"
                f" {per_ms:.0f} iterations/ms ({how})",
                file=sys.stderr,
                flush=True,
            )
        _per_ms, _checked_ms = per_ms, got
        return per_ms, got


def burn(ms: float) -> float | None:
    """Hold the interpreter lock for ``ms`` ms of CPU (the calibrated loop); returns the CPU
    time it took, in ms (None for 0)."""
    if ms <= 0:
        return None
    if not _per_ms:
        calibrate(ms)
    return _cpu_ms(max(1, round(_per_ms * ms)))


# --- the handlers ----------------------------------------------------------------------------


def handle(seconds: float, kind: str = "", cpu_ms: float = 0.0) -> float | None:
    """A sync handler's body: the call, the CPU loop, then ``time.sleep(seconds)`` (which
    releases the lock as a blocking read would). Returns the loop's CPU time in ms, if any."""
    call(kind)
    spent = burn(cpu_ms)
    if seconds > 0:
        time.sleep(seconds)
    return spent


async def ahandle(
    seconds: float, kind: str = "", cpu_ms: float = 0.0, clients: AsyncClients | None = None
) -> float | None:
    """An async handler's body: the call (on ``clients``, default the running loop's), the CPU
    loop (on the loop's thread: it blocks the loop, as such code does), then
    ``asyncio.sleep(seconds)``."""
    if kind:
        await (clients or loop_clients()).call(kind)
    spent = burn(cpu_ms)
    if seconds > 0:
        await asyncio.sleep(seconds)
    return spent


def describe(ms: float, kind: str, cpu_ms: float, use_async: bool) -> str:
    """What the handler does, in words, for the ``# handler:`` lines: e.g. ``one INCR (redis-py
    (hiredis)), then time.sleep(1 ms)``; the plain wait as before (``time.sleep(1 ms)``)."""
    steps = []
    if kind:
        client = {
            "redis": "redis.asyncio" if use_async else "redis-py (hiredis)",
            "postgres": "AsyncConnectionPool" if use_async else "psycopg_pool ConnectionPool",
            "http": "httpx.AsyncClient" if use_async else "httpx.Client",
        }[kind]
        what = {"redis": "one INCR", "postgres": "one SELECT 1", "http": "one GET"}[kind]
        steps.append(f"{what} ({client})")
    if cpu_ms > 0:
        steps.append(f"{cpu_ms:g} ms of Python CPU")
    if ms > 0 or not steps:
        steps.append(f"{'asyncio.sleep' if use_async else 'time.sleep'}({ms:g} ms)")
    return ", then ".join(steps)
