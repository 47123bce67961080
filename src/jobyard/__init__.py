"""jobyard: a job queue where an accepted job is never lost and every outcome is visible."""

from __future__ import annotations

from .app import App
from .backends.base import QueueConfig, WorkerInfo
from .clock import Clock, FrozenClock, SystemClock
from .errors import (
    ConfigurationError,
    Drop,
    DuplicateJob,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobyardError,
    QueueFull,
    Retry,
    SchemaError,
    StoreUnavailable,
)
from .hooks import EnqueueEvent, JobEvent
from .job import Job, JobFunction, JobHandle, Status
from .retry import Backoff
from .worker.executor import JobContext, current_job

__all__ = [
    "App",
    "Backoff",
    "Clock",
    "ConfigurationError",
    "Drop",
    "DuplicateJob",
    "EnqueueEvent",
    "FrozenClock",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobEvent",
    "JobFailed",
    "JobFunction",
    "JobHandle",
    "JobNotFound",
    "JobyardError",
    "QueueConfig",
    "QueueFull",
    "Retry",
    "SchemaError",
    "Status",
    "StoreUnavailable",
    "SystemClock",
    "WorkerInfo",
    "current_job",
]
__version__ = "0.1.0"
