"""What every peer runner shares: arguments, the worker process, the drain clock and the idle
latency probe. Runs in ``bench/.venv-peers`` (the peers' own environment), standard library only.

A runner ``bench_<lib>.py`` is both the driver (``python bench_<lib>.py --url ...``) and the module
its library's worker imports (``rq worker``, ``celery -A bench_celery``, ...).

Latency: the ``stamp`` task of each library sends ``"<i> <time.time()>"`` in one UDP datagram to
the driver as its handler starts (``$BENCH_STAMP_PORT``); the driver compares it with the instant
before it enqueued job ``i``. The no-op task sends nothing: drains are timed by polling the store.

``--work-ms MS`` (with ``--async``): the jobs enqueued and drained wait MS ms on I/O instead of
doing nothing, each runner with its library's closest equivalent of ``time.sleep`` in a sync
handler (``asyncio.sleep`` in an async one). A runner says what it ran with ``Harness.handler``
(a ``# handler:`` line), above all when its library cannot run the kind of handler asked for.

``--call KIND`` / ``--cpu-ms MS`` (issue 18): the drained jobs first make one call on a client of
the worker process's own, then hold the interpreter lock for MS ms, then wait ``--work-ms``: every
runner's handlers run ``handle`` (sync) or ``ahandle`` (async) of ``bench/_calls.py``, the same
bodies as jobyard's. What the call talks to (``_common.call_target``: a private redis-server, the
local PostgreSQL, or ``bench/_httpd.py``) is started for this library's run by ``peers.py``
(``--call-url``), or by the harness when the runner is run alone; its URL goes to the worker as
``$BENCH_CALL_URL``, with ``$BENCH_CALL_POOL`` (the PostgreSQL pool's size: the worker's slots; a
runner whose library has other slots sets it).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import random
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

# the repository root is on the path only now; the "as" names are there for the runners
from bench._calls import AsyncClients as AsyncClients  # noqa: E402
from bench._calls import ahandle as ahandle  # noqa: E402
from bench._calls import calibrate, describe  # noqa: E402
from bench._calls import handle as handle  # noqa: E402
from bench._common import (  # noqa: E402
    CALLS,
    DrainClock,
    call_target,
    check_calls,
    emit,
    emit_cpu_share,
    emit_latencies,
    emit_per_slot,
    emit_slot_share,
    log,
    spawn,
    stop_process,
)

_stamp_sock: socket.socket | None = None


def send_stamp(i: int) -> None:
    """Called first thing by each library's ``stamp`` handler."""
    global _stamp_sock
    t = time.time()
    if _stamp_sock is None:
        _stamp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _stamp_sock.sendto(f"{i} {t!r}".encode(), ("127.0.0.1", int(os.environ["BENCH_STAMP_PORT"])))


def store_url() -> str:
    """The store URL the driver handed to the worker."""
    return os.environ["BENCH_URL"]


