"""Bodies of the child processes of the multi-process tests (``spawn``: a clean interpreter, so
they are importable top-level functions). Each reports one value on ``results``."""

from __future__ import annotations

import multiprocessing
import os
import random
import traceback
from collections.abc import Callable
from typing import Any

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsInsertParams,
    NewJob,
    Outcome,
)
from jobyard.backends.postgres.backend import PostgresBackend
from jobyard.clock import SystemClock

PAYLOAD = '{"args":[],"kwargs":{}}'
PROCESSES = 4
CTX = multiprocessing.get_context("spawn")


def run_processes(target: Callable[..., None], *args: Any, n: int = PROCESSES) -> list[Any]:
    """Start ``n`` processes that wait on one barrier, then run ``target``; their results."""
    start = CTX.Barrier(n)
    results = CTX.Queue()
    procs = [CTX.Process(target=target, args=(*args, start, results)) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        reports = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    errors = [r[2] for r in reports if r[0] != "ok"]
    assert not errors, errors[0]
    return [r[2] for r in reports]


def _report(results: Any, body: Callable[[], Any]) -> None:
    try:
        results.put(("ok", os.getpid(), body()))
    except BaseException:  # noqa: BLE001 - the parent test shows the child's traceback
        results.put(("error", os.getpid(), traceback.format_exc()))


def enqueue_keys(url: str, keys: list[str], start: Any, results: Any) -> None:
    """Enqueue one job per key, one key per statement, in a random order; report key -> id."""

    def body() -> dict[str, tuple[str, bool]]:
        backend = PostgresBackend(url, SystemClock())
        try:
            backend.schema_check()  # connect before the race starts
            order = list(keys)
            random.shuffle(order)
            start.wait(30)
            out = {}
            for key in order:
                job = NewJob(name="task", queue="q", payload=PAYLOAD, idempotency_key=key)
                (inserted,) = backend.jobs_insert(JobsInsertParams([job]))
                out[key] = (inserted.id, inserted.created)
            return out
        finally:
            backend.close()

    _report(results, body)


def enqueue_batch(url: str, keys: list[str], start: Any, results: Any) -> None:
    """Enqueue every key in one batch (shuffled); report key -> id."""

    def body() -> dict[str, tuple[str, bool]]:
        backend = PostgresBackend(url, SystemClock())
        try:
            backend.schema_check()
            order = list(keys)
            random.shuffle(order)
            jobs = [
                NewJob(name="task", queue="q", payload=PAYLOAD, idempotency_key=k) for k in order
            ]
            start.wait(30)
            inserted = backend.jobs_insert(JobsInsertParams(jobs))
            return {k: (i.id, i.created) for k, i in zip(order, inserted, strict=True)}
        finally:
            backend.close()

    _report(results, body)


def claim_until_empty(url: str, limit: int, ack: bool, start: Any, results: Any) -> None:
    """Claim batches (completing each unless ``ack`` is false) until a claim comes back
    empty; report the ids claimed."""

    def body() -> list[str]:
        backend = PostgresBackend(url, SystemClock())
        try:
            backend.schema_check()
            start.wait(30)
            seen: list[str] = []
            while True:
                jobs = backend.jobs_claim(JobsClaimParams(f"w{os.getpid()}", ["q"], limit))
                if not jobs:
                    return seen
                seen.extend(j.id for j in jobs)
                if ack:
                    outcomes = [Outcome(j.id, j.token, "completed", result="null") for j in jobs]
                    assert backend.jobs_ack(JobsAckParams(outcomes)) == []
        finally:
            backend.close()

    _report(results, body)


def migrate(url: str, start: Any, results: Any) -> None:
    """Run the migrations; report the names this process applied."""

    def body() -> list[str]:
        backend = PostgresBackend(url, SystemClock())
        try:
            start.wait(30)
            return backend.schema_migrate()
        finally:
            backend.close()

    _report(results, body)
