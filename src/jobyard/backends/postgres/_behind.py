"""A lock statement and the claim it guards, sent as one message of the simple protocol.

A claim of limited queues must read the running counts and the rate buckets after the queues'
lock is granted, so the lock is a statement of its own before the claim, in the same implicit
transaction (see ``jobs_claim_lock`` in queries/leases.sql). Sent as a pipeline of the extended
protocol, that is one round trip, but psycopg's pipeline does several times the client work of
one statement (its sends, Sync and results are each a step of Python), and in a worker whose
slots and completer hold the GIL between those steps the claim waited for it at each: a
queue under a rate far above the worker's pace claimed 128 jobs in 1.4 ms more than the same
queue without a limit, and drained at 85-87 % of its figure, where the lock statement adds
0.1-0.3 ms when timed alone (bench/README.md, "Claims behind the lock without a pipeline").

Here both are server-side prepared statements, executed by one simple-protocol message
(``EXECUTE lock(...); EXECUTE claim(...)``): one round trip, one wait for the reply, and, as
in the pipeline, one implicit transaction whose second statement takes its own snapshot after
the first was granted (READ COMMITTED). The parameters travel as literals that psycopg quotes.
Each connection prepares a statement the first time it is executed there (a fresh connection
answers that it does not exist, and the message is sent again after the PREPARE).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

_PARAM = re.compile(r"%\((\w+)\)[sb]")


@dataclass(frozen=True, slots=True)
class _Prepared:
    name: str
    prepare: str  # PREPARE name AS the query, its parameters numbered
    params: tuple[str, ...]  # the names of $1, $2, ...


_prepared: dict[str, _Prepared] = {}
_prepared_lock = threading.Lock()


def _statement(query: str) -> _Prepared:
    """The prepared form of ``query`` (psycopg's ``%(name)s`` placeholders; every parameter is
    cast in the query, so the server infers its type)."""
    found = _prepared.get(query)
    if found is not None:
        return found
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    body = _PARAM.sub(number, query).replace("%%", "%")
    with _prepared_lock:
        name = f"jobyard_behind_{len(_prepared)}"
        found = _prepared.setdefault(
            query, _Prepared(name, f"PREPARE {name} AS {body}", tuple(names))
        )
    return found


def _execute(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any]) -> str:
    statement = _statement(query)
    values = sql.SQL(", ").join(sql.Literal(params[name]) for name in statement.params)
    return f"EXECUTE {statement.name}({values.as_string(conn)})"


def run(
    conn: psycopg.Connection[Any],
    lock: tuple[str, Mapping[str, Any]],
    guarded: tuple[str, Mapping[str, Any]],
) -> tuple[int, list[tuple[Any, ...]]]:
    """Run ``lock`` then ``guarded`` (each a query and its parameters) on ``conn`` (autocommit)
    in one round trip and one implicit transaction; the number of rows ``lock`` returned and
    the rows of ``guarded``."""
    message = f"{_execute(conn, *lock)}; {_execute(conn, *guarded)}"
    for _ in range(3):
        try:
            cursor = conn.execute(message)  # no parameters: the simple protocol
        except psycopg.errors.InvalidSqlStatementName:
            # Not prepared on this connection yet (each statement at most once per connection;
            # the failed message took nothing: its implicit transaction was rolled back).
            for query in (lock[0], guarded[0]):
                with contextlib.suppress(psycopg.errors.DuplicatePreparedStatement):
                    conn.execute(_statement(query).prepare)
            continue
        taken = len(cursor.fetchall())
        cursor.nextset()
        return taken, cursor.fetchall()
    raise RuntimeError("a claim's prepared statements could not be prepared")
