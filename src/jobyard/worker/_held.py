"""What a worker knows of one job it holds, from claim until its outcome is acknowledged."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..backends.base import ClaimedJob
from .executor import JobContext


@dataclass(slots=True)
class Running:
    """A claimed job from claim until its outcome is acknowledged. The worker's lock guards
    every field but ``job`` and ``ctx``."""

    job: ClaimedJob
    ctx: JobContext
    next_renew: float  # monotonic
    renewed_at: float = 0.0  # monotonic; when its lease was last sent for renewal
    claimed_at: float = 0.0  # monotonic
    deadline: float | None = None  # monotonic; set when a sync handler starts
    started: bool = False
    settled: bool = False  # an outcome was decided (or the job was released)
    lost: bool = False  # the store said the lease is gone: stop renewing it
    task: asyncio.Task[None] | None = field(default=None, repr=False)  # an async handler's
