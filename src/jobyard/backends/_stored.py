"""How the SQL stores hold values: one rule each for SQLite and PostgreSQL.

A job id of theirs is the decimal form of a 64-bit row key; a text column holds any Python string
once it is made :func:`storable`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

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
