"""jobyard's throughput and latency on one store.

    python bench/throughput.py --backend {sqlite,postgres,redis,redis_cluster,memory} --jobs N
        [-c C] [--processes P] [--work-ms MS] [--call {redis,postgres,http}] [--cpu-ms MS]
        [--async]

Prints, each on a line of its own (``name: value unit``):

- ``enqueue``: jobs/s enqueued one at a time (``noop.enqueue()`` in a loop), N jobs;
- ``enqueue_many``: jobs/s enqueued in batches (``--batch`` per ``enqueue_many`` call), N jobs;
- ``drain``: jobs/s of no-op jobs run by ONE worker process (``python -m jobyard worker
  bench.apps:app -q bench -c C``), the 2N jobs the two phases above left pending; timed from the
  jobs' own records (the first jobs' ``started_at`` to the last jobs' ``finished_at``), so the
  process start-up is never included and the clock costs the store nothing while it runs;
- ``slot_share`` (only with ``--work-ms``): the drain as a share of what the slots could do if
  waiting were the only cost, ``drain / (C * P * 1000 / MS)``;
- ``per_slot`` (only with ``--call`` and no ``--work-ms``): the drain per slot, ``drain / (C * P)``;
- ``cpu_share`` (only with ``--cpu-ms``): the drain as a share of what the machine's cores could
  do if the loop were the only cost, ``drain / (cores * 1000 / MS)``;
- ``latency p50/p95/p99``: enqueue-to-start of one job at a time with that worker idle: the
  handler sends ``time.time()`` at its start as a UDP datagram (as every peer's runner does),
  compared with the instant before ``enqueue()``; this process waits for it in ``recv``.

Stores: sqlite -> a temp file; postgres -> a fresh schema in database ``test`` (dropped after);
redis -> a private redis-server on a free port (``--shared-redis``: 127.0.0.1:6379/0 under a random
key prefix, deleted after); redis_cluster -> a private 3-node cluster; memory -> the worker runs
in this process (memory:// cannot be shared between processes). ``--url`` uses a given store as is.

``--work-ms MS``: the jobs enqueued and drained wait MS milliseconds on I/O instead of doing
nothing (``bench.apps.work``, ``time.sleep``; with ``--async``, ``bench.apps.awork``,
``asyncio.sleep``). ``--processes P``: the worker command's ``--processes`` (P processes of C
slots each). The idle latency probe is the no-op ``stamp`` job in every case.

``--call KIND`` and ``--cpu-ms MS`` (issue 18: handlers that call something): each drained job
first makes one call on a client of its process's own (``redis``: an INCR on a private
redis-server of its own; ``postgres``: ``SELECT 1`` through a psycopg_pool pool; ``http``: a GET to
``bench/_httpd.py``; see ``bench/_calls.py``), then holds the interpreter lock for MS ms of
calibrated pure Python, then waits ``--work-ms`` if given. A ``# calls:`` line compares the calls
the target saw (redis, http) with the jobs drained; with ``--cpu-ms`` a ``# cpu loop:`` line gives
the loop's CPU time per job as the last jobs measured it in the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    CALLS,
    REPO,
    Stamps,
    call_target,
    check_calls,
    emit,
    emit_cpu_share,
    emit_latencies,
    emit_per_slot,
    emit_slot_share,
    first_started,
    last_finished,
    log,
    private_redis,
    psql,
    redis_cluster,
    short_id,
    spawn,
    stop_process,
)
from jobyard.worker._cpu import default_processes

BACKENDS = ("sqlite", "postgres", "redis", "redis_cluster", "memory")


@contextlib.contextmanager
def store(backend: str, shared_redis: bool) -> Iterator[str]:
    """Create the store for one run; yield its URL; remove it afterwards."""
    tag = short_id()
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="jobyard-bench-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
    elif backend == "postgres":
        schema = f"bench_{tag}"
        psql(f"CREATE SCHEMA {schema}", database="test")
        try:
            yield f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
        finally:
            psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE", database="test")
    elif backend == "redis":
        if shared_redis:
            prefix = f"bench{tag}:"
            try:
                yield f"redis://127.0.0.1:6379/0?prefix={prefix}"
            finally:
                _delete_redis_prefix("redis://127.0.0.1:6379/0", prefix)
        else:
            with private_redis() as url:
                yield f"{url}?prefix=bench{tag}:"
    elif backend == "redis_cluster":
        with redis_cluster() as ports:
            yield f"redis+cluster://127.0.0.1:{ports[0]}?prefix=bench{tag}:"
    else:
        raise SystemExit(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")


def _delete_redis_prefix(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    client.close()


def counts(app: Any) -> dict[str, int]:
    """Jobs of queue ``bench`` by status."""
    for s in app.stats(["bench"]):
        if s.queue == "bench":
            return dict(s.counts)
    return {}


def start_worker(args: argparse.Namespace, url: str, log_path: Path) -> Any:
    """One worker process (or, for memory://, a worker in this process)."""
    if args.backend == "memory" and not args.url:
        from bench.apps import app

        worker = app.worker(queues=["bench"], concurrency=args.concurrency)
        worker.start()
        return worker
    argv = [
        sys.executable,
        "-m",
        "jobyard",
        "worker",
        "bench.apps:app",
        "-q",
        "bench",
        "-c",
        str(args.concurrency),
        "--log-level",
        # a handler that calls something may raise: INFO logs each failed attempt (and no line
        # per completed job), which report_retries counts
        "INFO" if args.call or args.cpu_ms > 0 else "WARNING",
    ]
    argv += ["--processes", str(args.processes)]  # resolved: the worker's default, or given
    if args.prefetch is not None:
        argv += ["--prefetch", str(args.prefetch)]
    if args.pin:
        argv += ["--pin"]
    if args.worker_wrapper:
        argv = [*shlex.split(args.worker_wrapper), *argv]
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "JOBYARD_BENCH_URL": url,
        "PYTHONPATH": pythonpath,
        "BENCH_CALL_URL": os.environ.get("BENCH_CALL_URL", ""),
        "BENCH_CALL_POOL": str(args.concurrency),  # a connection per slot of each process
    }
    return spawn(argv, env=env, cwd=REPO, log_path=log_path)


