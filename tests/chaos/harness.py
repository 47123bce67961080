"""The chaos run: a producer and worker processes on one store, SIGKILLed and replaced while the
jobs run, the store restarted once, and an account of what every job went through.

Bookkeeping of the duplicate bound. A job can run twice only if an execution was not
acknowledged: its worker died (SIGKILL) or lost its lease (the store went away). So at each such
moment the run records the jobs *in flight*: the jobs the store holds as ``running`` for the
victim's worker id (claimed and waiting for a thread, running, or finished with the outcome not
yet written), read while the victim is SIGSTOPped and once more right after the SIGKILL (a claim
the store committed as the process stopped shows up there); for a store restart, every running
job, read with all workers SIGSTOPped (once the store has finished the statements they sent)
before the stop, and again, workers stopped again, as soon as the store answers (a move the
crash made the store forget shows up there as running), plus every job completed before the
crash and not after it (a completion the store acknowledged but forgot). A
job may then run at most once more than the number of those moments it was in flight at; that is
asserted per job, and the total is the bound printed with the duplicates.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

import jobyard
from tests.chaos import chaos_app
from tests.conftest import SUMMARY_PROPERTY

ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()
SUMMARY_FILE = Path("/tmp/jobyard-chaos-summary.txt")


class Restartable(Protocol):
    """A store server the test started: ``down()`` stops it, ``up()`` brings it back;
    ``quiesce()`` waits until no statement sent by a (now stopped) client is still running."""

    def quiesce(self) -> None: ...

    def down(self) -> None: ...

    def up(self) -> None: ...


# --- processes ---------------------------------------------------------------------------------


class Proc:
    """A child process in its own session, so teardown can kill it with everything it spawned."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv = argv
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        """SIGKILL the whole process group (a supervisor's children too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def children(pid: int) -> list[int]:
    """Live children of ``pid`` that are worker processes spawned by ``--processes``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in cmdline:
            out.append(int(entry.name))
    return out


