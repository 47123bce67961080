"""Loading the SQL that lives beside this module: named query blocks and numbered migrations.

Both are read once per process with :mod:`importlib.resources`, so they work from a wheel, a zip
or a source checkout alike. No SQL is ever assembled from Python strings.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from functools import cache
from importlib import resources

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$")
_MIGRATION_RE = re.compile(r"^(\d{4})_(\w+)\.sql$")


def parse_queries(text: str) -> dict[str, str]:
    """Split ``-- name: x`` blocks into ``{"x": "SELECT ..."}``.

    Text before the first header is the file's preamble and is dropped. A block runs to the next
    header; its trailing blank lines, comments and ``;`` are trimmed, since ``sqlite3`` refuses
    anything after a statement's end.
    """
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if name is None:
            return
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        sql = "\n".join(lines).strip().rstrip(";").rstrip()
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = sql

    for line in text.splitlines():
        match = _NAME_RE.match(line)
        if match:
            flush()
            name = match.group(1)
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
            lines = []
        elif name is not None:
            lines.append(line)
    flush()
    return queries


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
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    return parse_queries(text)


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this version, oldest first."""
    found: list[Migration] = []
    folder = resources.files(__package__).joinpath("migrations")
    for entry in folder.iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if not match:
            continue
        statements = split_statements(entry.read_text(encoding="utf-8"))
        found.append(Migration(int(match.group(1)), entry.name[:-4], tuple(statements)))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two SQLite migrations share a version number: {versions}")
    return tuple(found)
