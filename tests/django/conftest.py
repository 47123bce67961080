"""Django, set up once for this process with the example shop's settings: its database a SQLite
file of this run, the jobyard store ``memory://`` on a frozen clock, so tests drain the queue in
their own thread. The tests that run real servers and workers start their own processes."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "django"
_tmp = tempfile.mkdtemp(prefix="jobyard-django-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ["SHOP_DATABASE"] = f"sqlite:///{_tmp}/shop.db"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))


def _setup() -> None:
    from django.conf import settings
    from django.core.management import call_command

    import django
    import jobyard

    settings.TASKS["default"]["OPTIONS"]["url"] = "memory://"
    django.setup()
    from jobyard.django._compat import task_backends

    task_backends["default"].app.clock = jobyard.FrozenClock(1_800_000_000.0)
    call_command("migrate", verbosity=0)


_setup()


@pytest.fixture
def backend():  # type: ignore[no-untyped-def]
    """The default task backend on a fresh memory store (its App reopened for this test)."""
    from jobyard.django._compat import task_backends

    found = task_backends["default"]
    found.app.close()  # memory://: the next use opens an empty store
    return found
