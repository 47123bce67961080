"""Shared helpers of the benchmarks: standard library only, so the peer runners (in their own
virtual environment) import it too.

Every figure is printed on a line of its own as ``name: value unit`` so scripts can read it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench._calls import CALLS, COUNTER

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
FIGURES = (
    "enqueue",
    "enqueue_many",
    "drain",
    "slot_share",
    "per_slot",
    "cpu_share",
    "latency p50",
    "latency p95",
    "latency p99",
)
UNITS = {
    "enqueue": "jobs/s",
    "enqueue_many": "jobs/s",
    "drain": "jobs/s",
    "slot_share": "%",
    "per_slot": "jobs/s",
    "cpu_share": "%",
}


# --- output ----------------------------------------------------------------------------------


def emit(name: str, value: float | None, unit: str, note: str = "") -> None:
    """Print one figure as ``name: value unit`` (``n/a`` when the library cannot do it)."""
    if value is None:
        text = f"{name}: n/a"
    elif unit == "ms":
        text = f"{name}: {value:.2f} {unit}"
    elif unit == "%":
        text = f"{name}: {value:.1f} {unit}"
    else:
        text = f"{name}: {value:.0f} {unit}"
    if note:
        text += f"  # {note}"
    print(text, flush=True)


LINE_RE = re.compile(r"^(?P<name>[a-z_][a-z_ 0-9]*):\s+(?P<value>n/a|[0-9.]+)(?:\s+(?P<unit>\S+))?")


def parse_figures(text: str) -> dict[str, float | None]:
    """Read ``name: value unit`` lines back (``n/a`` becomes None)."""
    out: dict[str, float | None] = {}
    for line in text.splitlines():
        m = LINE_RE.match(line.strip())
        if m and m["name"] in FIGURES:
            out[m["name"]] = None if m["value"] == "n/a" else float(m["value"])
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    if not values:
        return float("nan")
    data = sorted(values)
    k = (len(data) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def slot_capacity(slots: int, work_ms: float) -> float | None:
    """Jobs/s that ``slots`` slots could finish if each job only waited ``work_ms`` on I/O and
    nothing else cost any time; None for no-op jobs (no bound)."""
    if work_ms <= 0:
        return None
    return slots * 1000.0 / work_ms


def emit_slot_share(rate: float, slots: int, work_ms: float) -> None:
    """``slot_share``: the drain as a share of ``slot_capacity`` (nothing for no-op jobs)."""
    capacity = slot_capacity(slots, work_ms)
    if capacity is not None:
        plural = "s" if slots != 1 else ""
        note = f"of {capacity:,.0f} jobs/s: {slots} slot{plural} x 1000 / {work_ms:g} ms"
        emit("slot_share", 100.0 * rate / capacity, "%", note)


def emit_per_slot(rate: float, slots: int) -> None:
    """``per_slot``: the drain per slot, for handlers whose cost is not a fixed wait (``--call``
    without ``--work-ms``: the slot's capacity is not known beforehand)."""
    emit("per_slot", rate / slots, "jobs/s", f"drain / {slots} slot{'s' if slots != 1 else ''}")


def cpu_capacity(cpu_ms: float) -> float:
    """Jobs/s the machine's cores could finish if each job only held a core for ``cpu_ms``."""
    return (os.cpu_count() or 1) * 1000.0 / cpu_ms


def emit_cpu_share(rate: float, cpu_ms: float) -> None:
    """``cpu_share`` (only with ``--cpu-ms``): the drain as a share of ``cpu_capacity``. One
    process holds one interpreter lock: its Python runs on one core at a time, so one worker
    process tops out at 1 / cores of it (50% on 2 cores)."""
    if cpu_ms > 0:
        cores = os.cpu_count() or 1
        note = f"of {cpu_capacity(cpu_ms):,.0f} jobs/s: {cores} cores x 1000 / {cpu_ms:g} ms"
        emit("cpu_share", 100.0 * rate / cpu_capacity(cpu_ms), "%", note)


def emit_latencies(samples_ms: Sequence[float]) -> None:
    """The three latency lines."""
    for q in (50, 95, 99):
        emit(f"latency p{q}", percentile(samples_ms, q), "ms")


def log(message: str) -> None:
    """Progress on stderr, so stdout holds only figures."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- measuring -------------------------------------------------------------------------------


@dataclass
class DrainClock:
    """Times a drain by polling the store: from the first job seen started to the last one seen
    finished. ``poll`` returns (started, finished) counts of the ``total`` jobs."""

    total: int
    poll: Callable[[], tuple[int, int]]
    timeout: float = 300.0
    first: float | None = None
    last: float | None = None
    finished: int = 0
    timed_out: bool = False
    polls: int = field(default=0)

    def run(self) -> float:
        """Wait for the drain; the rate in jobs/s (a partial rate if it timed out)."""
        deadline = time.monotonic() + self.timeout
        while True:
            started, finished = self.poll()
            self.polls += 1
            now = time.perf_counter()
            if self.first is None and (started > 0 or finished > 0):
                self.first = now
            self.finished = finished
            if finished >= self.total:
                self.last = now
                break
            if time.monotonic() > deadline:
                self.last = now
                self.timed_out = True
                break
            # Fine-grained until the first job starts, then coarser so the counting queries do
            # not steal the worker's CPU (the error is at most one interval at either end).
            time.sleep(0.002 if self.first is None else 0.02)
        assert self.first is not None, "no job ever started"
        elapsed = max(self.last - self.first, 1e-9)
        return self.finished / elapsed


def first_started(handles: Sequence[Any]) -> datetime:
    """The earliest ``started_at`` among the jobs of ``handles`` (those that started)."""
    return min(j.started_at for j in (h.get() for h in handles) if j.started_at is not None)


def last_finished(handles: Sequence[Any]) -> datetime:
    """The latest ``finished_at`` among the jobs of ``handles`` (those that finished)."""
    return max(j.finished_at for j in (h.get() for h in handles) if j.finished_at is not None)


def records_span(first: Sequence[Any], last: Sequence[Any]) -> float:
    """Seconds from the earliest ``started_at`` among the handles ``first`` to the latest
    ``finished_at`` among ``last``: a drain timed from the jobs' own records, which costs the
    store nothing while it runs. Jobs run in enqueue order, so the first enqueued start first
    and the last finish last; ``last`` must hold more jobs than can run or wait in the worker
    at once."""
    return max((last_finished(last) - first_started(first)).total_seconds(), 1e-9)


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- processes and ports ---------------------------------------------------------------------


STAMP_PORT = "BENCH_STAMP_PORT"  # where the idle latency probe's handler reports its start
_stamp_sock: socket.socket | None = None


def send_stamp(i: int) -> float:
    """First thing in the idle latency probe's handler (``bench.apps.stamp``): its start instant,
    sent as a UDP datagram ``"i t"`` to ``$BENCH_STAMP_PORT`` when that is set, as every peer's
    runner sends it (``peer_runners/_harness.send_stamp``); returned either way."""
    global _stamp_sock
    t = time.time()
    port = os.environ.get(STAMP_PORT)
    if port:
        if _stamp_sock is None:
            _stamp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _stamp_sock.sendto(f"{i} {t!r}".encode(), ("127.0.0.1", int(port)))
    return t


class Stamps:
    """The producer's end of the idle latency probe, as the peers' runners measure it: each
    sample's handler sends its start instant (:func:`send_stamp`) and the producer waits for
    that datagram in ``recv``, using no CPU and no store call while the worker starts the job.
    (Waiting with ``JobHandle.result`` polled the store at once, on the 2-core machine beside
    the worker starting the job: a load the peers' probes do not make.) Sets
    ``$BENCH_STAMP_PORT`` for the worker processes started after it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        os.environ[STAMP_PORT] = str(self.sock.getsockname()[1])

    def wait(self, i: int, timeout: float = 30.0) -> float | None:
        """The start instant sample ``i``'s handler sent, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                idx, _, stamp = self.sock.recv(256).decode().partition(" ")
            except TimeoutError:
                return None
            if int(idx) == i:
                return float(stamp)
        return None

    def close(self) -> None:
        os.environ.pop(STAMP_PORT, None)
        self.sock.close()


def free_port() -> int:
    """A free TCP port on the loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> None:
    """Block until something listens on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on port {port}")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM (SIGINT first for CLIs that prefer it), then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig) if _own_group(proc) else proc.send_signal(sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _own_group(proc: subprocess.Popen[bytes]) -> bool:
    try:
        return os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        return False


def spawn(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    log_path: str | Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process in its own process group (so it and its children stop together)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(
        list(argv),
        env=full_env,
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
        start_new_session=True,
    )


# --- Redis -----------------------------------------------------------------------------------


def _redis_server_args(port: int, workdir: Path) -> list[str]:
    return [
        shutil.which("redis-server") or "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--protected-mode",
        "no",
    ]


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free loopback port, no persistence; yields its URL."""
    workdir = Path(tempfile.mkdtemp(prefix="jobyard-bench-redis-"))
    port = free_port()
    proc = spawn(_redis_server_args(port, workdir), log_path=workdir / "redis.log")
    try:
        wait_port(port)
        log(f"private redis-server on port {port}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def redis_cluster(nodes: int = 3) -> Iterator[list[int]]:
    """A Redis Cluster of ``nodes`` masters on free ports in a temp dir; yields the ports."""
    workdir = Path(tempfile.mkdtemp(prefix="jobyard-bench-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        while len(ports) < nodes:
            port = free_port()
            # the cluster bus listens on port + 10000: it must be free too
            if port + 10000 > 65535 or port in ports:
                continue
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port + 10000)) == 0:
                    continue
            ports.append(port)
        for port in ports:
            node_dir = workdir / str(port)
            node_dir.mkdir()
            args = [
                *_redis_server_args(port, node_dir),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                "5000",
            ]
            procs.append(spawn(args, log_path=node_dir / "redis.log"))
        for port in ports:
            wait_port(port)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in ports],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = subprocess.run(
                ["redis-cli", "-p", str(ports[0]), "cluster", "info"],
                capture_output=True,
                text=True,
            ).stdout
            if "cluster_state:ok" in info:
                break
            time.sleep(0.1)
        else:
            raise TimeoutError("the Redis Cluster did not become ready")
        log(f"private Redis Cluster on ports {ports}")
        yield ports
    finally:
        for proc in procs:
            stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --- PostgreSQL ------------------------------------------------------------------------------


def psql(sql: str, database: str = "postgres") -> str:
    """Run SQL through psql as user postgres (trust auth on the loopback)."""
    res = subprocess.run(
        [
            "psql",
            "-h",
            PG_HOST,
            "-p",
            str(PG_PORT),
            "-U",
            PG_USER,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-qAtc",
            sql,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0:
        raise RuntimeError(f"psql failed: {res.stderr.strip()}")
    return res.stdout


@contextlib.contextmanager
def scratch_database(label: str) -> Iterator[str]:
    """A fresh database ``bench_<label>_<random>`` dropped afterwards; yields its URL."""
    name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
    psql(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- what a handler calls (bench/_calls.py) -------------------------------------------------

CALL_PG_URL = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/test"


@contextlib.contextmanager
def call_target(kind: str) -> Iterator[str]:
    """What the handlers' ``--call KIND`` talks to, for one run; yields its URL (the workers'
    ``$BENCH_CALL_URL``): redis, a private redis-server of its own (not the store's, nor the
    shared one); postgres, database ``test`` of the local server (one ``SELECT 1`` touches no
    table); http, ``bench/_httpd.py`` in a process of its own. ``""``: nothing, an empty URL."""
    if not kind:
        yield ""
    elif kind == "redis":
        with private_redis() as url:
            yield url
    elif kind == "postgres":
        yield CALL_PG_URL
    elif kind == "http":
        port = free_port()
        proc = spawn([sys.executable, str(BENCH_DIR / "_httpd.py"), "--port", str(port)])
        try:
            wait_port(port)
            log(f"http server for the calls on port {port}")
            yield f"http://127.0.0.1:{port}/"
        finally:
            stop_process(proc)
    else:
        raise SystemExit(f"unknown call {kind!r}; one of {', '.join(CALLS)}")


def calls_counted(kind: str, url: str) -> int | None:
    """How many calls the target has seen (redis: the counter the INCRs raise; http: the
    server's count); None where it keeps none (postgres)."""
    if kind == "redis":
        out = subprocess.run(
            ["redis-cli", "-u", url, "GET", COUNTER],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return int(out) if out.isdigit() else 0
    if kind == "http":
        import urllib.request

        with urllib.request.urlopen(url + "count", timeout=10) as r:
            return int(r.read())
    return None


def check_calls(kind: str, url: str, jobs: int) -> None:
    """Print a ``# calls:`` line: the calls the target saw against the jobs counted done when
    the drain ended (a job run twice shows here; so does a job counted done before its call, as
    Huey counts a job done once popped, or a call made after the count was read)."""
    seen = calls_counted(kind, url)
    if seen is not None:
        mark = "" if seen == jobs else f" ({seen - jobs:+d})"
        print(f"# calls: {seen} {kind} calls seen for {jobs} jobs drained{mark}", flush=True)


def short_id() -> str:
    """A short random tag for schema names and key prefixes."""
    return uuid.uuid4().hex[:8]
