"""The worker's own metrics port and JSON logs, with real worker processes on the shared
stores: ``jobyard worker --processes 2 --metrics-port P --log-format json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobyard
from tests.conftest import ROOT, wait_until
from tests.web.support import free_port

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.processes


@pytest.fixture
def app(shared_store: tuple[str, str]) -> Iterator[jobyard.App]:
    app = jobyard.App(shared_store[1])
    yield app
    app.close()


def counters(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(port: int, metric: str, /, **labels: str) -> float:
    try:
        return counters(port).get((metric, tuple(sorted(labels.items()))), 0.0)
    except OSError:
        return -1.0  # not serving yet


def test_processes_sum_their_metrics_and_log_json(
    app: jobyard.App, shared_store: tuple[str, str], tmp_path: Path
) -> None:
    # given a worker of two processes (two slots each, no jobs claimed ahead of a free slot, so
    # that both get some), serving its metrics
    port = free_port()
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as out:
        argv = [sys.executable, "-m", "jobyard", "worker", "tests.apps.obs_app:app", "-q", "obs"]
        argv += ["-c", "2", "--prefetch", "0", "--processes", "2", "--metrics-port", str(port)]
        argv += ["--metrics-host", "127.0.0.1", "--log-format", "json", "--log-level", "DEBUG"]
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, "JOBYARD_URL": shared_store[1], "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            # when, both processes up, eight jobs that take a moment and two that always fail
            # are enqueued
            wait_until(lambda: len(app.workers()) == 2, timeout=30, what="both processes")
            ok = app.by_name("ok", queue="obs")
            handles = [ok.enqueue(n) for n in range(8)]
            boom = app.by_name("boom", queue="obs", max_attempts=2)
            dead = [boom.enqueue(n) for n in range(2)]
            pids = {h.result(timeout=60) for h in handles}
            for h in dead:
                with pytest.raises(jobyard.JobFailed):
                    h.result(timeout=60)

            # then the counters are the sum over both processes (each ran some of the jobs)
            assert len(pids) == 2
            done = {"queue": "obs", "name": "ok"}
            wait_until(
                lambda: sample(port, "jobyard_jobs_completed_total", **done) == 8,
                timeout=20,
                what="eight completions summed",
            )
            got = counters(port)

            def at(metric: str, /, **labels: str) -> float:
                return got.get((metric, tuple(sorted(labels.items()))), 0.0)

            failed = {"queue": "obs", "name": "boom"}
            wait_until(lambda: sample(port, "jobyard_jobs_failed_total", **failed) == 2)
            got = counters(port)
            assert at("jobyard_jobs_retried_total", **failed) == 2
            assert at("jobyard_job_run_seconds_count", **done) == 8
            assert at("jobyard_jobs", queue="obs", status="completed") == 8
            assert at("jobyard_workers_live") == 2
        finally:
            proc.terminate()
            assert proc.wait(30) == 0

    # and every line the worker wrote is one JSON object, the job lines with the job's fields
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    jobs = [line for line in lines if line["logger"] == "jobyard.jobs"]
    completed = [j for j in jobs if j["outcome"] == "completed"]
    assert sorted(j["id"] for j in completed) == sorted(h.id for h in handles)
    one = completed[0]
    assert (one["name"], one["queue"], one["attempt"], one["max_attempts"]) == ("ok", "obs", 1, 4)
    assert one["duration"] > 0.1 and one["worker_id"] and one["workflow_id"] is None
    assert one["level"] == "DEBUG" and one["error"] is None
    last = [j for j in jobs if j["outcome"] == "dead"]
    assert sorted(j["id"] for j in last) == sorted(h.id for h in dead)
    # the error's last line, control characters escaped by JSON, not by the text filter
    assert last[0]["error"].startswith("ValueError: boom ") and last[0]["error"].endswith("\x1b[2J")


def test_a_taken_metrics_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "jobyard", "worker", "tests.apps.obs_app:app"]
        argv += ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
        out = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, "JOBYARD_URL": f"sqlite:///{tmp_path}/jobs.db"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2
    assert f"cannot serve metrics on 127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr
