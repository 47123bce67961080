"""Where a worker's CPU goes, per job and per thread: the worker's own Python (claim, dispatch,
pipeline, completer, heartbeat) against its handlers', and how many times each thread was woken.

    python bench/worker_cpu.py --backend {sqlite,postgres,redis} [--jobs N] [-c 8]
        [--processes P] [--work-ms MS] [--call {redis,postgres,http}] [--cpu-ms MS]

Enqueues ``2N`` jobs (``enqueue_many``) of ``throughput.py``'s workload, starts the worker command
as ``throughput.py`` does, and once every process is up and a tenth of the jobs is done reads each
worker thread's CPU time and context switches from ``/proc/<pid>/task/<tid>`` (its Python name
from ``py-spy dump``); again when nine tenths are done. Prints, per thread role summed over the
processes (``handler`` is every handler thread), the CPU in us per job, the voluntary context
switches per job (a thread that blocks and is woken: a wake-up) and the involuntary ones (taken
off its core), then the process totals and, where the benchmark started it, the store's and the
call target's redis-server CPU per job. The handler threads' CPU includes the handler's own call
and loop: ``calls.py``'s ``one call`` line gives what the call alone costs a thread.

py-spy must be installed (``pip install py-spy``); it reads the names once, pausing each process
for a moment before the first reading.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CALLS, call_target, log
from bench.throughput import counts, start_worker, stop_worker, store, workload
from jobyard.worker._cpu import default_processes

TICK = os.sysconf("SC_CLK_TCK")


def role(name: str) -> str:
    """A thread's role from its Python name: handler threads are summed into one."""
    if name.startswith("jobyard-handler-"):
        return "handler"
    return re.sub(r"-\d+$", "", name) or "?"


def worker_pids(root: int) -> list[int]:
    """The worker processes: the command's own (one process) or its children (a supervisor)."""
    kids = []
    for task in Path(f"/proc/{root}/task").iterdir():
        with open(task / "children") as f:
            kids += [int(p) for p in f.read().split()]
    return kids or [root]


