"""No secret printed, ever: a credential in a store URL (userinfo, with unencoded delimiters,
or a query parameter) never shows in a repr, an error, a traceback, a log record, a driver's
warning or the CLI's output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import jobyard
from jobyard._secrets import forget, mask_url, scrub
from jobyard.backends.postgres import _connect as pg_connect
from jobyard.backends.redis import _connection as redis_connection
from tests.conftest import ROOT, wait_until

HEAD, TAIL = "S3CR", "T0KN"  # a leak of any part of a secret shows one of them
# Characters a careless user leaves unencoded in a password.
PASSWORD_CHARS = st.characters(
    codec="ascii", categories=["L", "N", "P", "S"], exclude_characters=" \t\n"
)
QUERY_CHARS = st.characters(codec="ascii", categories=["L", "N"], include_characters="@#/?:%=!$")


@st.composite
def secret_urls(draw: st.DrawFn) -> tuple[str, str]:
    """(url, secret): every shape of URL a store accepts, with one credential somewhere."""
    scheme = draw(st.sampled_from(["postgresql", "postgres", "redis", "rediss", "redis+cluster"]))
    where = draw(st.sampled_from(["userinfo", "userinfo-no-user", "query"]))
    alphabet = QUERY_CHARS if where == "query" else PASSWORD_CHARS
    secret = HEAD + draw(st.text(alphabet, max_size=12)) + TAIL
    host = draw(st.sampled_from(["127.0.0.1:1", "db.example", "[::1]:7", "h1:7000,h2:7001"]))
    path = draw(st.sampled_from(["", "/", "/0", "/test"]))
    query: list[str] = draw(
        st.lists(st.sampled_from(["application_name=a@b", "schema=s", "prefix=p", "x=1"]))
    )
    userinfo = ""
    if where == "userinfo":
        userinfo = f"{draw(st.sampled_from(['u', 'postgres', 'default']))}:{secret}@"
    elif where == "userinfo-no-user":
        userinfo = f":{secret}@"
    else:
        name = draw(st.sampled_from(["password", "sslpassword", "passfile", "token", "authToken"]))
        query.insert(draw(st.integers(0, len(query))), f"{name}={secret}")
    url = f"{scheme}://{userinfo}{host}{path}" + ("?" + "&".join(query) if query else "")
    return url, secret


def assert_clean(text: str, secret: str, where: str) -> None:
    for part in (secret, HEAD, TAIL):
        assert part not in text, f"{where} shows {part!r}: {text!r}"


# derandomize: the same 400 URL shapes every run, so CI cannot turn red on a new draw; widen it
# by hand (max_examples=30000, derandomize=False) when changing the masking. Each case starts
# with no remembered secrets: once an earlier case's pieces ("S3CR", "T0KN") are remembered,
# scrub() hides any leak of them, and a failure found in a fresh process passes on replay.
@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(secret_urls())
# Found by the long run with the state reset (libpq and redis-py split the password elsewhere
# than at "@" and quoted the tail as a port or an option name): clean only by the luck of an
# earlier case having remembered "T0KN".
@example(("postgresql://u:S3CR@:T0KN@127.0.0.1:1", "S3CR@:T0KN"))
@example(("redis://u:S3CR@?T0KN@127.0.0.1:1?application_name=a@b", "S3CR@?T0KN"))
def test_no_part_of_a_secret_shows_in_any_rendering_of_its_url(case: tuple[str, str]) -> None:
    url, secret = case
    forget()  # no memory of earlier cases' secrets: only this URL's own may hide a leak
    # the masked URL, and any text quoting the URL
    assert_clean(mask_url(url), secret, "mask_url")
    assert_clean(scrub(f"cannot connect to {url}: refused"), secret, "scrub")
    assert_clean(scrub(f"pool 'jobyard {url}' failed"), secret, "scrub (quoted)")
    # an App and its backend's URL parser: a repr, or an error and its whole traceback
    texts: list[tuple[str, str]] = []
    try:
        app = jobyard.App(url)
        texts.append(("repr(app)", repr(app)))
        parse = pg_connect.parse_url if url.startswith("postgres") else redis_connection.parse_url
        parse(url)
    except Exception as exc:  # noqa: BLE001 - whatever is raised, it must not quote the secret
        texts.append(("error", str(exc)))
        texts.append(("traceback", "".join(traceback.format_exception(exc))))
    for where, text in texts:
        assert_clean(text, secret, where)


def test_a_driver_warning_never_shows_the_secret(caplog: pytest.LogCaptureFixture) -> None:
    # given a PostgreSQL URL with its password in the query, to a port where nothing listens
    from jobyard.backends.postgres.backend import PostgresBackend

    secret = "QS3CRETpw"
    url = f"postgresql://postgres:{secret}@127.0.0.1:1/test?sslpassword={secret}x&password={secret}"
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    app = jobyard.App(url)  # registers the URL's secrets
    backend = PostgresBackend(url, jobyard.SystemClock())
    try:
        # when the pool fails to connect, it warns
        wait_until(
            lambda: any(r.name.startswith("psycopg") for r in caplog.records),
            timeout=20,
            what="a psycopg pool warning",
        )
    finally:
        backend.close()
        app.close()
    # then its warnings name the masked store, never the password
    text = "\n".join(caplog.text.splitlines())
    assert "error connecting" in text and "jobyard postgresql://postgres:***@" in text
    assert secret not in text and secret not in repr(backend) and secret not in repr(app)


def _cli(url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"}
    env.pop("JOBYARD_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobyard", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_status_and_the_workers_log_never_show_a_query_password(kind: str, tmp_path: Path) -> None:
    # given a store URL whose password is in the query (accepted: PostgreSQL trusts the test
    # user, Redis has no password to check... or refuses, which must not print it either)
    from tests.conftest import make_store_url

    secret = "QS3CRETpw"
    base = make_store_url(kind, tmp_path)
    url = base + ("&" if "?" in base else "?") + f"password={secret}"
    ref = "tests.apps.contract_app:app"
    # when status runs, and a worker starts and logs its store
    status = _cli(url, "status", ref)
    out, _ = status.communicate(timeout=60)
    worker = _cli(url, "worker", ref, "--grace", "1")
    lines: list[str] = []
    try:
        assert worker.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("store" in line for line in lines):
            line = worker.stdout.readline()
            if not line:
                break
            lines.append(line)
    finally:
        worker.kill()
        worker.wait(10)
    # then neither shows the secret, and both name the store masked
    assert secret not in out and "password=***" in out, out
    log: Any = "".join(lines)
    assert secret not in log and "password=***" in log, log
