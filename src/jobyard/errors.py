"""Exceptions a handler raises to steer its job, and the errors jobyard raises to its callers."""

from __future__ import annotations


class JobyardError(Exception):
    """Base class of every error jobyard raises."""


class ConfigurationError(JobyardError, ValueError):
    """A setting, URL or name that jobyard cannot work with."""


class SchemaError(JobyardError):
    """The store's schema is missing or older than this version of jobyard."""


class StoreUnavailable(JobyardError):
    """The store could not be reached or refused the connection; the message names the cause
    (connection refused at host:port, a database that does not exist, failed authentication)."""


class QueueFull(JobyardError):
    """The queue holds ``max_pending`` jobs already; nothing of the refused enqueue was written."""

    def __init__(self, queue: str, max_pending: int) -> None:
        super().__init__(f"queue {queue!r} is full: max_pending={max_pending} jobs are pending")
        self.queue = queue
        self.max_pending = max_pending


class DuplicateJob(JobyardError):
    """A re-drive was refused because another job holds the same idempotency key."""

    @classmethod
    def key_held(cls, job_id: str, holder: str) -> DuplicateJob:
        """``retry(job_id)`` refused: pending or running job ``holder`` holds its key."""
        return cls(f"job {job_id} cannot be retried: job {holder} holds its idempotency key")


class JobNotFound(JobyardError, KeyError):
    """No job with this id exists in the store (``hint``: what the id may have meant)."""

    def __init__(self, job_id: str, hint: str = "") -> None:
        super().__init__(job_id)
        self.hint = hint

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"no job with id {self.args[0]!r}{hint}"


class InvalidTransition(JobyardError):
    """The job is not in a state that allows the requested change (cancel a finished job...).

    Every store refuses a move with the same words: build it with the constructors below."""

    @classmethod
    def cannot_cancel(cls, job_id: str, status: str) -> InvalidTransition:
        """``cancel(job_id)`` refused: a finished job cannot be cancelled."""
        return cls(f"job {job_id} is {status}: only pending or running jobs can be cancelled")

    @classmethod
    def cannot_retry(cls, job_id: str, status: str) -> InvalidTransition:
        """``retry(job_id)`` refused: only a failed or cancelled job can be retried."""
        return cls(f"job {job_id} is {status}: only failed or cancelled jobs can be retried")

    @classmethod
    def input_not_completed(cls, job_id: str, input_id: str, status: str) -> InvalidTransition:
        """``retry(job_id)`` refused: a workflow step whose input has not completed would run
        without its argument."""
        how = (
            "resume the whole workflow instead (app.resume_workflow, jobyard retry --workflow)"
            if status in ("failed", "cancelled")
            else "retry this step once it completed"
            if status in ("waiting", "pending", "running")
            else "it cannot run again"
        )
        return cls(
            f"job {job_id} takes the result of job {input_id}, which is {status}: "
            f"a step runs only after its inputs completed; {how}"
        )


class JobFailed(JobyardError):
    """Raised by :meth:`JobHandle.result` when the job ended in the ``failed`` state."""

    def __init__(self, job_id: str, error: str | None) -> None:
        last = (error or "").strip().splitlines()
        super().__init__(f"job {job_id} failed: {last[-1] if last else 'unknown error'}")
        self.job_id = job_id
        self.error = error


class JobCancelled(JobyardError):
    """Raised by :meth:`JobHandle.result` when the job was cancelled."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id


class Retry(Exception):
    """Raised by a handler to ask for another attempt after ``delay`` seconds.

    The attempt counts against ``max_attempts``; once they are spent the job fails.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Drop(Exception):
    """Raised by a handler to fail its job at once, with no further attempts."""

    def __init__(self, reason: str = "dropped by handler") -> None:
        super().__init__(reason)
        self.reason = reason
