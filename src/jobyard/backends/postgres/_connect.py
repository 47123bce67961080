"""Connection settings from a ``postgresql://`` URL, and the pool that serves the backend.

jobyard's own URL parameters are taken out before the rest goes to libpq:

- ``schema=NAME``: every jobyard table lives in that schema (each connection's search_path);
- ``pool_min_size=N`` / ``pool_max_size=N``: the connection pool's bounds (default 1 / 20);
- ``worker_commit=async`` (default) or ``sync``: whether the worker's own moves (claims,
  outcomes, renewals, reaping) skip waiting for the WAL flush; see queries/README.md for why that is
  safe, and when it is not used even so.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import select
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.numeric import Int8Dumper
from psycopg_pool import ConnectionPool

from ..._secrets import scrub
from ...errors import ConfigurationError, StoreUnavailable

SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")
DEFAULT_POOL_MIN = 1
DEFAULT_POOL_MAX = 20

# libpq checks these values only when it connects, and its refusal then reads like an outage
# (a pool retries it forever): they are checked here, so a typo is a ConfigurationError at once.
# The values are libpq's (https://www.postgresql.org/docs/current/libpq-connect.html); an
# option this libpq does not know at all is refused by conninfo_to_dict already.
_CHOICES: dict[str, tuple[str, ...]] = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
    "sslcertmode": ("disable", "allow", "require"),
    "sslnegotiation": ("postgres", "direct"),
}
_INTEGERS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "sslcompression",
    "sslsni",
)
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")  # as libpq's parse_int_param reads one
# What libpq says when it refuses an option's value at connect time (before any network):
# for options checked nowhere above, a one-shot command still reports bad input, not an outage.
_LIBPQ_REFUSED = re.compile(
    r"invalid (integer value|port number|\w+ value)|could not match \d+ port numbers"
)


@dataclass(frozen=True, slots=True)
class Settings:
    """What a URL asks for: the libpq conninfo, connection keywords, schema and pool bounds."""

    conninfo: str
    kwargs: dict[str, Any]
    schema: str | None
    pool_min: int
    pool_max: int
    async_commit: bool = True

    @property
    def search_path(self) -> str | None:
        """The search_path every connection uses, ``None`` for the server's default.
        ``pg_temp`` goes last so a temporary table can never shadow a jobyard table."""
        return None if self.schema is None else f"{self.schema}, pg_temp"

    @property
    def lock_scope(self) -> str:
        """Names the schema in advisory lock keys (``""`` for the default one)."""
        return self.schema or ""


def _int_param(name: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise ConfigurationError(f"URL parameter {name} must be an integer >= {low}")
    return number


def parse_url(url: str) -> Settings:
    """Split a ``postgresql://`` (or ``postgres://``) URL into :class:`Settings`. A refusal
    never quotes the URL's credentials, even pieces of a password libpq split elsewhere (a
    "port" that is the password's tail), whichever URLs this process remembered before."""
    try:
        return _parse_url(url)
    except ConfigurationError as exc:
        raise ConfigurationError(scrub(str(exc), url)) from None


def _parse_url(url: str) -> Settings:
    parts = urlsplit(url)
    schema: str | None = None
    pool_min, pool_max = DEFAULT_POOL_MIN, DEFAULT_POOL_MAX
    async_commit = True
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            if not SCHEMA_RE.match(value):
                raise ConfigurationError(
                    f"invalid schema {value!r}: use 1 to 63 of a-z 0-9 _, not starting with a digit"
                )
            schema = value
        elif key == "pool_min_size":
            pool_min = _int_param(key, value, 0)
        elif key == "pool_max_size":
            pool_max = _int_param(key, value, 1)
        elif key == "worker_commit":
            if value not in ("async", "sync"):
                raise ConfigurationError("URL parameter worker_commit must be async or sync")
            async_commit = value == "async"
        else:
            rest.append((key, value))
    pool_min = min(pool_min, pool_max)
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid PostgreSQL URL: {scrub(str(exc))}") from None
    _check_values(given)
    kwargs: dict[str, Any] = {"autocommit": True}
    # Generic plans for jobyard's prepared statements: planning the claim afresh each time (a
    # custom plan, PostgreSQL's first choice) costs several times its execution, and none of
    # these statements has parameters whose values should change its plan. A connection lent
    # to a handler gets the default back for its transaction (connection_acquire).
    options = str(given.get("options") or "")
    options += " -c plan_cache_mode=force_generic_plan"
    # No JIT compilation: a generic plan is compiled afresh at every execution once its
    # estimated cost passes jit_above_cost, and with the statistics an ANALYZE leaves (a
    # server's autoanalyze) the claim's estimate grows with the pending rows, past that mark
    # from about 12,000 of them (and past the inlining and optimizing marks from 60,000): each
    # claim then spent 0.1-4 s compiling what runs in a few milliseconds (bench/README.md,
    # "Cost as the store fills", issue 18 §3). Also off for a handler's lent transaction.
    options += " -c jit=off"
    if "application_name" not in given:
        kwargs["application_name"] = "jobyard"
    if "connect_timeout" not in given:
        kwargs["connect_timeout"] = 10
    if schema is not None:
        options += f" -c search_path={schema},pg_temp"
    kwargs["options"] = options.strip()
    return Settings(conninfo, kwargs, schema, pool_min, pool_max, async_commit)


