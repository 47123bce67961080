"""What jobyard costs as its store fills with finished jobs.

    python bench/scale.py --backend {sqlite,postgres,redis} [--first 20000 --backlog 300000]
        [--rounds 5] [--warm 2000]

Measured as a user would (the public API, ONE worker process ``-c 8``, no-op jobs), on one queue:

1. ``first``: enqueue N1 jobs and drain them (the store is empty, its worker just started);
2. ``backlog``: enqueue N2 more in the same queue and drain them;
3. ``after`` and ``empty``, R rounds (``--rounds``): N1 jobs drained on this store, which holds
   N1 + N2 finished jobs (and N1 more each round), and N1 jobs drained on a fresh store of the
   same kind (a new schema, file or redis-server) with a worker of its own, warmed by a drain of
   ``--warm`` jobs first (untimed: the filled store's worker is warm from the backlog). Both
   stores' jobs are enqueued before either drain, and the two drains run a second apart, in
   alternating order, the first round's ``after`` right behind the backlog.

Each drain is enqueued while the queue is paused (``app.pause_queue``), then resumed, so the
worker drains a full queue; its rate is timed from the jobs' own records: from the earliest
``started_at`` among the phase's first jobs to the latest ``finished_at`` among its last jobs.

``drain after / empty`` is the median of the R rounds' ratios: what a user sees of the history
(the same drain, with and without 320,000 finished jobs stored), measured side by side. Until
issue 18 this compared phase 3 with phase 1: one 1-3 s drain with another a minute later, the
first of them including the worker's warm-up. On this shared 2-core machine a drain's rate
follows the other work running beside it, and that ratio ranged 0.5-1.7 from run to run while
what each job cost did not change (bench/README.md, "Cost as the store fills", issue 18 §3).
``drain after / first`` (round 1's ``after`` against phase 1) is still printed beside it.

``cpu per job`` (from /proc/<pid>/task/*/schedstat): the CPU time per job of the worker process
and of the store's server processes that serve it (PostgreSQL: those of the worker's own
sessions; Redis: the redis-server; SQLite runs in the worker), from the queue's resume to the
drain's end: what a job costs, whatever else the machine runs. ``cpu wait per job``: the time
those threads were runnable but waited for a CPU (held by the machine's other work, or by their
own other threads): a drain slowed by its neighbours shows here, not in ``cpu per job``.

Also printed (``name: value unit``): idle enqueue-to-start latency p50/p99 after phase 1 and
after the rounds; ``app.stats()``, the newest 50 jobs (``app.jobs()``) and the newest 50 failed
jobs (``app.jobs(status="failed")``), each the median of a few calls with the store full
(``stats`` right after the drain, when most jobs completed within the last minute and are
counted as such; ``stats idle`` a minute later); and the store's size: PostgreSQL relation
sizes and dead tuples per partition, Redis memory per finished job, the SQLite file.

``--first`` / ``--backlog`` scale the run down (e.g. ``--first 5000 --backlog 50000``).
The store is made as in ``bench/throughput.py`` (PostgreSQL: a fresh schema in ``test``; Redis: a
private redis-server; SQLite: a temp file) and removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, log, percentile, psql, records_span, short_id
from bench.throughput import start_worker, stop_worker, store

BACKENDS = ("sqlite", "postgres", "redis")
EDGE = 40  # jobs at each end of a phase whose records time it


def enqueue(app: Any, noop: Any, n: int, batch: int = 1000) -> list[Any]:
    """N no-op jobs while the queue is paused; the handles of the first and last EDGE."""
    app.pause_queue("bench")
    handles: list[Any] = []
    done = 0
    calls = [((), {}) for _ in range(batch)]
    while done < n:
        size = min(batch, n - done)
        got = noop.enqueue_many(calls[:size])
        if done == 0:
            handles += got[:EDGE]
        done += size
        if done >= n:
            handles += got[-EDGE:]
    return handles


@dataclass
class Drained:
    rate: float  # jobs/s, from the jobs' records
    cpu: Used | None  # per job: the worker's and the store server's CPU, and waits for one


def drain(side: Side, n: int, timeout: float, handles: list[Any] | None = None) -> Drained:
    """Enqueue n jobs (unless ``handles`` says they are: enqueued, the queue paused), let the
    worker drain them; jobs/s from the jobs' records."""
    app = side.app
    if handles is None:
        handles = enqueue(app, side.noop, n)
    first, last = handles[:EDGE], handles[EDGE:]
    cpu0 = side.cpu()
    app.pause_queue("bench", paused=False)
    deadline = time.monotonic() + timeout
    for h in last:
        h.result(timeout=max(deadline - time.monotonic(), 1.0), poll=0.05)
    cpu1 = side.cpu()
    # Jobs run in enqueue order (same priority and run_at order), c at a time: once the last
    # are done the phase is done; check that nothing is left behind anyway.
    while True:
        c = counts(app)
        if c.get("pending", 0) + c.get("running", 0) == 0:
            break
        if time.monotonic() > deadline:
            log("warning: jobs left pending or running")
            break
        time.sleep(0.1)
    cpu = None if cpu0 is None or cpu1 is None else cpu1.minus(cpu0).per(n)
    return Drained(n / records_span(first, last), cpu)


