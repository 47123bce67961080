"""How the SQL stores hold values: one rule each for SQLite and PostgreSQL; and the rows of
``limits_stats`` every store builds from what it read (:func:`limit_stats`).

A job id of theirs is the decimal form of a 64-bit row key; a text column holds any Python string
once it is made :func:`storable`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .base import (
    JobLimits,
    KeyStats,
    LimitsStatsParams,
    LimitStats,
    QueueConfig,
    QueueLimits,
    Rate,
)

log = logging.getLogger("jobyard.store")
R = TypeVar("R")
S = TypeVar("S")

_MAX_KEY = 2**63 - 1  # INTEGER PRIMARY KEY (SQLite) and bigint (PostgreSQL)


def parse_numeric_id(job_id: str) -> int | None:
    """The row key a job id names, or ``None`` if it cannot name one: only the exact decimal
    form's digits count (``"1.0"``, ``" 1"``, ``"1\\n"`` and ``"٣"`` name no job, though a
    database would coerce some of them)."""
    if isinstance(job_id, str) and 0 < len(job_id) <= 19 and job_id.isascii() and job_id.isdigit():
        key = int(job_id)
        return key if key <= _MAX_KEY else None
    return None


def storable(value: str | None) -> str | None:
    """Text every SQL store can hold: lone surrogates (not UTF-8) and NUL characters (refused
    by PostgreSQL text) escaped. A handler's traceback may hold either, and refusing it would
    lose the outcome (the worker would retry the settlement forever)."""
    if value is None or (value.isascii() and "\x00" not in value):
        return value
    escaped = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped.replace("\x00", "\\x00")


def readable(rows: Iterable[R], read: Callable[[R], S], what: str) -> list[S]:
    """``read`` applied to each stored row; a row that cannot be read (a field missing or of the
    wrong type, JSON that does not parse: written by hand or by another program) is left out
    with one warning naming it, so it fails alone instead of taking every listing, and the
    worker's ticks, down with it."""
    out: list[S] = []
    for row in rows:
        try:
            out.append(read(row))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            log.warning("corrupt %s record skipped: %s: %s", what, type(exc).__name__, exc)
    return out


# Limits as the SQL stores keep them: a rate as three columns (count, per, burst), NULL when unset.
LIMIT_COLUMNS = (
    "rate_count",
    "rate_per",
    "rate_burst",
    "key_concurrency",
    "key_rate_count",
    "key_rate_per",
    "key_rate_burst",
)


def limit_columns(limits: QueueLimits) -> dict[str, Any]:
    """The columns of ``LIMIT_COLUMNS`` for ``limits`` (``fair`` is a queue's column apart)."""
    rate, key_rate = limits.rate, limits.key_rate
    return {
        "rate_count": None if rate is None else rate.count,
        "rate_per": None if rate is None else rate.per,
        "rate_burst": None if rate is None else rate.burst,
        "key_concurrency": limits.key_concurrency,
        "key_rate_count": None if key_rate is None else key_rate.count,
        "key_rate_per": None if key_rate is None else key_rate.per,
        "key_rate_burst": None if key_rate is None else key_rate.burst,
    }


def limits_from(cells: Sequence[Any], fair: Any = False) -> QueueLimits:
    """The inverse of :func:`limit_columns`: ``cells`` in ``LIMIT_COLUMNS`` order."""
    rc, rp, rb, kc, krc, krp, krb = cells
    return QueueLimits(
        rate=None if rc is None else Rate(int(rc), float(rp), int(rb)),
        key_concurrency=None if kc is None else int(kc),
        key_rate=None if krc is None else Rate(int(krc), float(krp), int(krb)),
        fair=bool(fair),
    )


def limit_stats(
    params: LimitsStatsParams,
    now: float,
    queues: Sequence[QueueConfig],
    named: Sequence[JobLimits],
    counts: Iterable[Sequence[Any]],
    buckets: Mapping[tuple[str, str | None], Sequence[Any]],
) -> list[LimitStats]:
    """``limits_stats`` from what a store read (every store builds its rows here): the queues'
    configs, the job limits, ``counts`` rows (queue, name, key or None, pending, due,
    running) and the buckets without a key, (queue, job or None) -> (tat, ...).

    A ``counts`` row counts, of one (queue, name, key), the pending jobs among those the store
    read of the queue (at most ``params.walk``, so a queue's rows sum to the jobs read: fewer
    than the walk means all of them), how many of those are due, and every running job."""
    wanted = set(params.queues)
    # scope -> key -> [pending, due, running]
    per_key: dict[tuple[str, str | None], dict[str, list[int]]] = {}
    running: dict[tuple[str, str | None], int] = {}
    due: dict[tuple[str, str | None], int] = {}
    read: dict[str, int] = {}  # queue -> pending jobs read
    for queue, name, key, pending, ready, run in counts:
        read[queue] = read.get(queue, 0) + int(pending)
        for at in ((queue, None), (queue, name)):
            running[at] = running.get(at, 0) + int(run)
            due[at] = due.get(at, 0) + int(ready)
            if key is not None:
                cell = per_key.setdefault(at, {}).setdefault(key, [0, 0, 0])
                cell[0] += int(pending)
                cell[1] += int(ready)
                cell[2] += int(run)

    def scope(queue: str, job: str | None, limits: QueueLimits, cap: int | None) -> LimitStats:
        keys = per_key.get((queue, job), {})
        bucket = buckets.get((queue, job))
        used = None
        if limits.rate is not None:
            used = rate_used(limits.rate, None if bucket is None else float(bucket[0]), now)
        full = limits.key_concurrency
        at_cap = [] if full is None else [c for c in keys.values() if c[2] >= full]
        ranked = sorted(keys.items(), key=lambda kc: (-kc[1][0], kc[0]))[: params.top_keys]
        return LimitStats(
            queue=queue,
            job=job,
            limits=limits,
            max_concurrency=cap,
            running=running.get((queue, job), 0),
            rate_used=used,
            keys_running=sum(1 for c in keys.values() if c[2]),
            keys_full=len(at_cap),
            top_keys=() if job else tuple(KeyStats(k, p, r) for k, (p, _, r) in ranked if p),
            due=due.get((queue, job), 0),
            due_keys_full=sum(c[1] for c in at_cap),
            exact=read.get(queue, 0) < params.walk,
        )

    configs = {q.name: q for q in queues}
    keyed = {
        q for (q, job), keys in per_key.items() if job is None and any(c[0] for c in keys.values())
    }
    rows: list[LimitStats] = []
    for name in sorted(set(configs) | keyed):
        cfg = configs.get(name) or QueueConfig(name)
        limited = cfg.limits or cfg.max_concurrency is not None or name in keyed
        if limited and (not wanted or name in wanted):
            rows.append(scope(name, None, cfg.limits, cfg.max_concurrency))
    for job in named:
        if not wanted or job.queue in wanted:
            rows.append(scope(job.queue, job.name, job.limits, None))
    rows.sort(key=lambda r: (r.queue, r.job is not None, r.job or ""))
    return rows


def rate_used(rate: Rate, tat: float | None, now: float) -> float:
    """How much of a rate's burst is taken at ``now``: 0 idle, 1 the next start waits."""
    if tat is None or tat <= now:
        return 0.0
    return min(1.0, (tat - now) / (rate.burst * rate.interval))
