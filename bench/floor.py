"""The physical floor of idle enqueue-to-start latency on this machine: the bare transport, no
job-queue library at all.

    python bench/floor.py [--store redis|postgres|all] [--samples 300] [--shared-redis]

Every library's idle latency sits on this floor: whatever it adds comes on top of one message
through the store and the scheduling of two processes. A target asking one library's p99 to be
under another's p50 on the same path asks for less spread than the transport's own, if the
transport's p99 here is already above its p50 by more than the libraries differ.

Measured as ``throughput.py`` measures its idle latency probe: the worker in a process of its
own (started with subprocess), this process the producer, one message at a time with a random
10-50 ms pause between samples; the producer notes ``time.time()`` before its enqueue call, the
worker ``time.time()`` when its handler would start (it sends that back on its stdout, and the
producer waits for it before the next sample). A few warm-up samples are not counted.

- redis: ``LPUSH key <producer's time>`` (redis-py with hiredis); the worker blocks in
  ``BRPOP key 0`` and notes when the reply arrived. Also ``PING`` alone, a round trip with no
  worker; and jobyard's own path with none of its Python: the producer sends the insert script
  of one plain job (its arguments made beforehand but the payload, which carries the producer's
  time), the worker waits as jobyard's does (``BLPOP`` of the wake list and the claim script in
  one pipeline) and notes when the claim's reply arrived: with the lean scripts
  (``jobs_insert_one``, ``jobs_claim_one``) and with the general ones. A private redis-server
  on a free port (``--shared-redis``: 127.0.0.1:6379, a random key deleted after).
- postgres (127.0.0.1:5432, database ``test``, a schema ``floor_<random>`` dropped after): the
  minimal honest queue shape. The producer, autocommit, inserts a row and notifies in one
  statement, one transaction committed as the server is configured (``WITH j AS (INSERT ...
  RETURNING id) SELECT pg_notify(...)``: one round trip); the worker LISTENs and on each
  notification claims one row (``DELETE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT
  1) RETURNING``) and notes when the claim returned. Also ``SELECT 1`` alone.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    log,
    percentile,
    private_redis,
    psql,
    short_id,
    stop_process,
)

WARMUP = 5
PG_URL = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/test"

# Each worker prints "ready", then one line "<producer's time> <worker's time>" per message.
REDIS_WORKER = """
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
key = sys.argv[2]
r.ping()
print("ready", flush=True)
while True:
    _, payload = r.brpop([key], 0)
    t = time.time()
    print(payload.decode(), t, flush=True)
"""

# jobyard's own scripts with no jobyard Python around them: the worker's waiting claim (a BLPOP
# of the wake list and the claim script, one pipeline) and, in the producer, the insert script,
# both sent raw with their arguments made beforehand. argv: url, prefix, lean ("1") or general.
JOBYARD_WORKER = """
import json, sys, time, redis
from jobyard.backends.redis._connection import Scripts
from jobyard.backends.redis.keys import Keys
r = redis.Redis.from_url(sys.argv[1])
keys, lean = Keys(sys.argv[2]), sys.argv[3] == "1"
scripts = Scripts(r)
name = "jobs_claim_one" if lean else "jobs_claim"
script = scripts[name]
r.script_load(script.script)
claim_keys = [keys.config("floor")] if lean else keys.queue("floor")
print("ready", flush=True)
while True:
    pipe = r.pipeline(transaction=False)
    pipe.blpop([keys.wake("floor")], timeout=0)
    args = ["", "8", "w", "p"] if lean else ["", "1", "8", "w", "p", "", "0"]
    pipe.evalsha(script.sha, len(claim_keys), *claim_keys, *args)
    _, reply = pipe.execute()
    t = time.time()
    for i in range(1, len(reply), 13):
        print(json.loads(reply[i + 3])["t0"], t, flush=True)
"""

PG_WORKER = """
import sys, time, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
table, channel = sys.argv[2], sys.argv[3]
claim = (
    f"DELETE FROM {table} WHERE id = (SELECT id FROM {table} ORDER BY id"
    " FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING t0"
)
conn.execute(f"LISTEN {channel}")
print("ready", flush=True)
while True:
    for _ in conn.notifies(stop_after=1):
        pass
    while (row := conn.execute(claim).fetchone()) is not None:
        t = time.time()
        print(repr(row[0]), t, flush=True)
"""


def pause() -> None:
    time.sleep(random.uniform(0.01, 0.05))


def report(label: str, samples_ms: list[float]) -> None:
    p50, p95, p99 = (percentile(samples_ms, q) for q in (50, 95, 99))
    print(f"{label}: p50 {p50:.2f}, p95 {p95:.2f}, p99 {p99:.2f}  # p99/p50 {p99 / p50:.1f}x")


def round_trips(call: Callable[[], object], n: int) -> list[float]:
    """``n`` calls timed one at a time (ms), paced as the samples are."""
    out = []
    for i in range(WARMUP + n):
        pause()
        t0 = time.perf_counter()
        call()
        if i >= WARMUP:
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


@contextlib.contextmanager
def worker(script: str, *argv: str) -> Iterator[subprocess.Popen[str]]:
    """The worker process, once it said it is ready and had a second to go idle."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker did not start (exit {proc.poll()})")
        time.sleep(1.0)
        yield proc
    finally:
        stop_process(proc)  # type: ignore[arg-type]