def counts(app: Any) -> dict[str, int]:
    for s in app.stats(["bench"]):
        if s.queue == "bench":
            return dict(s.counts)
    return {}


# --- CPU spent per job -------------------------------------------------------------------------


@dataclass(frozen=True)
class Sched:
    """Seconds on a CPU, and seconds runnable but waiting for one (the run queue: the time the
    machine's other work held every CPU), of some threads (/proc/<pid>/task/*/schedstat)."""

    ran: float = 0.0
    waited: float = 0.0

    def __add__(self, other: Sched) -> Sched:
        return Sched(self.ran + other.ran, self.waited + other.waited)

    def __sub__(self, other: Sched) -> Sched:
        return Sched(self.ran - other.ran, self.waited - other.waited)

    def per(self, n: int) -> Sched:
        return Sched(self.ran / n, self.waited / n)


@dataclass
class CpuTimes:
    worker: dict[int, Sched]  # each worker process's threads, summed
    server: dict[int, Sched]  # each store server process serving it

    def minus(self, before: CpuTimes) -> Used:
        """Spent since ``before``: a process that started since counts whole."""

        def spent(now: dict[int, Sched], then: dict[int, Sched]) -> Sched:
            out = Sched()
            for pid, t in now.items():
                out += t - then.get(pid, Sched())
            return out

        return Used(spent(self.worker, before.worker), spent(self.server, before.server))


@dataclass(frozen=True)
class Used:
    worker: Sched
    server: Sched

    @property
    def ran(self) -> float:
        return self.worker.ran + self.server.ran

    @property
    def waited(self) -> float:
        return self.worker.waited + self.server.waited

    def per(self, n: int) -> Used:
        return Used(self.worker.per(n), self.server.per(n))


def _sched(pid: int) -> Sched | None:
    """Every thread of process ``pid``: seconds on a CPU and in the run queue."""
    total = Sched()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            total += Sched(int(ran) / 1e9, int(waited) / 1e9)
    return total


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (the worker command may supervise worker processes)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parents.get(pid, [])
    return out


# --- one store and its worker ------------------------------------------------------------------


class Side:
    """A store, the App that enqueues into it, and the one worker process that drains it. On
    PostgreSQL the worker's sessions carry an application_name of their own, so the server
    processes that serve them are found (for ``cpu``)."""

    def __init__(self, args: argparse.Namespace, url: str) -> None:
        import jobyard
        from bench.apps import noop

        self.backend = args.backend
        self.url = url
        self.app = jobyard.App(url)
        self.app.migrate()
        self.noop = self.app.by_name(noop.name, queue="bench")
        self.tag = f"jobyard-scale-{short_id()}"
        worker_url = url
        if self.backend == "postgres":
            worker_url += f"{'&' if '?' in url else '?'}application_name={self.tag}"
        self.log_path = Path(tempfile.mkstemp(prefix="jobyard-scale-worker-", suffix=".log")[1])
        self.worker = start_worker(args, worker_url, self.log_path)

    def cpu(self) -> CpuTimes | None:
        """CPU and run-queue time so far of the worker process(es) and of the store server's
        processes that serve it (PostgreSQL: its sessions; Redis: the redis-server)."""
        if not hasattr(self.worker, "pid"):
            return None
        server: list[int] = []
        if self.backend == "postgres":
            rows = psql(
                f"SELECT pid FROM pg_stat_activity WHERE application_name = '{self.tag}'",
                database="test",
            )
            server = [int(p) for p in rows.split()]
        elif self.backend == "redis":
            server = [int(self.app.backend.client.info("server")["process_id"])]
        return CpuTimes(
            {pid: t for pid in _tree(self.worker.pid) if (t := _sched(pid)) is not None},
            {pid: t for pid in server if (t := _sched(pid)) is not None},
        )

    def close(self) -> None:
        stop_worker(self.worker)
        self.app.close()
        self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def empty_side(args: argparse.Namespace) -> Iterator[Side]:
    """A fresh store of the same kind with its own worker, warmed by an untimed drain."""
    with store(args.backend, False) as url:
        side = Side(args, url)
        try:
            if args.warm:
                drain(side, args.warm, args.drain_timeout)
            yield side
        finally:
            side.close()


