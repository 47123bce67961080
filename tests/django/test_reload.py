"""``manage.py jobyard_worker --reload`` watches the project, not jobyard's own package (where
the worker's APP, ``jobyard.django.worker:app``, lives)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import wait_until
from tests.examples.procs import process

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"


def test_reload_restarts_the_worker_when_a_task_of_the_project_changes(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("*.db", "__pycache__"))
    env = {
        "SHOP_DATABASE": f"sqlite:///{tmp_path}/shop.db",
        "JOBYARD_URL": f"sqlite:///{tmp_path}/jobs.db",
    }
    args = ["manage.py", "jobyard_worker", "--reload", "--grace", "1"]
    with process(args, project, env, tmp_path / "worker.log") as log:
        wait_until(lambda: "started" in log.read_text(), timeout=30, what="the worker")
        assert f"watching {project} for changes" in log.read_text()

        (project / "orders" / "tasks.py").touch()

        wait_until(
            lambda: "reloading: tasks.py changed" in log.read_text(),
            timeout=30,
            what=f"the reload; {log.read_text()}",
        )
