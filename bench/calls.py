"""The handlers of ``--call`` / ``--cpu-ms`` alone, with no queue: what the call costs, and the
most jobs/s bare threads (or coroutines) running the same handler body keep up on this machine,
the ceiling a worker's slots can approach (as ``ceiling.py`` is for ``time.sleep`` alone).

    python bench/calls.py [--call redis,postgres,http] [-c 8] [--async-c 32] [--work-ms 1]
        [--cpu-ms MS] [--seconds 3] [--processes P] [--threads-only]

For each call (each on the target throughput.py would start for it, ``_common.call_target``):
- ``<call> one call``: one thread, one call at a time: the median wall time of a call and the
  CPU time this process spent per call (the client's Python: what a handler holds the lock for);
- ``<call> threads``: ``-c`` threads each running ``_calls.handle(work_ms, call, cpu_ms)`` in a
  loop for ``--seconds``: jobs/s, the share of ``-c x 1000 / work_ms`` with ``--work-ms``, and the
  process's CPU and voluntary context switches (wake-ups) per job; ``--processes P`` runs P such
  processes side by side (as ``jobyard worker --processes P`` does), summed;
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
from bench._common import BENCH_DIR, CALLS, call_target, cpu_capacity, emit, slot_capacity


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


def share(rate: float, slots: int, work_ms: float, cpu_ms: float = 0.0) -> str:
    capacity = slot_capacity(slots, work_ms)
    text = "" if capacity is None else f"; {100 * rate / capacity:.1f}% of {capacity:,.0f}/s"
    if cpu_ms > 0:
        machine = cpu_capacity(cpu_ms)
        text += f"; cpu_share {100 * rate / machine:.1f}% of {machine:,.0f}/s"
    return text


def threads(
    kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float, processes: int = 1
) -> None:
    """``n`` bare threads running the sync handler body; with ``processes`` > 1, that many
    processes of ``n`` threads each, side by side (as ``jobyard worker --processes``)."""
    if processes > 1:
        return _threads_in_processes(kind, n, work_ms, cpu_ms, seconds, processes)
    rate, cpu_us, woken = _run_threads(kind, n, work_ms, cpu_ms, seconds)
    note = f"{n} threads{share(rate, n, work_ms, cpu_ms)}; {cpu_us:.0f} us CPU"
    note += f", {woken:.2f} wake-ups per job"
    emit(f"{kind or 'none'} threads", rate, "jobs/s", note)


def _threads_in_processes(
    kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float, processes: int
) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start = time.time() + 2.0  # every process is up and has its client by then
    with ctx.Pool(processes) as pool:
        got = pool.starmap(
            _threads_at, [(kind, n, work_ms, cpu_ms, seconds, start)] * processes, chunksize=1
        )
    rate = sum(r for r, _, _ in got)
    cpu_us = sum(r * c for r, c, _ in got) / rate
    woken = sum(r * w for r, _, w in got) / rate
    each = ", ".join(f"{r:,.0f}" for r, _, _ in got)
    slots = n * processes
    note = (
        f"{processes} processes x {n} threads ({each}/s){share(rate, slots, work_ms, cpu_ms)};"
        f" {cpu_us:.0f} us CPU, {woken:.2f} wake-ups per job"
    )
    emit(f"{kind or 'none'} threads", rate, "jobs/s", note)


def _threads_at(
    kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float, start: float
) -> tuple[float, float, float]:
    """In a process of the pool: the threads, started at the epoch second ``start``."""
    _calls.call(kind)  # the client and its first connection
    time.sleep(max(0.0, start - time.time()))
    return _run_threads(kind, n, work_ms, cpu_ms, seconds)


def _run_threads(
    kind: str, n: int, work_ms: float, cpu_ms: float, seconds: float
) -> tuple[float, float, float]:
    """(jobs/s, this process's CPU in us per job, its voluntary context switches per job)."""
    import resource

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
    usage = resource.getrusage(resource.RUSAGE_SELF)
    end = time.perf_counter() + seconds
    start.wait()
    for w in workers:
        w.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    jobs = max(sum(done), 1)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return jobs / seconds, 1e6 * cpu / jobs, (after.ru_nvcsw - usage.ru_nvcsw) / jobs


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
    emit(f"{kind} async", rate, "jobs/s", f"{n} coroutines{share(rate, n, work_ms, cpu_ms)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--call",
        default=",".join(CALLS),
        help="comma-separated: redis,postgres,http, or none (the wait alone)",
    )
    p.add_argument("--concurrency", "-c", type=int, default=8, help="threads")
    p.add_argument("--async-c", type=int, default=32, help="coroutines")
    p.add_argument("--work-ms", type=float, default=1.0, metavar="MS")
    p.add_argument("--cpu-ms", type=float, default=0.0, metavar="MS")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="bare threads: this many processes of -c threads each, side by side",
    )
    p.add_argument("--threads-only", action="store_true", help="only the bare threads' line")
    args = p.parse_args()
    kinds = [k.strip() for k in args.call.split(",") if k.strip()]
    kinds = ["" if k == "none" else k for k in kinds]  # none: the wait (and loop) alone
    unknown = [k for k in kinds if k and k not in CALLS]
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
            if kind and not args.threads_only:
                one_call(kind)
            threads(kind, args.concurrency, args.work_ms, args.cpu_ms, args.seconds, args.processes)
            if kind and not args.threads_only:
                coroutines(kind, args.async_c, args.work_ms, args.cpu_ms, args.seconds)
            _calls.close_clients()
    if "http" in kinds and not args.threads_only:
        subprocess.run([sys.executable, str(BENCH_DIR / "_httpd.py"), "--ceiling"], check=True)


if __name__ == "__main__":
    main()
