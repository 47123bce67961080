"""The dashboard inside a Django project, behind Django's admin login.

``path("jobs/", include(jobyard.django.dashboard_urls()))``: a view that lets signed-in staff
in and hands the request to the dashboard's ASGI app in-process (under WSGI or ASGI alike), with
the path below the mount as the dashboard's own. Staff see a read-only dashboard; superusers
may act (retry, cancel, pause...). Anyone else is sent to the admin's login page. The view is
exempt from Django's CSRF middleware: the dashboard checks its own (a per-browser cookie sent
back with every form, and the ``Origin`` header).
"""

from __future__ import annotations

import asyncio
from http.cookies import SimpleCookie
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path, reverse
from django.views.decorators.csrf import csrf_exempt

from ..web import create_app
from ._compat import task_backends

Message = dict[str, Any]


def dashboard_urls(backend: str = "default", *, refresh: float = 3.0) -> list[URLPattern]:
    """URL patterns serving the dashboard of the task backend ``backend`` (its jobyard App)
    where they are included: ``path("jobs/", include(dashboard_urls()))``."""
    dashboard = DashboardView(backend, refresh)

    # The dashboard checks its own CSRF token: a per-browser cookie sent back with every
    # form, and the Origin header.
    @csrf_exempt  # type: ignore[untyped-decorator]
    async def view(request: HttpRequest, rest: str) -> HttpResponse:
        return await dashboard(request, rest)

    return [re_path(r"^(?P<rest>.*)\Z", view, name="jobyard-dashboard")]


class DashboardView:
    """The view behind :func:`dashboard_urls` (async: Django runs it under WSGI too)."""

    def __init__(self, backend: str, refresh: float) -> None:
        self.backend = backend
        self.refresh = refresh
        self._sites: dict[bool, Any] = {}  # read_only -> the dashboard's ASGI app

    def site(self, read_only: bool) -> Any:
        """The dashboard, read-only or not, built once."""
        if read_only not in self._sites:
            app = task_backends[self.backend].app
            self._sites[read_only] = create_app(app, read_only=read_only, refresh=self.refresh)
        return self._sites[read_only]

    async def __call__(self, request: HttpRequest, rest: str) -> HttpResponse:
        user = await request.auser()
        if not (user.is_active and user.is_staff):
            return redirect_to_login(request.get_full_path(), _login_url())
        prefix = request.path[: len(request.path) - len(rest)].rstrip("/")
        scope = _scope(request, prefix, "/" + rest)
        scope["jobyard.user"] = f"django user {user.get_username()}"
        status, headers, body = await call_asgi(
            self.site(read_only=not user.is_superuser), scope, request.body
        )
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name == "set-cookie":
                jar: SimpleCookie = SimpleCookie()
                jar.load(value)
                for key, morsel in jar.items():
                    response.cookies[key] = morsel
            elif name != "content-length":
                response[name] = value
        return response


def _login_url() -> str:
    if apps.is_installed("django.contrib.admin"):
        return str(reverse("admin:login"))
    return str(settings.LOGIN_URL)


def _scope(request: HttpRequest, prefix: str, path: str) -> dict[str, Any]:
    host = request.get_host()
    name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "root_path": prefix,
        "path": prefix + path,
        "raw_path": (prefix + path).encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [
            (key.lower().encode("latin-1"), str(value).encode("latin-1"))
            for key, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (name or host, int(port) if port.isdigit() else 80),
    }


async def call_asgi(
    app: Any, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run one HTTP request through an ASGI app in-process: (status, headers, body)."""
    done = asyncio.Event()
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client "leaves" once the whole response is sent
        return {"type": "http.disconnect"}

    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers.extend(
                (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in message["headers"]
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    done.set()
    return status, headers, b"".join(chunks)
