"""``jobyard worker APP --reload`` finds APP where ``jobyard worker APP`` does: a package in the
working directory, run through the real ``jobyard`` console script (whose own directory, not
the working directory, is first on its ``sys.path``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import jobyard
from tests.conftest import wait_until

SHOP = """
import jobyard

app = jobyard.App()


@app.job
def hello(name: str) -> str:
    return f"hello {name}"
"""


def test_reload_watches_a_package_of_the_working_directory_and_runs_its_jobs(
    tmp_path: Path,
) -> None:
    pytest.importorskip("watchfiles")
    script = shutil.which("jobyard", path=str(Path(sys.executable).parent))
    assert script is not None, "the jobyard console script is not installed beside python"
    # given a package in the working directory, importable from there only
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "tasks.py").write_text(SHOP)
    url = f"sqlite:///{tmp_path}/jobs.db"
    env = {**os.environ, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"}
    for name in ("PYTHONPATH", "JOBYARD_DEBUG"):
        env.pop(name, None)
    log = tmp_path / "worker.log"
    # when a reloading worker of it starts from there
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [script, "worker", "shop.tasks:app", "--reload", "--grace", "1"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    app = jobyard.App(url)
    try:
        # then it watches the package and runs its jobs
        wait_until(
            lambda: "watching" in log.read_text() or proc.poll() is not None,
            timeout=30,
            what="the worker to start watching",
        )
        assert f"watching {tmp_path / 'shop'} for changes" in log.read_text(), log.read_text()
        assert app.enqueue("hello", "ada").result(timeout=30) == "hello ada"
    finally:
        app.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
