"""Who may see and who may act, checked on every request before any page runs.

- Tokens: without any, whoever reaches the server (which binds 127.0.0.1 by default) may see
  everything and act; with an admin token (``token=``) and/or a read-only token
  (``read_token=``), a request must carry one: ``Authorization: Bearer T``, the session cookie
  the login form or a first ``?token=T`` link sets, and is then admin or read-only.
  ``read_only=True`` makes everyone read-only.
- Read-only: every action is refused here (403), whatever the page shows.
- CSRF: every POST carries the ``csrf`` field, equal to this browser's ``jobyard_csrf`` cookie (a
  random value set on its first visit, SameSite=Strict: another site can neither read nor send
  it), and an ``Origin`` header, when the browser sends one, naming this host.
- Behind an application's own login (no token), that application may name the user in the
  ASGI scope (``"jobyard.user"``): the actions' log lines and ``cancelled_by`` carry it.
- Every response carries a strict Content-Security-Policy (no inline script or style), and
  pages are never framed or cached.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "jobyard_session"
CSRF_COOKIE = "jobyard_csrf"
CSRF_FIELD = "csrf"
MAX_FORM = 1 << 20  # bytes of a POST body: a form of the dashboard is far smaller
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
)
OPEN_PATHS = ("/static/", "/login", "/favicon.ico")  # served to anyone who reaches the server
ADMIN = "admin"
READ = "read"
# Where an application that serves the dashboard behind its own login names the signed-in
# user (ASGI scope key); read only when the dashboard itself requires no token.
EMBEDDER_USER = "jobyard.user"


def session_value(token: str) -> str:
    """What the session cookie holds for ``token``: a digest, so the cookie is not the token."""
    return hmac.new(token.encode(), b"jobyard dashboard session", hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Access:
    """The dashboard's access rules (see the module's docstring)."""

    token: str | None = None
    read_token: str | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        for label, value in (("token", self.token), ("read_token", self.read_token)):
            if value is not None and (not isinstance(value, str) or len(value) < 8):
                raise ValueError(f"the dashboard's {label} must be at least 8 characters")
        if self.token is not None and self.token == self.read_token:
            raise ValueError("the dashboard's token and read_token must differ")

    @property
    def open(self) -> bool:
        """True when no token is required."""
        return self.token is None and self.read_token is None

    def role_of_token(self, given: str) -> str | None:
        """The role a presented token grants, or None."""
        for token, role in ((self.token, ADMIN), (self.read_token, READ)):
            if token is not None and hmac.compare_digest(given.encode(), token.encode()):
                return READ if self.read_only else role
        return None

    def role_of_session(self, value: str) -> str | None:
        """The role a session cookie grants, or None."""
        for token, role in ((self.token, ADMIN), (self.read_token, READ)):
            if token is not None and hmac.compare_digest(value, session_value(token)):
                return READ if self.read_only else role
        return None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # noqa: BLE001 - a malformed cookie header is no cookie at all
        return {}
    return {k: m.value for k, m in jar.items()}


def cookie_header(name: str, value: str, path: str, *, secure: bool, max_age: int | None) -> bytes:
    """A ``Set-Cookie`` value: HttpOnly, SameSite=Strict, on the dashboard's path only."""
    parts = [f"{name}={value}", f"Path={path or '/'}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts).encode()


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *SECURITY_HEADERS,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware applying :class:`Access`, the CSRF rule and the security headers."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path", "")
        path = scope.get("path", "")
        if root and path.startswith(root):  # Starlette keeps the mount's prefix in the path
            path = path[len(root) :]
        headers = _headers(scope)
        cookies = _cookies(headers)
        secure = scope.get("scheme") == "https"
        extra: list[tuple[bytes, bytes]] = []
        csrf = cookies.get(CSRF_COOKIE, "")
        if len(csrf) < 32:
            csrf = secrets.token_urlsafe(32)
            extra.append(
                (b"set-cookie", cookie_header(CSRF_COOKIE, csrf, root, secure=secure, max_age=None))
            )
        access = self.access
        role, who = self._identify(headers, cookies)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if role is None and "token" in query and scope["method"] == "GET":
            granted = self.access.role_of_token(query["token"])
            if granted is not None:
                # A first link with ?token=: keep it as a session cookie, and drop it from the
                # address bar (and from the history) at once.
                token = query.pop("token")
                rest = urlencode(query)
                location = (root + path) + (f"?{rest}" if rest else "")
                extra.append(
                    (
                        b"set-cookie",
                        cookie_header(
                            SESSION_COOKIE, session_value(token), root, secure=secure, max_age=None
                        ),
                    )
                )
                extra.append((b"location", location.encode()))
                await _plain(send, 303, "signed in", extra)
                return
        is_open = any(path == p or path.startswith(p) for p in OPEN_PATHS if p.endswith("/")) or (
            path in OPEN_PATHS
        )
        if role is None and not is_open:
            if scope["method"] == "GET" and "fragment" not in query:
                nxt = urlencode(
                    {
                        "next": path
                        + (
                            f"?{scope['query_string'].decode()}"
                            if scope.get("query_string")
                            else ""
                        )
                    }
                )
                extra.append((b"location", f"{root}/login?{nxt}".encode()))
                await _plain(send, 303, "sign in first", extra)
            else:
                await _plain(send, 401, "sign in first: this dashboard needs a token", extra)
            return
        if scope["method"] not in ("GET", "HEAD"):
            if scope["method"] != "POST":
                await _plain(send, 405, "method not allowed", extra)
                return
            body, problem = await self._read_form(receive, headers, cookies)
            if problem is not None:
                await _plain(send, 403, problem, extra)
                return
            if role == READ and path not in ("/login", "/logout"):
                await _plain(send, 403, "this dashboard is read-only: actions are refused", extra)
                return
            receive = _replay(body, receive)
        scope["jobyard.role"] = role
        if access.open and isinstance(scope.get(EMBEDDER_USER), str):
            # Mounted behind an application's own login (jobyard.django, a FastAPI route):
            # that application names the user, for the log and for cancelled_by.
            who = f"{scope[EMBEDDER_USER]} (signed in to the application)"
        scope["jobyard.who"] = who
        scope["jobyard.csrf"] = csrf
        scope["jobyard.secure"] = secure

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS, *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _identify(self, headers: dict[str, str], cookies: dict[str, str]) -> tuple[str | None, str]:
        """(role or None, how the caller proved it) from the request's credentials."""
        access = self.access
        if access.open:
            return (READ if access.read_only else ADMIN), "no token"
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            role = access.role_of_token(auth[7:].strip())
            if role is not None:
                return role, f"{role} token (bearer)"
        session = cookies.get(SESSION_COOKIE)
        if session:
            role = access.role_of_session(session)
            if role is not None:
                return role, f"{role} token (session)"
        return None, "nobody"

    async def _read_form(
        self, receive: Receive, headers: dict[str, str], cookies: dict[str, str]
    ) -> tuple[bytes, str | None]:
        """The POST body and why it is refused (None: it passes the CSRF rule)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", "client went away"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_FORM:
                return b"", "form too large"
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        origin = headers.get("origin")
        if origin is not None:
            host = headers.get("host", "")
            if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
                return body, "cross-site request refused (its Origin is not this dashboard)"
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            return body, "actions are forms: application/x-www-form-urlencoded only"
        fields = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        given = fields.get(CSRF_FIELD, "")
        expected = cookies.get(CSRF_COOKIE, "")
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            return body, "CSRF check failed: reload the page and try again"
        return body, None


def _replay(body: bytes, then: Receive) -> Receive:
    """A ``receive`` that hands the already read body to the app once, then waits on the
    client's own messages (its disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive


def host_of(header: str) -> str:
    """The host of a ``Host`` header, without its port (``[::1]:8181`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def only_hosts(app: ASGIApp, hosts: tuple[str, ...]) -> ASGIApp:
    """``app`` answering only requests whose ``Host`` is one of ``hosts`` (421 otherwise)."""
    allowed = {h.strip("[]").lower() for h in hosts}

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and host_of(_headers(scope).get("host", "")) not in allowed:
            await _plain(send, 421, "this dashboard answers only to its own address", [])
            return
        await app(scope, receive, send)

    return guarded
