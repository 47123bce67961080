"""The handlers of ``--call`` / ``--cpu-ms`` alone, with no queue: what the call costs, and the
most jobs/s bare threads (or coroutines) running the same handler body keep up on this machine,
the ceiling a worker's slots can approach (as ``ceiling.py`` is for ``time.sleep`` alone).

    python bench/calls.py [--call redis,postgres,http] [-c 8] [--async-c 32] [--work-ms 1]
        [--cpu-ms MS] [--seconds 3]

For each call (each on the target throughput.py would start for it, ``_common.call_target``):
- ``<call> one call``: one thread, one call at a time: the median wall time of a call and the
  CPU time this process spent per call (the client's Python: what a handler holds the lock for);
- ``<call> threads``: ``-c`` threads each running ``_calls.handle(work_ms, call, cpu_ms)`` in a
  loop for ``--seconds``: jobs/s, and the share of ``-c x 1000 / work_ms`` with ``--work-ms``;
- ``<call> async``: ``--async-c`` coroutines on one event loop running ``_calls.ahandle``.
Then the HTTP server's own ceiling (``_httpd.py --ceiling``) when ``http`` is among the calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _calls
from bench._common import BENCH_DIR, CALLS, call_target, emit, slot_capacity


def one_call(kind: str, n: int = 500) -> None:
    """The cost of one call alone, one thread."""
    _calls.call(kind)  # the client and its first connection
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        _calls.call(kind)
        walls.append((time.perf_counter() - t0) * 1e6)
    cpu = (time.process_time() - cpu0) * 1e6 / n
    emit(f"{kind} one call", statistics.median(walls), "us", f"wall p50; {cpu:.0f} us CPU per call")


def share(rate: float, slots: int, work_ms: float) -> str:
    capacity = slot_capacity(slots, work_ms)
    return "" if capacity is None else f"; {100 * rate / capacity:.1f}% of {capacity:,.0f}/s"


def threads(kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float) -> None:
    """``n`` bare threads running the sync handler body."""
    done = [0] * n
    start = threading.Barrier(n + 1)
    end = 0.0

    def run(i: int) -> None:
        start.wait()
        while time.perf_counter() < end:
            _calls.handle(work_ms / 1000, kind, cpu_ms)
            done[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for w in workers:
        w.start()
    end = time.perf_counter() + seconds
    start.wait()
    for w in workers:
        w.join()
    rate = sum(done) / seconds
    emit(f"{kind} threads", rate, "jobs/s", f"{n} threads{share(rate, n, work_ms)}")


def coroutines(kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float) -> None:
    """``n`` coroutines on one loop running the async handler body."""

    async def main() -> int:
        clients = _calls.AsyncClients()
        if kind:
            await clients.call(kind)  # the client and its first connection
        end = time.perf_counter() + seconds

        async def run() -> int:
            done = 0
            while time.perf_counter() < end:
                await _calls.ahandle(work_ms / 1000, kind, cpu_ms, clients)
                done += 1
            return done

        try:
            return sum(await asyncio.gather(*(run() for _ in range(n))))
        finally:
            await clients.aclose()

    rate = asyncio.run(main()) / seconds
    emit(f"{kind} async", rate, "jobs/s", f"{n} coroutines{share(rate, n, work_ms)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--call", default=",".join(CALLS), help="comma-separated: redis,postgres,http")
    p.add_argument("--concurrency", "-c", type=int, default=8, help="threads")
    p.add_argument("--async-c", type=int, default=32, help="coroutines")
    p.add_argument("--work-ms", type=float, default=1.0, metavar="MS")
    p.add_argument("--cpu-ms", type=float, default=0.0, metavar="MS")
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    kinds = [k.strip() for k in args.call.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in CALLS]
    if unknown:
        p.error(f"unknown call {unknown[0]!r}; one of {', '.join(CALLS)}")
    print(
        f"# calls alone: work_ms={args.work_ms:g} cpu_ms={args.cpu_ms:g} threads="
        f"{args.concurrency} coroutines={args.async_c} load={os.getloadavg()[0]:.2f}",
        flush=True,
    )
    os.environ["BENCH_CALL_POOL"] = str(max(args.concurrency, args.async_c))
    for kind in kinds:
        with call_target(kind) as url:
            os.environ["BENCH_CALL_URL"] = url
            one_call(kind)
            threads(kind, args.concurrency, args.work_ms, args.cpu_ms, args.seconds)
            coroutines(kind, args.async_c, args.work_ms, args.cpu_ms, args.seconds)
            _calls.close_clients()
    if "http" in kinds:
        subprocess.run([sys.executable, str(BENCH_DIR / "_httpd.py"), "--ceiling"], check=True)


if __name__ == "__main__":
    main()
