"""The Django app of the integration: add ``"jobyard.django"`` to ``INSTALLED_APPS`` for
``manage.py jobyard_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class JobyardConfig(AppConfig):  # type: ignore[misc]
    """jobyard's Django app (label ``jobyard``): no models, one management command."""

    name = "jobyard.django"
    label = "jobyard"
    verbose_name = "jobyard"
