"""The heartbeat's decisions, every 50 ms: which leases to renew, which handlers overran their
timeout, which buffered jobs waited too long for a slot (see ``_slots.py``); and the renewal
itself, one round trip for every lease due.

The renewal also carries what a handler reported with ``current_job().progress`` since the last
one, and brings back which of the renewed jobs someone asked to cancel. A lease is renewed every
third of its length; a job whose progress changed is renewed sooner, but at most once every
``PROGRESS_GAP`` seconds, so a handler reporting progress in a tight loop costs one small write
a second, batched with every other job due.

The worker holds its jobs by (id, token), one entry per attempt: a job whose lease lapsed while
this worker stalled may be claimed again by this same worker while the stalled attempt is still
held. A renewal carries one pair per id, so each id the store reports back names the token that
was sent for it, and a "lost" reply marks that attempt alone, never the newer one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..backends.base import Backend, LeasesRenewParams, Progress
from ..events import Events, LeaseLost
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
    ids: set[str] = set()  # one pair per id: the store answers by id (see the module's doc)
    for run in running:
        ctx = run.ctx
        fresh = ctx._progress is not ctx._progress_sent and not run.settled
        due = run.next_renew <= now or (fresh and run.renewed_at + PROGRESS_GAP <= now)
        if due and not run.lost and run.job.id not in ids:
            ids.add(run.job.id)  # another attempt of it waits for the next beat, 50 ms later
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
    running: Mapping[tuple[str, str], Running],
    lock: threading.Lock,
    now: float,
    events: Events | None = None,
) -> list[tuple[str, str]]:
    """Renew the leases due in one round trip, with the fresh progress; mark the ones the store
    says are lost (their outcome will be refused). Returns the (id, token) of the renewed jobs
    with a cancellation request. If the store is away, try again within a second, not a third
    of a lease from now, so a short outage does not cost the leases it straddles.

    The store answers with ids; each is matched back to the token this request sent for it
    (one per id, see :func:`scan`). By the time the answer arrives this worker may hold a newer
    attempt of the same job (claimed again after the stale one's lease lapsed): that attempt's
    lease is not the one the answer is about, and marking it lost would stop its renewals and
    let a healthy attempt lapse."""
    due = beat.renew
    if not due:
        return []
    try:
        renewed = backend.leases_renew(LeasesRenewParams(worker_id, due, beat.progress))
    except Exception:
        with lock:
            for key in due:
                if (pending := running.get(key)) is not None:
                    pending.next_renew = min(pending.next_renew, now + RETRY_RENEWAL)
        raise
    sent = dict(due)
    lost = [(job_id, sent[job_id]) for job_id in renewed.lost if job_id in sent]
    marked = []
    with lock:
        for key in lost:
            if (gone := running.get(key)) is not None and not gone.lost:
                gone.lost = True
                marked.append(gone)
    for run in marked:
        log.warning(
            "job %s: attempt %d lost its lease (the job may run again, here or on another "
            "worker); its outcome will be refused",
            run.job.id,
            run.job.attempts,
        )
        if events is not None and events.active:
            job = run.job
            events.emit(LeaseLost(job.id, job.name, job.queue, job.attempts, "renew"))
    return [(job_id, sent[job_id]) for job_id in renewed.cancel_requested if job_id in sent]