def latency(stamp: Any, samples: int) -> list[float]:
    """Enqueue-to-start of one job at a time, the worker idle."""
    time.sleep(1.0)
    out: list[float] = []
    for _ in range(samples):
        time.sleep(random.uniform(0.01, 0.05))
        t0 = time.time()
        started = stamp.enqueue().result(timeout=30, poll=0.002)
        out.append((float(started) - t0) * 1000.0)
    return out


def median_ms(fn: Any, times: int = 7) -> float:
    fn()  # warm (prepared statements, script cache)
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(out)


def store_size(backend: str, url: str, app: Any, finished: int, baseline: int) -> None:
    if backend == "postgres":
        schema = url.split("schema=")[1]
        rows = psql(
            "SELECT c.relname, pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0),"
            " coalesce(s.n_dead_tup, 0) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
            f" WHERE n.nspname = '{schema}' AND c.relname LIKE 'jobs\\_%' AND c.relkind = 'r'"
            " ORDER BY 1",
            database="test",
        )
        for line in rows.split():
            name, size, live, dead = line.split("|")
            emit(
                f"size {name}",
                int(size) / 1e6,
                "MB",
                f"{int(live)} live, {int(dead)} dead tuples",
            )
    elif backend == "redis":
        used = app.backend.client.info("memory")["used_memory"]
        emit("redis used_memory", used / 1e6, "MB")
        emit("redis bytes per finished job", (used - baseline) / max(finished, 1), "B")
    elif backend == "sqlite":
        path = url.split("sqlite:///")[1]
        emit("sqlite file", os.path.getsize(path) / 1e6, "MB")


def emit_drain(name: str, d: Drained, note: str) -> None:
    emit(f"drain {name}", d.rate, "jobs/s", note)
    if d.cpu is not None:
        c = d.cpu
        note = f"worker {c.worker.ran * 1e6:.0f}, server {c.server.ran * 1e6:.0f}"
        emit(f"cpu per job {name}", c.ran * 1e6, "us", note)
        emit(f"cpu wait per job {name}", c.waited * 1e6, "us", "runnable, waiting for a CPU")


