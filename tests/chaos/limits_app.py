"""Handlers of the limited-queue chaos test (test_limits_chaos.py), run by real worker processes.

The queue ``limited`` holds 50 starts a second across every worker (``paced``, short jobs); in
the queue ``keyed`` each job carries one of a few keys, and ``one_at_a_time`` lets one job of a
key run at a time (its jobs last longer than the gap between two jobs of a key, so without the
limit they would overlap). Every execution leaves two files
in ``$JOBYARD_SINK``: ``start.<id>.<pid>.<random>`` when the handler begins, holding the key, the
instant the store recorded for the claim (its ``started_at``) and the host's instant, and
``end.<id>.<pid>.<random>`` with the host's instant once its work is done. A worker SIGKILLed in
between leaves a start without an end.
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
QUEUE = "limited"
KEYED = "keyed"
RATE = "50/s"  # a burst of 5, then one start every 20 ms
LEASE = 1.0
FAST = jobyard.Backoff("fixed", base=0.05, jitter=False)


def _write(name: str, text: str) -> None:
    aside = SINK / f".{name}"
    aside.write_text(text)
    os.replace(aside, SINK / name)  # a reader never sees a file half written


def _run(work: tuple[float, float]) -> None:
    job = jobyard.current_job()
    tag = f"{re.sub(r'[^A-Za-z0-9_-]', '_', job.id)}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    claimed = app.get(job.id)
    started = claimed.started_at.timestamp() if claimed.started_at else 0.0
    _write(f"start.{tag}", f"{claimed.queue}\n{claimed.key}\n{started:.6f}\n{time.time():.6f}")
    time.sleep(random.uniform(*work))
    _write(f"end.{tag}", f"{time.time():.6f}")


@app.job(queue=QUEUE, lease=LEASE, max_attempts=1000, backoff=FAST)
def paced(n: int) -> int:
    """Record the start (with the store's claim instant), work 0-30 ms, record the end."""
    _run((0.0, 0.030))
    return n


@app.job(queue=KEYED, lease=LEASE, max_attempts=1000, backoff=FAST, key_concurrency=1)
def one_at_a_time(n: int) -> int:
    """The same, working 50-150 ms: one job of a key at a time."""
    _run((0.05, 0.15))
    return n
