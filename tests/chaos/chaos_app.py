"""Handlers for the chaos and partition tests, run by real worker processes.

Every execution of ``chaos_work`` leaves a file in ``$JOBYARD_SINK`` named
``run.<job id>.<pid>.<attempt>.<random>`` once the handler's work is done, so the test can count
executions (and who made them) after the worker that made them was SIGKILLed. Short leases and a
small fixed backoff make recovery quick.
"""

from __future__ import annotations

import os
import random
import re
import time
import uuid
from pathlib import Path

import jobyard

app = jobyard.App()  # JOBYARD_URL
SINK = Path(os.environ.get("JOBYARD_SINK", "."))
QUEUE = "chaos"
LEASE = 1.0
POISON_ATTEMPTS = 3
FAST = jobyard.Backoff("fixed", base=0.05, jitter=False)


def safe(text: str) -> str:
    """A job id as a file-name part (ids are strings; keep them from spelling a path)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def mark(kind: str, tag: str, text: str = "") -> Path:
    """Record one event as its own file ``<kind>.<tag>.<pid>.<attempt>.<random>``."""
    try:
        attempt = jobyard.current_job().attempt
    except LookupError:
        attempt = 0
    name = f"{kind}.{safe(tag)}.{os.getpid()}.{attempt}.{uuid.uuid4().hex[:8]}"
    path = SINK / name
    # Written aside, then renamed: a test that sees the mark must never read it empty.
    aside = SINK / f".{name}"
    aside.write_text(text or f"{time.time():.6f}")
    os.replace(aside, path)
    return path


@app.job(queue=QUEUE, lease=LEASE, max_attempts=1000, backoff=FAST)
def chaos_work(n: int) -> int:
    """Sleep a random 0-20 ms, then record the execution. max_attempts is high: every SIGKILL
    that catches a job costs it an attempt, and no job may run out of them here."""
    time.sleep(random.uniform(0.0, 0.020))
    mark("run", jobyard.current_job().id, str(n))
    return n


@app.job(queue=QUEUE, lease=LEASE, max_attempts=1000, backoff=FAST)
def chaos_next(n: int) -> int:
    """The second step of a chain: gets ``chaos_work``'s result, records, passes it on."""
    mark("next", jobyard.current_job().id, str(n))
    return n


@app.job(queue=QUEUE, lease=LEASE, max_attempts=1000, backoff=FAST)
def chaos_join(values: list[int], first: int) -> int:
    """The join of a group of chains: the chains' results in member order, recorded."""
    mark("join", jobyard.current_job().id, f"{first} {values}")
    return sum(values)


def workflow_batch(ns: list[int]) -> jobyard.Group:
    """A producer batch as one workflow: ``chain(chaos_work(n), chaos_next())`` for each n,
    joined by ``chaos_join``. Its ids: work and next alternate, the join comes last."""
    return jobyard.group(*[jobyard.chain(chaos_work.s(n), chaos_next.s()) for n in ns])


class PoisonError(Exception):
    """What the poison job always raises."""


@app.job(queue=QUEUE, lease=LEASE, max_attempts=POISON_ATTEMPTS, backoff=FAST)
def chaos_poison(tag: str) -> None:
    """Fail every attempt: the dead letter must hold it after exactly POISON_ATTEMPTS."""
    mark("poison", jobyard.current_job().id, tag)
    raise PoisonError(f"poison pill {tag}")


PARTITION_QUEUE = "partition"


@app.job(queue=PARTITION_QUEUE, lease=LEASE, max_attempts=3, backoff=jobyard.Backoff("fixed", 0.0))
def partition_job(tag: str, host: str = "") -> str:
    """The first attempt announces itself, then holds the job until the test drops a file
    ``release.<tag>`` into the sink (at most 120 s) and answers "first"; a later attempt holds
    it until ``rescue.<tag>`` appears and answers "rescued". Each answer names the host
    (``$JOBYARD_HOST``) and pid."""
    job = jobyard.current_job()
    me = f"{os.environ.get('JOBYARD_HOST', '?')}:{os.getpid()}"
    mark("start", tag, me)
    gate = "release" if job.attempt == 1 else "rescue"
    deadline = time.monotonic() + 120.0
    while not (SINK / f"{gate}.{tag}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    if job.attempt == 1:
        mark("late", tag, me)
        return f"first {me}"
    return f"rescued {me}"
