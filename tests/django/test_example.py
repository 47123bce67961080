"""The example shop (examples/django) as it runs: a real server (runserver) and a real worker
(manage.py jobyard_worker), on SQLite (enqueue on commit) and on PostgreSQL (the job written in
the order's own transaction). An order placed is receipted by the worker; an order whose
transaction fails leaves no job behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import jobyard
from tests.conftest import wait_until
from tests.examples.procs import free_port, process, wait_http

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"


def _stores(kind: str, tmp_path: Path) -> dict[str, str]:
    if kind == "sqlite":
        return {
            "SHOP_DATABASE": f"sqlite:///{tmp_path}/shop.db",
            "JOBYARD_URL": f"sqlite:///{tmp_path}/jobs.db",
        }
    support = pytest.importorskip("tests.postgres.support")
    url = support.fresh_url()  # a fresh schema with jobyard's tables
    return {
        "SHOP_DATABASE": support.with_params(support.BASE_URL, schema=support.schema_of(url)),
        "JOBYARD_URL": url,
        "SHOP_TRANSACTIONAL": "1",
    }


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_order_is_receipted_by_the_worker_and_a_failed_one_leaves_no_job(
    kind: str, tmp_path: Path
) -> None:
    env = {**_stores(kind, tmp_path), "DJANGO_SETTINGS_MODULE": "shop.settings"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_args = ["manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks"]
    if kind == "postgres":  # the ASGI way: the dashboard's async view on an event loop
        server_args = ["-m", "uvicorn", "shop.asgi:application", "--port", str(port)]
    worker_args = [
        "manage.py",
        "jobyard_worker",
        "-c",
        "2",
        "--poll-interval",
        "0.2",
        "--grace",
        "1",
    ]
    # The worker starts while the shop's tables are made: it needs them only for a job.
    with process(worker_args, EXAMPLE, env, tmp_path / "worker.log") as worker_log:
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "orders", "-v0"],  # what the test uses
            cwd=EXAMPLE,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert migrate.returncode == 0, migrate.stderr
        with process(server_args, EXAMPLE, env, tmp_path / "server.log") as server_log:
            _shop(base, server_log, worker_log)
    app = jobyard.App(env["JOBYARD_URL"])
    try:
        jobs = app.jobs()
    finally:
        app.close()
    assert [(j.name, j.queue, j.priority, j.status) for j in jobs] == [
        ("orders.tasks.send_receipt", "emails", 10, "completed")
    ]


def _shop(base: str, server_log: Path, worker_log: Path) -> None:
    wait_http(f"{base}/orders/0", server_log)

    failed = httpx.post(f"{base}/orders/", data={"item": "pen", "fail": "1"})
    placed = httpx.post(f"{base}/orders/", data={"item": "book", "quantity": "2"})

    assert failed.status_code == 500
    assert placed.status_code == 201, placed.text
    order = placed.json()

    def receipted() -> dict[str, object] | None:
        body: dict[str, object] = httpx.get(f"{base}/orders/{order['order']}").json()
        return body if body["receipt_sent"] and body["status"] == "SUCCESSFUL" else None

    body = wait_until(receipted, timeout=20, what=f"the receipt; {worker_log.read_text()}")
    assert body["task"] == order["task"]
    assert body["return_value"] == {"order": order["order"], "item": "book", "quantity": 2}

    # The dashboard is mounted at /jobs/, behind the admin login.
    gate = httpx.get(f"{base}/jobs/dead")
    assert (gate.status_code, gate.headers["location"]) == (302, "/admin/login/?next=/jobs/dead")


def test_the_worker_command_takes_jobyard_workers_flags(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SHOP_DATABASE": f"sqlite:///{tmp_path}/shop.db",
        "JOBYARD_URL": f"sqlite:///{tmp_path}/jobs.db",
    }
    run = subprocess.run(
        [sys.executable, "manage.py", "jobyard_worker", "--concurrency", "0"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2  # bad input: jobyard worker's own check, one line
    assert "--concurrency" in run.stderr and len(run.stderr.strip().splitlines()) == 1
