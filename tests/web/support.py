"""Serving the dashboard in a test: uvicorn on a thread, on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from tests import ports


def free_port() -> int:
    """A TCP port nothing listens on, of this process's own range (tests/ports.py), for a
    server started in another process (``jobyard dashboard --port``)."""
    return ports.free_port()


@contextlib.contextmanager
def serving(asgi: Any) -> Iterator[str]:
    """``asgi`` served on 127.0.0.1 until the block ends; yields its base URL. The socket is
    bound here and handed to uvicorn: no other process can take the port in between."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        asgi, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="dashboard", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the dashboard did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class Counting:
    """A real store, with its calls counted (what a page costs in round trips)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._backend, name)
        if callable(value) and not name.startswith("_"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return value(*args, **kwargs)

            return counted
        return value


@contextlib.contextmanager
def limited_queue(app: Any, sink: Any) -> Iterator[None]:
    """The board's ``hostile`` queue under limits, held full while the block runs: at most 2
    running (``max_concurrency``), 1 per key (``key_concurrency``), ``6000/m`` (room left); a
    worker runs one job of the key ``HOSTILE`` and one of ``customer:7`` (both held at the
    gate), and holds back 3 more of ``HOSTILE`` and 1 of ``customer:7`` (pending)."""
    from tests.conftest import running_worker, wait_until

    from .board_app import HOSTILE, open_gate

    app.configure_queue("hostile", max_concurrency=2, rate_limit="6000/m", key_concurrency=1)
    fn = app.registry["hostile"]
    for key, n in ((HOSTILE, 4), ("customer:7", 2)):
        for i in range(n):
            fn.options(key=key).enqueue(f"{key} {i}", mode="hold")
    try:
        with running_worker(app, queues=["hostile"], concurrency=4):

            def full() -> bool:
                (st,) = app.stats(["hostile"])
                return st.counts.get("running") == 2

            wait_until(full, what="two held jobs running")
            yield
            open_gate(sink, "hostile")
    finally:
        open_gate(sink, "hostile")