class Harness:
    """Parses the common arguments and runs the four measurements for one library."""

    def __init__(self, lib: str, argv: Sequence[str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=f"benchmark {lib}")
        parser.add_argument("--url", required=True)
        parser.add_argument("--jobs", type=int, default=10_000)
        parser.add_argument("--concurrency", "-c", type=int, default=8)
        parser.add_argument("--work-ms", type=float, default=0.0, metavar="MS")
        parser.add_argument("--async", dest="use_async", action="store_true")
        parser.add_argument("--call", choices=CALLS, default="")
        parser.add_argument("--cpu-ms", type=float, default=0.0, metavar="MS")
        parser.add_argument("--cpu-per-ms", type=float, default=0.0, metavar="N")
        parser.add_argument(
            "--call-url", default="", help="what --call talks to (default: started here)"
        )
        parser.add_argument("--latency-samples", type=int, default=200)
        parser.add_argument("--batch", type=int, default=1000)
        parser.add_argument("--drain-timeout", type=float, default=120.0)
        parser.add_argument("--variant", default="", help="a library-specific setting")
        parser.add_argument("--keep-log", action="store_true")
        self.args = parser.parse_args(argv)
        self.lib = lib
        self.url: str = self.args.url
        self.n: int = self.args.jobs
        self.concurrency: int = self.args.concurrency
        self.batch: int = self.args.batch
        self.work_ms: float = self.args.work_ms
        self.use_async: bool = self.args.use_async
        self.call: str = self.args.call
        self.cpu_ms: float = self.args.cpu_ms
        os.environ["BENCH_URL"] = self.url
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.stamp_port = self.sock.getsockname()[1]
        os.environ["BENCH_STAMP_PORT"] = str(self.stamp_port)
        self.worker: Any = None
        self.log_path = HERE / f".{lib}-worker.log"
        self.log_path.unlink(missing_ok=True)
        header = f"# {lib}: jobs={self.n} concurrency={self.concurrency}"
        if self.working:
            header += f" work_ms={self.work_ms:g} handler={'async' if self.use_async else 'sync'}"
        if self.call or self.cpu_ms > 0:
            header += f" call={self.call or 'none'} cpu_ms={self.cpu_ms:g}"
        print(header, flush=True)
        if self.args.cpu_per_ms > 0:  # the worker inherits it
            os.environ["BENCH_CPU_PER_MS"] = f"{self.args.cpu_per_ms:g}"
        if self.cpu_ms > 0:
            per_ms, got = calibrate(self.cpu_ms)
            how = "given" if self.args.cpu_per_ms > 0 else "each process calibrates its own"
            print(
                f"# cpu loop: {per_ms:,.0f} iterations per ms in the driver; {self.cpu_ms:g} ms"
                f" took {got:.3f} ms of CPU ({how})",
                flush=True,
            )
        # what the call talks to, for this library's run (peers.py starts it and hands it over,
        # so that it outlives a runner it kills); else started here, stopped by stop_worker
        self._resources = contextlib.ExitStack()
        atexit.register(self._resources.close)
        self.call_url: str = self.args.call_url
        if self.call and not self.call_url:
            self.call_url = self._resources.enter_context(call_target(self.call))
        os.environ["BENCH_CALL_URL"] = self.call_url
        os.environ["BENCH_CALL_POOL"] = str(self.concurrency)

    # the handler ---------------------------------------------------------------------------

    @property
    def working(self) -> bool:
        """True when the drained jobs are ``work``/``awork`` jobs rather than no-ops."""
        return self.work_ms > 0 or self.use_async or bool(self.call) or self.cpu_ms > 0

    @property
    def seconds(self) -> float:
        """What each drained job waits, in seconds (the argument every ``work`` handler gets)."""
        return self.work_ms / 1000.0

    @property
    def work_args(self) -> tuple[float] | tuple[float, str, float]:
        """The positional arguments of a ``work``/``awork`` job: ``(seconds,)``, or ``(seconds,
        call, cpu_ms)`` with ``--call`` or ``--cpu-ms`` (so the plain wait's jobs are as before)."""
        if self.call or self.cpu_ms > 0:
            return (self.seconds, self.call, self.cpu_ms)
        return (self.seconds,)

    @property
    def work_kwargs(self) -> dict[str, float | str]:
        """The same as keyword arguments (SAQ, Procrastinate)."""
        names = ("seconds", "call", "cpu_ms")
        return dict(zip(names, self.work_args, strict=False))

    def what(self, use_async: bool) -> str:
        """The drained job's body in words (``_calls.describe``): ``use_async``, whether the
        library runs the async handler."""
        return describe(self.work_ms, self.call, self.cpu_ms, use_async)

    def handler(self, ran: str, cannot: str = "") -> None:
        """Say which handler the drain runs (``ran``); ``cannot``: why it is not the kind asked
        for (e.g. the library runs no async handler), printed as such."""
        asked = "async" if self.use_async else "sync"
        text = f"# handler: {ran}"
        if cannot:
            text = f"# handler: {asked} handler asked; {cannot}: ran {ran} instead"
        print(text, flush=True)

    # enqueue -------------------------------------------------------------------------------

    def enqueue(self, fn: Callable[[], object]) -> None:
        """``enqueue``: N calls of ``fn``, one job each."""
        log(f"{self.lib}: enqueue {self.n} jobs one at a time")
        t0 = time.perf_counter()
        for _ in range(self.n):
            fn()
        emit("enqueue", self.n / (time.perf_counter() - t0), "jobs/s")

    async def enqueue_async(self, fn: Callable[[], Awaitable[object]]) -> None:
        """``enqueue`` for an async client: each call awaited before the next."""
        log(f"{self.lib}: enqueue {self.n} jobs one at a time")
        t0 = time.perf_counter()
        for _ in range(self.n):
            await fn()
        emit("enqueue", self.n / (time.perf_counter() - t0), "jobs/s")

    def enqueue_many(self, fn: Callable[[int], object] | None, note: str = "") -> None:
        """``enqueue_many``: N jobs through ``fn(size)``, one bulk call per batch; ``None``
        when the library has no bulk API (then the jobs are enqueued one at a time, untimed, so
        the drain has as many jobs as for every other library)."""
        if fn is None:
            emit("enqueue_many", None, "", note or "no bulk API")
            return
        log(f"{self.lib}: enqueue_many {self.n} jobs in batches of {self.batch}")
        t0 = time.perf_counter()
        done = 0
        while done < self.n:
            size = min(self.batch, self.n - done)
            fn(size)
            done += size
        emit("enqueue_many", self.n / (time.perf_counter() - t0), "jobs/s", note)

    async def enqueue_many_async(
        self, fn: Callable[[int], Awaitable[object]] | None, note: str = ""
    ) -> None:
        if fn is None:
            emit("enqueue_many", None, "", note or "no bulk API")
            return
        log(f"{self.lib}: enqueue_many {self.n} jobs in batches of {self.batch}")
        t0 = time.perf_counter()
        done = 0
        while done < self.n:
            size = min(self.batch, self.n - done)
            await fn(size)
            done += size
        emit("enqueue_many", self.n / (time.perf_counter() - t0), "jobs/s", note)

    # the worker ----------------------------------------------------------------------------

    def start_worker(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        """The library's own worker, one process, started from this directory."""
        bindir = str(Path(sys.executable).parent)
        full_env = {
            "BENCH_URL": self.url,
            "BENCH_STAMP_PORT": str(self.stamp_port),
            "PYTHONPATH": str(HERE),
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            **(env or {}),
        }
        cmd = list(argv)
        if not os.path.isabs(cmd[0]) and (Path(bindir) / cmd[0]).exists():
            cmd[0] = str(Path(bindir) / cmd[0])
        log(f"{self.lib}: worker: {' '.join(cmd)}")
        self.worker = spawn(cmd, env=full_env, cwd=HERE, log_path=self.log_path)

    def stop_worker(self) -> None:
        """Stop the worker, then what its calls talked to."""
        if self.worker is not None:
            stop_process(self.worker, timeout=15)
            self.worker = None
        if not self.args.keep_log:
            self.log_path.unlink(missing_ok=True)
        self._resources.close()

    # drain ---------------------------------------------------------------------------------

    def drain(
        self,
        total: int,
        poll: Callable[[], tuple[int, int]],
        note: str = "",
        purge: Callable[[], object] | None = None,
        slots: int | None = None,
    ) -> None:
        """``drain``: from the first job seen started to the last seen finished, polling the
        store (``poll`` returns started and finished counts of the ``total`` jobs). A drain
        that times out reports the rate so far, then ``purge`` deletes the jobs still waiting,
        so that the latency samples do not queue behind them. With ``--work-ms``, also
        ``slot_share``: the drain over what ``slots`` (default: ``--concurrency``) could do."""
        what = f"jobs waiting {self.work_ms:g} ms" if self.working else "no-op jobs"
        log(f"{self.lib}: drain {total} {what}, one worker process")

        def checked() -> tuple[int, int]:
            if self.worker is not None and self.worker.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the {self.lib} worker exited:\n{tail}")
            return poll()

        clock = DrainClock(total, checked, timeout=self.args.drain_timeout)
        rate = clock.run()
        assert clock.first is not None and clock.last is not None
        text = f"{clock.finished} jobs in {clock.last - clock.first:.2f}s"
        if clock.timed_out:
            text += ", TIMED OUT: partial rate"
        emit("drain", rate, "jobs/s", "; ".join(x for x in (text, note) if x))
        emit_slot_share(rate, slots or self.concurrency, self.work_ms)
        if self.call and self.work_ms <= 0:
            emit_per_slot(rate, slots or self.concurrency)
        emit_cpu_share(rate, self.cpu_ms)
        if self.call:
            check_calls(self.call, self.call_url, clock.finished)
        if clock.timed_out:
            if purge is None:
                raise RuntimeError(f"{self.lib}: the drain timed out and there is no purge")
            log(f"{self.lib}: deleting the jobs still waiting")
            purge()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the worker finishes what it had taken
                before = poll()[1]
                time.sleep(1.0)
                if poll()[1] == before:
                    break

    # idle latency --------------------------------------------------------------------------

    def latency(
        self, enqueue_stamp: Callable[[int], Any], settle: float = 1.0, max_gap: float = 0.05
    ) -> None:
        """Enqueue-to-start with the worker idle: one ``stamp`` job at a time, a random pause of
        10 ms to ``max_gap`` between them (a worker that polls every P seconds needs
        ``max_gap`` >= P, or the samples lock onto its polling phase). ``enqueue_stamp(i)`` may
        return an awaitable (run here)."""
        import asyncio
        import inspect

        samples = self.args.latency_samples
        log(f"{self.lib}: idle latency, {samples} samples")
        time.sleep(settle)
        self.sock.settimeout(0)
        try:  # drop anything stale
            while True:
                self.sock.recv(256)
        except BlockingIOError:
            pass
        loop: asyncio.AbstractEventLoop | None = None
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            loop = None
        values: list[float] = []
        lost = 0
        for i in range(samples):
            time.sleep(random.uniform(0.01, max(max_gap, 0.01)))
            t0 = time.time()
            res = enqueue_stamp(i)
            if inspect.isawaitable(res):
                assert loop is not None
                loop.run_until_complete(res)  # type: ignore[arg-type]
            deadline = time.monotonic() + 30
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    lost += 1
                    break
                self.sock.settimeout(left)
                try:
                    data = self.sock.recv(256).decode()
                except TimeoutError:
                    lost += 1
                    break
                idx, _, stamp = data.partition(" ")
                if int(idx) == i:
                    values.append((float(stamp) - t0) * 1000.0)
                    break
        if lost:
            log(f"{self.lib}: {lost} latency samples never started within 30s")
        emit_latencies(values)
