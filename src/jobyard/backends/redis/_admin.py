"""Queue settings, the worker registry and per-queue counts on Redis."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ...errors import ConfigurationError
from .._stored import LIMIT_COLUMNS, limit_columns, limit_stats, limits_from
from ..base import (
    STATUSES,
    JobLimits,
    LimitsStatsParams,
    LimitsSyncParams,
    LimitStats,
    QueueConfig,
    QueueLimits,
    QueueStats,
    StatsParams,
    StoreInfo,
    ThroughputMinute,
    ThroughputParams,
    WorkerInfo,
    WorkersBeatParams,
)
from ._core import dumps
from .keys import QUEUE_RE

# Pending jobs one limits_walk script reads (a few ms of the server's time at most).
LIMITS_CALL = 1000

if TYPE_CHECKING:
    from ._core import Core


def queues_configure(c: Core, config: QueueConfig) -> None:
    """Create or replace a queue's settings."""
    if not QUEUE_RE.match(config.name):
        raise ConfigurationError(f"invalid queue name {config.name!r}")
    settings = {
        "max_concurrency": config.max_concurrency,
        "max_attempts": config.max_attempts,
        "backoff": config.backoff,
        "max_pending": config.max_pending,
        "paused": "1" if config.paused else None,
        "retention": None if config.retention is None else str(max(1, round(config.retention))),
        **limit_fields(config.limits),
        "fair": "1" if config.limits.fair else None,
    }
    c.run("queues_configure", c.keys.queue(config.name), [config.name, dumps(settings)])
    c.call(lambda: c.client.sadd(c.keys.queues, config.name))


def queues_list(c: Core) -> list[QueueConfig]:
    """Every configured queue, by name."""
    names = c.known_queues()
    if not names:
        return []

    def fetch() -> list[dict[str, str]]:
        pipe = c.client.pipeline(transaction=False)
        for q in names:
            pipe.hgetall(c.keys.queue(q)[0])
        return cast(list[dict[str, str]], pipe.execute())

    out = []
    for q, h in zip(names, c.call(fetch), strict=True):
        if not h:
            continue
        out.append(
            QueueConfig(
                name=q,
                max_concurrency=int(h["max_concurrency"]) if "max_concurrency" in h else None,
                max_attempts=int(h["max_attempts"]) if "max_attempts" in h else None,
                backoff=h.get("backoff"),
                max_pending=int(h["max_pending"]) if "max_pending" in h else None,
                paused=h.get("paused") == "1",
                retention=float(h["retention"]) if "retention" in h else None,
                limits=limits_from([h.get(f) for f in LIMIT_COLUMNS], h.get("fair") == "1"),
            )
        )
    return out


def workers_beat(c: Core, params: WorkersBeatParams) -> None:
    """Register, refresh or remove a worker; forget the silent ones."""
    w = params.worker
    info = dumps(
        {
            "host": w.host,
            "pid": w.pid,
            "queues": list(w.queues),
            "concurrency": w.concurrency,
            "started_at": w.started_at,
            "forget_after": float(params.forget_after),
        }
    )
    args = [
        c.now(),
        w.id,
        info,
        "1" if params.stopping else "",
        repr(float(params.forget_after)),
    ]
    c.run("workers_beat", [c.keys.workers, c.keys.workers_info], args)


def workers_list(c: Core) -> list[WorkerInfo]:
    """Registered workers, oldest first."""
    reply = c.run("workers_list", [c.keys.workers, c.keys.workers_info], [c.now()])
    out = []
    for i in range(0, len(reply), 3):
        info = json.loads(reply[i + 2])
        out.append(
            WorkerInfo(
                id=reply[i],
                host=info["host"],
                pid=int(info["pid"]),
                queues=tuple(info["queues"]),
                concurrency=int(info["concurrency"]),
                started_at=float(info["started_at"]),
                last_seen=float(reply[i + 1]) - float(info.get("forget_after", 0.0)),
            )
        )
    out.sort(key=lambda w: w.started_at)
    return out


def _known(c: Core, queues: Sequence[str] | None) -> list[str]:
    """The store's known queues, only those of ``queues`` when given."""
    names = c.known_queues()
    if not queues:
        return names
    wanted = set(queues)
    return [q for q in names if q in wanted]


def stats_get(c: Core, params: StatsParams) -> list[QueueStats]:
    """Counts by status for each queue that has jobs or a configuration."""
    names = _known(c, params.queues)
    out = []
    for batch in c.slices(names):
        reply = c.run("stats_get", c.group_keys(batch), [c.now(), str(len(batch))])
        # the counts, completed in the last minute, configured, the oldest due run_at
        width = len(STATUSES) + 3
        for g, q in enumerate(batch):
            values = reply[g * width : (g + 1) * width]
            row = [int(v) for v in values[:-1]]
            counts = dict(zip(STATUSES, row[: len(STATUSES)], strict=True))
            if not any(counts.values()) and not row[-1]:
                continue
            oldest = float(values[-1]) if values[-1] else None
            out.append(QueueStats(q, counts, row[-2], oldest))
    out.sort(key=lambda s: s.queue)
    return out


