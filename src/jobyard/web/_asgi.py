"""The dashboard as one ASGI application: routes and sign-in.

:func:`build` is what :func:`jobyard.web.create_app` returns. Pages are in :mod:`._pages`,
actions in :mod:`._actions`, what they share in :mod:`._site`, every read and move in
:mod:`._data`, the access rules in :mod:`._auth`. Handlers are plain functions: Starlette runs
them on its thread pool, where the App's synchronous store calls belong.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..app import App
from . import _actions, _pages
from ._auth import SESSION_COOKIE, Access, Guard, cookie_header, session_value
from ._site import Site, form_of, guarded, log, safe_path

# --- sign-in ------------------------------------------------------------------------------------


def login_page(site: Site, request: Request) -> Response:
    """The sign-in form (only where a token is required)."""
    nxt = safe_path(request.query_params.get("next"))
    if site.access.open:
        return RedirectResponse(request.scope.get("root_path", "") + nxt, status_code=303)
    return site.render(request, "login.html", "login", next=nxt, problem=None)


async def login(site: Site, request: Request) -> Response:
    """Check the token typed in; set the session cookie."""
    form = await form_of(request)
    token = form.get("token", "")
    nxt = safe_path(form.get("next", ""))
    role = site.access.role_of_token(token) if token else None
    if role is None:
        client = request.client.host if request.client else "unknown"
        log.warning("refused a sign-in with a wrong token from %s", client)
        return site.render(
            request, "login.html", "login", status=403, next=nxt, problem="That token is wrong."
        )
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + nxt, status_code=303)
    response.headers.append(
        "set-cookie",
        cookie_header(
            SESSION_COOKIE,
            session_value(token),
            root,
            secure=bool(request.scope.get("jobyard.secure")),
            max_age=None,
        ).decode(),
    )
    return response


async def logout(request: Request) -> Response:
    """Forget the session cookie."""
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=root or "/")
    return response


def build(
    app: App,
    *,
    token: str | None = None,
    read_token: str | None = None,
    read_only: bool = False,
    refresh: float = 3.0,
) -> Starlette:
    """The dashboard of ``app`` (see :func:`jobyard.web.create_app`)."""

    access = Access(token, read_token, read_only)
    site = Site(app, access, refresh)

    def get(path: str, handler: Callable[[Site, Request], Response], name: str) -> Route:
        return Route(path, guarded(site, handler), methods=["GET"], name=name)

    def post(path: str, handler: Callable[[Site, Request], Response], name: str) -> Route:
        async def endpoint(request: Request) -> Response:
            request.state.form = await form_of(request)

            result: Response = await run_in_threadpool(guarded(site, handler), request)
            return result

        return Route(path, endpoint, methods=["POST"], name=name)

    async def login_post(request: Request) -> Response:
        return await login(site, request)

    from . import metrics

    registry = metrics.registry_for(app)  # this process's counters and the store's gauges

    def metrics_page(site: Site, request: Request) -> Response:
        body, content_type = metrics.render(registry)
        return Response(body, headers={"content-type": content_type})

    routes = [
        get("/", _pages.overview, "overview"),
        get("/jobs", _pages.jobs, "jobs"),
        get("/jobs/{job_id:path}", _pages.job, "job"),
        get("/dead", _pages.dead, "dead"),
        get("/dead/confirm", _pages.dead_confirm, "dead_confirm"),
        get("/workers", _pages.workers, "workers"),
        get("/schedules", _pages.schedules, "schedules"),
        get("/enqueue", _pages.enqueue, "enqueue"),
        get("/metrics", metrics_page, "metrics"),
        get("/login", login_page, "login_page"),
        Route("/login", login_post, methods=["POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        post("/actions/retry", _actions.retry, "retry"),
        post("/actions/cancel", _actions.cancel, "cancel"),
        post("/actions/cancel-workflow", _actions.cancel_workflow, "cancel_workflow"),
        post("/actions/resume-workflow", _actions.resume_workflow, "resume_workflow"),
        post("/actions/queue", _actions.queue, "queue"),
        post("/actions/dead", _actions.dead, "dead_action"),
        post("/actions/schedule", _actions.schedule, "schedule"),
        post("/actions/enqueue", _actions.enqueue, "enqueue_action"),
        Mount("/static", StaticFiles(packages=[("jobyard.web", "static")]), name="static"),
    ]
    web = Starlette(routes=routes, middleware=[Middleware(Guard, access=access)])
    web.state.jobyard_site = site  # for benchmarks and tests that look inside
    return web
