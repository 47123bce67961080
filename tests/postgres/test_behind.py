"""A claim behind its lock (``_behind.run``): the lock statement and the claim as one message of
two prepared statements, in one implicit transaction, prepared on each connection once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from jobyard.backends.postgres import _behind

# Stand-ins of the same shape as jobs_claim_lock and a claim: the "claim" counts the advisory
# locks this session holds while it runs, and echoes its parameters back.
LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended('test:behind:' || name, 0))"
    " FROM unnest(%(queues)b::text[]) AS q (name) ORDER BY name"
)
CLAIM = (
    "SELECT count(*), %(limit)s::int8, %(worker_id)s::text, %(now)s::float8 FROM pg_locks"
    " WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
)
ARGS = {"limit": 7, "worker_id": "w'1", "now": None}


def test_the_lock_is_held_while_the_claim_runs(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    # given a connection that has prepared neither statement
    conn = connect(autocommit=True)
    # when both are sent behind one another
    taken, rows = _behind.run(conn, (LOCK, {"queues": ["b", "a"]}), (CLAIM, ARGS))
    # then the claim ran inside the lock's transaction, holding both locks, with its parameters
    assert taken == 2
    assert rows == [(2, 7, "w'1", None)]
    # and the locks ended with that transaction
    (held,) = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    ).fetchone() or (None,)
    assert held == 0


def test_each_connection_prepares_once_and_again_after_a_deallocate(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    conn = connect(autocommit=True)

    def prepared() -> int:
        (n,) = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'jobyard_behind_%'"
        ).fetchone() or (None,)
        return int(n or 0)

    for _ in range(3):
        assert _behind.run(conn, (LOCK, {"queues": ["a"]}), (CLAIM, ARGS))[0] == 1
    assert prepared() == 2
    # a connection whose statements were dropped (DISCARD, DEALLOCATE) prepares them again
    conn.execute("DEALLOCATE ALL")
    assert _behind.run(conn, (LOCK, {"queues": ["a"]}), (CLAIM, ARGS))[1][0][0] == 1
    assert prepared() == 2
