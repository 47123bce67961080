"""Per-test PostgreSQL stores: a brand-new, migrated schema in database ``test`` for each call.

``fresh_url()`` is what the contract suite's ``store`` fixture calls for every test, so it is
cheap: one round trip creates the schema and applies the migrations (through the backend's own
migration runner), on one connection kept for the process. Every schema this process made is
dropped when it exits; schemas left behind by a process that died are swept by the next run.
Processes running at once (pytest-xdist workers, other runs) never drop each other's schemas:
a schema is named by its creation time and its process, a process drops only its own at exit,
and the sweep takes only schemas over six hours old (no run lasts that long).

The server is the shared one at 127.0.0.1:5432 (trust auth, user postgres), overridable with
``$JOBYARD_TEST_POSTGRES``. It is never stopped here.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from jobyard.backends.postgres import _migrate

BASE_URL = os.environ.get("JOBYARD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PREFIX = "jyt_"
STALE_AFTER = 6 * 3600.0  # seconds: a schema this old belongs to a run that died
DROP_CHUNK = 8  # schemas per DROP statement: each drop locks every table of its schema

_lock = threading.Lock()
_counter = itertools.count(1)
_admin: psycopg.Connection[Any] | None = None
_admin_pid = 0
_created: list[tuple[int, str]] = []  # (creating pid, schema)
_swept = False


def with_params(url: str, **params: str) -> str:
    """``url`` with query parameters added or replaced."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query)))


def schema_of(url: str) -> str | None:
    """The ``schema=`` parameter of a URL."""
    return dict(parse_qsl(urlsplit(url).query)).get("schema")


def admin() -> psycopg.Connection[Any]:
    """This process's own autocommit connection to the test database (not for tests' jobs)."""
    global _admin, _admin_pid
    if _admin is None or _admin.closed or _admin_pid != os.getpid():
        _admin = psycopg.connect(BASE_URL, autocommit=True, application_name="jobyard-tests")
        _admin_pid = os.getpid()
    return _admin


def _sweep(conn: psycopg.Connection[Any]) -> None:
    """Drop schemas of earlier runs that died before their own cleanup."""
    cutoff = int(time.time() - STALE_AFTER)
    rows = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", [PREFIX + "%"]
    ).fetchall()
    stale = []
    for (name,) in rows:
        try:
            born = int(name[len(PREFIX) :].split("_", 1)[0])
        except ValueError:
            continue
        if born < cutoff:
            stale.append(name)
    _drop(conn, stale)


def _drop(conn: psycopg.Connection[Any], schemas: list[str]) -> None:
    for i in range(0, len(schemas), DROP_CHUNK):
        chunk = schemas[i : i + DROP_CHUNK]
        names = sql.SQL(", ").join(sql.Identifier(s) for s in chunk)
        with contextlib.suppress(psycopg.Error):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(names))


def fresh_url(**params: str) -> str:
    """Create a uniquely named, migrated schema in database ``test`` and return its URL.

    Extra keyword arguments become URL parameters (``application_name=...``). The schema is
    dropped when this process exits (or earlier, with :func:`drop`)."""
    global _swept
    with _lock:
        conn = admin()
        if not _swept:
            _swept = True
            _sweep(conn)
        schema = f"{PREFIX}{int(time.time())}_{os.getpid()}_{next(_counter)}"
        conn.execute("SELECT set_config('search_path', %s, false)", [schema])
        _migrate.apply(conn, schema)
        conn.execute("RESET search_path")
        _created.append((os.getpid(), schema))
    return with_params(BASE_URL, schema=schema, **params)


def drop(url: str) -> None:
    """Drop a schema made by :func:`fresh_url` now."""
    schema = schema_of(url)
    if schema is None or not schema.startswith(PREFIX):
        raise ValueError(f"not a test schema: {url}")
    with _lock:
        _drop(admin(), [schema])
        _created[:] = [c for c in _created if c[1] != schema]


@atexit.register
def _cleanup() -> None:
    mine = [schema for pid, schema in _created if pid == os.getpid()]
    if not mine:
        return  # a forked child must not drop its parent's schemas
    with contextlib.suppress(psycopg.Error):
        conn = admin()
        conn.execute("SET lock_timeout = '5s'")
        _drop(conn, mine)
        conn.close()
