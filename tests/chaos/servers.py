"""Private store servers for the chaos and partition tests: a PostgreSQL cluster, a Redis server
and a three-node Redis Cluster, each on its own port and data directory, started and stopped by
the test (never the shared servers of ``make services``). Every ``close`` is safe to call twice
and after a failed start."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import ports


def free_port() -> int:
    """A TCP port free on every address, of this process's own range (tests/ports.py)."""
    return ports.free_port()


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


# --- PostgreSQL ------------------------------------------------------------------------------


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin directory (skip the test if there is none)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if not found:
        pytest.skip("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb)")
    return found[-1].parent


class PostgresServer:
    """A throwaway PostgreSQL cluster with trust auth, run as user ``postgres`` when the test
    runs as root (PostgreSQL refuses to run as root), else as the current user.

    ``listen``: addresses to listen on; ``subnets``: CIDRs besides localhost that pg_hba trusts.
    """

    def __init__(self, listen: Sequence[str] = ("127.0.0.1",), subnets: Sequence[str] = ()):
        self.bin = postgres_bin()
        self.as_root = os.geteuid() == 0  # PostgreSQL refuses root: run it as user postgres
        self.root = Path(tempfile.mkdtemp(prefix="jobyard-chaos-pg-"))
        if self.as_root:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root, ignore_errors=True)
                pytest.skip("running as root, and there is no user 'postgres' to run PostgreSQL")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.port = free_port()
        self.listen = tuple(listen)
        self.subnets = tuple(subnets)
        self.running = False
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.listen[0]}:{self.port}/postgres"

    def url_for(self, host: str) -> str:
        return f"postgresql://postgres@{host}:{self.port}/postgres"

    def _as_postgres(self, *argv: str, timeout: float = 120.0) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv),
            cwd=self.root,
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def init(self) -> PostgresServer:
        """initdb, configure, start."""
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N"
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\n"
                f"listen_addresses = '{','.join(self.listen)}'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "max_connections = 300\n"
                "shared_buffers = 32MB\n"
            )
        with (self.data / "pg_hba.conf").open("a") as hba:
            for subnet in self.subnets:
                hba.write(f"host all all {subnet} trust\n")
        for attempt in range(5):
            try:
                self.start()
                return self
            except subprocess.CalledProcessError:
                # a port found free and taken since (another run on the machine): another one;
                # the last ``port =`` line of postgresql.conf is the one in force
                taken = "could not bind" in self.logfile.read_text(errors="replace")
                if not taken or attempt == 4:
                    raise
                self.port = free_port()
                with (self.data / "postgresql.conf").open("a") as conf:
                    conf.write(f"port = {self.port}\n")
        raise AssertionError("unreachable")

    def start(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.logfile), "-w",
            "-t", "60", "start",
        )  # fmt: skip
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``immediate`` is a crash: no checkpoint, WAL recovery at the next start."""
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"
        )
        self.running = False

    def quiesce(self, timeout: float = 30.0) -> None:
        """Wait until no jobyard connection has a statement in progress that could still commit
        (its client may be SIGSTOPped while the server still runs what it sent: a claim
        committing after the test looked would go unseen)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True, application_name="chaos-test") as conn:

            def busy() -> list[Any]:
                return conn.execute(
                    "SELECT pid, state, wait_event_type, wait_event, backend_xid, query"
                    " FROM pg_stat_activity"
                    " WHERE application_name = 'jobyard' AND state <> 'idle'"
                ).fetchall()

            try:
                # A statement waiting for its stopped client (the rest of a pipeline, or room
                # to write its rows) or for a lock held by one cannot commit before the crash.
                _wait(
                    lambda: (
                        not [
                            r for r in busy() if r[1] == "active" and r[2] not in ("Client", "Lock")
                        ]
                    ),
                    timeout,
                    "quiet",
                )
            except TimeoutError:
                rows = "\n".join(repr(r) for r in busy())
                raise TimeoutError(
                    f"statements of stopped clients still running:\n{rows}"
                ) from None

    def down(self) -> None:
        """Crash the server (``pg_ctl stop -m immediate``): committed work survives in the WAL."""
        self.stop("immediate")

    def up(self) -> None:
        self.start()
        self.restarts += 1

    def close(self) -> None:
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except (subprocess.SubprocessError, OSError):
                pid = int((self.data / "postmaster.pid").read_text().split()[0])
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


# --- Redis -----------------------------------------------------------------------------------


class PortTaken(RuntimeError):
    """A first start found its port taken since it was picked."""


def redis_bin() -> str:
    path = shutil.which("redis-server")
    if path is None:
        pytest.skip("redis-server is not installed")
    return path


