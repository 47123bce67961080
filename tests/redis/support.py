"""Redis stores for tests: a fresh key prefix on the shared server, private servers a test may
stop and restart, and a real three-node Redis Cluster for the session.

``fresh_url()`` and ``cluster_url()`` are what the contract suite's store fixture calls. Keys of
every fresh prefix are deleted when the test process exits; private servers and the cluster are
stopped then (and die with the process if it is killed: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests import ports

SHARED_HOST = "127.0.0.1"
SHARED_PORT = 6379
SESSION = f"jyt-{uuid.uuid4().hex[:8]}"  # every prefix of this process starts with it
_counter = itertools.count(1)
_lock = threading.Lock()
_cluster: Cluster | None = None
_servers: list[Server] = []


def new_prefix() -> str:
    """A key prefix no other test (of any process) uses."""
    return f"{SESSION}-{next(_counter)}"


def fresh_url(**query: str | float) -> str:
    """``redis://127.0.0.1:6379/0?prefix=<unique>``: an empty store on the shared server."""
    params = {"prefix": new_prefix(), **{k: str(v) for k, v in query.items()}}
    qs = "&".join(f"{k}={v}" for k, v in params.items())
    return f"redis://{SHARED_HOST}:{SHARED_PORT}/0?{qs}"


def cluster_url(**query: str | float) -> str:
    """``redis+cluster://127.0.0.1:<port>?prefix=<unique>`` on the session's 3-node cluster."""
    global _cluster
    with _lock:
        if _cluster is None:
            _cluster = Cluster.start()
        port = _cluster.ports[0]
    params = {"prefix": new_prefix(), **{k: str(v) for k, v in query.items()}}
    qs = "&".join(f"{k}={v}" for k, v in params.items())
    return f"redis+cluster://{SHARED_HOST}:{port}?{qs}"


def prefix_of(url: str) -> str:
    """The ``prefix=`` of a URL made here."""
    for part in url.split("?", 1)[1].split("&"):
        name, _, value = part.partition("=")
        if name == "prefix":
            return value
    raise ValueError(f"no prefix in {url!r}")


def _cleanup_shared() -> None:
    """Delete every key this process's prefixes created on the shared server."""
    with contextlib.suppress(redis.RedisError):
        client = redis.Redis(host=SHARED_HOST, port=SHARED_PORT, socket_timeout=10)
        # keys of jobyard ("{<prefix>..."), and tests' own list/stream keys, which embed it too
        for pattern in (f"*{SESSION}-*",):
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        client.close()


atexit.register(_cleanup_shared)


# --- servers a test owns -------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Run in the child before exec: get SIGTERM when the test process dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A port of this process's own range that is free, and whose cluster bus port (+10000) is
    free too (tests/ports.py: no two xdist workers pick the same)."""
    return ports.free_port(10000)


def wait_for(predicate: object, timeout: float, what: str) -> None:
    """Poll ``predicate`` until truthy or fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class PortTaken(RuntimeError):
    """The server could not have its port: it exited, or another server answers there."""