def stop_worker(worker: Any) -> None:
    if hasattr(worker, "stop") and not hasattr(worker, "pid"):
        worker.stop(grace=5)
    else:
        stop_process(worker, timeout=20)


def workload(args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], str]:
    """The job the enqueue phases enqueue and the drain runs: (job function, its arguments, a
    description)."""
    from bench._calls import describe
    from bench.apps import awork, noop, work

    if args.call or args.cpu_ms > 0:
        job = awork if args.use_async else work
        what = describe(args.work_ms, args.call, args.cpu_ms, args.use_async)
        kind = "async" if args.use_async else "sync"
        return job, (args.work_ms, args.call, args.cpu_ms), f"{kind} jobs: {what}"
    if args.use_async:
        return awork, (args.work_ms,), f"async jobs awaiting asyncio.sleep({args.work_ms:g} ms)"
    if args.work_ms > 0:
        return work, (args.work_ms,), f"sync jobs in time.sleep({args.work_ms:g} ms)"
    return noop, (), "no-op jobs"


def timed_drain(
    args: argparse.Namespace, app: Any, worker: Any, handles: list[Any], total: int
) -> tuple[float, str]:
    """The drain's rate and a note, timed from the jobs' own records: from the earliest
    ``started_at`` among the first jobs enqueued to the latest ``finished_at`` among the last
    (``first_started``, ``last_finished``). While it runs, the store is read only to learn that
    it ended: one job's record per poll until the last job enqueued has finished, then the
    counts. Polling the counts every 20 ms throughout (as this did until 2026-12) cost
    PostgreSQL 0.7 of a core on this 2-core machine: app.stats() counts the pending rows, 45
    times a second.

    With ``--processes P`` the clock starts once all P worker processes are live
    (``app.workers()``) and counts the jobs finished after that: on a loaded machine one process
    can start 0.3 s after the other, which would otherwise weigh on a drain of a second or two
    and understate the scaling."""
    deadline = time.monotonic() + args.drain_timeout
    slots = args.concurrency * args.processes
    edge = min(max(64, 4 * slots), len(handles))  # more than run or wait in the workers at once

    def exited() -> None:
        if hasattr(worker, "poll") and worker.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.returncode} during the drain")

    before, up_at = 0, None
    if args.processes > 1:
        while sum(1 for w in app.workers() if "bench" in w.queues) < args.processes:
            exited()
            if time.monotonic() > deadline:
                raise SystemExit(f"{args.processes} worker processes did not come up")
            time.sleep(0.01)
        up_at = time.time()
        c = counts(app)
        before = c.get("completed", 0) + c.get("failed", 0)
        if before >= total:
            raise SystemExit(
                f"all {total} jobs finished before the {args.processes} worker processes were"
                " up: run with more --jobs"
            )

    finished, timed_out = 0, False
    tail = handles[-1]
    while not timed_out and not tail.get().status.finished:
        exited()
        timed_out = time.monotonic() > deadline
        time.sleep(0.01)
    while True:  # jobs run in enqueue order: this is at once true, or nearly
        c = counts(app)
        finished = c.get("completed", 0) + c.get("failed", 0)
        if finished >= total or timed_out:
            break
        exited()
        timed_out = time.monotonic() > deadline
        time.sleep(0.05)

    first, last = handles[:edge], handles[-edge:]
    begun = up_at if up_at is not None else first_started(first).timestamp()
    end = time.time() if timed_out else last_finished(last).timestamp()
    span = end - begun
    done = finished - before
    note = f"{done} jobs in {span:.2f}s"
    if timed_out:
        note += ", TIMED OUT: partial"
    if args.processes > 1:
        note += f"; timed from all {args.processes} processes up ({before} done before)"
    return done / max(span, 1e-9), note


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, stamp

    job, job_args, what = workload(args)

    app.migrate()
    app.stats(["bench"])  # open the store (and its pool) before timing anything
    n, batch = args.jobs, args.batch

    log(f"{args.backend}: enqueue {n} jobs one at a time")
    handles: list[Any] = []  # every job's handle: the drain is timed from their records
    t0 = time.perf_counter()
    for _ in range(n):
        handles.append(job.enqueue(*job_args))
    emit("enqueue", n / (time.perf_counter() - t0), "jobs/s")

    log(f"{args.backend}: enqueue_many {n} jobs in batches of {batch}")
    calls = [(job_args, {}) for _ in range(batch)]
    t0 = time.perf_counter()
    done = 0
    while done < n:
        size = min(batch, n - done)
        handles += job.enqueue_many(calls[:size])
        done += size
    emit("enqueue_many", n / (time.perf_counter() - t0), "jobs/s", f"batches of {batch}")

    total = 2 * n
    pending = counts(app).get("pending", 0)
    if pending != total:
        log(f"warning: {pending} jobs pending, expected {total}")
        total = pending
    log_path = Path(tempfile.mkstemp(prefix="jobyard-bench-worker-", suffix=".log")[1])
    procs = f"{args.processes} processes" if args.processes > 1 else "one worker process"
    log(f"{args.backend}: drain {total} {what}, {procs}, -c {args.concurrency}")
    stamps = Stamps()  # before the worker: its processes learn the probe's port
    worker = start_worker(args, url, log_path)
    try:
        rate, note = timed_drain(args, app, worker, handles, total)
        emit("drain", rate, "jobs/s", note)
        slots = args.concurrency * args.processes
        emit_slot_share(rate, slots, args.work_ms)
        if args.call and args.work_ms <= 0:
            emit_per_slot(rate, slots)
        emit_cpu_share(rate, args.cpu_ms)
        if args.call:
            check_calls(args.call, os.environ["BENCH_CALL_URL"], total)
        if args.cpu_ms > 0:
            report_cpu_loop(handles[-64:], args.cpu_ms)
        failed = counts(app).get("failed", 0)
        if failed:
            log(f"warning: {failed} jobs failed")
        report_retries(log_path)

        log(f"{args.backend}: idle latency, {args.latency_samples} samples")
        time.sleep(1.0)  # the worker goes idle: it sleeps on its push signal
        samples: list[float] = []
        lost = 0
        for i in range(args.latency_samples):
            time.sleep(random.uniform(0.01, 0.05))
            t_enqueue = time.time()
            stamp.enqueue(i)
            started = stamps.wait(i)
            if started is None:
                lost += 1
            else:
                samples.append((started - t_enqueue) * 1000.0)
        if lost:
            log(f"{args.backend}: {lost} latency samples never started within 30s")
        emit_latencies(samples)
        if args.group:
            run_group(args, job, job_args, rate)
    finally:
        stop_worker(worker)
        stamps.close()
        app.close()
        if args.keep_log or (hasattr(worker, "returncode") and worker.returncode not in (0, None)):
            log(f"worker log: {log_path}")
        else:
            log_path.unlink(missing_ok=True)