def gone(pid: int) -> bool:
    """The process is dead (reaped, or a zombie waiting for its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def poll(predicate: Callable[[], Any], timeout: float) -> bool:
    """Like :func:`wait_for`, but answers False at the deadline instead of failing."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def retrying(fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Call the store through a restart: retry connection errors until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def report(request: pytest.FixtureRequest, line: str) -> None:
    """Show a summary line whatever the capture mode: stderr (capture disabled), a file, and
    the terminal summary at the end of the session (tests/conftest.py), which reads it from the
    test's report: under pytest-xdist the test runs in a worker process, the summary is
    written by the controller."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    with ctx:
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()
    with SUMMARY_FILE.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
    request.node.user_properties.append((SUMMARY_PROPERTY, line))


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Event:
    """A kill or a restart, and the jobs in flight at that moment."""

    kind: str
    what: str
    in_flight: set[str]


@dataclass
class Outcome:
    kind: str
    jobs: int
    accepted: int
    kills: int
    restarts: int
    producer_kills: int
    lost: list[str]
    stuck: list[str]
    unexecuted: list[str]
    duplicates: int
    bound: int
    bound_kills: int
    batch_stored: str
    uncovered: dict[str, str]
    failed: list[jobyard.Job]
    poison_runs: int
    wrong_results: list[str]
    torn_batches: list[str]
    dead_workers: list[str]
    down_exits: int
    forgotten: int
    wall: float
    workflows: int = 0  # accepted batches that were a workflow (a group of chains and a join)
    workflow_problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"chaos {self.kind}: jobs={self.accepted}/{self.jobs} kills={self.kills} "
            f"restarts={self.restarts} producer_kills={self.producer_kills} "
            f"(batch stored: {self.batch_stored}) lost={len(self.lost)} stuck={len(self.stuck)} "
            f"duplicates={self.duplicates} (bound {self.bound}: kills {self.bound_kills}, "
            f"restart {self.bound - self.bound_kills}, of which forgotten completions "
            f"{self.forgotten}) down_exits={self.down_exits} workflows={self.workflows} "
            f"wall={self.wall:.1f}s"
        )


class ChaosRun:
    """One backend's run. ``server`` (optional) is restarted once, at ``restart_at`` of the jobs
    completed; ``kill_every`` seconds a random worker process is SIGKILLed and replaced."""

    def __init__(
        self,
        kind: str,
        url: str,
        tmp: Path,
        *,
        jobs: int = 3000,
        batch: int = 100,
        pause: float = 0.4,
        server: Restartable | None = None,
        restart_at: float = 0.4,
        downtime: float = 1.5,
        kill_every: float = 0.5,
        direct_workers: int = 2,
        supervised: int = 2,
        concurrency: int = 4,
        deadline: float = 240.0,
    ) -> None:
        self.kind = kind
        self.url = url
        self.jobs = jobs
        self.batch = batch
        self.pause = pause
        self.server = server
        self.restart_at = restart_at
        self.downtime = downtime
        self.kill_every = kill_every
        self.direct_workers = direct_workers
        self.supervised = supervised
        self.concurrency = concurrency
        self.deadline = deadline
        self.sink = tmp / "sink"
        self.logs = tmp / "logs"
        self.sink.mkdir()
        self.logs.mkdir()
        self.acks = tmp / "acks.txt"
        self.acks.touch()
        self.env = {
            **os.environ,
            "JOBYARD_URL": url,
            "JOBYARD_SINK": str(self.sink),
            "PYTHONUNBUFFERED": "1",
        }
        self.app = jobyard.App(url)
        self.procs: list[Proc] = []
        self.workers: list[Proc] = []
        self.supervisor: Proc | None = None
        self.producer: Proc | None = None
        self.killed_batch: tuple[int, int] | None = None
        self.call_time: float | None = None  # how long an enqueue_many call took, observed
        self.events: list[Event] = []
        self.killed_children = 0
        self.outages: list[tuple[float, float]] = []  # wall-clock (down, up) of each restart
        self.down_exits = 0  # worker processes that exited because the store was down
        self.dead: list[str] = []  # worker processes that died on their own
        self.forgotten = 0  # completions a store restart forgot
        self._n = 0

    # processes ----------------------------------------------------------------------------

    def _spawn(self, label: str, argv: list[str]) -> Proc:
        self._n += 1
        proc = Proc(argv, self.env, self.logs / f"{self._n:03d}-{label}.log")
        self.procs.append(proc)
        return proc

    def worker_argv(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "jobyard", "worker", "tests.chaos.chaos_app:app",
            "-q", chaos_app.QUEUE, "-c", str(self.concurrency), "--grace", "2",
            "--reap-interval", "0.2", "--poll-interval", "0.5", *extra,
        ]  # fmt: skip

    def spawn_worker(self) -> Proc:
        proc = self._spawn("worker", self.worker_argv())
        self.workers.append(proc)
        return proc

    def spawn_producer(self, first: int, count: int) -> Proc:
        argv = [sys.executable, "-m", "tests.chaos.producer"]
        argv += [str(first), str(count), str(self.batch), str(self.pause), str(self.acks)]
        self.producer = self._spawn("producer", argv)
        return self.producer

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        self.app.close()

    # reading the store -----------------------------------------------------------------------

    def running(self, pid: int | None = None) -> set[str]:
        """Ids of running jobs (of the worker process ``pid`` only, when given)."""
        jobs = retrying(lambda: self.app.jobs(status="running", limit=100_000))
        prefix = None if pid is None else f"{HOST}:{pid}:"
        return {
            j.id
            for j in jobs
            if prefix is None or (j.worker_id is not None and j.worker_id.startswith(prefix))
        }

    def completed(self) -> set[str]:
        jobs = retrying(lambda: self.app.jobs(status="completed", limit=100_000))
        return {j.id for j in jobs}

    def counts(self) -> dict[str, int]:
        stats = retrying(lambda: self.app.stats([chaos_app.QUEUE]))
        return stats[0].counts if stats else {}

    def ack_lines(self) -> list[list[str]]:
        return [line.split(" ", 2) for line in self.acks.read_text().splitlines() if line]

    # faults ------------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        """SIGSTOP a random worker process, note its jobs in flight, SIGKILL it, replace it."""
        candidates: list[tuple[Proc | None, int]] = [(w, w.pid) for w in self.workers]
        if self.supervisor is not None:
            candidates += [(None, c) for c in children(self.supervisor.pid)]
        if not candidates:
            return
        proc, pid = random.choice(candidates)
        try:
            os.kill(pid, signal.SIGSTOP)
            in_flight = self.running(pid)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return  # a child that just died on its own is caught at the end (dead_workers)
        wait_for(lambda: gone(pid), 10, f"process {pid} to die")
        in_flight |= self.running(pid)
        self.events.append(Event("kill", f"worker pid {pid}", in_flight))
        if proc is not None:
            self.workers.remove(proc)
            proc.proc.wait(10)
            self.spawn_worker()
        else:
            self.killed_children += 1  # the supervisor starts its replacement

    def catch_producer(self, timeout: float = 0.5) -> bool:
        """Watch the acks file. When the producer writes a ``begin`` line it is about to call
        enqueue_many: wait a random part of how long a call took so far, SIGSTOP it, and if
        the batch's ``ack`` is still missing it is inside the call (encoding, in the store's
        round trip or transaction, or reading the answer): SIGKILL it and start another from
        the next batch. Else let it go on, and learn how long the call took. On SQLite the
        kill waits for a moment when the producer holds the write lock: mid-transaction."""
        proc = self.producer
        if proc is None:
            return False
        deadline = time.monotonic() + timeout
        size = self.acks.stat().st_size
        begun: float | None = None
        while proc.alive() and time.monotonic() < deadline:
            if self.acks.stat().st_size == size:
                time.sleep(0.0005)
                continue
            size = self.acks.stat().st_size
            last = self.ack_lines()[-1]
            if last[0] == "ack" and begun is not None:
                self.call_time = time.monotonic() - begun
            if last[0] != "begin":
                begun = None
                continue
            begun = time.monotonic()
            if self.call_time is None:
                continue  # learn first
            time.sleep(random.uniform(0.0, 0.9 * self.call_time))
            os.kill(proc.pid, signal.SIGSTOP)
            last = self.ack_lines()[-1]
            if last[0] != "begin":
                os.kill(proc.pid, signal.SIGCONT)
                size = self.acks.stat().st_size
                begun = None
                continue
            if self.kind == "sqlite" and not self.sqlite_write_locked():
                # On SQLite, kill it only inside its write transaction (holding the lock).
                os.kill(proc.pid, signal.SIGCONT)
                size = self.acks.stat().st_size
                begun = None
                continue
            start, count = int(last[1]), int(last[2])
            os.kill(proc.pid, signal.SIGKILL)
            proc.proc.wait(10)
            self.killed_batch = (start, count)
            rest = self.jobs - (start + count)
            self.producer = self.spawn_producer(start + count, rest) if rest > 0 else None
            return True
        return False

    def sqlite_write_locked(self, probes: int = 20) -> bool:
        """Whether the (stopped) producer holds the SQLite file's write lock: every attempt to
        take it, over a while, fails. A worker's transaction is far shorter than that."""
        path = self.url[len("sqlite:///") :]
        for _ in range(probes):
            conn = sqlite3.connect(path, timeout=0)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.rollback()
                return False
            except sqlite3.OperationalError:
                time.sleep(0.002)
            finally:
                conn.close()
        return True

    def during_outage(self, moment: float, margin: float = 10.0) -> bool:
        return any(down - 1.0 <= moment <= up + margin for down, up in self.outages)

    def check_direct_workers(self) -> None:
        """Replace a worker process that exited on its own, if it could not start because the
        store was down (``jobyard worker`` exits 1 when it cannot open its store); any other
        death is a bug, recorded for the end."""
        for w in list(self.workers):
            code = w.proc.poll()
            if code is None:
                continue
            self.workers.remove(w)
            out = w.output()
            if code == 1 and "started: queues=" not in out and self.during_outage(time.time()):
                self.down_exits += 1
                self.spawn_worker()
            else:
                self.dead.append(f"worker pid {w.pid} exited {code}: {out[-2000:]}")

    def check_supervised(self) -> list[str]:
        """The supervisor's children: every exit it logged was a SIGKILL of the test's, or a
        child that could not start while the store was down."""
        assert self.supervisor is not None
        sup = self.supervisor
        exit_re = re.compile(
            r"^(\S+ \S+),\d+ \S+ WARNING worker process (\d+) exited with (-?\d+)", re.M
        )

        def kills_seen() -> bool:
            codes = [m.group(3) for m in exit_re.finditer(sup.output())]
            return codes.count("-9") >= self.killed_children

        # It notices a dead child within its 0.2 s poll.
        poll(kills_seen, 10)
        problems = []
        sigkilled = 0
        for m in exit_re.finditer(sup.output()):
            stamp, pid, code = m.groups()
            moment = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
            if code == "-9":
                sigkilled += 1
            elif code == "1" and self.during_outage(moment):
                self.down_exits += 1
            else:
                problems.append(f"supervised worker {pid} exited with {code} at {stamp}")
        if sigkilled != self.killed_children:
            problems.append(
                f"the supervisor saw {sigkilled} children SIGKILLed; the test killed "
                f"{self.killed_children}"
            )
        if problems:
            problems.append(sup.output()[-3000:])
        return problems

    def worker_pids(self) -> list[int]:
        pids = [w.pid for w in self.workers]
        if self.supervisor is not None:
            pids += children(self.supervisor.pid)
        return pids

    @contextlib.contextmanager
    def workers_stopped(self) -> Iterator[None]:
        """Every worker process (and the producer) SIGSTOPped for the block: none claims, acks
        or reaps."""
        pids = self.worker_pids()
        if self.producer is not None and self.producer.alive():
            pids.append(self.producer.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def restart_store(self) -> None:
        """Take the store down and bring it back, noting the jobs in flight on either side.

        Workers (and the producer) are SIGSTOPped while the store finishes what they sent,
        the running jobs are read and the store goes down; they run
        against the dead store for ``downtime``, and are stopped again while it comes back and
        the running jobs are read once more, before any reaper can move them: a move the store
        forgot in the crash (PostgreSQL commits the worker's moves asynchronously) shows up as
        running again there, or, for a job whose claim was forgotten too, as no longer
        completed: such a completion was acknowledged to its worker but not kept, and the job
        runs again ("forgotten" in the summary)."""
        assert self.server is not None
        with self.workers_stopped():
            self.server.quiesce()
            in_flight = self.running()
            completed = self.completed()
            self.server.down()
        down = time.time()
        time.sleep(self.downtime)  # load: workers retry against a dead store meanwhile
        with self.workers_stopped():
            self.server.up()
            in_flight |= self.running()
            forgotten = completed - self.completed()
        self.forgotten += len(forgotten)
        self.outages.append((down, time.time()))
        self.events.append(Event("restart", "store", in_flight | forgotten))

    # the run -------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        started = time.monotonic()
        for _ in range(self.direct_workers):
            self.spawn_worker()
        if self.supervised:
            self.supervisor = self._spawn(
                "supervisor", self.worker_argv("--processes", str(self.supervised))
            )
        expected = self.direct_workers + self.supervised
        wait_for(lambda: len(self.app.workers()) >= expected, 60, "the workers to register")

        poison = self.app.by_name(
            "chaos_poison",
            queue=chaos_app.QUEUE,
            lease=chaos_app.LEASE,
            max_attempts=chaos_app.POISON_ATTEMPTS,
            backoff=chaos_app.FAST,
            priority=10,
        ).enqueue("p")
        # Faults start once the poison job is dead, so its error is its own (no lapsed lease).
        wait_for(lambda: self.app.get(poison.id).status == "failed", 60, "the poison job to fail")

        self.spawn_producer(0, self.jobs)
        next_kill = time.monotonic() + self.kill_every
        restarted = self.server is None
        deadline = time.monotonic() + self.deadline
        next_count = 0.0
        while True:
            now = time.monotonic()
            if now > deadline:
                pytest.fail(f"{self.kind}: the jobs were not done after {self.deadline}s")
            if (
                self.killed_batch is None
                and sum(1 for line in self.ack_lines() if line[0] == "ack") >= 2
            ):
                self.catch_producer()
            self.check_direct_workers()
            if now >= next_kill:
                self.kill_worker()
                next_kill = time.monotonic() + self.kill_every * random.uniform(0.8, 1.2)
            if now >= next_count:
                next_count = now + 0.25
                counts = self.counts()
                if (
                    not restarted
                    and counts.get("completed", 0) >= self.restart_at * self.jobs
                    and counts.get("running", 0) > 0
                ):
                    self.restart_store()
                    restarted = True
                    continue
                producing = self.producer is not None and self.producer.alive()
                if (
                    not producing
                    and restarted
                    and counts.get("waiting", 0) == 0
                    and counts.get("pending", 0) == 0
                    and counts.get("running", 0) == 0
                ):
                    break
            time.sleep(0.02)
        if self.producer is not None:
            assert self.producer.proc.wait(10) == 0, self.producer.output()[-3000:]
        kills_done = time.monotonic()

        # Survivors must still be alive: a worker that died on its own is a bug (but see
        # check_direct_workers: a worker cannot start while its store is down).
        self.check_direct_workers()
        survivors = [*self.workers, *([self.supervisor] if self.supervisor else [])]
        dead = [
            *self.dead,
            *(f"pid {w.pid}: {w.output()[-2000:]}" for w in survivors if not w.alive()),
        ]
        if self.supervisor is not None:
            dead += self.check_supervised()
        alive = [w for w in survivors if w.alive()]

        # A process still importing has no SIGTERM handler yet: wait until each has started.
        def all_started() -> bool:
            if not all("started: queues=" in w.output() for w in self.workers):
                return False
            if self.supervisor is None:
                return True
            log = self.supervisor.output()
            return all(f"worker {HOST}:{pid}:" in log for pid in children(self.supervisor.pid))

        wait_for(all_started, 60, "every worker process to start")
        for w in alive:
            w.proc.send_signal(signal.SIGTERM)
        for w in alive:
            try:
                code = w.proc.wait(30)
            except subprocess.TimeoutExpired:
                code = None
            if code != 0:
                dead.append(f"pid {w.pid} exited {code} on SIGTERM: {w.output()[-2000:]}")
        return self.account(poison.id, kills_done - started, dead)

    # the account --------------------------------------------------------------------------------

    def account(self, poison_id: str, wall: float, dead: list[str]) -> Outcome:
        accepted: dict[str, int] = {}
        for line in self.ack_lines():
            if line[0] == "ack":
                accepted.update({job_id: n for n, job_id in json.loads(line[2])})
        jobs = {j.id: j for j in self.app.jobs(name="chaos_work", limit=10 * self.jobs)}
        lost = [i for i in accepted if i not in jobs or jobs[i].status != "completed"]
        stuck = [f"{i}: {j.status}" for i, j in jobs.items() if j.status != "completed"]
        wrong = [
            i
            for i, j in jobs.items()
            if (j.status == "completed" and j.result != j.args[0])
            or accepted.get(i, j.args[0]) != j.args[0]
        ]

        runs: collections.Counter[str] = collections.Counter()
        poison_runs = 0
        for p in self.sink.iterdir():
            kind, job_id = p.name.split(".")[:2]
            if kind == "run":
                runs[job_id] += 1
            elif kind == "poison" and job_id == chaos_app.safe(poison_id):
                poison_runs += 1
        safe = {i: chaos_app.safe(i) for i in jobs}
        unexecuted = [i for i, j in jobs.items() if j.status == "completed" and not runs[safe[i]]]
        unexecuted += [f"{s} (ran, but no such job)" for s in set(runs) - set(safe.values())]
        duplicates = sum(c - 1 for c in runs.values() if c > 1)
        bound = sum(len(e.in_flight) for e in self.events)
        uncovered = {}
        for i, s in safe.items():
            extra = runs[s] - 1
            allowed = sum(1 for e in self.events if i in e.in_flight)
            if extra > allowed:
                uncovered[i] = (
                    f"ran {runs[s]} times, in flight at {allowed} faults; executions by pids "
                    + ", ".join(sorted(p.name.split(".")[2] for p in self.sink.glob(f"run.{s}.*")))
                )

        torn = []
        batch_stored = "-"
        if self.killed_batch is not None:
            start, count = self.killed_batch
            stored = sum(1 for j in jobs.values() if start <= j.args[0] < start + count)
            batch_stored = {0: "none", count: "all"}.get(stored, f"{stored} of {count}")
            if stored not in (0, count):
                torn.append(f"batch {start}+{count}: {stored} of {count} jobs stored")
        failed = self.app.jobs(status="failed", limit=100)
        workflows, problems = self.account_workflows(accepted, jobs)
        return Outcome(
            kind=self.kind,
            jobs=self.jobs,
            accepted=len(accepted),
            kills=sum(1 for e in self.events if e.kind == "kill"),
            restarts=sum(1 for e in self.events if e.kind == "restart"),
            producer_kills=int(self.killed_batch is not None),
            lost=lost,
            stuck=stuck,
            unexecuted=unexecuted,
            duplicates=duplicates,
            bound=bound,
            bound_kills=sum(len(e.in_flight) for e in self.events if e.kind == "kill"),
            batch_stored=batch_stored,
            uncovered=uncovered,
            failed=failed,
            poison_runs=poison_runs,
            wrong_results=wrong,
            torn_batches=torn,
            dead_workers=dead,
            down_exits=self.down_exits,
            forgotten=self.forgotten,
            wall=wall,
            workflows=workflows,
            workflow_problems=problems,
        )

    def account_workflows(
        self, accepted: dict[str, int], works: dict[str, jobyard.Job]
    ) -> tuple[int, list[str]]:
        """Every chain reached its end with the right value, and every workflow has exactly
        one join, completed with the sum of its members in order, run once unless a fault
        caught it running."""
        limit = 10 * self.jobs
        nexts = {j.id: j for j in self.app.jobs(name="chaos_next", limit=limit)}
        joins = self.app.jobs(name="chaos_join", limit=limit)
        problems: list[str] = []
        members: dict[str, list[int]] = collections.defaultdict(list)
        for work_id, n in accepted.items():
            work = works.get(work_id)
            if work is None or work.workflow_id is None:
                continue
            members[work.workflow_id].append(n)
            step = nexts.get(work.children[0]) if len(work.children) == 1 else None
            if step is None or step.status != "completed" or step.result != n:
                problems.append(f"the chain of {work_id} ({n}) did not end: {step}")
        per_flow = collections.Counter(j.workflow_id for j in joins)
        problems += [f"workflow {f}: {per_flow[f]} joins" for f in members if per_flow[f] != 1]
        for job in joins:
            want = sum(members.get(job.workflow_id or "", []))
            if job.status != "completed" or (job.workflow_id in members and job.result != want):
                problems.append(f"join {job.id}: {job.status}, {job.result} (want {want})")
        runs = collections.Counter(p.name.split(".")[1] for p in self.sink.glob("join.*"))
        runs.update(p.name.split(".")[1] for p in self.sink.glob("next.*"))
        for job in [*joins, *nexts.values()]:
            executions = runs[chaos_app.safe(job.id)]
            allowed = sum(1 for e in self.events if job.id in e.in_flight)
            if executions == 0 and job.status == "completed":
                problems.append(f"{job.name} {job.id} completed without an execution")
            if executions > 1 + allowed:
                problems.append(f"{job.name} {job.id} ran {executions} times, {allowed} faults")
        return len(members), problems


def check(outcome: Outcome, poison_error: str) -> None:
    """Every promise of the chaos run, each failure naming what broke."""
    assert outcome.producer_kills == 1, "the producer was never caught inside enqueue_many"
    assert not outcome.lost, f"accepted jobs lost: {outcome.lost[:20]}"
    assert not outcome.stuck, f"jobs not completed: {outcome.stuck[:20]}"
    assert not outcome.unexecuted, f"completed without an execution: {outcome.unexecuted[:20]}"
    assert not outcome.wrong_results, f"wrong results: {outcome.wrong_results[:20]}"
    assert not outcome.torn_batches, f"enqueue_many was not all or nothing: {outcome.torn_batches}"
    assert not outcome.uncovered, f"duplicates beyond the jobs in flight: {outcome.uncovered}"
    assert outcome.duplicates <= outcome.bound
    assert not outcome.dead_workers, f"workers died: {outcome.dead_workers}"
    assert outcome.workflows > 0, "no workflow was accepted"
    assert not outcome.workflow_problems, outcome.workflow_problems[:20]
    assert len(outcome.failed) == 1, [(j.id, j.name, j.error) for j in outcome.failed]
    (poison,) = outcome.failed
    assert poison.name == "chaos_poison"
    assert poison.attempts == poison.max_attempts == chaos_app.POISON_ATTEMPTS
    assert outcome.poison_runs == chaos_app.POISON_ATTEMPTS
    assert poison.error is not None and poison_error in poison.error, poison.error