def _check_values(given: dict[str, Any]) -> None:
    """Refuse the values libpq would refuse only when connecting (see :data:`_CHOICES`)."""
    for item in str(given.get("port") or "").split(","):
        if item.strip() and not (_INTEGER.fullmatch(item) and 1 <= int(item) <= 65535):
            raise ConfigurationError(
                f"invalid PostgreSQL URL: port {item.strip()!r} is not a number from 1 to 65535"
            )
    for item in str(given.get("hostaddr") or "").split(","):
        try:
            if item.strip():
                ipaddress.ip_address(item.strip())
        except ValueError:
            raise ConfigurationError(
                f"invalid PostgreSQL URL: hostaddr {item.strip()!r} is not an IP address"
            ) from None
    for name, choices in _CHOICES.items():
        value = given.get(name)
        if value is not None and str(value) not in choices:
            raise ConfigurationError(
                f"invalid PostgreSQL URL: {name}={value!r} is not one of {', '.join(choices)}"
            )
    for name in _INTEGERS:
        value = given.get(name)
        if value is not None and not _INTEGER.fullmatch(str(value)):
            raise ConfigurationError(
                f"invalid PostgreSQL URL: {name}={value!r} is not a whole number"
            )


def is_dropped(conn: psycopg.Connection[Any]) -> bool:
    """True if the server has dropped this idle connection, found without a round trip.

    An idle connection that does not LISTEN receives nothing, so a readable socket means the
    server has sent its farewell (``pg_terminate_backend``, a restart) or closed it. Checked on
    every checkout instead of the pool's ``check`` hook, which sleeps with backoff after each
    refused connection: a dropped one is simply closed, the pool forgets it, and the next one
    is taken at once."""
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK:
        return True
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up each new pooled connection."""
    # Every Python int as int8 (arrays too): psycopg would otherwise pick int2/int4/int8 per
    # value, and each combination of parameter types is a prepared statement of its own.
    conn.adapters.register_dumper(int, Int8Dumper)


def probe(settings: Settings, timeout: float) -> None:
    """Open one connection and close it, within ``timeout`` seconds; raise
    :class:`StoreUnavailable` with libpq's own words for the cause (connection refused at
    host:port, a database or role that does not exist, a failed password). Used before a
    one-shot command opens the pool, whose background reconnects would only report
    ``PoolTimeout`` after 30 s."""
    kwargs = dict(settings.kwargs)
    kwargs["connect_timeout"] = max(2, round(timeout))  # libpq's minimum is 2 s
    try:
        conn = psycopg.connect(settings.conninfo, **kwargs)
    except psycopg.Error as exc:
        cause = scrub(str(exc).removeprefix("connection failed: "))
        if isinstance(exc, psycopg.ProgrammingError) or _LIBPQ_REFUSED.search(cause):
            raise ConfigurationError(f"invalid PostgreSQL URL: {cause}") from None
        raise StoreUnavailable(cause) from None
    conn.close()


class PoolOutageFilter(logging.Filter):
    """Keeps psycopg_pool's reconnect warnings to one line per step of an outage.

    While the server is down, each of the pool's connecting threads logs every failed attempt,
    over two lines: a dozen lines a second for the one cause. This passes the first, then one
    each time the outage has lasted twice as long as at the last line passed (1 s, 2 s, 4 s,
    ... capped at a minute), each on one line. A pause of a minute without failures ends the
    outage. Other pool messages pass untouched."""

    QUIET_AFTER = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._since = self._last = self._next = 0.0
        self._step = 1.0

    def filter(self, record: logging.LogRecord) -> bool:
        """True to log ``record``, rewritten to one line; False to drop it."""
        message = record.getMessage()
        if not message.startswith("error connecting"):
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last > self.QUIET_AFTER:  # a new outage
                self._since, self._next, self._step = now, now + 1.0, 1.0
                passed = True
            elif now >= self._next:
                self._step = min(self._step * 2, 60.0)
                self._next = now + self._step
                passed = True
            else:
                passed = False
            self._last = now
            lasted = now - self._since
        if passed:
            record.msg = scrub(" ".join(message.split())) + (
                f" (unreachable for {lasted:.0f}s; retrying)" if lasted >= 1 else ""
            )
            record.args = ()
        return passed


_POOL_FILTER = PoolOutageFilter()


def open_pool(settings: Settings, name: str) -> ConnectionPool[psycopg.Connection[Any]]:
    """A pool that opens connections in the background and reopens lost ones with backoff
    (its warnings kept to one line per step of an outage: :class:`PoolOutageFilter`)."""
    pool_log = logging.getLogger("psycopg.pool")
    if _POOL_FILTER not in pool_log.filters:
        pool_log.addFilter(_POOL_FILTER)
    return ConnectionPool(
        settings.conninfo,
        kwargs=settings.kwargs,
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        # No ``reset`` hook: with one, the pool hands every returned connection to one of its
        # worker threads, and a worker's claims and acks each paid that thread's wake-up and
        # its turn at the GIL (claim round trip 1.3-1.5 -> 0.9-1.1 ms at the median under 1 ms
        # handlers at -c 8). The one connection that leaves autocommit, a handler's, is put
        # back in it by connection_release before the pool sees it.
        configure=configure,
        name=name,
        open=True,
    )
