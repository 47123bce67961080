"""What the dashboard costs: each page's latency on a full store, and the workers' drain with
five open tabs polling it.

    python bench/dashboard.py --backend {sqlite,postgres,redis} [--jobs 1000000] [--failed 5000]

1. Fill a fresh store (made as ``bench/throughput.py`` makes it) with ``--jobs`` completed
   no-op jobs and ``--failed`` jobs in the dead letter (three error kinds), run by two worker
   processes, plus a workflow and a schedule.
2. Start the dashboard in its own process (the live cache off, so every request reads the
   store) and time every page ``--samples`` times, one request at a time: p50 and p95.
3. The no-op drain: ``--drain`` jobs enqueued while their queue is paused, then drained by one
   worker process (``-c 8``), timed from the jobs' own records; alternately with no dashboard
   tab and with five tabs polling the overview's live part every 3 s (as a browser does, the
   dashboard's live cache on as it ships), ``--rounds`` times each; the medians side by side.

Prints a Markdown table of both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import jobyard
from bench._common import free_port, log, percentile, records_span, wait_port
from bench.throughput import store

app = jobyard.App(os.environ.get("JOBYARD_BENCH_URL", "memory://"))
ERRORS = (
    "ConnectionError: payment gateway timed out",
    "ValueError: card declined",
    "KeyError: 'billing_address'",
)


@app.job(queue="bench")
def noop() -> None:
    """Nothing: what is measured is the queue."""


@app.job(queue="billing", max_attempts=1)
def charge(order_id: int, customer_id: int) -> None:
    """Always fails, with one of three errors."""
    raise RuntimeError(ERRORS[order_id % 3])


@app.job(queue="bench")
def join(results: list[Any]) -> int:
    """A workflow's last step."""
    return len(results)


app.schedule(every=3600, job=noop, name="hourly-noop")
GROUP = "/dead?queue=billing&name=charge&error=RuntimeError%3A+ValueError%3A+card+declined"