def enqueue_to_start(
    proc: subprocess.Popen[str], enqueue: Callable[[float], object], n: int
) -> list[float]:
    """``n`` idle samples (ms): the producer's time before ``enqueue(t0)`` to the worker's."""
    assert proc.stdout is not None
    out = []
    for i in range(WARMUP + n):
        pause()
        t0 = time.time()
        enqueue(t0)
        sent, started = (float(x) for x in proc.stdout.readline().split())
        assert sent == t0, (sent, t0)
        if i >= WARMUP:
            out.append((started - t0) * 1000.0)
    return out


def run_redis(n: int, shared: bool) -> None:
    import redis

    with contextlib.ExitStack() as stack:
        url = "redis://127.0.0.1:6379/0" if shared else stack.enter_context(private_redis())
        key = f"floor:{short_id()}"
        r = redis.Redis.from_url(url)
        stack.callback(r.close)
        stack.callback(r.delete, key)
        print(f"# floor redis: raw LPUSH -> BRPOP, worker in its own process, {n} samples (ms)")
        log(f"redis: {n} PING")
        report("redis ping", round_trips(r.ping, n))
        with worker(REDIS_WORKER, url, key) as proc:
            log(f"redis: {n} LPUSH -> BRPOP")
            report(
                "redis lpush->brpop", enqueue_to_start(proc, lambda t0: r.lpush(key, repr(t0)), n)
            )
        for lean in (True, False):
            prefix = f"floor{short_id()}"
            stack.callback(_delete_prefix, r, prefix)
            send = _jobyard_insert(r, prefix, lean)
            what = "lean" if lean else "general"
            with worker(JOBYARD_WORKER, url, prefix, "1" if lean else "") as proc:
                log(f"redis: {n} jobyard's {what} insert -> its waiting claim")
                report(f"redis jobyard {what} scripts", enqueue_to_start(proc, send, n))


def _jobyard_insert(r: Any, prefix: str, lean: bool) -> Callable[[float], object]:
    """The producer's raw send of jobyard's insert script (lean: jobs_insert_one, else
    jobs_insert) of one plain job whose payload carries ``t0``; its arguments made beforehand
    but the payload."""
    from jobyard.backends.base import DEFAULT_MAX_ATTEMPTS, NewJob
    from jobyard.backends.redis._connection import Scripts
    from jobyard.backends.redis._core import dumps
    from jobyard.backends.redis._insert import rows
    from jobyard.backends.redis.keys import Keys

    keys, scripts = Keys(prefix), Scripts(r)
    name = "jobs_insert_one" if lean else "jobs_insert"
    script = scripts[name]
    r.script_load(script.script)
    if lean:
        head = [keys.config("floor"), keys.seq, keys.queues, keys.wake("floor")]
        fixed = ["", "floor", str(DEFAULT_MAX_ATTEMPTS)]
    else:
        head = [*keys.queue("floor"), keys.seq, keys.queues, keys.wake("floor")]
        fixed = ["", dumps(["floor"]), "", "1", "", "", str(DEFAULT_MAX_ATTEMPTS)]

    def send(t0: float) -> object:
        job = NewJob(name="stamp", queue="floor", payload=dumps({"t0": repr(t0)}))
        return r.execute_command(
            "EVALSHA", script.sha, len(head), *head, *fixed, rows([job], [[]], ["floor"])
        )

    return send


def _delete_prefix(r: Any, prefix: str) -> None:
    for key in r.scan_iter(match="{" + prefix + "*", count=1000):
        r.delete(key)


def run_postgres(n: int) -> None:
    import psycopg

    schema = f"floor_{short_id()}"
    table, channel = f"{schema}.floor_jobs", schema
    psql(
        f"CREATE SCHEMA {schema}; CREATE TABLE {table} (id bigserial PRIMARY KEY, t0 float8)",
        "test",
    )
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            sync = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
            print(
                f"# floor postgres: raw INSERT + NOTIFY -> LISTEN + claim (SKIP LOCKED),"
                f" worker in its own process, synchronous_commit={sync}, {n} samples (ms)"
            )
            log(f"postgres: {n} SELECT 1")
            report("postgres select 1", round_trips(lambda: conn.execute("SELECT 1").fetchone(), n))
            insert = (
                f"WITH j AS (INSERT INTO {table} (t0) VALUES (%s) RETURNING id)"
                f" SELECT pg_notify('{channel}', id::text) FROM j"
            )
            with worker(PG_WORKER, PG_URL, table, channel) as proc:
                log(f"postgres: {n} INSERT + NOTIFY -> LISTEN + claim")
                samples = enqueue_to_start(
                    proc, lambda t0: conn.execute(insert, (t0,)).fetchone(), n
                )
                report("postgres insert+notify->claim", samples)
    finally:
        psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE", "test")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("redis", "postgres", "all"), default="all")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--shared-redis", action="store_true", help="use 127.0.0.1:6379/0 (a random key)"
    )
    args = parser.parse_args()
    if args.store in ("redis", "all"):
        run_redis(args.samples, args.shared_redis)
    if args.store in ("postgres", "all"):
        run_postgres(args.samples)


if __name__ == "__main__":
    main()
