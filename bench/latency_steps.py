"""Idle enqueue-to-start latency cut into its steps, with the worker in a process of its own (as
``throughput.py`` runs it), so the producer's enqueue and the worker never share a GIL.

    python bench/latency_steps.py --backend {sqlite,postgres,redis} [--samples 300]
        [--server-time] [--probe udp,result] [--url URL]

The worker process wraps its backend's store calls to note when each returned (``time.time()``);
this process enqueues the no-op ``stamp`` job one at a time with a random 10-50 ms pause, as
``throughput.py`` does, and cuts each sample into: the enqueue call itself, from its return to
the return of the claim that took the job (the push signal and the claim: negative when the
worker had the job before the enqueue call returned to its caller), and from there to the
handler's start. Prints the median, p95 and p99 of each step, and the other store calls the
worker made meanwhile (maintenance).

On Redis the step to the claim's return is also cut where the claim's raw reply was read (the
rest is the worker's parsing of it). ``--server-time``: the server's own time per command while
the samples ran; redis: from its slow log at threshold 0 (``EVALSHA`` by script name; a blocked
``BLPOP`` counts its work, not its wait; the log's own cost, about a microsecond a command,
lands on each script once per call it makes); postgres: from pg_stat_statements, which the
server must preload (``--url`` a private server's schema).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO, Stamps, log, percentile
from bench.throughput import counts, store

CALLS = (
    "jobs_claim",
    "jobs_ack",
    "leases_lapsed",
    "leases_reap",
    "jobs_expire",
    "workers_beat",
    "store_tidy",
)

# Run in the worker process: the bench app's worker with its store calls timed.
WORKER = """
import json, os, signal, sys, threading, time
from bench.apps import app
backend = app.backend
events = []
def timed(name):
    inner = getattr(backend, name)
    def call(params):
        t0 = time.time()
        out = inner(params)
        events.append((name, t0, time.time(), len(out) if isinstance(out, list) else 0))
        return out
    setattr(backend, name, call)
for name in json.loads(os.environ["CALLS"]):
    if hasattr(backend, name):
        timed(name)
core = getattr(backend, "core", None)
if core is not None:  # redis: when a claim's raw reply was read, before it is parsed
    sent_once = core.call_once
    def call_once(name, fn, **kw):
        out = sent_once(name, fn, **kw)
        if name.startswith("jobs_claim"):
            events.append(("claim reply", 0.0, time.time(), 0))
        return out
    core.call_once = call_once
listener = getattr(backend, "_listener", None)
if listener is not None:  # postgres: when a notification reached the worker, when a wait ended
    heard, waited = listener._notified, listener.wait
    def notified(payload, schema):
        events.append(("notified", 0.0, time.time(), 0))
        return heard(payload, schema)
    def wait(*a, **kw):
        out = waited(*a, **kw)
        events.append(("woke", 0.0, time.time(), 0))
        return out
    listener._notified, listener.wait = notified, wait
worker = app.worker(queues=["bench"], concurrency=8)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
worker.start()
print("ready", flush=True)
stop.wait()
worker.stop(grace=2)
with open(os.environ["EVENTS"], "w") as f:
    json.dump(events, f)
"""

STEPS = (
    "enqueue call",
    "enqueue returned -> claim returned",
    "claim returned -> handler started",
    "total: enqueue -> handler started",
)


class SlowLog:
    """Redis's own time per command over the samples: the slow log at threshold 0 (the store's
    server is a private one, ``throughput.store``), its settings put back afterwards."""

    def __init__(self, app: Any) -> None:
        backend = app.backend
        self.client = backend.client
        self.names = {s.sha: name for name, s in backend.scripts._scripts.items()}
        self.saved = self.client.config_get("slowlog-*")
        self.client.config_set("slowlog-max-len", 1_000_000)
        self.client.config_set("slowlog-log-slower-than", 0)
        self.client.slowlog_reset()

    def report(self) -> None:
        entries = self.client.slowlog_get(1_000_000)
        for key, value in self.saved.items():
            self.client.config_set(key, value)
        took: dict[str, list[float]] = {}
        for e in entries:
            words = [w.decode() if isinstance(w, bytes) else str(w) for w in e["command"].split()]
            name = words[0].upper() if words else "?"
            if name == "EVALSHA" and len(words) > 1:
                name = self.names.get(words[1], "EVALSHA ?")
            took.setdefault(name, []).append(e["duration"])
        print("# redis server time per call (slow log at threshold 0, us)")
        for name, us in sorted(took.items(), key=lambda kv: -len(kv[1])):
            print(
                f"server {name}: {len(us)} calls, median {statistics.median(us):.0f},"
                f" p95 {percentile(us, 95):.0f}, p99 {percentile(us, 99):.0f}"
            )


class StatStatements:
    """PostgreSQL's own time per statement over the samples, from pg_stat_statements (reset
    first; the server must preload it, as a private one can: see bench/README.md)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url.split("?")[0], autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def report(self) -> None:
        rows = self.conn.execute(
            "SELECT calls, mean_exec_time, mean_plan_time, stddev_exec_time,"
            " regexp_replace(left(query, 70), '\\s+', ' ', 'g')"
            " FROM pg_stat_statements WHERE calls >= 10 ORDER BY calls DESC LIMIT 12"
        ).fetchall()
        print("# postgres server time per statement (pg_stat_statements, ms: mean, sd)")
        for calls, mean, plan, sd, text in rows:
            print(f"server {calls} calls, exec {mean:.3f} (sd {sd:.3f}), plan {plan:.3f}: {text}")
        self.conn.close()


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, stamp

    app.migrate()
    counts(app)  # open the store before timing anything
    events_path = Path(tempfile.mkstemp(prefix="jobyard-steps-", suffix=".json")[1])
    stamps = Stamps()  # before the worker: it learns the probe's port
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "EVENTS": str(events_path),
        "CALLS": json.dumps(CALLS),
    }
    worker = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None
        worker.stdout.readline()
        time.sleep(1.0)  # the worker goes idle
        log(f"{args.backend}: {args.samples} idle samples")
        slowlog: SlowLog | StatStatements | None = None
        if args.server_time:
            slowlog = SlowLog(app) if args.backend == "redis" else StatStatements(url)
        sends = watch_sends(args.backend)
        samples: dict[str, list[tuple[float, float, float]]] = {p: [] for p in args.probe}
        for i in range(args.samples):
            probe = args.probe[i % len(args.probe)]  # several probes: interleaved
            time.sleep(random.uniform(0.01, 0.05))
            t0 = time.time()
            handle = stamp.enqueue(i)
            t1 = time.time()
            if probe == "udp":
                started = stamps.wait(i)
            else:  # the handle, polled: the store is read at once, beside the starting job
                started = float(handle.result(timeout=30, poll=0.005))
            if started is not None:
                samples[probe].append((t0, t1, started))
        if slowlog is not None:
            slowlog.report()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        stamps.close()
        app.close()
    events = json.loads(events_path.read_text())
    events_path.unlink()
    for probe, taken in samples.items():
        report(f"{args.backend} ({probe} probe)", taken, events, sends)


