"""Backend selection by URL scheme. Each backend is imported only when its scheme is used, so a
SQLite user needs neither psycopg nor redis-py installed."""

from __future__ import annotations

import importlib

from .._extras import MissingExtra
from .._secrets import check_url, mask_url, remember, scrub
from ..clock import Clock
from ..errors import ConfigurationError, StoreUnavailable
from .base import Backend

__all__ = ["SCHEMES", "in_process", "mask_url", "open_backend", "probe_store"]

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


# scheme -> (module, function) of a quick reachability check; stores in this process have none
PROBES: dict[str, tuple[str, str]] = {
    "postgresql": ("jobyard.backends.postgres._connect", "probe"),
    "postgres": ("jobyard.backends.postgres._connect", "probe"),
    "redis": ("jobyard.backends.redis._connection", "probe"),
    "rediss": ("jobyard.backends.redis._connection", "probe"),
    "redis+cluster": ("jobyard.backends.redis._connection", "probe"),
}


def in_process(url: str) -> bool:
    """Whether the store a URL names lives in this process only (memory://): no other process,
    a worker's child included, sees its jobs."""
    return url.split("://", 1)[0].lower() == "memory"


def probe_store(url: str, timeout: float) -> None:
    """Connect to the store once, within ``timeout`` seconds and without retries, and raise
    :class:`jobyard.errors.StoreUnavailable` with the cause if that fails."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in PROBES:
        return
    check_url(url)  # a URL that would split its password is refused before any parser sees it
    remember(url)  # its credentials are scrubbed from anything the drivers say
    module_name, fn = PROBES[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return  # open_backend says what to install
    try:
        getattr(module, fn)(module.parse_url(url), timeout)
    except StoreUnavailable as exc:
        raise StoreUnavailable(scrub(f"store {mask_url(url)} unavailable: {exc}")) from None


def open_backend(url: str, clock: Clock) -> Backend:
    """Build the backend a URL names; a wrong scheme lists the supported ones."""
    check_url(url)
    remember(url)
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
