"""Backend selection by URL scheme. Each backend is imported only when its scheme is used, so a
SQLite user needs neither psycopg nor redis-py installed."""

from __future__ import annotations

import importlib
import re

from .._extras import MissingExtra
from ..clock import Clock
from ..errors import ConfigurationError
from .base import Backend

# scheme -> (module, class, pip extra)
SCHEMES: dict[str, tuple[str, str, str | None]] = {
    "sqlite": ("jobyard.backends.sqlite.backend", "SQLiteBackend", None),
    "memory": ("jobyard.backends.memory", "MemoryBackend", None),
    "postgresql": ("jobyard.backends.postgres.backend", "PostgresBackend", "postgres"),
    "postgres": ("jobyard.backends.postgres.backend", "PostgresBackend", "postgres"),
    "redis": ("jobyard.backends.redis.backend", "RedisBackend", "redis"),
    "rediss": ("jobyard.backends.redis.backend", "RedisBackend", "redis"),
    "redis+cluster": ("jobyard.backends.redis.backend", "RedisBackend", "redis"),
}


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^@/?#]*)@")


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***``, safe to print or log."""

    def mask(m: re.Match[str]) -> str:
        user, sep, _ = m.group(2).partition(":")
        return f"{m.group(1)}{user}:***@" if sep else m.group(0)

    return _USERINFO.sub(mask, url)


def open_backend(url: str, clock: Clock) -> Backend:
    """Build the backend a URL names; a wrong scheme lists the supported ones."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        supported = ", ".join(f"{s}://" for s in SCHEMES)
        raise ConfigurationError(
            f"unsupported store URL {mask_url(url)!r}: the scheme must be one of {supported}"
        )
    module_name, class_name, extra = SCHEMES[scheme]
    try:
        module = importlib.import_module(module_name)
    except MissingExtra:
        raise  # its message names the extra already
    except ImportError as exc:
        hint = f": pip install 'jobyard[{extra}]'" if extra else ""
        raise ConfigurationError(f"the {scheme}:// backend is not installed{hint} ({exc})") from exc
    backend: Backend = getattr(module, class_name)(url, clock)
    return backend
