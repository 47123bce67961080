"""Limited queues under kills, on every shared store: with 4 worker processes, one SIGKILLed
at random every ~0.9 s and replaced (8 times), every job completes, and the limits hold.

The bound tested for the rate (50/s, a burst of 5: ``base.Rate``): the store's claims of the
queue in any window of 1 s number at most 50 + 5 = 55, i.e. the rate plus one burst, which
is smaller than one claim batch, whatever the kills. The claims counted are the instants the
store recorded (``started_at``), read by each handler as it starts; a claim whose worker died
before its handler ran is not seen, which can only hide starts, never add one. Key concurrency
1: the executions of one key (from handler start to end, host clock) never overlap. An
execution cut by a SIGKILL has no end; the store holds its key slot until the reaper rescues
the job (a lease of 1 s), so the next execution of that key starts after the kill.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobyard
from tests.chaos import limits_app
from tests.conftest import ROOT, make_store_url

pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

JOBS = int(os.environ.get("JOBYARD_LIMITS_CHAOS_JOBS", "200"))  # of the rate-limited queue
KEYED_JOBS = 80
KEYS = 4
BURST = 5
PER_SECOND = 50
MAX_KILLS = 8  # each stalls the keys its worker held for a lease and a reap: enough is enough


@pytest.fixture(params=["sqlite", "postgres", "redis", "redis_cluster"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return make_store_url(request.param, tmp_path)


def spawn(url: str, sink: Path, logs: Path) -> subprocess.Popen[bytes]:
    log = (logs / f"worker-{time.monotonic_ns()}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "jobyard", "worker", "tests.chaos.limits_app:app", "-c", "4"],
        cwd=ROOT,
        env={**os.environ, "JOBYARD_URL": url, "JOBYARD_SINK": str(sink), "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_a_limited_queue_holds_its_limits_under_kills(url: str, tmp_path: Path) -> None:
    sink, logs = tmp_path / "sink", tmp_path / "logs"
    sink.mkdir()
    logs.mkdir()
    app = jobyard.App(url)
    if url.startswith("postgresql"):
        app.migrate()
    app.configure_queue(limits_app.QUEUE, rate_limit=limits_app.RATE)
    paced = app.by_name("paced", queue=limits_app.QUEUE)
    keyed = app.by_name("one_at_a_time", queue=limits_app.KEYED)
    handles = paced.enqueue_many([((n,), {}) for n in range(JOBS)])
    handles += [keyed.options(key=f"k{n % KEYS}").enqueue(n) for n in range(KEYED_JOBS)]
    total = JOBS + KEYED_JOBS
    queues = [limits_app.QUEUE, limits_app.KEYED]
    workers = [spawn(url, sink, logs) for _ in range(4)]
    kills = 0
    deadline = time.monotonic() + 150
    try:
        while True:
            done = sum(s.counts["completed"] for s in app.stats(queues))
            if done == total:
                break
            if time.monotonic() > deadline:
                tail = "".join(p.read_text()[-1500:] for p in sorted(logs.iterdir())[-2:])
                pytest.fail(f"{done} of {total} completed\n{tail}")
            time.sleep(random.uniform(0.5, 1.2))
            if kills < MAX_KILLS and done < total * 0.8:
                victim = workers.pop(random.randrange(len(workers)))
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)
                kills += 1
                workers.append(spawn(url, sink, logs))
    finally:
        for w in workers:
            w.kill()
            w.wait(10)
        app.close()
    took = time.monotonic() - (deadline - 150)
    print(f"limits chaos: {total} jobs, {kills} kills, {took:.1f} s")
    assert kills >= 4
    assert {app.get(h.id).status for h in handles} == {jobyard.Status.COMPLETED}

    starts: dict[str, tuple[str, str, float, float]] = {}  # tag -> (queue, key, claimed, began)
    ends: dict[str, float] = {}
    for path in sink.iterdir():
        kind, _, tag = path.name.partition(".")
        lines = path.read_text().splitlines()
        if kind == "start":
            starts[tag] = (lines[0], lines[1], float(lines[2]), float(lines[3]))
        elif kind == "end":
            ends[tag] = float(lines[0])
    assert len({tag.split(".")[0] for tag in ends}) == total  # every job ran to its end

    # The rate: claims (store instants) of the limited queue in any window of 1 s.
    claimed = sorted(at for q, _, at, _ in starts.values() if q == limits_app.QUEUE)
    worst, j = 0, 0
    for i, t in enumerate(claimed):
        while claimed[j] <= t - 1.0 + 1e-6:
            j += 1
        worst = max(worst, i - j + 1)
    assert worst <= PER_SECOND + BURST, f"{worst} claims within one second"
    print(f"limits chaos: at most {worst} claims in 1 s")
    assert worst >= PER_SECOND * 0.6  # it did run near the rate (the check is not vacuous)

    # key_concurrency=1: the finished executions of one key never overlap.
    by_key: dict[str, list[tuple[float, float]]] = {}
    for tag, (queue, key, _, began) in starts.items():
        if tag in ends and queue == limits_app.KEYED:
            by_key.setdefault(key, []).append((began, ends[tag]))
    assert len(by_key) == KEYS
    for key, spans in by_key.items():
        spans.sort()
        for (_, end), (begin, _) in itertools.pairwise(spans):
            assert begin >= end, f"two jobs of {key} ran at once"