class Server:
    """A redis-server on a private loopback port and directory; safe to stop and restart."""

    def __init__(self, port: int, directory: Path, extra: list[str]) -> None:
        self.port = port
        self.dir = directory
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start_new(cls, *extra: str, port: int | None = None) -> Server:
        """Start a server (snapshotting disabled unless ``extra`` says otherwise). A port picked
        here that turns out to be taken (another run on the machine) is replaced by another."""
        directory = Path(tempfile.mkdtemp(prefix="jobyard-redis-"))
        for attempt in range(5):
            server = cls(port or free_port(), directory, list(extra))
            try:
                server.start()
            except PortTaken:
                if port is not None or attempt == 4:
                    raise
                continue
            _servers.append(server)
            return server
        raise AssertionError("unreachable")

    @property
    def url(self) -> str:
        """A ``redis://`` URL for this server (no prefix)."""
        return f"redis://{SHARED_HOST}:{self.port}/0"

    def client(self) -> redis.Redis:
        """A plain client of this server, which does not retry (a stopped server fails fast)."""
        return redis.Redis(
            host=SHARED_HOST, port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )

    def start(self) -> None:
        """Start (or start again, on the same port and directory)."""
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            SHARED_HOST,
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            *self.extra,
        ]
        proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # only prctl, before exec
        )
        self.proc = proc

        def ours() -> bool:
            # The server that answers must be this process: one that could not bind its port
            # exits, and the answer would come from whoever holds the port.
            if proc.poll() is not None:
                code = proc.returncode
                raise PortTaken(f"redis-server on port {self.port} exited ({code}): taken?")
            info = self.client().info("server")
            if int(info["process_id"]) != proc.pid:
                proc.kill()
                proc.wait(10)
                raise PortTaken(f"port {self.port} is another redis-server's")
            return True

        wait_for(ours, 10, f"redis-server on port {self.port}")

    def stop(self, save: bool = False) -> None:
        """Stop: ``SHUTDOWN SAVE`` (the data survives a restart) or a SIGKILL (it does not)."""
        if self.proc is None:
            return
        if save:
            with contextlib.suppress(redis.RedisError):
                self.client().shutdown(save=True)
        else:
            self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def restart(self, save: bool = True) -> None:
        """Stop and start again on the same port."""
        self.stop(save=save)
        self.start()

    def close(self) -> None:
        """Stop for good and remove the directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three cluster-enabled redis-server nodes joined with ``redis-cli --cluster create``."""

    def __init__(self, nodes: list[Server]) -> None:
        self.nodes = nodes

    @property
    def ports(self) -> list[int]:
        """The nodes' ports."""
        return [n.port for n in self.nodes]

    @classmethod
    def start(cls) -> Cluster:
        """Start the nodes, join them, and wait until every node says the cluster is ok."""
        nodes = [
            Server.start_new(
                "--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--appendonly", "no"
            )
            for _ in range(3)
        ]
        cluster = cls(nodes)
        addresses = [f"{SHARED_HOST}:{p}" for p in cluster.ports]
        command = ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0"]
        subprocess.run(
            [*command, "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )

        def ok() -> bool:
            for node in nodes:
                info = node.client().execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                slots = node.client().execute_command("CLUSTER", "SLOTS")
                if len(slots) < 3:
                    return False
            return True

        wait_for(ok, 30, "the cluster to report cluster_state:ok")
        return cluster


def _stop_servers() -> None:
    for server in _servers:
        with contextlib.suppress(Exception):
            server.close()


atexit.register(_stop_servers)


def server_ports(url: str) -> list[int]:
    """The ports of the server(s) behind a URL made here: the shared one, or every cluster node."""
    if url.startswith("redis+cluster://"):
        assert _cluster is not None
        return _cluster.ports
    return [int(url.split("://", 1)[1].split("/", 1)[0].split(":")[1])]


def connections(port: int, name: str) -> list[dict[str, str]]:
    """CLIENT LIST entries of the connections named ``name`` (the URL's ``client_name=``)."""
    client = redis.Redis(host=SHARED_HOST, port=port, socket_timeout=5, decode_responses=True)
    try:
        return [c for c in client.client_list() if c.get("name") == name]
    finally:
        client.close()


def kill_connections(port: int, name: str) -> int:
    """``CLIENT KILL`` every connection named ``name`` (the URL's ``client_name=``) on the
    server at ``port``: other tests' connections to a shared server are left alone."""
    client = redis.Redis(host=SHARED_HOST, port=port, socket_timeout=5, decode_responses=True)
    try:
        killed = 0
        for info in client.client_list():
            if info.get("name") == name:
                killed += int(client.client_kill_filter(_id=info["id"]))
        return killed
    finally:
        client.close()


__all__ = [
    "SESSION",
    "Cluster",
    "Server",
    "cluster_url",
    "connections",
    "free_port",
    "fresh_url",
    "kill_connections",
    "new_prefix",
    "prefix_of",
    "server_ports",
]
