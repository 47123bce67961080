"""The app the dashboard's tests show: handlers that fail until fixed, run until cancelled, wait
at a gate, and carry hostile text. ``app`` (from ``$JOBYARD_URL``) is what real worker processes
run; a test builds its own with :func:`build` on its store."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jobyard

SINK = Path(os.environ.get("JOBYARD_SINK", "."))
HOSTILE = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>&amp;\u202e\x1b[31m"


def fixed(sink: Path, tag: str) -> None:
    """Make :func:`flaky` jobs of ``tag`` succeed from now on."""
    (sink / f"fixed.{tag}").write_text("yes")


def open_gate(sink: Path, tag: str) -> None:
    """Let the :func:`part` jobs of ``tag`` finish."""
    (sink / f"gate.{tag}").write_text("open")


def build(url: str | None = None, sink: Path | None = None) -> jobyard.App:
    """An App with the board's handlers on ``url``; handlers read flags from ``sink``."""
    app = jobyard.App(url)
    where = sink or SINK

    @app.job(queue="flaky", max_attempts=1)
    def flaky(tag: str, customer_id: int = 0) -> str:
        if not (where / f"fixed.{tag}").exists():
            raise RuntimeError(f"not fixed yet: {tag}")
        return f"fixed {tag}"

    @app.job(queue="slow", lease=3.0)
    def slow(tag: str, seconds: float = 60.0) -> str:
        ctx = jobyard.current_job()
        deadline = time.monotonic() + seconds
        step = 0
        while time.monotonic() < deadline:
            step += 1
            ctx.progress(min(step / 100, 0.99), f"step {step}")
            ctx.raise_if_cancelled()
            time.sleep(0.05)
        return tag

    @app.job(queue="pausable")
    def tick(tag: str) -> str:
        return tag

    @app.job(queue="canary")
    def canary(tag: str) -> str:
        return tag

    @app.job(queue="flow")
    def part(tag: str, n: int) -> int:
        deadline = time.monotonic() + 60
        while not (where / f"gate.{tag}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return n * 2

    @app.job(queue="flow")
    def join(results: list[int]) -> int:
        return sum(results)

    @app.job(queue="hostile", max_attempts=1)
    def hostile(value: Any, mode: str = "return") -> Any:
        if mode == "hold":  # running, with a hostile progress note, until the gate opens
            jobyard.current_job().progress(0.5, f"{HOSTILE} note")
            deadline = time.monotonic() + 60
            while not (where / "gate.hostile").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            return value
        if mode == "fail":
            raise ValueError(f"{HOSTILE}\n{value}")
        return {"echo": value, HOSTILE: HOSTILE}

    return app


app = build()
