"""Versioned schema migrations: applied in order, each once, recorded in ``jobyard_migrations``.

Concurrent runs (two hosts deploying at once) take turns on a session advisory lock named after
the schema, so the second finds everything applied and does nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors, sql

from ...errors import SchemaError
from ._sql import MIGRATIONS, Q


def lock_key(scope: str) -> str:
    """The advisory lock name of migrations into one schema."""
    return f"jobyard:migrate:{scope}"


def apply(conn: psycopg.Connection[Any], schema: str | None) -> list[str]:
    """Create ``schema`` if it is named and missing, then apply the pending migrations.

    ``conn`` must be in autocommit mode with its search_path on ``schema`` (or the default);
    each migration runs in its own transaction together with its record. Returns the names
    applied."""
    key = {"key": lock_key(schema or "")}
    conn.execute(Q.migrations_lock, key)
    try:
        if schema is not None:
            conn.execute(sql.SQL(Q.schema_create).format(schema=sql.Identifier(schema)))
        conn.execute(Q.migrations_table)
        applied = {row[0] for row in conn.execute(Q.migrations_applied)}
        done: list[str] = []
        for name, text in MIGRATIONS:
            if name in applied:
                continue
            with conn.transaction():
                conn.execute(text.encode("utf-8"))  # several statements: no parameters
                conn.execute(Q.migrations_record, {"name": name})
            done.append(name)
        return done
    finally:
        if not conn.broken:
            conn.execute(Q.migrations_unlock, key)


def check(conn: psycopg.Connection[Any], where: str) -> None:
    """Raise :class:`SchemaError` (one line naming ``jobyard migrate``) if the schema is
    missing or older than this version of jobyard."""
    try:
        applied = {row[0] for row in conn.execute(Q.migrations_applied)}
    except (errors.UndefinedTable, errors.InvalidSchemaName):
        raise SchemaError(
            f"the jobyard schema is missing in {where}: run `jobyard migrate APP`"
        ) from None
    missing = [name for name, _ in MIGRATIONS if name not in applied]
    if missing:
        raise SchemaError(
            f"the jobyard schema in {where} is behind (missing {', '.join(missing)}): "
            "run `jobyard migrate APP`"
        )
