"""Idle enqueue-to-start latency cut into its steps, with the worker in a process of its own (as
``throughput.py`` runs it), so the producer's enqueue and the worker never share a GIL.

    python bench/latency_steps.py --backend {sqlite,postgres,redis} [--samples 300]

The worker process wraps its backend's store calls to note when each returned (``time.time()``);
this process enqueues the no-op ``stamp`` job one at a time with a random 10-50 ms pause, as
``throughput.py`` does, and cuts each sample into: the enqueue call itself, from its return to
the return of the claim that took the job (the push signal and the claim: negative when the
worker had the job before the enqueue call returned to its caller), and from there to the
handler's start. Prints the median, p95 and p99 of each step, and the other store calls the
worker made meanwhile (maintenance).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO, log, percentile
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


def run(args: argparse.Namespace, url: str) -> None:
    os.environ["JOBYARD_BENCH_URL"] = url
    from bench.apps import app, stamp

    app.migrate()
    counts(app)  # open the store before timing anything
    events_path = Path(tempfile.mkstemp(prefix="jobyard-steps-", suffix=".json")[1])
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
        samples = []
        for _ in range(args.samples):
            time.sleep(random.uniform(0.01, 0.05))
            t0 = time.time()
            handle = stamp.enqueue()
            t1 = time.time()
            started = float(handle.result(timeout=30, poll=0.005))
            samples.append((t0, t1, started))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        app.close()
    events = json.loads(events_path.read_text())
    events_path.unlink()
    report(args.backend, samples, events)


def report(
    backend: str,
    samples: list[tuple[float, float, float]],
    events: list[tuple[str, float, float, int]],
) -> None:
    claims = sorted((e for e in events if e[0] == "jobs_claim" and e[3] > 0), key=lambda e: e[2])
    rows = []
    for t0, t1, started in samples:
        claim = next((e for e in claims if t0 <= e[2] <= started), None)
        if claim is not None:
            rows.append((t1 - t0, claim[2] - t1, started - claim[2], started - t0))
    print(f"# jobyard {backend}: idle latency in steps, {len(rows)} samples (ms)")
    for i, label in enumerate(STEPS):
        col = [r[i] * 1000 for r in rows]
        print(
            f"{label}: median {statistics.median(col):.3f}, p95 {percentile(col, 95):.3f},"
            f" p99 {percentile(col, 99):.3f}"
        )
    for name in CALLS[1:]:
        took = [(e[2] - e[1]) * 1000 for e in events if e[0] == name]
        if took:
            print(f"{name}: {len(took)} calls, median {statistics.median(took):.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="redis")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    with store(args.backend, False) as url:
        run(args, url)


if __name__ == "__main__":
    main()
