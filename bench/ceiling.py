"""The most a thread-per-slot worker can get from this machine: C bare threads, no store and no
library, each taking an item from a queue, holding the interpreter lock for a given time
(``--python-us``, split before and after the wait, as a worker's own Python per job is), waiting
``--work-ms`` in ``time.sleep`` and handing the item on. Prints the share of slot capacity
used, with the threads spread over the CPUs and pinned to one, and the CPU time per item.

    python bench/ceiling.py [-c 8] [--work-ms 1] [--python-us 0,11,30] [--jobs 20000]

What a worker of the same slots reaches (``throughput.py --work-ms 1 -c 8``) is to be read
against the row with about its own Python per job: for jobyard on Redis 30-40 us (the handler
path 11 us, in one thread with the store stubbed; claim and acknowledgement with their Redis
client calls 20-28 us per job, in one thread), and the store's server shares the same cores.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time


def run(concurrency: int, work_ms: float, python_us: float, jobs: int) -> str:
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done: queue.SimpleQueue[int] = queue.SimpleQueue()
    half = python_us / 2e6

    def hold(seconds: float) -> None:  # Python work: the lock is held throughout
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def slot() -> None:
        while (item := todo.get()) is not None:
            hold(half)
            time.sleep(work_ms / 1000)
            hold(half)
            done.put(item)

    for i in range(jobs):
        todo.put(i)
    threads = [threading.Thread(target=slot) for _ in range(concurrency)]
    cpu0, t0 = os.times(), time.perf_counter()
    for t in threads:
        t.start()
    for _ in range(jobs):
        done.get()
    elapsed, cpu1 = time.perf_counter() - t0, os.times()
    for _ in threads:
        todo.put(None)
    share = jobs / elapsed / (concurrency * 1000 / work_ms) * 100
    user = (cpu1.user - cpu0.user) / jobs * 1e6
    system = (cpu1.system - cpu0.system) / jobs * 1e6
    return f"share {share:.1f} %, cpu per item: user {user:.1f} us, system {system:.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--python-us", default="0,11,30", help="comma-separated")
    parser.add_argument("--jobs", type=int, default=20000)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(f"# ceiling: {args.concurrency} bare threads, time.sleep({args.work_ms:g} ms) each")
    for python_us in (float(x) for x in args.python_us.split(",")):
        for pinned in (False, True) if len(cpus) > 1 else (False,):
            if pinned:
                os.sched_setaffinity(0, {cpus[-1]})  # threads started from here on inherit it
            line = run(args.concurrency, args.work_ms, python_us, args.jobs)
            where = "pinned" if pinned else "spread"
            print(f"python {python_us:g} us, {where}: {line}", flush=True)
            if pinned:
                os.sched_setaffinity(0, set(cpus))
    sys.exit(0)


if __name__ == "__main__":
    main()
