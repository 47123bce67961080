"""Pinning a worker process to one CPU (``jobyard worker --pin``, ``Worker(cpu=...)``).

Every thread of a worker shares one interpreter lock. Spread over several cores, each hand-off of
the lock between threads on different cores (a handler back from its I/O, a claim's reply, an
acknowledgement) pays for a wake-up across cores and for caches it finds cold; on one core the
same hand-off is a plain context switch. With handlers that wait 1 ms, a worker of 8 slots on
Redis kept 66-76% of its slots busy spread out and 68-84% pinned (more in 10 of 11 pairs of
runs, 7 points at the median), on the 2-core machine of ``bench/README.md``.

Pinning costs parallelism only to handlers that compute in C while releasing the lock (resizing
images with Pillow, numpy): run those unpinned, and use processes for more cores.
"""

from __future__ import annotations

import contextlib
import math
import os

from ..errors import ConfigurationError


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on; a ConfigurationError where affinity is not supported
    (pinning needs Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        raise ConfigurationError("pinning a worker to a CPU needs Linux (sched_setaffinity)")
    return sorted(os.sched_getaffinity(0))


def default_processes() -> int:
    """``jobyard worker``'s process count when none is given: one per CPU this process may run
    on (as Celery and Dramatiq default to one per core). A handler that calls a database, Redis
    or an HTTP API holds the interpreter lock for part of every call, so one process's threads
    take turns on one core; see bench/README.md, "How many processes"."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_cpus()  # a container's CPU limit does not show in its affinity
    return max(min(cpus or 1, quota or cpus or 1), 1)


def cgroup_cpus(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """The CPUs a cgroup v2 quota allows (``cpu.max`` "200000 100000" -> 2, rounded up), or
    None without a quota (``max``) or where there is no such file."""
    try:
        with open(path) as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(math.ceil(int(quota) / int(period)), 1)
    except (ValueError, ZeroDivisionError):
        return None


def pick_cpu(index: int | None = None) -> int:
    """A CPU for one worker process: the ``index``-th of the allowed ones, round robin (the
    processes of one ``--processes`` command spread over the CPUs), or, without an index, one
    chosen by the process id (separately started workers tend not to share one)."""
    cpus = allowed_cpus()
    return cpus[(os.getpid() if index is None else index) % len(cpus)]


def check_cpu(cpu: int) -> int:
    """``cpu`` if this process may run on it, else a ConfigurationError saying which it may."""
    cpus = allowed_cpus()
    if cpu not in cpus:
        raise ConfigurationError(
            f"CPU {cpu} is not one this process may run on: {', '.join(map(str, cpus))}"
        )
    return cpu


def pin_process(cpu: int) -> None:
    """Pin every thread of this process to ``cpu``; threads started later inherit it."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {cpu})
