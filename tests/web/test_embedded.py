"""The dashboard served behind an application's own login: that application names the user
in the ASGI scope ("jobyard.user") and the dashboard's actions record it, but only where the
dashboard requires no token of its own (a token is the credential then)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

import jobyard
import jobyard.web

TOKEN = "admin-token-0123456789"


def _behind_login(dashboard: Any, user: str) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await dashboard({**scope, "jobyard.user": user}, receive, send)

    return app


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_cancel_names_the_applications_user_unless_a_token_is_required(
    token: str | None,
) -> None:
    app = jobyard.App("memory://")
    job_id = app.enqueue("anything", 1).id
    dashboard = jobyard.web.create_app(app, token=token)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with TestClient(_behind_login(dashboard, "alice"), headers=headers) as client:
        client.get(f"/jobs/{job_id}")
        csrf = client.cookies["jobyard_csrf"]
        done = client.post(
            "/actions/cancel", data={"id": job_id, "csrf": csrf}, follow_redirects=False
        )
        assert done.status_code == 303

    by = app.get(job_id).cancelled_by or ""
    if token is None:
        assert "alice (signed in to the application)" in by
    else:
        assert "alice" not in by and "admin token" in by
