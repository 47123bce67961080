"""``jobyard worker --processes N``: N worker processes, each its own process group, supervised
by this one: a child that dies is replaced (a child that keeps dying, at most every few seconds),
and SIGINT/SIGTERM are passed on once.

With ``--metrics-port``, the supervisor serves the metrics, summed over its children: each child
writes a snapshot of its counters (``app.metrics()``) to a file of its own in a private folder
about once a second and when it stops, and a scrape adds the files up (a child that died keeps
its last snapshot, so the sums never go down when it is replaced; one killed outright loses at
most its last second). The store's gauges are read by the supervisor itself, once per scrape."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from types import FrameType
from typing import Any

from ._cpu import pick_cpu

log = logging.getLogger("jobyard.worker")
EXIT_BAD_INPUT = 2  # a child that cannot load its app or store settings: do not respawn it
ORPHAN_CHECK = 0.5  # seconds between a child's looks at whether its supervisor still lives
SNAPSHOT_EVERY = 1.0  # seconds between a child's metrics snapshots


def run_processes(
    app_ref: str,
    processes: int,
    log_level: str = "INFO",
    pin: bool = False,
    log_format: str = "text",
    metrics: tuple[str, int] | None = None,
    app: Any = None,
    **options: Any,
) -> int:
    """Run ``processes`` worker processes of ``app_ref`` and supervise them: a child that dies is
    replaced, SIGINT/SIGTERM are passed on (a second one too). With ``pin``, child i runs on the
    i-th allowed CPU, round robin (its replacement too). ``metrics`` (host, port): serve the
    children's summed metrics there, and ``app``'s store gauges. Returns the exit status."""
    folder = None if metrics is None else tempfile.mkdtemp(prefix="jobyard-metrics-")
    try:
        if metrics is not None and folder is not None and app is not None:
            _serve_summed(app, folder, *metrics)
        return _supervise(app_ref, processes, log_level, pin, log_format, folder, options)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _serve_summed(app: Any, folder: str, host: str, port: int) -> None:
    from .._tally import read_snapshots
    from ..web import metrics

    registry = metrics.registry_for(app, lambda: read_snapshots(folder))
    metrics.serve(registry, port, host)
    log.info("metrics on http://%s:%d/metrics (summed over the worker processes)", host, port)


def _supervise(
    app_ref: str,
    processes: int,
    log_level: str,
    pin: bool,
    log_format: str,
    folder: str | None,
    options: dict[str, Any],
) -> int:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    children: list[Any] = []
    respawns: list[float] = []
    stopping = threading.Event()

    def spawn(i: int) -> Any:
        own = {**options, "cpu": pick_cpu(i)} if pin else options
        p = ctx.Process(
            target=_child_main,
            args=(app_ref, log_level, own, os.getpid(), log_format, folder),
            daemon=False,
        )
        p.start()
        if stopping.is_set() and p.pid is not None:  # a signal came while it was starting
            os.kill(p.pid, signal.SIGTERM)
        return p

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        for p in children:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    children.extend(spawn(i) for i in range(processes))
    while True:
        for i, p in enumerate(children):
            if not p.is_alive() and p.exitcode == EXIT_BAD_INPUT and not stopping.is_set():
                log.error("worker process %s cannot start; stopping the others", p.pid)
                forward(signal.SIGTERM, None)
                for q in children:
                    q.join(60)
                return EXIT_BAD_INPUT
            if not p.is_alive() and not stopping.is_set():
                log.warning(
                    "worker process %s exited with %s; starting a replacement", p.pid, p.exitcode
                )
                # A child that keeps dying at once is replaced at most every few seconds.
                recent = [t for t in respawns if time.monotonic() - t < 10.0]
                respawns[:] = recent
                if len(recent) >= 2 * processes:
                    stopping.wait(2.0)
                respawns.append(time.monotonic())
                children[i] = spawn(i)
        if stopping.is_set() and not any(p.is_alive() for p in children):
            return 0
        time.sleep(0.2)


def _child_main(
    app_ref: str,
    log_level: str,
    options: dict[str, Any],
    supervisor: int,
    log_format: str = "text",
    metrics_folder: str | None = None,
) -> None:
    from .._logjson import configure
    from .._secrets import scrub
    from .._tally import write_snapshot
    from ..app import load_app
    from ..backends import mask_url
    from ..errors import JobyardError

    # Our own process group: a terminal's Ctrl-C reaches the supervisor alone, which passes it
    # on once; in the group it would reach each child twice, and a second signal means "now".
    os.setpgrp()
    _stop_when_orphaned(supervisor)  # its pid from the supervisor: it may be gone already
    configure(log_level, log_format)
    try:
        app = load_app(app_ref)
    except JobyardError as exc:
        log.error("%s", exc)
        raise SystemExit(EXIT_BAD_INPUT) from None
    delay = 0.2
    while True:  # a replacement started while the store is down waits for it, quietly
        try:
            _ = app.backend
            break
        except JobyardError as exc:  # a bad URL or a schema behind: waiting will not mend it
            log.error("%s", exc)
            raise SystemExit(EXIT_BAD_INPUT) from None
        except Exception as exc:  # noqa: BLE001 - any driver error while the store is down
            log.warning(
                "store %s unreachable (%s); retrying in %.1fs",
                mask_url(app.url),
                scrub(str(exc)),
                delay,
            )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
    if metrics_folder is None:
        app.run_worker(**options)
        return
    app.metrics()  # counting starts before the first job
    done = threading.Event()

    def snapshots() -> None:
        while not done.wait(SNAPSHOT_EVERY):
            _write_quietly(write_snapshot, app, metrics_folder)

    threading.Thread(target=snapshots, name="jobyard-metrics-snapshot", daemon=True).start()
    try:
        app.run_worker(**options)
    finally:
        done.set()
        _write_quietly(write_snapshot, app, metrics_folder)


def _write_quietly(write: Any, app: Any, folder: str) -> None:
    try:
        write(app.metrics(), folder)
    except OSError as exc:  # the supervisor removed the folder: it is stopping
        log.debug("metrics snapshot not written: %s", exc)


def _stop_when_orphaned(supervisor: int) -> None:
    """Stop this child gracefully (as SIGTERM does) once its supervisor is gone, killed with no
    chance to pass a signal on: a child in its own process group would otherwise run on,
    unsupervised, until someone finds it."""

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(ORPHAN_CHECK)
        log.warning(
            "worker process %s: its supervisor %s is gone; stopping", os.getpid(), supervisor
        )
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="jobyard-orphan-watch", daemon=True).start()
