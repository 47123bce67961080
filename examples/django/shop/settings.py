"""Settings of the example shop. Read from the environment:

- ``SHOP_DATABASE``: ``sqlite:///path/shop.db`` (the default: ``shop.db`` here) or
  ``postgresql://user@host:port/db?schema=NAME`` (the schema is put on the search_path).
- ``JOBYARD_URL``: the jobyard store (default ``sqlite:///jobs.db`` here).
- ``SHOP_TRANSACTIONAL=1``: write each job in the order's own transaction (PostgreSQL, with
  jobyard's tables in the same database and schema) instead of enqueueing on commit.
"""

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-a-secret")
DEBUG = os.environ.get("SHOP_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "jobyard.django",  # manage.py jobyard_worker
    "orders",
]
if os.environ.get("SHOP_BACKPORT", "1") == "1":  # Django 5.2: the django-tasks backport's app
    try:
        import django.tasks  # noqa: F401  (Django >= 6 has it built in)
    except ImportError:
        INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"


def database(url: str) -> dict:
    """A DATABASES entry for a sqlite:/// or postgresql:// URL."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path[1:] or "shop.db"}
    query = dict(parse_qsl(parts.query))
    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": {},
    }
    if "schema" in query:
        entry["OPTIONS"]["options"] = f"-c search_path={query['schema']}"
    return entry


DATABASES = {
    "default": database(os.environ.get("SHOP_DATABASE", f"sqlite:///{BASE_DIR / 'shop.db'}"))
}

TASKS = {
    "default": {
        "BACKEND": "jobyard.django.JobyardBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "url": os.environ.get("JOBYARD_URL", f"sqlite:///{BASE_DIR / 'jobs.db'}"),
            "transactional": os.environ.get("SHOP_TRANSACTIONAL", "") == "1",
            "max_attempts": 3,
        },
    }
}
