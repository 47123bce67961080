"""The FastAPI example (examples/fastapi) as it runs: uvicorn serving it, a real jobyard worker,
one SQLite store. A signup's job is enqueued from an async handler and run by the worker; the
dashboard at /jobs answers only behind the service's own auth dependency."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until
from tests.examples.procs import free_port, process, wait_http

pytest.importorskip("fastapi")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi"


def test_signup_job_runs_and_the_dashboard_needs_the_services_auth(tmp_path: Path) -> None:
    env = {"JOBYARD_URL": f"sqlite:///{tmp_path}/jobs.db", "SERVICE_ADMIN_PASSWORD": "s3cret-pw"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = ["-m", "uvicorn", "service:api", "--port", str(port), "--log-level", "warning"]
    worker = ["-m", "jobyard", "worker", "service:jobs", "--poll-interval", "0.2", "--grace", "1"]
    with (
        process(server, EXAMPLE, env, tmp_path / "server.log") as server_log,
        process(worker, EXAMPLE, env, tmp_path / "worker.log") as worker_log,
    ):
        wait_http(f"{base}/docs", server_log)

        job = httpx.post(f"{base}/signup", params={"email": "a@example.com"}).json()["job"]

        def done() -> dict[str, object] | None:
            body: dict[str, object] = httpx.get(f"{base}/signup/{job}").json()
            return body if body["status"] == "completed" else None

        body = wait_until(done, timeout=20, what=f"the job; {worker_log.read_text()}")
        assert body["result"] == {"sent_to": "a@example.com"}

        assert httpx.get(f"{base}/jobs/jobs").status_code == 401
        assert httpx.get(f"{base}/jobs/jobs", auth=("admin", "wrong")).status_code == 401
        with httpx.Client(base_url=base, auth=("admin", "s3cret-pw")) as admin:
            page = admin.get("/jobs/jobs")
            assert page.status_code == 200 and "send_welcome" in page.text
            assert f'href="/jobs/jobs/{job}"' in page.text  # links under the mount
            csrf = admin.cookies["jobyard_csrf"]
            form = {"id": job, "csrf": csrf}
            retried = admin.post("/jobs/actions/retry", data=form)
            # Through the auth and the CSRF check to the action, which refuses a completed job.
            assert retried.status_code == 400 and "completed" in retried.text
        assert httpx.post(f"{base}/jobs/actions/retry", data=form).status_code == 401
