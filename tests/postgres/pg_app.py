"""Handlers for the PostgreSQL worker-process tests (``JOBYARD_URL`` names the store,
``JOBYARD_SINK`` the directory where each execution leaves a file)."""

from __future__ import annotations

import time

import jobyard
from tests.apps.contract_app import mark, wait_for_gate

app = jobyard.App()  # JOBYARD_URL


@app.job(queue="tx", lease=1.0, max_attempts=3, backoff=jobyard.Backoff("fixed", base=0.0))
def tx_write(tag: str, hold: float, gated: bool = False) -> int:
    """Write a row through the job's own connection, then (first attempt only) hold the open
    transaction for ``hold`` seconds before answering: the window a test kills or pauses in.
    With ``gated``, later attempts answer only once the test opens the gate."""
    job = jobyard.current_job()
    job.connection.execute("INSERT INTO effects (tag, attempt) VALUES (%s, %s)", [tag, job.attempt])
    mark("written", tag, str(job.attempt))
    if job.attempt == 1:
        time.sleep(hold)
        mark("late", tag)
    elif gated:
        wait_for_gate(tag)
    return job.attempt


@app.job(queue="work")
def record(tag: str) -> int:
    """Record one execution."""
    mark("run", tag)
    return jobyard.current_job().attempt
