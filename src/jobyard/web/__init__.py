"""The dashboard (``jobyard dashboard APP``) as an ASGI application, in the ``web`` extra.

``jobyard.web.create_app(app)`` returns it, to serve on its own or to mount inside a Starlette or
FastAPI application. ``import jobyard`` never imports this package, nor Starlette or Jinja2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._extras import require

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..app import App

__all__ = ["create_app"]


def create_app(
    app: App,
    *,
    token: str | None = None,
    read_only: bool = False,
    read_token: str | None = None,
    refresh: float = 3.0,
) -> Starlette:
    """The dashboard of ``app`` as an ASGI application.

    ``token``: every request must carry it (``Authorization: Bearer``, or the session cookie
    the sign-in page or a first ``?token=`` link sets) and may then act. ``read_token``: a
    second token that may only look. ``read_only``: nobody may act, whatever the token; the
    actions are hidden and refused. Without a token, whoever reaches the server may act: bind
    it to 127.0.0.1, or mount it behind your own authentication. ``refresh``: seconds between
    the live parts' updates while a tab is visible."""
    require("web", "starlette", "jinja2")
    from ._asgi import build

    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    return build(app, token=token, read_token=read_token, read_only=read_only, refresh=refresh)