def names(pid: int) -> dict[int, str]:
    """tid -> Python thread name, from py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = subprocess.run([spy, "dump", "--json", "-p", str(pid)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"py-spy dump failed: {out.stderr.strip()}")
    return {t["os_thread_id"]: t["thread_name"] or "?" for t in json.loads(out.stdout)}


def thread_stats(pid: int, tid: int) -> tuple[float, int, int] | None:
    """(CPU seconds, voluntary, involuntary context switches) of one thread; None if gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except FileNotFoundError:
        return None
    cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return cpu, int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"])


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def redis_servers() -> dict[int, int]:
    """port -> pid of the redis-servers running here."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        pid, _, cmd = line.strip().partition(" ")
        port = re.search(r"--port (\d+)|:(\d+)", cmd)
        if "redis-server" in cmd and port:
            found[int(port.group(1) or port.group(2))] = int(pid)
    return found


def spy(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` until it is sent SIGINT (raw output, a line per stack)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = f"{args.spy_out}.{pid}.txt"
    argv = [exe, "record", "-p", str(pid), "-f", "raw", "-t", "-o", out, *args.spy.split()]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def redis_cli(url: str, *command: str) -> str:
    """A command to the store's redis-server, its reply as text."""
    m = re.match(r"redis://([^:/]+):(\d+)", url)
    assert m is not None
    argv = ["redis-cli", "-h", m[1], "-p", m[2], *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout


def snapshot(pids: list[int], tids: dict[int, dict[int, str]]) -> dict[str, list[float]]:
    """role -> [cpu s, voluntary, involuntary], summed."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for pid in pids:
        for tid, name in tids[pid].items():
            got = thread_stats(pid, tid)
            if got is not None:
                row = out[role(name)]
                for i, v in enumerate(got):
                    row[i] += v
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="redis")
    p.add_argument("--jobs", type=int, default=8000, help="N (the drain runs 2N)")
    p.add_argument("--concurrency", "-c", type=int, default=8)
    p.add_argument("--processes", type=int, default=None)
    p.add_argument("--work-ms", type=float, default=0.0)
    p.add_argument("--call", choices=CALLS, default="")
    p.add_argument("--cpu-ms", type=float, default=0.0)
    p.add_argument("--worker-wrapper", default="")
    p.add_argument(
        "--spy",
        default="",
        metavar="OPTIONS",
        help="also py-spy record each worker process during the measured part, with these"
        " options (e.g. '--gil --idle'); raw files, one per process, named by --spy-out",
    )
    p.add_argument("--spy-out", default="/tmp/worker_cpu", help="prefix of the py-spy files")
    p.add_argument(
        "--perf",
        default="",
        metavar="FILE",
        help="also `perf record -g` the worker processes during the measured part, into FILE",
    )
    args = p.parse_args()
    args.processes = args.processes or default_processes()
    # what throughput.start_worker and workload read
    args.url, args.use_async, args.prefetch, args.pin = None, False, None, False
    with call_target(args.call) as call_url:
        os.environ["BENCH_CALL_URL"] = call_url
        os.environ["BENCH_CALL_POOL"] = str(args.concurrency)
        with store(args.backend, shared_redis=False) as url:
            run(args, url, call_url)


def run(args: argparse.Namespace, url: str, call_url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app

    job, job_args, what = workload(args)
    app.migrate()
    total = 2 * args.jobs
    for i in range(0, total, 1000):
        job.enqueue_many([(job_args, {}) for _ in range(min(1000, total - i))])
    servers = redis_servers()
    store_port = re.search(r":(\d+)/", url) if args.backend == "redis" else None
    call_port = re.search(r":(\d+)/", call_url) if args.call == "redis" else None
    others = {
        label: servers.get(int(m.group(1)))
        for label, m in (("store redis-server", store_port), ("call redis-server", call_port))
        if m
    }
    log_path = Path(tempfile.mkstemp(prefix="jobyard-bench-worker-", suffix=".log")[1])
    log(
        f"{args.backend}: drain {total} {what}, {args.processes} process(es), -c {args.concurrency}"
    )
    worker = start_worker(args, url, log_path)

    def done() -> int:
        c = counts(app)
        return c.get("completed", 0) + c.get("failed", 0)

    deadline = time.monotonic() + 300

    def waiting() -> None:
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited: see {log_path}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the drain did not end in 300 s: see {log_path}")
        time.sleep(0.02)

    try:
        while done() < total // 10:
            waiting()
        pids = worker_pids(worker.pid)
        tids = {pid: names(pid) for pid in pids}
        n0, t0 = done(), time.monotonic()
        before = snapshot(pids, tids)
        p0 = {pid: proc_cpu(pid) for pid in pids}
        o0 = {k: proc_cpu(v) for k, v in others.items() if v}
        load0 = os.getloadavg()[0]
        if store_port:
            redis_cli(url, "CONFIG", "RESETSTAT")
        spies = [spy(pid, args) for pid in pids] if args.spy else []
        if args.perf:
            pid_list = ",".join(map(str, pids))
            argv = ["perf", "record", *os.environ.get("PERF_ARGS", "-F 1999 -g").split()]
            argv += ["-p", pid_list, "-o", args.perf]
            spies.append(
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        while done() < total * 9 // 10:
            waiting()
        n1, t1 = done(), time.monotonic()
        after = snapshot(pids, tids)
        p1 = {pid: proc_cpu(pid) for pid in pids}
        o1 = {k: proc_cpu(v) for k, v in others.items() if v}
        stats = redis_cli(url, "INFO", "commandstats") if store_port else ""
        for s in spies:
            s.send_signal(signal.SIGINT)
        for s in spies:
            s.wait(30)
    finally:
        stop_worker(worker)
        app.close()
    jobs = n1 - n0
    for line in log_path.read_text(errors="replace").splitlines():
        if "PROBE" in line:  # a diagnostic patch's lines, if the worker carries one
            print(line)
    print(
        f"# worker_cpu {args.backend}: {what}; {args.processes} x -c {args.concurrency};"
        f" {jobs} jobs in {t1 - t0:.2f}s = {jobs / (t1 - t0):,.0f}/s;"
        f" load {load0:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(f"{'thread':<24} {'cpu us/job':>10} {'wakeups/job':>12} {'preempted/job':>14}")
    for name in sorted(after, key=lambda k: -(after[k][0] - before.get(k, [0, 0, 0])[0])):
        b = before.get(name, [0.0, 0, 0])
        a = after[name]
        print(
            f"{name:<24} {1e6 * (a[0] - b[0]) / jobs:>10.1f} {(a[1] - b[1]) / jobs:>12.2f}"
            f" {(a[2] - b[2]) / jobs:>14.2f}"
        )
    worker_cpu = sum(p1[pid] - p0[pid] for pid in pids)
    print(f"{'worker processes':<24} {1e6 * worker_cpu / jobs:>10.1f}")
    for label, cpu in o1.items():
        print(f"{label:<24} {1e6 * (cpu - o0[label]) / jobs:>10.1f}")
    if stats:
        print(f"{'store command':<24} {'us/job':>10} {'calls/job':>12} {'us/call':>14}")
        rows = []
        for m in re.finditer(r"cmdstat_(\w+):calls=(\d+),usec=(\d+)", stats):
            rows.append((int(m[3]), m[1], int(m[2])))
        for usec, name, calls in sorted(rows, reverse=True)[:12]:
            print(f"{name:<24} {usec / jobs:>10.1f} {calls / jobs:>12.3f} {usec / calls:>14.1f}")


if __name__ == "__main__":
    main()
