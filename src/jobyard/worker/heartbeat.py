"""The heartbeat's decisions, every 50 ms: which leases to renew, which handlers overran their
timeout, which buffered jobs waited too long for a slot (see ``_slots.py``); and the renewal
itself, one round trip for every lease due.

The renewal also carries what a handler reported with ``current_job().progress`` since the last
one, and brings back which of the renewed jobs someone asked to cancel. A lease is renewed every
third of its length; a job whose progress changed is renewed sooner, but at most once every
``PROGRESS_GAP`` seconds, so a handler reporting progress in a tight loop costs one small write
a second, batched with every other job due."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..backends.base import Backend, LeasesRenewParams, Progress
from ._held import Running

log = logging.getLogger("jobyard.worker")
RETRY_RENEWAL = 1.0  # seconds: a renewal that failed is tried again this soon
PROGRESS_GAP = 1.0  # seconds: a job's fresh progress is sent at most this often


@dataclass(slots=True)
class Beat:
    """What one beat found."""

    renew: list[tuple[str, str]] = field(default_factory=list)  # (id, token) of leases due
    progress: list[Progress] = field(default_factory=list)  # fresh progress of those
    overdue: list[Running] = field(default_factory=list)  # handlers past their timeout
    waited: list[Running] = field(default_factory=list)  # buffered past the hold time


def scan(running: Iterable[Running], now: float, hold: float | None) -> Beat:
    """With the worker's lock held: sort the held jobs into what is due now (and move each
    renewal's next time on by a third of its lease). ``hold`` None: buffered jobs never wait
    too long (a fixed prefetch)."""
    beat = Beat()
    for run in running:
        ctx = run.ctx
        fresh = ctx._progress is not ctx._progress_sent and not run.settled
        due = run.next_renew <= now or (fresh and run.renewed_at + PROGRESS_GAP <= now)
        if due and not run.lost:
            beat.renew.append((run.job.id, run.job.token))
            run.next_renew = now + run.job.lease / 3
            run.renewed_at = now
            if fresh and (sent := ctx._progress) is not None:
                beat.progress.append(sent)
                ctx._progress_sent = sent
        if run.settled:
            continue
        if run.deadline is not None and run.deadline <= now:
            beat.overdue.append(run)
        elif hold is not None and not run.started and run.claimed_at + hold <= now:
            beat.waited.append(run)
    return beat


def renew(
    backend: Backend,
    worker_id: str,
    beat: Beat,
    running: Mapping[str, Running],
    lock: threading.Lock,
    now: float,
) -> list[str]:
    """Renew the leases due in one round trip, with the fresh progress; mark the ones the store
    says are lost (their outcome will be refused). Returns the renewed jobs with a cancellation
    request. If the store is away, try again within a second, not a third of a lease from now,
    so a short outage does not cost the leases it straddles."""
    due = beat.renew
    if not due:
        return []
    try:
        renewed = backend.leases_renew(LeasesRenewParams(worker_id, due, beat.progress))
    except Exception:
        with lock:
            for job_id, _ in due:
                if (pending := running.get(job_id)) is not None:
                    pending.next_renew = min(pending.next_renew, now + RETRY_RENEWAL)
        raise
    lost = renewed.lost
    with lock:
        for job_id in lost:
            if (gone := running.get(job_id)) is not None:
                gone.lost = True
    for job_id in lost:
        log.warning(
            "job %s: lease lost (another worker may run it); its outcome will be refused", job_id
        )
    return renewed.cancel_requested