def worker(url: str, queues: list[str], processes: int, concurrency: int, log_path: Path) -> Any:
    """Worker processes of this module's app."""
    argv = [sys.executable, "-m", "jobyard", "worker", "bench.dashboard:app", "-c",
            str(concurrency), "--processes", str(processes), "--log-level", "WARNING"]  # fmt: skip
    for q in queues:
        argv += ["-q", q]
    env = {**os.environ, "JOBYARD_BENCH_URL": url, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = log_path.open("ab")
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def pending(queue: str) -> int:
    for s in app.stats([queue]):
        return s.counts.get("pending", 0) + s.counts.get("running", 0)
    return 0


def fill(url: str, jobs: int, failed: int, log_path: Path) -> None:
    """``jobs`` completed and ``failed`` failed jobs, run by two worker processes."""
    t0 = time.monotonic()
    app.pause_queue("bench")
    app.pause_queue("billing")
    batch = [((), {})] * 5000
    done = 0
    while done < jobs:
        size = min(5000, jobs - done)
        noop.enqueue_many(batch[:size])
        done += size
        if done % 100_000 == 0:
            log(f"enqueued {done:,}")
    charge.enqueue_many([((i, 1000 + i % 97), {}) for i in range(failed)])
    jobyard.group(*[noop.s() for _ in range(5)]).then(join.s()).enqueue()
    app.pause_queue("bench", paused=False)
    app.pause_queue("billing", paused=False)
    proc = worker(url, ["bench", "billing"], 2, 16, log_path)
    try:
        while pending("bench") + pending("billing"):
            time.sleep(1.0)
    finally:
        stop(proc)
    log(f"filled {jobs:,} + {failed:,} jobs in {time.monotonic() - t0:.0f} s")


def serve(url: str, port: int, cache: bool, log_path: Path) -> Any:
    """The dashboard in a process of its own."""
    argv = [sys.executable, __file__, "--serve", str(port)] + ([] if cache else ["--no-cache"])
    env = {**os.environ, "JOBYARD_BENCH_URL": url, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(argv, env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT)
    wait_port(port, 30)
    return proc


def _serve(port: int, cache: bool) -> None:
    import uvicorn

    import jobyard.web

    asgi = jobyard.web.create_app(app)
    if not cache:  # every request reads the store, as a tab's first load of a page does
        asgi.state.jobyard_site.cache.ttl = 0.0
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def time_pages(base: str, samples: int) -> list[tuple[str, float, float, int]]:
    """(page, p50 ms, p95 ms, bytes) for every page."""
    import httpx

    failed = app.jobs(status="failed", limit=1)[0].id
    flow = app.jobs(name="join", limit=1)[0].id
    pages = [
        ("overview", "/"),
        ("overview, last day", "/?range=day"),
        ("overview live part", "/?fragment=live"),
        ("jobs", "/jobs"),
        ("jobs, failed", "/jobs?status=failed"),
        ("jobs, a queue and status", "/jobs?queue=bench&status=completed"),
        ("jobs, an argument", "/jobs?arg=args.customer_id+%3D+1042"),
        ("jobs, page 2 (cursor)", None),
        ("a failed job", f"/jobs/{failed}"),
        ("a workflow's job", f"/jobs/{flow}"),
        ("dead letter", "/dead"),
        ("dead letter, a group", GROUP),
        ("workers", "/workers"),
        ("schedules", "/schedules"),
        ("enqueue", "/enqueue"),
    ]
    out = []
    with httpx.Client(base_url=base, timeout=30) as client:
        first = client.get("/jobs").text
        import re

        m = re.search(r'href="(\?cursor=[^"]+)" rel="next"', first)
        for label, path in pages:
            if path is None:
                path = "/jobs" + (m.group(1).replace("&amp;", "&") if m else "")
            client.get(path)  # warm
            times = []
            size = 0
            for _ in range(samples):
                t0 = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, (path, r.status_code)
                size = len(r.content)
            out.append((label, statistics.median(times), percentile(times, 95), size))
    return out


class Pollers:
    """``n`` tabs polling the overview's live part every ``every`` seconds."""

    def __init__(self, base: str, n: int, every: float = 3.0) -> None:
        self.base, self.n, self.every = base, n, every
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.requests = 0

    def run(self, offset: float) -> None:
        import httpx

        with httpx.Client(base_url=self.base, timeout=30) as client:
            self.stop.wait(offset)
            while not self.stop.is_set():
                client.get("/?fragment=live")
                self.requests += 1
                self.stop.wait(self.every)

    def __enter__(self) -> Pollers:
        for i in range(self.n):
            t = threading.Thread(target=self.run, args=(i * self.every / self.n,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(35)


def drain_rate(url: str, n: int, log_path: Path) -> float:
    """jobs/s of one worker process (-c 8) draining ``n`` no-op jobs."""
    app.pause_queue("drain")
    fn = noop.options(queue="drain")
    handles: list[Any] = []
    for start in range(0, n, 5000):
        got = fn.enqueue_many([((), {})] * min(5000, n - start))
        handles += [got[0], got[-1]] if start == 0 or start + 5000 >= n else []
    first, last = handles[:1], handles[-1:]
    proc = worker(url, ["drain"], 1, 8, log_path)
    try:
        time.sleep(1.0)  # started and idle: the drain starts with the resume
        app.pause_queue("drain", paused=False)
        last[0].result(timeout=600, poll=0.1)
        while pending("drain"):
            time.sleep(0.1)
    finally:
        stop(proc)
    return n / records_span(first, last)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--failed", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve, cache=not args.no_cache)
        return
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-dashboard-{os.getpid()}.log"
    with store(args.backend, shared_redis=False) as url:
        global app
        app.close()
        app.url = url
        os.environ["JOBYARD_BENCH_URL"] = url
        if args.backend == "postgres":
            app.migrate()
        fill(url, args.jobs, args.failed, log_path)
        port = free_port()
        dash = serve(url, port, cache=False, log_path=log_path)
        try:
            rows = time_pages(f"http://127.0.0.1:{port}", args.samples)
        finally:
            stop(dash)
        port = free_port()
        dash = serve(url, port, cache=True, log_path=log_path)
        try:
            base = f"http://127.0.0.1:{port}"
            alone, polled, polls = [], [], 0
            for _ in range(args.rounds):
                alone.append(drain_rate(url, args.drain, log_path))
                with Pollers(base, 5) as p:
                    polled.append(drain_rate(url, args.drain, log_path))
                polls += p.requests
        finally:
            stop(dash)
    print(f"\n{args.backend}: {args.jobs:,} completed + {args.failed:,} failed jobs stored\n")
    print("| page | p50 ms | p95 ms | KB |")
    print("|---|---:|---:|---:|")
    for label, p50, p95, size in rows:
        print(f"| {label} | {p50:.1f} | {p95:.1f} | {size / 1024:.0f} |")
    a, b = statistics.median(alone), statistics.median(polled)
    print(f"\nno-op drain, one worker process -c 8, {args.drain:,} jobs, median of {args.rounds}:")
    print("\n| dashboard tabs | jobs/s | runs |")
    print("|---|---:|---|")
    print(f"| none | {a:,.0f} | {', '.join(f'{x:,.0f}' for x in alone)} |")
    print(f"| 5 polling every 3 s | {b:,.0f} | {', '.join(f'{x:,.0f}' for x in polled)} |")
    print(f"\ncost of 5 tabs: {(1 - b / a) * 100:+.1f}% ({polls} polls)")


if __name__ == "__main__":
    main()
