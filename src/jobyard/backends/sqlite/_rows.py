"""Rows of ``queries.sql`` to the records of :mod:`jobyard.backends.base`, and back.

Each function here knows the column list of the statements it decodes; ``queries.sql`` names
which functions read which statements. Decoding never raises on a corrupt row: a payload, result
or error that is not valid text comes back with U+FFFD in place of the bad bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._stored import limits_from
from ..base import (
    ClaimedJob,
    JobRecord,
    NewJob,
    QueueConfig,
    Schedule,
    WorkerInfo,
    fair_round,
)


def text(value: Any) -> str:
    """Decode a wide text column read as BLOB; bytes that are not UTF-8 become U+FFFD."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def text_or_none(value: Any) -> str | None:
    """:func:`text`, keeping NULL."""
    return None if value is None else text(value)


def float_or_none(value: Any) -> float | None:
    """A REAL column, keeping NULL.

    SQLite stores an integral REAL as an integer on disk, and RETURNING may hand it back so.
    """
    return None if value is None else float(value)


def record(r: Sequence[Any]) -> JobRecord:
    """A row of the record columns of ``jobs_get``, the ``jobs_list`` statements,
    ``jobs_cancel``, ``jobs_retry``."""
    return JobRecord(
        id=str(r[0]),
        name=r[1],
        queue=r[2],
        payload=text(r[3]),
        status=r[4],
        priority=r[5],
        attempts=r[6],
        max_attempts=r[7],
        run_at=float(r[8]),
        created_at=float(r[9]),
        started_at=float_or_none(r[10]),
        finished_at=float_or_none(r[11]),
        worker_id=r[12],
        result=text_or_none(r[13]),
        error=text_or_none(r[14]),
        parent_id=r[15],
        idempotency_key=r[16],
        delivery=r[17],
        cancel_requested_at=float_or_none(r[18]),
        cancelled_by=text_or_none(r[19]),
        progress=float_or_none(r[20]),
        progress_note=text_or_none(r[21]),
        workflow_id=r[22],
        depends_on=ids(r[23]),
        dependents=ids(r[24]),
        key=r[25],
    )


def ids(value: Any) -> tuple[str, ...]:
    """A JSON array of job ids built by the record statements' ``job_links`` subqueries
    (NULL: the job has no such links)."""
    return () if value is None else tuple(str(i) for i in json.loads(value))


def claim_order(r: Sequence[Any]) -> tuple[int, int, float, int]:
    """Sort key of a ``jobs_claim`` row: priority DESC, round, run_at, id (RETURNING keeps no
    order)."""
    return (-r[12], fair_round(r[14]), r[13], r[0])


def claimed(r: Sequence[Any]) -> ClaimedJob:
    """A row returned by ``jobs_claim``."""
    return ClaimedJob(
        id=str(r[0]),
        name=r[1],
        queue=r[2],
        payload=text(r[3]),
        attempts=r[4],
        max_attempts=r[5],
        backoff=r[6],
        timeout=float_or_none(r[7]),
        lease=float(r[8]),
        token=r[9],
        delivery=r[10],
        parent_id=r[11],
        run_at=float_or_none(r[13]),
    )


def queue_config(r: Sequence[Any]) -> QueueConfig:
    """A row of ``queues_list``."""
    return QueueConfig(
        name=r[0],
        max_concurrency=r[1],
        max_attempts=r[2],
        backoff=r[3],
        max_pending=r[4],
        paused=bool(r[5]),
        retention=r[6],
        limits=limits_from(r[7:14], r[14]),
    )


def worker(r: Sequence[Any]) -> WorkerInfo:
    """A row of ``workers_list``."""
    try:
        names = json.loads(r[3])
    except ValueError:
        names = []
    return WorkerInfo(
        id=r[0],
        host=r[1],
        pid=r[2],
        queues=tuple(str(n) for n in names) if isinstance(names, list) else (),
        concurrency=r[4],
        started_at=float(r[5]),
        last_seen=float(r[6]),
    )


def schedule(r: Sequence[Any]) -> Schedule:
    """A row of ``schedules_list``."""
    return Schedule(
        name=r[0],
        cron=r[1] or None,  # empty: an interval schedule
        job=NewJob.from_json(r[2]),
        active=bool(r[3]),
        next_run_at=float_or_none(r[4]),
        last_run_at=float_or_none(r[5]),
        every=float_or_none(r[6]),
        timezone=r[7],
        catch_up=r[8],
        paused=bool(r[9]),
    )