def rounds(
    args: argparse.Namespace, filled: Side, empty: Side, stack: contextlib.ExitStack
) -> tuple[list[Drained], list[Drained]]:
    """The R rounds: a drain on the filled store and one on a fresh store, back to back, in
    alternating order (round 1: the filled store first, right behind the backlog)."""
    stored = args.first + args.backlog + args.latency_samples
    afters: list[Drained] = []
    empties: list[Drained] = []
    for r in range(1, args.rounds + 1):
        if r > 1:
            stack.close()  # the last round's fresh store and its worker
            empty = stack.enter_context(empty_side(args))
        order = (filled, empty) if r % 2 else (empty, filled)
        # Both stores' jobs are enqueued (paused) before either drain, the second one's first,
        # so that the two drains run a second apart (the resumed worker's next poll).
        queued = {id(side): enqueue(side.app, side.noop, args.first) for side in order[::-1]}
        for side in order:
            handles = queued[id(side)]
            if side is filled:
                log(f"{args.backend}: round {r}, {args.first} jobs, {stored} finished stored")
                d = drain(filled, args.first, args.drain_timeout, handles)
                afters.append(d)
                emit_drain(f"after {r}", d, f"{args.first} jobs, {stored} finished stored")
                stored += args.first
            else:
                log(f"{args.backend}: round {r}, {args.first} jobs on a fresh store")
                d = drain(empty, args.first, args.drain_timeout, handles)
                empties.append(d)
                emit_drain(f"empty {r}", d, f"{args.first} jobs, a fresh store, warm worker")
        emit(f"drain after / empty {r}", afters[-1].rate / empties[-1].rate * 100.0, "%")
    return afters, empties


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import stamp

    filled = Side(args, url)
    app = filled.app
    stamp = app.by_name(stamp.name, queue="bench")
    baseline = 0
    if args.backend == "redis":
        baseline = app.backend.client.info("memory")["used_memory"]
    try:
        log(f"{args.backend}: phase 1, {args.first} jobs on an empty store")
        first = drain(filled, args.first, args.drain_timeout)
        emit_drain("first", first, f"{args.first} jobs, empty store, the worker's first")
        lat = latency(stamp, args.latency_samples)
        emit("latency before p50", percentile(lat, 50), "ms")
        emit("latency before p99", percentile(lat, 99), "ms")

        # Round 1's fresh store is made and warmed now, so that its "after" drain can follow
        # the backlog at once, as a user's next drain would (with the backlog's dead rows,
        # vacuums and checkpoints still to come); every later round's is made before its two
        # drains, which then run back to back.
        with contextlib.ExitStack() as later:
            next_empty = later.enter_context(empty_side(args))
            log(f"{args.backend}: phase 2, {args.backlog} more jobs")
            backlog = drain(filled, args.backlog, args.drain_timeout)
            emit_drain("backlog", backlog, f"{args.backlog} jobs")
            afters, empties = rounds(args, filled, next_empty, later)

        stored = args.first + args.backlog + args.latency_samples + args.rounds * args.first
        ratios = [a.rate / e.rate * 100.0 for a, e in zip(afters, empties, strict=True)]
        each = ", ".join(f"{x:.0f}" for x in ratios)
        emit("drain after / empty", statistics.median(ratios), "%", f"median of rounds: {each}")
        emit("drain after / first", afters[0].rate / first.rate * 100.0, "%", "round 1, cold")
        pairs = zip(afters, empties, strict=True)
        cpus = [(a.cpu.ran, e.cpu.ran) for a, e in pairs if a.cpu and e.cpu]
        if cpus:
            cpu_ratio = statistics.median(a / e for a, e in cpus)
            emit("cpu per job after / empty", cpu_ratio * 100.0, "%", "median of rounds")
        lat = latency(stamp, args.latency_samples)
        emit("latency after p50", percentile(lat, 50), "ms")
        emit("latency after p99", percentile(lat, 99), "ms")

        finished = stored + args.latency_samples
        recent = sum(s.completed_last_minute for s in app.stats())
        emit(
            "stats", median_ms(lambda: app.stats()), "ms", f"{recent} completed in the last minute"
        )
        emit("list newest 50", median_ms(lambda: app.jobs(limit=50)), "ms")
        emit("list failed 50", median_ms(lambda: app.jobs(status="failed", limit=50)), "ms")
        if args.idle_stats:
            # app.stats() also counts the completions of the last minute, which right after a
            # drain are most of the store: measured again once they are older than a minute.
            log(f"{args.backend}: waiting 61 s for the last minute's completions to age")
            time.sleep(61)
            emit("stats idle", median_ms(lambda: app.stats()), "ms", f"{finished} finished stored")
        store_size(args.backend, url, app, finished, baseline)
    finally:
        filled.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite")
    parser.add_argument("--first", type=int, default=20_000, help="jobs of each measured drain")
    parser.add_argument("--backlog", type=int, default=300_000, help="jobs of phase 2")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of a drain on this store and on an empty one"
    )
    parser.add_argument(
        "--warm", type=int, default=2_000, help="jobs an empty store's worker drains untimed first"
    )
    parser.add_argument("--concurrency", "-c", type=int, default=8)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    parser.add_argument("--url", default=None, help="use this store as is (not cleaned up)")
    parser.add_argument(
        "--no-idle-stats",
        dest="idle_stats",
        action="store_false",
        help="skip the second app.stats() timing after a minute's pause",
    )
    args = parser.parse_args(argv)
    # what bench.throughput.start_worker reads: one plain worker process of no-op jobs
    args.prefetch, args.worker_wrapper, args.shared_redis, args.pin = None, "", False, False
    args.processes, args.work_ms, args.use_async = 1, 0.0, False
    args.call, args.cpu_ms = "", 0.0
    print(
        f"# jobyard {args.backend}: first={args.first} backlog={args.backlog}"
        f" rounds={args.rounds} warm={args.warm} concurrency={args.concurrency}",
        flush=True,
    )
    if args.url:
        run(args, args.url)
        return
    with store(args.backend, False) as url:
        run(args, url)


if __name__ == "__main__":
    main()
