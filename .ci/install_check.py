"""Run by ``.ci/install-check`` inside a fresh virtual environment holding jobyard from its wheel.

``bare``: no extras. One job runs end to end on SQLite through a real worker, a recurring schedule
is accepted (croniter is a core dependency), and the stores of the missing extras refuse with one
line naming the extra. ``postgres`` / ``redis``: that extra alone; its store's modules import,
the other store's library is absent.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tempfile
import time

EXTRAS = {
    "postgres": (("psycopg", "psycopg_pool"), ("jobyard.backends.postgres.backend",)),
    "redis": (("redis",), ("jobyard.backends.redis.backend", "jobyard.backends.redis.consumers")),
    # The Django Tasks backend, its app and its management command (no settings needed).
    "django": (
        ("django", "django_tasks"),
        ("jobyard.django", "jobyard.django.apps", "jobyard.django.management.commands.jobyard_worker"),
    ),
}
URLS = {"postgres": "postgresql://127.0.0.1/test", "redis": "redis://127.0.0.1:6379/15"}


def absent(libraries: tuple[str, ...]) -> None:
    for name in libraries:
        assert importlib.util.find_spec(name) is None, f"{name} is installed but should not be"


def bare() -> None:
    import jobyard

    for libraries, _ in EXTRAS.values():
        absent(libraries)
    with tempfile.TemporaryDirectory() as where:
        app = jobyard.App(f"sqlite:///{where}/jobs.db")

        @app.job(queue="checks")
        def add(a: int, b: int) -> int:
            return a + b

        app.schedule("0 0 1 1 *", add, (0, 0))  # croniter must be importable without extras
        app.migrate()
        handle = add.enqueue(2, 3)
        worker = app.worker(concurrency=1, poll_interval=0.1)
        worker.start()
        try:
            assert handle.result(timeout=60) == 5
        finally:
            worker.stop(grace=5)
            app.close()
    for extra, url in URLS.items():
        started = time.monotonic()
        try:
            jobyard.App(url).backend  # noqa: B018 - opening the store is the point
        except jobyard.ConfigurationError as exc:
            message = str(exc)
            assert f"pip install 'jobyard[{extra}]'" in message, message
            assert "\n" not in message, message
        else:
            raise AssertionError(f"{url} opened without the {extra} extra")
        assert time.monotonic() - started < 10
    try:
        import jobyard.django  # noqa: F401
    except ImportError as exc:  # MissingExtra: one line naming the extra
        assert "pip install 'jobyard[django]'" in str(exc), exc
    else:
        raise AssertionError("jobyard.django imported without the django extra")


def one_extra(extra: str) -> None:
    for other, (libraries, _) in EXTRAS.items():
        if other != extra:
            absent(libraries)
    for module in EXTRAS[extra][1]:
        importlib.import_module(module)


if __name__ == "__main__":
    which = sys.argv[1]
    bare() if which == "bare" else one_extra(which)
    print(f"install_check {which}: ok")
