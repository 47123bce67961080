"""Handlers that record what they did, for tests that run real worker processes.

Every execution writes a file into ``$JOBYARD_SINK`` so the test can count executions after the
worker is gone (killed or not)."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import jobyard

app = jobyard.App()  # JOBYARD_URL
SINK = Path(os.environ.get("JOBYARD_SINK", "."))


def mark(kind: str, tag: str, text: str = "") -> None:
    """Record one event as its own file: ``<kind>.<tag>.<unique>``."""
    name = f"{kind}.{tag}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    # Written aside, then renamed: a test that sees the mark and SIGKILLs the worker at once
    # must never find it empty.
    aside = SINK / f".{name}"
    aside.write_text(text or f"{time.time():.6f}")
    os.replace(aside, SINK / name)


def marks(sink: Path, kind: str, tag: str = "") -> list[Path]:
    """The events of one kind (and tag) recorded so far."""
    prefix = f"{kind}.{tag}." if tag else f"{kind}."
    return [p for p in sink.iterdir() if p.name.startswith(prefix)]


def open_gate(sink: Path, tag: str) -> None:
    """Let the attempts waiting in :func:`wait_for_gate` for ``tag`` go on."""
    (sink / f"gate.{tag}").write_text("open")


def wait_for_gate(tag: str, timeout: float = 60.0) -> None:
    """Hold the calling handler until the test opens the gate of ``tag`` (at most ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not (SINK / f"gate.{tag}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@app.job(queue="work")
def record(tag: str) -> int:
    """Record one execution."""
    mark("run", tag)
    return os.getpid()


@app.job(queue="leases", lease=1.0, max_attempts=3, backoff=jobyard.Backoff("fixed", base=0.0))
def hang_first(tag: str, seconds: float, gated: bool = False) -> str:
    """The first attempt announces itself and runs ``seconds`` before it answers "first";
    later attempts answer "second" at once, or (``gated``) once the test opens the gate."""
    attempt = jobyard.current_job().attempt
    mark("start", tag, str(attempt))
    if attempt == 1:
        time.sleep(seconds)
        mark("late", tag)
        return "first"
    if gated:
        wait_for_gate(tag)
    return "second"


@app.job(queue="leases", lease=1.0)
def outlive_lease(tag: str, seconds: float) -> int:
    """Run longer than the lease: only heartbeats keep the job."""
    mark("start", tag)
    time.sleep(seconds)
    mark("end", tag)
    return jobyard.current_job().attempt


@app.job(queue="slow")
def sleep_for(tag: str, seconds: float) -> str:
    """Announce, then sleep."""
    mark("start", tag)
    time.sleep(seconds)
    mark("end", tag)
    return "slept"


@app.job(queue="work", lease=1.0)
def fan_member(tag: str, i: int) -> int:
    """A member of a group: a short wait, then its index (recorded)."""
    time.sleep(0.02)
    mark("member", tag, str(i))
    return i


@app.job(queue="fan", lease=1.0)
def fan_join(values: list[int], tag: str) -> int:
    """The join of a group (in another queue, so another hash slot on Redis Cluster)."""
    mark("join", tag, json.dumps(values))
    return sum(values)
