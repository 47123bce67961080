"""Handlers for the Redis tests that run real worker processes (``JOBYARD_URL``), recording each
execution in ``$JOBYARD_SINK`` as the contract suite's app does."""

from __future__ import annotations

import time

import jobyard
from tests.apps.contract_app import mark

app = jobyard.App()


@app.job(queue="amo", delivery="at_most_once", lease=1.0, max_attempts=3)
def fire_once(tag: str, seconds: float) -> str:
    """At most once: the first run announces itself, then takes ``seconds``."""
    mark("start", tag, str(jobyard.current_job().attempt))
    time.sleep(seconds)
    return "done"


@app.job(queue="alo", lease=1.0, max_attempts=3, backoff=jobyard.Backoff("fixed", base=0.0))
def hang_first(tag: str, seconds: float) -> str:
    """At least once: the first attempt takes ``seconds``; later attempts answer at once."""
    attempt = jobyard.current_job().attempt
    mark("start", tag, str(attempt))
    if attempt == 1:
        time.sleep(seconds)
        return "first"
    return "second"
