"""The dashboard in the example's URLs, behind Django's admin login: anonymous visitors and
non-staff users are sent to the admin login, staff may look, only superusers may act."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobyard.django import JobyardBackend

from . import tasks

_names = itertools.count()


@pytest.fixture
def client_as() -> Callable[..., Client]:
    def make(**flags: bool) -> Client:
        user = User.objects.create_user(f"user{next(_names)}", **flags)  # no password: no hashing
        client = Client()
        client.force_login(user)
        return client

    return make


def _cancel(client: Client, job_id: str) -> int:
    page = client.get(f"/jobs/jobs/{job_id}")
    assert page.status_code == 200
    csrf = client.cookies["jobyard_csrf"].value
    form = urlencode({"id": job_id, "csrf": csrf})  # as a browser sends a form
    response = client.post(
        "/jobs/actions/cancel", form, content_type="application/x-www-form-urlencoded"
    )
    return int(response.status_code)


def test_anonymous_visitors_and_non_staff_are_sent_to_the_admin_login(
    backend: JobyardBackend, client_as: Callable[..., Client]
) -> None:
    for client in (Client(), client_as()):
        response = client.get("/jobs/dead")
        assert response.status_code == 302
        assert response["Location"] == "/admin/login/?next=/jobs/dead"


def test_staff_see_the_dashboard_but_cannot_act(
    backend: JobyardBackend, client_as: Callable[..., Client]
) -> None:
    job_id = tasks.add.enqueue(1).id
    staff = client_as(is_staff=True)

    page = staff.get("/jobs/jobs")
    assert page.status_code == 200 and b"tests.django.tasks.add" in page.content
    assert f'href="/jobs/jobs/{job_id}"'.encode() in page.content  # links under the mount
    assert page["Content-Security-Policy"].startswith("default-src 'none'")

    assert _cancel(staff, job_id) == 403
    assert backend.app.get(job_id).status == "pending"


def test_superusers_act(backend: JobyardBackend, client_as: Callable[..., Client]) -> None:
    job_id = tasks.add.enqueue(1).id
    root = client_as(is_staff=True, is_superuser=True)

    assert _cancel(root, job_id) == 303
    job = backend.app.get(job_id)
    assert job.status == "cancelled"
    assert job.cancelled_by is not None and "django user user" in job.cancelled_by
