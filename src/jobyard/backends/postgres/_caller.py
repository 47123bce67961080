"""Running jobyard statements on a connection the caller owns (transactional enqueue and
completion), synchronously or on an asyncio connection: the same statement text either way.

The statements join the caller's transaction and never commit it. Inside a transaction they run
under a savepoint, so a refusal (a full queue) or a conflict undoes only jobyard's own work and
leaves the caller's transaction usable. When the jobyard schema is not on the caller's
search_path it is set for the duration and the caller's own is put back. Everything is sent as
one pipeline: one round trip.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.rows import tuple_row

from ...errors import ConfigurationError, QueueFull
from ._sql import Q

Params = Mapping[str, Any] | None
Step = tuple[str, Params]

QUEUE_FULL_SQLSTATE = "JY001"
CONFLICTS = (errors.SerializationFailure, errors.DeadlockDetected)
MAX_CONFLICT_RETRIES = 20


def queue_full(exc: BaseException) -> QueueFull | None:
    """The :class:`QueueFull` that ``jobyard_queue_full`` raised in SQL, if it is one."""
    if not isinstance(exc, psycopg.Error) or exc.sqlstate != QUEUE_FULL_SQLSTATE:
        return None
    try:
        detail = json.loads(exc.diag.message_detail or "{}")
        return QueueFull(str(detail["queue"]), int(detail["max_pending"]))
    except (ValueError, KeyError, TypeError):
        return QueueFull("?", -1)


def _failed(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True if the connection's transaction has failed (needs a rollback)."""
    return conn.info.transaction_status == pq.TransactionStatus.INERROR


def wrap(steps: Sequence[Step], *, savepoint: bool, search_path: str | None) -> list[Step]:
    """The statements to send around ``steps``; the result of interest is that of the last of
    ``steps``, at index :func:`result_index`."""
    out: list[Step] = []
    if savepoint:
        out.append((Q.savepoint, None))
    if search_path is not None:
        out.append((Q.search_path_save, None))
        out.append((Q.search_path_set, {"search_path": search_path}))
    out.extend(steps)
    if search_path is not None:
        # Outside a transaction block (an autocommit connection) the pipeline is one implicit
        # transaction and the transaction-local setting ends with it; restoring is harmless.
        out.append((Q.search_path_restore, None))
    if savepoint:
        out.append((Q.savepoint_release, None))
    return out


def result_index(steps: Sequence[Step], *, savepoint: bool, search_path: str | None) -> int:
    """Where the last of ``steps`` sits in :func:`wrap`'s output."""
    return int(savepoint) + (2 if search_path is not None else 0) + len(steps) - 1


def run_sync(conn: Any, steps: Sequence[Step], search_path: str | None) -> list[tuple[Any, ...]]:
    """Run ``steps`` on the caller's psycopg ``Connection``; the rows of the last one."""
    if isinstance(conn, psycopg.AsyncConnection):
        raise ConfigurationError(
            "an async connection needs the async API (enqueue_async / jobs_insert_async)"
        )
    if not isinstance(conn, psycopg.Connection):
        raise ConfigurationError(
            f"connection must be a psycopg Connection, not {type(conn).__name__}"
        )
    if _failed(conn):
        raise ConfigurationError("the caller's transaction has failed already: roll it back")
    savepoint = not conn.autocommit
    wrapped = wrap(steps, savepoint=savepoint, search_path=search_path)
    index = result_index(steps, savepoint=savepoint, search_path=search_path)
    conflicts = 0
    while True:
        try:
            # Cursors of our own row factory: the caller's connection may have another.
            cursors = [conn.cursor(row_factory=tuple_row) for _ in wrapped]
            with conn.pipeline():
                for cur, (query, params) in zip(cursors, wrapped, strict=True):
                    cur.execute(query, params)
            return cursors[index].fetchall()
        except psycopg.Error as exc:
            if savepoint and _failed(conn):
                conn.execute(Q.savepoint_rollback)
                conn.execute(Q.savepoint_release)
            if isinstance(exc, CONFLICTS) and conflicts < MAX_CONFLICT_RETRIES:
                conflicts += 1  # a fresh statement reads a fresh snapshot: try again
                continue
            full = queue_full(exc)
            if full is not None:
                raise full from None
            raise


async def run_async(
    conn: Any, steps: Sequence[Step], search_path: str | None
) -> list[tuple[Any, ...]]:
    """:func:`run_sync` for the caller's psycopg ``AsyncConnection``."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise ConfigurationError(
            f"connection must be a psycopg AsyncConnection, not {type(conn).__name__}"
        )
    if _failed(conn):
        raise ConfigurationError("the caller's transaction has failed already: roll it back")
    savepoint = not conn.autocommit
    wrapped = wrap(steps, savepoint=savepoint, search_path=search_path)
    index = result_index(steps, savepoint=savepoint, search_path=search_path)
    conflicts = 0
    while True:
        try:
            acursors = [conn.cursor(row_factory=tuple_row) for _ in wrapped]
            async with conn.pipeline():
                for acur, (query, params) in zip(acursors, wrapped, strict=True):
                    await acur.execute(query, params)
            return await acursors[index].fetchall()
        except psycopg.Error as exc:
            if savepoint and _failed(conn):
                await conn.execute(Q.savepoint_rollback)
                await conn.execute(Q.savepoint_release)
            if isinstance(exc, CONFLICTS) and conflicts < MAX_CONFLICT_RETRIES:
                conflicts += 1
                continue
            full = queue_full(exc)
            if full is not None:
                raise full from None
            raise
