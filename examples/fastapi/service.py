"""A FastAPI service that hands slow work to jobyard.

- The jobyard App is opened in the lifespan (its store checked before the first request) and
  closed at shutdown.
- Handlers enqueue with ``await fn.enqueue_async(...)``: the store call runs on a thread, the
  event loop never waits on it.
- The dashboard is served at ``/jobs`` behind the service's own auth dependency
  (``require_admin``): a route hands every request under ``/jobs`` to the dashboard's ASGI app
  once the dependency has let it through.

Run it: ``uvicorn service:api`` and ``jobyard worker service:jobs`` (same $JOBYARD_URL).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

import jobyard
import jobyard.web

jobs = jobyard.App()  # $JOBYARD_URL


@jobs.job(queue="emails", max_attempts=5)
def send_welcome(email: str) -> dict[str, str]:
    """The slow part of a signup."""
    return {"sent_to": email}


# --- the service's own auth --------------------------------------------------------------------

security = HTTPBasic()
ADMIN_PASSWORD = os.environ.get("SERVICE_ADMIN_PASSWORD", "change-me")


def require_admin(credentials: Annotated[HTTPBasicCredentials, Depends(security)]) -> str:
    """The service's auth dependency: HTTP Basic, user ``admin``."""
    good_user = hmac.compare_digest(credentials.username.encode(), b"admin")
    good_password = hmac.compare_digest(credentials.password.encode(), ADMIN_PASSWORD.encode())
    if not (good_user and good_password):
        raise HTTPException(401, "who are you?", headers={"WWW-Authenticate": "Basic"})
    return credentials.username


# --- the App in the lifespan --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    jobs.check_store()  # fail at startup, naming the cause, if the store cannot be reached
    api.state.dashboard = jobyard.web.create_app(jobs)  # open: require_admin guards it
    yield
    jobs.close()


api = FastAPI(lifespan=lifespan)


@api.post("/signup", status_code=202)
async def signup(email: str) -> dict[str, str]:
    handle = await send_welcome.enqueue_async(email)
    return {"job": handle.id}


@api.get("/signup/{job_id}")
async def signup_status(job_id: str) -> dict[str, Any]:
    try:
        job = await asyncio.to_thread(jobs.get, job_id)  # a store read: off the loop
    except jobyard.JobNotFound:
        raise HTTPException(404, "no such job") from None
    return {"status": str(job.status), "result": job.result}


# --- the dashboard at /jobs, behind require_admin ----------------------------------------------


class Mounted(Response):
    """A response that hands the request to an ASGI app mounted at ``prefix``."""

    def __init__(self, app: Any, prefix: str, user: str) -> None:  # no body of its own
        self.app = app
        self.prefix = prefix
        self.user = user
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "") + self.prefix
        # "jobyard.user": who the dashboard's log lines and cancelled_by name.
        await self.app({**scope, "root_path": root, "jobyard.user": self.user}, receive, send)


@api.api_route("/jobs", methods=["GET", "POST"], include_in_schema=False)
@api.api_route("/jobs/{path:path}", methods=["GET", "POST"], include_in_schema=False)
async def dashboard(request: Request, user: Annotated[str, Depends(require_admin)]) -> Any:
    # The route takes no body, so the dashboard reads the request's body itself.
    return Mounted(request.app.state.dashboard, "/jobs", user)
