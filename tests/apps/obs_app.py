"""Jobs of the observability tests (metrics, JSON logs) for real worker processes."""

from __future__ import annotations

import os
import time

import jobyard

app = jobyard.App()  # JOBYARD_URL


@app.job(queue="obs")
def ok(n: int) -> int:
    """Takes a moment, so that every process of a worker gets some; returns its pid."""
    time.sleep(0.15)
    return os.getpid()


@app.job(queue="obs", max_attempts=2, backoff=jobyard.Backoff("fixed", base=0.0, jitter=False))
def boom(n: int) -> None:
    """Always fails: one retry, then the dead letter."""
    raise ValueError(f"boom {n}\x1b[2J")
