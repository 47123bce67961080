"""The SQL beside this module, read once per process (``.._sqlfiles``, shared with PostgreSQL):
named query blocks, and numbered migrations split into statements with SQLite's own tokenizer."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import cache

from .._sqlfiles import read_migrations, read_queries


def split_statements(script: str) -> list[str]:
    """Split a migration script into statements using SQLite's own tokenizer.

    ``executescript`` would do this too, but it commits first, and a migration must run inside
    the ``BEGIN IMMEDIATE`` that serialises concurrent migrators.
    """
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    rest = "\n".join(
        line for line in buffer.splitlines() if line.strip() and not line.strip().startswith("--")
    )
    if rest:
        raise ValueError(f"incomplete SQL statement at the end of a migration: {rest[:80]!r}")
    return statements


@dataclass(frozen=True, slots=True)
class Migration:
    """One ``NNNN_name.sql`` file."""

    version: int
    name: str  # "0001_initial"
    statements: tuple[str, ...]


@cache
def queries() -> dict[str, str]:
    """The named blocks of ``queries.sql``."""
    return read_queries(__package__)


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this version, oldest first."""
    return tuple(
        Migration(int(name[:4]), name, tuple(split_statements(script)))
        for name, script in read_migrations(__package__)
    )