class RedisServer:
    """A throwaway redis-server with an append-only file, so a restart keeps its data.

    Redis is only as durable as its persistence settings. ``crash=False``: ``down()`` is a
    graceful stop (SIGTERM runs SHUTDOWN, which writes the whole append-only file first), with
    Redis' default ``appendfsync everysec``. ``crash=True``: ``down()`` is SIGKILL, and the file
    is fsynced before every reply (``appendfsync always``) so that nothing acknowledged is lost;
    with ``everysec`` a crash may forget the last second of acknowledged writes, enqueues too.
    """

    def __init__(
        self,
        bind: Sequence[str] = ("127.0.0.1",),
        port: int | None = None,
        extra: Sequence[str] = (),
        root: Path | None = None,
        crash: bool = False,
    ) -> None:
        self.binary = redis_bin()
        self.bind = tuple(bind)
        self.port = port or free_port()
        self.root = root or Path(tempfile.mkdtemp(prefix="jobyard-chaos-redis-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.extra = tuple(extra)
        self.crash = crash
        self.proc: subprocess.Popen[bytes] | None = None
        self.proc_started = False  # started once: the port is this server's for good
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://{self.bind[0]}:{self.port}/0"

    def url_for(self, host: str) -> str:
        return f"redis://{host}:{self.port}/0"

    def _cli(self, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-h", self.bind[0], "-p", str(self.port), *args],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return out.stdout.decode(errors="replace").strip()

    def ping(self) -> bool:
        try:
            return self._cli("ping") == "PONG"
        except subprocess.TimeoutExpired:
            return False

    def start(self) -> RedisServer:
        """Start, on the same port again after :meth:`down`. A first start whose port turns out
        to be taken (another run on the machine) moves to another port."""
        for attempt in range(5):
            try:
                return self._start()
            except PortTaken:
                if self.restarts or self.proc_started or attempt == 4:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start(self) -> RedisServer:
        log = (self.root / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", *self.bind,
                "--protected-mode", "no",
                "--dir", str(self.root),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always" if self.crash else "everysec",
                *self.extra,
            ],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        _wait(self._loaded, 60, f"redis-server on port {self.port}")
        self.proc_started = True
        return self

    def _loaded(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            text = (self.root / "server.log").read_text(errors="replace")[-2000:]
            error = PortTaken if "Address already in use" in text else RuntimeError
            raise error(f"redis-server exited with {self.proc.returncode}: {text}")
        if not self.ping():
            return False
        # the server that answers must be this one, not another holding the port
        if f"process_id:{self.proc.pid}" not in self._cli("info", "server").split():
            self.proc.kill()
            self.proc.wait(10)
            raise PortTaken(f"port {self.port} is another redis-server's")
        return "loading:0" in self._cli("info", "persistence")

    def stop(self) -> None:
        """SIGKILL if ``crash``, else a graceful stop: SIGTERM makes Redis write and fsync its
        append-only file, then exit."""
        if self.proc is not None and self.proc.poll() is None:
            if self.crash:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(60)
        self.proc = None

    def quiesce(self) -> None:
        """Nothing to wait for: Redis runs one command (one script) at a time, to its end."""

    def down(self) -> None:
        self.stop()

    def up(self) -> None:
        self.start()
        self.restarts += 1

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)


class RedisCluster:
    """A private three-node Cluster (no replicas) made by the Redis suite's helper
    (``tests.redis.support.Cluster``), with one node to take down and bring back."""

    def __init__(self) -> None:
        redis_bin()
        self.cluster: Any = None
        self.target = 1  # the node down() stops
        self.restarts = 0

    @property
    def nodes(self) -> list[Any]:
        return list(self.cluster.nodes) if self.cluster is not None else []

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> RedisCluster:
        from tests.redis.support import Cluster

        self.cluster = Cluster.start()
        return self

    def _cli(self, node: Any, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(node.port), *args],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return out.stdout.decode(errors="replace").strip()

    def node_for(self, key: str) -> int:
        """The index of the node that serves ``key``'s slot."""
        slot = int(self._cli(self.nodes[0], "cluster", "keyslot", key))
        for i, node in enumerate(self.nodes):
            for line in self._cli(node, "cluster", "nodes").splitlines():
                fields = line.split()
                if "myself" not in fields[2]:
                    continue
                for part in fields[8:]:
                    low, _, high = part.partition("-")
                    if low.isdigit() and int(low) <= slot <= int(high or low):
                        return i
        raise LookupError(f"no node serves slot {slot}")

    def wait_ok(self) -> None:
        for node in self.nodes:
            _wait(
                lambda n=node: "cluster_state:ok" in self._cli(n, "cluster", "info"),
                60,
                f"cluster node {node.port} to report cluster_state:ok",
            )

    def quiesce(self) -> None:
        """Nothing to wait for: each node runs one command (one script) at a time."""

    def down(self) -> None:
        """Stop node ``target`` gracefully (SHUTDOWN SAVE); its slots are unreachable until
        :meth:`up`."""
        self.nodes[self.target].stop(save=True)

    def up(self) -> None:
        """Start the node again: its nodes.conf and snapshot bring it back as it was."""
        self.nodes[self.target].start()
        self.wait_ok()
        self.restarts += 1

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.close()
