"""What the event stream costs a worker's hot path: CPU seconds per no-op job, drained by an
in-process worker, side by side with another checkout of jobyard.

    python bench/events_cost.py --backend {sqlite,redis} [--jobs N] [--rounds R]
        [--other /path/to/other/src] [--subscribed]

Each round runs two fresh processes one after the other (which goes first alternates), this
checkout's ``src`` and ``--other``'s (e.g. ``git archive`` of main's ``src`` in a temp folder),
each: enqueue N no-op jobs with ``enqueue_many``, then time a worker (``-c 8``) draining
them: the wall time and the process's CPU time (every thread, ``getrusage``), which a busy
shared machine inflates far less than the wall time. ``--subscribed`` adds ``app.metrics()``
(the tally subscribed: what ``--metrics-port`` costs). Prints per round and the medians, then
the ratio new/other. Redis: the shared server at 127.0.0.1:6379 under a random key prefix,
deleted after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"

CHILD = r"""
import json, os, resource, sys, time, uuid
import jobyard
url = sys.argv[1]; n = int(sys.argv[2]); subscribed = sys.argv[3] == "1"
app = jobyard.App(url)
@app.job(queue="bench")
def noop() -> None:
    return None
if subscribed:
    app.metrics()
for i in range(0, n, 1000):
    noop.enqueue_many([((), {})] * min(1000, n - i))
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
w = app.worker(queues=["bench"], concurrency=8)
c0, t0 = cpu(), time.monotonic()
w.start()
while True:
    (st,) = app.stats(["bench"])
    if st.counts.get("completed", 0) >= n:
        break
    time.sleep(0.005)
c1, t1 = cpu(), time.monotonic()
w.stop()
if url.startswith("redis"):
    b = app.backend
    for k in b.client.scan_iter(match=b.keys.prefix + "*", count=1000):
        b.client.delete(k)
print(json.dumps({"wall": t1 - t0, "cpu": c1 - c0}))
"""


def run(src: str, url: str, n: int, subscribed: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(n), "1" if subscribed else "0"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--other", required=True, help="the other checkout's src folder")
    parser.add_argument("--subscribed", action="store_true")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"new": [], "other": []}
    for r in range(args.rounds):
        order = [("new", str(HERE)), ("other", args.other)]
        for label, src in order if r % 2 == 0 else order[::-1]:  # neither always goes first
            with tempfile.TemporaryDirectory() as tmp:
                if args.backend == "sqlite":
                    url = f"sqlite:///{tmp}/bench.db"
                else:
                    url = f"redis://127.0.0.1:6379/0?prefix=jyb-{os.urandom(4).hex()}"
                got = run(src, url, args.jobs, args.subscribed and label == "new")
            rows[label].append(got)
            per = got["cpu"] / args.jobs * 1e6
            print(
                f"round {r + 1} {label}: {args.jobs / got['wall']:.0f} jobs/s, {per:.1f} us CPU/job"
            )
    med = {
        k: (
            statistics.median(args.jobs / x["wall"] for x in v),
            statistics.median(x["cpu"] / args.jobs * 1e6 for x in v),
        )
        for k, v in rows.items()
    }
    for k, (rate, cpu) in med.items():
        print(f"median {k}: {rate:.0f} jobs/s, {cpu:.1f} us CPU/job")
    print(
        f"ratio new/other: throughput {med['new'][0] / med['other'][0]:.3f}, "
        f"CPU per job {med['new'][1] / med['other'][1]:.3f}"
    )


if __name__ == "__main__":
    main()
