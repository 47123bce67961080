"""Calling the store through transient failures: retry with capped exponential backoff."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import JobyardError

log = logging.getLogger("jobyard.worker")
T = TypeVar("T")


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    stopped: threading.Event,
    default: T,
    max_delay: float = 5.0,
) -> T:
    """Run ``fn`` until it succeeds; on a store error wait and retry, until ``stopped`` is set
    (then return ``default``). Errors of jobyard's own (bad input) are not retried."""
    delay = 0.05
    while True:
        try:
            return fn()
        except JobyardError:
            raise
        except Exception as exc:  # noqa: BLE001 - drivers raise many kinds of connection error
            log.warning(
                "could not %s (%s: %s); retrying in %.2fs", what, type(exc).__name__, exc, delay
            )
            if stopped.wait(delay):
                return default
            delay = min(delay * 2, max_delay) * random.uniform(0.8, 1.0)
