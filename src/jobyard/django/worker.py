"""``jobyard.django.worker:app``: the App of a Django project's task backend, for ``jobyard
worker`` and its child processes (``--processes``, ``--reload``), which load their App by
reference. Importing this module sets Django up (``$DJANGO_SETTINGS_MODULE``), imports every
installed app's ``tasks`` module, and picks the backend named by ``$JOBYARD_DJANGO_BACKEND``
(``default``). ``manage.py jobyard_worker`` is the usual way in.
"""

from __future__ import annotations

import os

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

import django

from ..app import App
from ._backend import ALIAS_VARIABLE, JobyardBackend
from ._compat import task_backends


def backend_app(alias: str | None = None) -> App:
    """The jobyard App of the Django task backend ``alias``, with every task registered."""
    if not apps.ready:
        django.setup()
    alias = alias or os.environ.get(ALIAS_VARIABLE) or "default"
    backend = task_backends[alias]
    if not isinstance(backend, JobyardBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, "
            "not jobyard.django.JobyardBackend"
        )
    backend.discover()
    return backend.app


def __getattr__(name: str) -> App:
    # ``app``, built when first asked for (by load_app), once $JOBYARD_DJANGO_BACKEND is set.
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = backend_app()
    globals()["app"] = built
    return built
