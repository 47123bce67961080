"""Who may see and act on the dashboard: tokens, read-only, CSRF, the headers every page
carries, and the library never importing the web stack."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import jobyard
import jobyard.testing
from jobyard.web._auth import CSP

from ..conftest import ROOT, wait_until
from .conftest import csrf_of
from .support import free_port

TOKEN = "admin-token-0123456789"
READ = "read-token-0123456789"


def failed_job(app: jobyard.App, tag: str = "a") -> str:
    """A job in the dead letter."""
    h = app.registry["flaky"].enqueue(tag)
    jobyard.testing.drain(app)
    assert app.get(h.id).status == "failed"
    return h.id


def post_forms(html: str) -> list[str]:
    """The actions of a page (its POST forms), but signing out."""
    actions = re.findall(r'<form method="post" action="([^"]+)"', html)
    return [a for a in actions if not a.endswith("/logout")]


def test_import_jobyard_imports_no_web_library() -> None:
    code = (
        "import sys, jobyard, jobyard.cli, jobyard.testing\n"
        "jobyard.App('memory://')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'jinja2', 'uvicorn', 'markupsafe') or m.startswith('jobyard.web')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_every_response_carries_the_strict_headers(board: jobyard.App, client_for: Any) -> None:
    client = client_for(board)
    for path in ("/", "/jobs", "/static/app.js", "/jobs/nope", "/actions/retry"):
        r = client.get(path)
        assert r.headers["content-security-policy"] == CSP, path
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_without_a_token_a_request_must_sign_in(board: jobyard.App, client_for: Any) -> None:
    job_id = failed_job(board)
    client = client_for(board, token=TOKEN)
    r = client.get("/jobs?status=failed")
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=%2Fjobs%3Fstatus%3Dfailed"
    assert client.get("/?fragment=live").status_code == 401
    assert client.get("/login").status_code == 200
    csrf = csrf_of(client, "/login")
    r = client.post("/actions/retry", data={"csrf": csrf, "id": job_id})
    assert r.status_code == 401
    assert board.get(job_id).status == "failed"
    assert client.get("/", headers={"Authorization": "Bearer wrong-token-000"}).status_code == 303
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/static/app.css").status_code == 200  # assets are public code


def test_the_sign_in_form_and_a_token_link_set_a_session(
    board: jobyard.App, client_for: Any
) -> None:
    client = client_for(board, token=TOKEN)
    csrf = csrf_of(client, "/login")
    r = client.post("/login", data={"csrf": csrf, "token": "wrong-token-000", "next": "/jobs"})
    assert r.status_code == 403 and "That token is wrong" in r.text
    r = client.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "//evil.example/x"})
    assert r.status_code == 303 and r.headers["location"] == "/"  # never another site
    assert TOKEN not in r.headers["set-cookie"]  # the cookie holds a digest, not the token
    assert client.get("/jobs").status_code == 200
    link = client_for(board, token=TOKEN)
    r = link.get(f"/jobs?status=failed&token={TOKEN}")
    assert r.status_code == 303 and r.headers["location"] == "/jobs?status=failed"
    assert link.get("/jobs?status=failed").status_code == 200


def test_read_only_hides_every_action_and_refuses_them(board: jobyard.App, client_for: Any) -> None:
    job_id = failed_job(board)
    board.sync_schedules()
    client = client_for(board, read_only=True)
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/workers", "/schedules", "/enqueue"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert post_forms(r.text) == [], path
    assert "read-only" in client.get("/").text
    csrf = csrf_of(client)
    for action, data in (
        ("/actions/retry", {"id": job_id}),
        ("/actions/queue", {"queue": "flaky", "op": "pause"}),
        ("/actions/dead", {"op": "purge"}),
        ("/actions/enqueue", {"job": "tick", "args": '["x"]'}),
        ("/actions/resume-workflow", {"workflow": "any"}),
    ):
        r = client.post(action, data={"csrf": csrf, **data})
        assert r.status_code == 403, action
        assert "read-only" in r.text
    assert board.get(job_id).status == "failed"
    assert not any(q.paused for q in board.queues())
    assert board.jobs(name="tick") == []


def test_a_read_token_beside_the_admin_token_only_looks(
    board: jobyard.App, client_for: Any
) -> None:
    job_id = failed_job(board)
    reader = client_for(board, token=TOKEN, read_token=READ)
    reader.headers["Authorization"] = f"Bearer {READ}"
    page = reader.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and post_forms(page.text) == []
    csrf = csrf_of(reader)
    assert reader.post("/actions/retry", data={"csrf": csrf, "id": job_id}).status_code == 403
    assert board.get(job_id).status == "failed"
    admin = client_for(board, token=TOKEN, read_token=READ)
    admin.headers["Authorization"] = f"Bearer {TOKEN}"
    assert "/actions/retry" in post_forms(admin.get(f"/jobs/{job_id}").text)
    csrf = csrf_of(admin)
    assert admin.post("/actions/retry", data={"csrf": csrf, "id": job_id}).status_code == 303
    assert board.get(job_id).status == "pending"


def test_every_action_needs_the_csrf_token_and_this_origin(
    board: jobyard.App, client_for: Any
) -> None:
    job_id = failed_job(board)
    client = client_for(board)
    csrf = csrf_of(client)
    refused = [
        {"id": job_id},  # no token
        {"id": job_id, "csrf": "x" * 43},  # another browser's
    ]
    for data in refused:
        r = client.post("/actions/retry", data=data)
        assert r.status_code == 403 and "CSRF" in r.text
    r = client.post(
        "/actions/retry",
        data={"id": job_id, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
    )
    assert r.status_code == 403 and "cross-site" in r.text
    r = client.post("/actions/retry", json={"id": job_id, "csrf": csrf})
    assert r.status_code == 403
    assert board.get(job_id).status == "failed"
    r = client.post(
        "/actions/retry", data={"id": job_id, "csrf": csrf}, headers={"Origin": "http://testserver"}
    )
    assert r.status_code == 303
    assert board.get(job_id).status == "pending"
    assert client.get("/jobs").status_code == 200


def test_every_action_is_logged_with_who_and_how_many(
    board: jobyard.App, client_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [failed_job(board, "a"), failed_job(board, "b")]
    client = client_for(board, token=TOKEN)
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    csrf = csrf_of(client)
    with caplog.at_level(logging.INFO, logger="jobyard.web"):
        assert client.post("/actions/retry", data={"csrf": csrf, "id": ids[0]}).status_code == 303
        jobyard.testing.drain(board)
        r = client.post(
            "/actions/dead",
            data={"csrf": csrf, "op": "retry", "queue": "flaky", "expected": "2"},
        )
        assert r.status_code == 303
    lines = [r.getMessage() for r in caplog.records if r.name == "jobyard.web"]
    assert f"admin token (bearer) from testclient: retry job {ids[0]} (1 job(s))" in lines
    assert any("retry dead letter matching queue='flaky' (2 job(s))" in line for line in lines)


def test_the_command_refuses_another_address_without_a_token(tmp_path: Path) -> None:
    env = {**os.environ, "JOBYARD_URL": f"sqlite:///{tmp_path}/d.db"}
    env.pop("JOBYARD_DASHBOARD_TOKEN", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobyard",
            "dashboard",
            "tests.web.board_app:app",
            "--host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "without a token" in out.stderr and "JOBYARD_DASHBOARD_TOKEN" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_command_serves_with_a_token_and_only_its_own_name_without(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "JOBYARD_URL": f"sqlite:///{tmp_path}/d.db"}
    procs = []
    try:
        open_port, token_port = free_port(), free_port()
        for port, extra in ((open_port, {}), (token_port, {"JOBYARD_DASHBOARD_TOKEN": TOKEN})):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "jobyard",
                        "dashboard",
                        "tests.web.board_app:app",
                        "--port",
                        str(port),
                    ],
                    cwd=ROOT,
                    env={**env, **extra},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )

        def answers(port: int, **kw: Any) -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=2, **kw)
            except httpx.HTTPError:
                return None

        assert wait_until(lambda: answers(open_port), 30).status_code == 200
        rebound = answers(open_port, headers={"Host": "evil.example"})
        assert rebound is not None and rebound.status_code == 421  # DNS rebinding
        assert wait_until(lambda: answers(token_port), 30).status_code == 303
        authorized = answers(token_port, headers={"Authorization": f"Bearer {TOKEN}"})
        assert authorized is not None and authorized.status_code == 200
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
