"""Real server and worker processes of the examples, each killed for good at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nothing listens on, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[Path]:
    """``python ARGS`` in ``cwd``, its output in ``log``; SIGTERM, then SIGKILL, at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield log
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_http(url: str, log: Path, timeout: float = 20.0) -> None:
    """Wait until something answers at ``url`` (any status)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                pytest.fail(f"no server at {url}; its log:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