def throughput_get(c: Core, params: ThroughputParams) -> list[ThroughputMinute]:
    """The kept minutes of each queue (one script per slice of queues)."""
    names = _known(c, params.queues)
    out = []
    for batch in c.slices(names):
        args = [c.now(), str(len(batch)), repr(float(params.since))]
        reply = c.run("throughput_get", c.group_keys(batch), args)
        for i in range(0, len(reply), 4):
            g, minute, done, failed = reply[i : i + 4]
            out.append(ThroughputMinute(batch[int(g) - 1], float(minute), int(done), int(failed)))
    out.sort(key=lambda m: (m.queue, m.minute))
    return out


def store_info(c: Core) -> StoreInfo:
    """Node or Cluster, and the URL's retention: a ttl of 0 keeps the jobs until purged."""
    settings = c.settings
    return StoreInfo(
        "redis_cluster" if c.cluster else "redis",
        retention=settings.result_ttl if settings.result_ttl > 0 else None,
        failed_retention=settings.failed_ttl if settings.failed_ttl > 0 else None,
    )


def limit_fields(limits: QueueLimits) -> dict[str, str | None]:
    """A queue's limits as fields of its config hash (``LIMIT_COLUMNS``; unset: left out), as
    the claim's gate reads them (``gate_open`` in _lib.lua)."""
    return {k: None if v is None else repr(v) for k, v in limit_columns(limits).items()}


def job_limits_text(limits: QueueLimits) -> str:
    """A job name's limits as one value of the queue's ``joblimits`` hash: the
    ``LIMIT_COLUMNS`` joined by commas, an unset one empty."""
    return ",".join("" if v is None else repr(v) for v in limit_columns(limits).values())


def job_limits_from(text: str) -> QueueLimits:
    """The inverse of :func:`job_limits_text`."""
    return limits_from([c or None for c in text.split(",")])


def limits_sync(c: Core, params: LimitsSyncParams) -> None:
    """Store job names' limits in each queue's ``joblimits`` hash (empty limits: deleted)."""
    for job in params.jobs:
        if not QUEUE_RE.match(job.queue):
            raise ConfigurationError(f"invalid queue name {job.queue!r}")
        key = c.keys.job_limits(job.queue)
        text = job_limits_text(job.limits) if job.limits else None

        def write(key: str = key, name: str = job.name, text: str | None = text) -> Any:
            if text is None:
                return c.client.hdel(key, name)
            return c.client.hset(key, name, text)

        c.call(write)


def limits_stats(c: Core, params: LimitsStatsParams) -> list[LimitStats]:
    """Every limited scope of the queues asked: their configs, job limits and rate buckets,
    and per queue its running jobs and its oldest ``params.walk`` pending jobs counted by
    name and key (``limits_walk.lua``, in calls of :data:`LIMITS_CALL` jobs)."""
    configs = queues_list(c)
    names = sorted(set(c.known_queues()) | {q.name for q in configs})
    if params.queues:
        names = [q for q in names if q in set(params.queues)]
    now = c.clock_now()
    named: list[JobLimits] = []
    counts: list[tuple[str, str, str | None, int, int, int]] = []
    buckets: dict[tuple[str, str | None], Sequence[Any]] = {}
    for q in names:
        tag = c.keys.tag(q)

        def fetch(q: str = q, tag: str = tag) -> list[Any]:
            pipe = c.client.pipeline(transaction=False)
            pipe.hgetall(c.keys.job_limits(q))
            pipe.get(f"{tag}:tat")
            return cast(list[Any], pipe.execute())

        limits, tat = c.call(fetch)
        if tat is not None:
            buckets[(q, None)] = [tat]
        jobs = sorted(limits)

        def tats(tag: str = tag, jobs: list[str] = jobs) -> list[Any]:
            pipe = c.client.pipeline(transaction=False)
            for name in jobs:
                pipe.get(f"{tag}:tat:j:{name}")
            return cast(list[Any], pipe.execute())

        for name, got in zip(jobs, c.call(tats) if jobs else [], strict=True):
            named.append(JobLimits(q, name, job_limits_from(limits[name])))
            if got is not None:
                buckets[(q, name)] = [got]
        counts += _walk(c, q, params.walk, now)
    return limit_stats(params, now, configs, named, counts, buckets)


def _walk(
    c: Core, queue: str, walk: int, now: float
) -> list[tuple[str, str, str | None, int, int, int]]:
    """(queue, name, key, pending, due, running) of one queue: its running jobs, and its
    oldest ``walk`` pending jobs (fewer where the queue holds fewer)."""
    out: list[tuple[str, str, str | None, int, int, int]] = []
    cursor, counted, first = "", 0, True
    while first or (cursor and counted < walk):
        args = [repr(now), cursor, str(min(LIMITS_CALL, walk - counted)), "1" if first else ""]
        reply = c.run("limits_walk", c.keys.queue(queue), args)
        cursor, counted, first = reply[0], counted + int(reply[1]), False
        for i in range(2, len(reply), 5):
            name, key, pending, due, running = reply[i : i + 5]
            out.append((queue, name, key or None, int(pending), int(due), int(running)))
    return out
