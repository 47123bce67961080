"""Django integration, in the ``django`` extra: a Django Tasks backend, a worker command and the
dashboard behind the admin login.

settings.py::

    INSTALLED_APPS = [..., "jobyard.django"]          # for manage.py jobyard_worker
    TASKS = {"default": {"BACKEND": "jobyard.django.JobyardBackend",
                         "OPTIONS": {"url": "postgresql:///app"}}}

urls.py::

    path("jobs/", include(jobyard.django.dashboard_urls())),   # staff see, superusers act

Works with Django 6's ``django.tasks`` and with the ``django-tasks`` backport on Django 5.2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._extras import require

require("django", "django")  # one line naming the extra, before anything imports Django

from . import _compat  # noqa: E402, F401 - which framework: django.tasks, else the backport
from ._backend import JobyardBackend, JobyardTask  # noqa: E402

if TYPE_CHECKING:
    from django.urls import URLPattern

__all__ = ["JobyardBackend", "JobyardTask", "dashboard_urls"]


def dashboard_urls(backend: str = "default", *, refresh: float = 3.0) -> list[URLPattern]:
    """URL patterns serving the dashboard of task backend ``backend`` where they are included
    (``path("jobs/", include(jobyard.django.dashboard_urls()))``): staff may look, superusers
    may act, anyone else is sent to the admin login. Needs the ``web`` extra too."""
    from ._dashboard import dashboard_urls as build

    return build(backend, refresh=refresh)
