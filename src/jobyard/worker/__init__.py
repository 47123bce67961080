"""The worker: claims jobs, runs their handlers, and records what happened."""

from __future__ import annotations

from .executor import JobContext, current_job
from .worker import Worker

__all__ = ["JobContext", "Worker", "current_job"]