def watch_sends(backend: str) -> list[float]:
    """Redis: the instants this process sent a command (redis-py's send), to cut the enqueue
    call at its send: the Python before it, and the round trip with the scripts after it."""
    sends: list[float] = []
    if backend == "redis":
        from redis.connection import AbstractConnection

        send = AbstractConnection.send_packed_command

        def noted(self: Any, command: Any, check_health: bool = True) -> None:
            sends.append(time.time())
            send(self, command, check_health)

        AbstractConnection.send_packed_command = noted  # type: ignore[method-assign]
    return sends


def report(
    backend: str,
    samples: list[tuple[float, float, float]],
    events: list[tuple[str, float, float, int]],
    sends: list[float],
) -> None:
    claims = sorted((e for e in events if e[0] == "jobs_claim" and e[3] > 0), key=lambda e: e[2])
    replies = sorted(e[2] for e in events if e[0] == "claim reply")
    heard = sorted(e[2] for e in events if e[0] == "notified")
    woke = sorted(e[2] for e in events if e[0] == "woke")
    rows = []
    parsed = []
    notes: list[tuple[float, float, float]] = []  # enqueue returned -> notified -> woke -> claim
    for t0, t1, started in samples:
        claim = next((e for e in claims if t0 <= e[2] <= started), None)
        if claim is not None:
            rows.append((t1 - t0, claim[2] - t1, started - claim[2], started - t0))
            reply = [t for t in replies if t0 <= t <= claim[2]]
            if reply:
                parsed.append((claim[2] - reply[-1]) * 1000)
            note = next((t for t in heard if t0 <= t <= claim[2]), None)
            wake = next((t for t in woke if note is not None and note <= t <= claim[2]), None)
            if note is not None and wake is not None:
                notes.append(((note - t1) * 1e3, (wake - note) * 1e3, (claim[2] - wake) * 1e3))
    print(f"# jobyard {backend}: idle latency in steps, {len(rows)} samples (ms)")
    for i, label in enumerate(STEPS):
        col = [r[i] * 1000 for r in rows]
        print(
            f"{label}: median {statistics.median(col):.3f}, p95 {percentile(col, 95):.3f},"
            f" p99 {percentile(col, 99):.3f}"
        )
        if i == 0 and sends:
            before = [
                (sent - t0) * 1e3
                for t0, t1, _ in samples
                if (sent := next((t for t in sends if t0 <= t <= t1), None)) is not None
            ]
            print(
                f"  of which the producer's Python before its send: median"
                f" {statistics.median(before):.3f}, p95 {percentile(before, 95):.3f}"
            )
        if i == 1 and parsed:  # redis: the part of that step the worker's Python took
            print(
                f"  of which the claim's reply read -> claim returned: median"
                f" {statistics.median(parsed):.3f}, p95 {percentile(parsed, 95):.3f}"
            )
        if i == 1 and notes:  # postgres: the notification, the wake-up, the claim
            for j, part in enumerate(
                ("enqueue returned -> notified", "notified -> wait returned", "-> claim returned")
            ):
                col = [n[j] for n in notes]
                print(
                    f"  {part}: median {statistics.median(col):.3f},"
                    f" p95 {percentile(col, 95):.3f} ({len(col)} samples)"
                )
    for name in CALLS[1:]:
        took = [(e[2] - e[1]) * 1000 for e in events if e[0] == name]
        if took:
            print(f"{name}: {len(took)} calls, median {statistics.median(took):.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="redis")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--server-time",
        action="store_true",
        help="the server's time per command (redis) or statement (postgres, pg_stat_statements)",
    )
    parser.add_argument("--url", default="", help="use this store as is (e.g. a private server)")
    parser.add_argument(
        "--probe",
        default="udp",
        type=lambda text: text.split(","),
        help="how this process learns that a job started: udp (the handler sends a datagram,"
        " this process waits in recv, as the peers' runners do), result (JobHandle.result,"
        " polled); several, comma-separated: interleaved sample by sample",
    )
    args = parser.parse_args()
    if args.url:
        run(args, args.url)
        return
    with store(args.backend, False) as url:
        run(args, url)


if __name__ == "__main__":
    main()
