"""What every page and action shares: the :class:`Site` (the App, the access rules, the
templates, the live cache), rendering, the redirect after an action with its message, the
error pages, and the action log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .._secrets import scrub
from ..app import App
from ..errors import (
    ConfigurationError,
    DuplicateJob,
    InvalidTransition,
    JobNotFound,
    JobyardError,
    QueueFull,
    StoreUnavailable,
)
from . import _data
from ._auth import ADMIN, Access, cookie_header
from ._render import environment

log = logging.getLogger("jobyard.web")

FLASH_COOKIE = "jobyard_flash"
PROBE_TIMEOUT = 3.0  # seconds a first request gives a store that was not opened yet
BAD_INPUT = (ConfigurationError, InvalidTransition, DuplicateJob, QueueFull, ValueError)
NAV = (
    ("overview", "/", "Overview"),
    ("jobs", "/jobs", "Jobs"),
    ("dead", "/dead", "Dead letter"),
    ("workers", "/workers", "Workers"),
    ("schedules", "/schedules", "Schedules"),
    ("enqueue", "/enqueue", "Enqueue"),
)


class Site:
    """What every handler shares: the App, the access rules, the templates, the live cache."""

    def __init__(self, app: App, access: Access, refresh: float) -> None:
        self.app = app
        self.access = access
        self.refresh = refresh
        self.env = environment()
        self.cache = _data.LiveCache()
        self.store = _data.store_view(app)

    def now(self) -> float:
        """Now for "ago" columns: the App's clock when frozen, else this host's."""
        frozen = self.app.clock.now()
        return time.time() if frozen is None else frozen

    def context(self, request: Request, page: str) -> dict[str, Any]:
        """What every template gets."""
        role = request.scope.get("jobyard.role")
        return {
            "root": request.scope.get("root_path", ""),
            "page": page,
            "nav": NAV,
            "can_act": role == ADMIN,
            "signed_in": not self.access.open,
            "read_only": role != ADMIN,
            "csrf": request.scope.get("jobyard.csrf", ""),
            "store": self.store,
            "now": self.now(),
            "refresh_ms": int(self.refresh * 1000),
            # a live refresh never takes an action's message: the page it redirects to shows it
            "flash": None if request.query_params.get("fragment") == "live" else _flash(request),
            "here": _here(request),
        }

    def render(
        self, request: Request, template: str, section: str, status: int = 200, **values: Any
    ) -> Response:
        """A page, or only its ``live`` block when the request asks for ``?fragment=live``
        (what the page's script polls)."""
        ctx = {**self.context(request, section), **values}
        tmpl = self.env.get_template(template)
        if request.query_params.get("fragment") == "live" and "live" in tmpl.blocks:
            html = "".join(tmpl.blocks["live"](tmpl.new_context(ctx)))
        else:
            html = tmpl.render(ctx)
        response = HTMLResponse(html, status_code=status)
        response.headers["cache-control"] = "no-store"
        if ctx["flash"] is not None:
            response.delete_cookie(FLASH_COOKIE, path=ctx["root"] or "/")
        return response

    def fail(self, request: Request, status: int, title: str, message: str) -> Response:
        """An error page (the message scrubbed of any credential)."""
        return self.render(
            request, "error.html", "", status=status, title=title, message=scrub(message)
        )

    def done(self, request: Request, to: str, message: str, *, ok: bool = True) -> Response:
        """After an action: back to ``to`` (a path of the dashboard), with a message."""
        self.cache.clear()
        root = request.scope.get("root_path", "")
        response = RedirectResponse(root + safe_path(to), status_code=303)
        value = quote(("ok:" if ok else "error:") + scrub(message)[:600])
        response.headers.append(
            "set-cookie",
            cookie_header(
                FLASH_COOKIE,
                value,
                root,
                secure=bool(request.scope.get("jobyard.secure")),
                max_age=60,
            ).decode(),
        )
        return response


def safe_path(value: str | None, default: str = "/") -> str:
    """``value`` if it is a path of this dashboard (``/jobs?x=1``), else ``default``: a form's
    ``next`` can never send a browser to another site."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    return value


def _flash(request: Request) -> tuple[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, message = unquote(raw).partition(":")
    return ("ok" if kind == "ok" else "error", message)


def _here(request: Request) -> str:
    """This page's path within the dashboard, with its query (for a form's ``next``)."""
    root = request.scope.get("root_path", "")
    path = request.url.path
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "fragment"]
    qs = "&".join(f"{quote(k)}={quote(v)}" for k, v in query)
    return path + (f"?{qs}" if qs else "")


def who(request: Request) -> str:
    """Who acts, for the log and for ``cancelled_by``: the credential and the client."""
    client = request.client.host if request.client else "unknown"
    return f"{request.scope.get('jobyard.who', 'nobody')} from {client}"


def log_action(request: Request, action: str, target: str, jobs: int) -> None:
    """One line on ``jobyard.web`` per action: who, what, how many jobs."""
    log.info("%s: %s %s (%d job(s))", who(request), action, target, jobs)


def guarded(site: Site, handler: Callable[[Site, Request], Response]) -> Callable[..., Response]:
    """A handler whose bad input is a 400 page, an unknown job a 404, a store that fails a 503:
    never a traceback."""

    def endpoint(request: Request) -> Response:
        try:
            if site.app._backend is None:
                # Not opened yet: one probe that fails in seconds, rather than a pool that
                # retries for its whole timeout while the page hangs.
                site.app.check_store(PROBE_TIMEOUT)
            return handler(site, request)
        except StoreUnavailable as exc:
            return site.fail(request, 503, "The store is unreachable", str(exc))
        except JobNotFound as exc:
            return site.fail(request, 404, "Not found", str(exc))
        except BAD_INPUT as exc:
            return site.fail(request, 400, "Bad request", str(exc))
        except JobyardError as exc:
            return site.fail(request, 503, "The store refused", f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            if not _is_store_error(exc):
                raise
            log.warning("store call failed: %s", scrub(f"{type(exc).__name__}: {exc}"))
            return site.fail(
                request, 503, "The store is unreachable", f"{type(exc).__name__}: {exc}"
            )

    return endpoint


def _is_store_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError | TimeoutError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"OperationalError", "ConnectionError", "InterfaceError", "RedisError"})


async def form_of(request: Request) -> dict[str, str]:
    """A POST's fields (the guard let only ``application/x-www-form-urlencoded`` through; the
    last of a repeated field wins)."""
    body = await request.body()
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
