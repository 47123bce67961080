"""A TCP proxy in front of a real Redis server that loses one reply on its way back.

Armed with a marker (a script's SHA), it forwards the next request holding the marker to Redis,
which runs it, then closes the client's connection instead of passing the reply on: the client
sees the connection drop after its command ran, as when a network fails at the wrong moment.
Everything else is passed through unchanged.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class LosingProxy:
    """Listens on ``127.0.0.1:<port>`` and forwards to ``upstream``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._socks: list[socket.socket] = []
        self.lost = 0  # replies lost so far
        self._closed = False
        threading.Thread(target=self._accept, name="losing-proxy", daemon=True).start()

    def lose_reply_to(self, marker: bytes) -> None:
        """Lose the reply to the next request that holds ``marker`` (once)."""
        with self._lock:
            self._marker = marker

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._socks += [client, server]
            lose = threading.Event()  # set: the next reply on this connection is lost
            threading.Thread(target=self._up, args=(client, server, lose), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, lose), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, lose: threading.Event) -> None:
        while data := _recv(client):
            with self._lock:
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    lose.set()  # before forwarding: the reply cannot overtake it
            try:
                server.sendall(data)
            except OSError:
                break
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        while data := _recv(server):
            if lose.is_set():  # Redis ran the command and answered: drop the answer
                with self._lock:
                    self.lost += 1
                break
            try:
                client.sendall(data)
            except OSError:
                break
        _close(client, server)

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        _close(*socks)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


@contextmanager
def losing_proxy(host: str, port: int) -> Iterator[LosingProxy]:
    """A :class:`LosingProxy` in front of ``host:port``, closed at the end of the block."""
    proxy = LosingProxy((host, port))
    try:
        yield proxy
    finally:
        proxy.close()
