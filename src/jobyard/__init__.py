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
from .job import Job, JobFunction, JobHandle, Signature, Status
from .retry import Backoff
from .worker.executor import JobContext, current_job
from .workflow import Chain, Group, Workflow, WorkflowHandle, chain, group

__all__ = [
    "App",
    "Backoff",
    "Chain",
    "Clock",
    "ConfigurationError",
    "Drop",
    "DuplicateJob",
    "EnqueueEvent",
    "FrozenClock",
    "Group",
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
    "Signature",
    "Status",
    "StoreUnavailable",
    "SystemClock",
    "WorkerInfo",
    "Workflow",
    "WorkflowHandle",
    "chain",
    "current_job",
    "group",
]
__version__ = "0.1.0"
