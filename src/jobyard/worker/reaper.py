"""The lease reaper: the lapsed-lease rule decided once, above every store.

A store reads the running jobs whose lease lapsed (``leases_lapsed``), the core decides each with
the job's own retry policy (:func:`jobyard.retry.decide_lapsed`), and the store applies the
decisions in one fenced move (``leases_reap``): a move whose job was renewed or settled since the
read is skipped, so a worker that was only slow keeps its job. Nothing is lost if the reaper
dies between the two calls: the read changed nothing, and the next tick reads the same leases.
"""

from __future__ import annotations

import random

from ..backends.base import Backend, LeasesLapsedParams, LeasesReapParams, Reaped
from ..retry import decide_lapsed

REAP_LIMIT = 1000  # lapsed leases decided per tick; a larger backlog is caught up over ticks


def reap(
    backend: Backend, limit: int = REAP_LIMIT, rng: random.Random | None = None
) -> list[Reaped]:
    """Recover the jobs whose lease lapsed, up to ``limit``; the jobs moved, and where to.
    Called with nothing lapsed, the move still runs with no decisions: a store's takeover of
    abandoned staged batches rides on it (see :class:`LeasesReapParams`)."""
    lapsed = backend.leases_lapsed(LeasesLapsedParams(limit)) if limit > 0 else []
    moves = [decide_lapsed(job, rng) for job in lapsed]
    return backend.leases_reap(LeasesReapParams(moves))
