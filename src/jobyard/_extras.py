"""Optional libraries, imported only where their feature is used.

A store package (``backends/postgres``, ``backends/redis``) calls :func:`require` when it is
imported, so a missing library is one line naming the extra to install, not a traceback from deep
inside the package.
"""

from __future__ import annotations

import importlib

from .errors import ConfigurationError

# extra -> what it enables, as the error message names it
FEATURES: dict[str, str] = {
    "postgres": "the PostgreSQL store (postgresql://)",
    "redis": "the Redis store (redis://, redis+cluster://) and its list and stream consumers",
    "web": "the dashboard",
    "metrics": "the worker's Prometheus metrics (--metrics-port)",
    "django": "the Django Tasks backend (jobyard.django)",
}


class MissingExtra(ConfigurationError, ImportError):
    """An optional library of jobyard is not installed; the message names the pip extra."""


def require(extra: str, *modules: str) -> None:
    """Import ``modules`` or raise :class:`MissingExtra` naming ``pip install 'jobyard[extra]'``."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise MissingExtra(
                f"{FEATURES[extra]} needs the {name} library: pip install 'jobyard[{extra}]' "
                f"({exc})"
            ) from None