def report_retries(log_path: Path) -> None:
    """A ``# retries:`` line when the worker's log shows attempts that raised (a drain that
    retries is not the drain of the handler asked for): how many, and the first one's error."""
    if not log_path.exists():
        return
    lines = [x for x in log_path.read_text(errors="replace").splitlines() if " retry in " in x]
    if lines:
        first = lines[0].split(": ", 1)[-1].strip()
        print(
            f"# retries: {len(lines)} attempts raised and were retried; the first: {first}",
            flush=True,
        )


def report_cpu_loop(handles: list[Any], cpu_ms: float) -> None:
    """The ``# cpu loop:`` line: the CPU time the loop took in the worker, as the jobs of
    ``handles`` returned it (``bench.apps.work``'s result), against ``cpu_ms``."""
    import statistics

    spent = [j.result for j in (h.get() for h in handles) if isinstance(j.result, float)]
    if spent:
        print(
            f"# cpu loop: {statistics.median(spent):.3f} ms of CPU per job at the median,"
            f" {min(spent):.3f}-{max(spent):.3f} ms, over the last {len(spent)} jobs"
            f" ({cpu_ms:g} ms asked)",
            flush=True,
        )


def run_group(args: argparse.Namespace, job: Any, job_args: tuple[Any, ...], drain: float) -> None:
    """A group of ``--group`` members of the same job and a join that receives every result:
    its members/s from the insert's return until the join completed (the one insert timed
    apart), beside the plain drain of the same run."""
    import jobyard
    from bench.apps import gather

    n = args.group
    log(f"{args.backend}: a group of {n} members and a join")
    t0 = time.perf_counter()
    flow = jobyard.group(*[job.s(*job_args) for _ in range(n)]).then(gather.s()).enqueue()
    t1 = time.perf_counter()
    emit("group_insert", n / (t1 - t0), "jobs/s", f"{n} members and a join in one insert")
    join = flow.jobs[-1]
    deadline = t1 + args.drain_timeout
    while not join.get().status.finished and time.perf_counter() < deadline:
        time.sleep(0.005)  # the drain clock's pace: result() backs off as it waits
    rate = n / (time.perf_counter() - t1)
    got = flow.result(timeout=1)
    share = f"{100.0 * rate / drain:.0f}% of the drain" if drain else ""
    emit("group", rate, "members/s", f"join got {got} results; {share}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite")
    parser.add_argument("--jobs", type=int, default=10_000, help="N (the drain runs 2N)")
    parser.add_argument("--concurrency", "-c", type=int, default=8)
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="the worker command's --processes (default: the worker's own, one per CPU; 1 on"
        " memory)",
    )
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--pin", action="store_true", help="the worker runs with --pin")
    parser.add_argument(
        "--work-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="each drained job waits MS ms on I/O (time.sleep; asyncio.sleep with --async);"
        " 0: no-op jobs",
    )
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="the drained jobs are async handlers (asyncio.sleep(MS))",
    )
    parser.add_argument(
        "--call",
        choices=CALLS,
        default="",
        help="each drained job first makes one call on a client of its own: a Redis INCR, a"
        " PostgreSQL SELECT 1 or an HTTP GET to a local server (before --cpu-ms and --work-ms)",
    )
    parser.add_argument(
        "--cpu-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="each drained job holds the GIL for MS ms of calibrated pure Python (after its"
        " call, before its wait); prints cpu_share",
    )
    parser.add_argument(
        "--cpu-per-ms",
        type=float,
        default=0.0,
        metavar="N",
        help="--cpu-ms: the loop's iterations per ms for every process (each still checks it);"
        " default: each process calibrates its own",
    )
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument(
        "--group",
        type=int,
        default=10_000,
        help="members of the group benchmark (a group and its join); 0: skip it",
    )
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue_many call")
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--url", default=None, help="use this store as is (not cleaned up)")
    parser.add_argument(
        "--shared-redis",
        action="store_true",
        help="redis: use 127.0.0.1:6379/0 under a random prefix instead of a private server",
    )
    parser.add_argument(
        "--worker-wrapper",
        default="",
        help="prefix the worker command, e.g. 'py-spy record -o worker.svg --'",
    )
    parser.add_argument("--keep-log", action="store_true", help="keep the worker's log")
    args = parser.parse_args(argv)
    negative = min(args.work_ms, args.cpu_ms, args.cpu_per_ms) < 0
    if args.processes is None:  # what `jobyard worker` runs when not told
        args.processes = 1 if args.backend == "memory" and not args.url else default_processes()
    if negative or args.processes < 1 or args.concurrency < 1:
        parser.error("--work-ms, --cpu-ms and --cpu-per-ms must be >= 0, --processes and -c >= 1")
    if args.processes > 1 and args.backend == "memory" and not args.url:
        parser.error("memory:// runs its worker in this process: no --processes")
    header = f"# jobyard {args.backend}: jobs={args.jobs} concurrency={args.concurrency}"
    if args.processes > 1:
        header += f" processes={args.processes}"
    if args.pin:
        header += " pinned"
    if args.work_ms > 0 or args.use_async:
        header += f" work_ms={args.work_ms:g} handler={'async' if args.use_async else 'sync'}"
    if args.call or args.cpu_ms > 0:
        if not (args.work_ms > 0 or args.use_async):
            header += f" handler={'async' if args.use_async else 'sync'}"
        header += f" call={args.call or 'none'} cpu_ms={args.cpu_ms:g}"
    print(header, flush=True)
    if args.cpu_per_ms > 0:
        os.environ["BENCH_CPU_PER_MS"] = f"{args.cpu_per_ms:g}"  # the worker inherits it
    if args.cpu_ms > 0:
        from bench._calls import calibrate

        per_ms, got = calibrate(args.cpu_ms)
        how = "given" if args.cpu_per_ms > 0 else "each worker process calibrates its own"
        print(
            f"# cpu loop: {per_ms:,.0f} iterations per ms in this process; {args.cpu_ms:g} ms"
            f" took {got:.3f} ms of CPU ({how})",
            flush=True,
        )
    if args.call or args.cpu_ms > 0:
        from bench._calls import describe

        print(f"# handler: {describe(args.work_ms, args.call, args.cpu_ms, args.use_async)}")
    with call_target(args.call) as call_url:
        os.environ["BENCH_CALL_URL"] = call_url
        os.environ["BENCH_CALL_POOL"] = str(args.concurrency)  # memory://: the worker is here
        if args.url:
            run(args, args.url)
            return
        with store(args.backend, args.shared_redis) as url:
            run(args, url)


if __name__ == "__main__":
    main()
