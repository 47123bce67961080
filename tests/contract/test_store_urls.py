"""A store URL that cannot work is bad input, found when the App opens its store: a
ConfigurationError saying what is wrong (never the password), one line and exit code 2 from the
command, and a worker that stops at once instead of retrying it as an outage."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobyard
from jobyard.cli import main
from tests.conftest import ROOT

SECRET = "S3CRpwT0KN"
PG = "postgresql://postgres:" + SECRET + "@127.0.0.1"
# (store, URL, words of the error); {tmp} is the test's own directory
BAD_URLS = [
    ("postgres", f"{PG}:abc/test", "port 'abc' is not a number"),
    ("postgres", f"{PG}:99999/test", "port '99999' is not a number"),
    ("postgres", f"{PG}:5432,127.0.0.1:x/test", "port 'x' is not a number"),
    ("postgres", f"{PG}/test?sslmode=bogus", "sslmode='bogus' is not one of"),
    ("postgres", f"{PG}/test?connect_timeout=x", "connect_timeout='x' is not a whole number"),
    ("postgres", f"{PG}/test?target_session_attrs=main", "target_session_attrs='main'"),
    ("postgres", f"{PG}/test?hostaddr=numbers-only", "hostaddr 'numbers-only' is not an IP"),
    ("redis", f"redis://:{SECRET}@127.0.0.1:abc/0", "bad port in Redis host"),
    ("redis", "redis://127.0.0.1:99999/0", "bad port in Redis host"),
    ("redis", "redis://127.0.0.1:6379/x", "the Redis database must be a number"),
    ("redis", "redis://127.0.0.1:6379/0?db=x", "Invalid value for 'db'"),
    ("redis", f"redis://:{SECRET}@127.0.0.1:6379/0?bogus=1", "redis-py takes no option 'bogus'"),
    ("redis", "redis://127.0.0.1:6379/0?socket_connect_timeout=soon", "socket_connect_timeout"),
    ("redis", "rediss://127.0.0.1:6379/0?ssl_cert_reqs=bogus", "Certificate Requirements"),
    ("redis_cluster", "redis+cluster://127.0.0.1:7000?db=3", "database 0 only"),
    ("redis_cluster", "redis+cluster://127.0.0.1:7000,127.0.0.1:x", "bad port in Redis host"),
    ("redis_cluster", "redis+cluster://127.0.0.1:7000?bogus=1", "no option 'bogus'"),
    ("sqlite", "sqlite:///{tmp}/jobs.db?mode=ro", "it takes no options"),
    ("sqlite", "sqlite:///{tmp}/jobs.db?journal_mode=off", "it takes no options"),
]
current: jobyard.App | None = None  # the App the command runs against, in this process


@pytest.mark.parametrize(("kind", "url", "words"), BAD_URLS, ids=[u for _, u, _ in BAD_URLS])
def test_a_malformed_url_is_bad_input_not_an_outage(
    kind: str,
    url: str,
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given an App on a URL no store could be reached by
    url = url.format(tmp=tmp_path)
    app = jobyard.App(url)
    # when it opens its store, then the URL is refused as configuration, naming the fault
    with pytest.raises(jobyard.ConfigurationError) as refused:
        _ = app.backend
    assert words in str(refused.value) and SECRET not in str(refused.value)
    assert not isinstance(refused.value, jobyard.StoreUnavailable)
    # and a one-shot command says so on one line, with exit code 2 (bad input)
    monkeypatch.setattr(sys.modules[__name__], "current", app)
    monkeypatch.delenv("JOBYARD_DEBUG", raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["status", f"{__name__}:current"])
    _, err = capsys.readouterr()
    assert done.value.code == 2, err
    (line,) = err.splitlines()
    assert line.startswith("error: ") and words in line and SECRET not in line


def test_a_value_libpq_refuses_when_connecting_is_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a value no check of jobyard's knows, which libpq refuses only when it connects
    psycopg = pytest.importorskip("psycopg")
    if psycopg.pq.version() < 160000:
        pytest.skip("require_auth needs libpq 16")
    app = jobyard.App(f"{PG}/test?require_auth=bogus")
    # when a one-shot command connects first, then it is bad input (exit 2), not an outage
    monkeypatch.setattr(sys.modules[__name__], "current", app)
    monkeypatch.delenv("JOBYARD_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        main(["status", f"{__name__}:current"])
    _, err = capsys.readouterr()
    assert done.value.code == 2, err
    (line,) = err.splitlines()
    assert "invalid PostgreSQL URL" in line and "require_auth" in line and SECRET not in line


@pytest.mark.parametrize(
    "url",
    [
        f"{PG}/test?sslmode=bogus",  # libpq's refusal was retried by the pool for ever
        f"redis://:{SECRET}@127.0.0.1:6379/0?bogus=1",  # a traceback at the first command
        "sqlite:///{tmp}/jobs.db?mode=ro",  # ignored: the worker ran read-write
    ],
    ids=["postgres", "redis", "sqlite"],
)
def test_a_worker_stops_at_once_on_a_malformed_url(url: str, tmp_path: Path) -> None:
    # given a worker process started on a malformed URL
    env = {**os.environ, "JOBYARD_URL": url.format(tmp=tmp_path)}
    env.pop("JOBYARD_DEBUG", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jobyard", "worker", "tests.apps.contract_app:app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # then it stops at once with one line and exit code 2, never retrying, never the password
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert time.monotonic() - started < 20
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and "URL" in line and SECRET not in line
