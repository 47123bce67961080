"""Connecting to Redis: URL options, the redis-py client (single node or Cluster), the Lua
scripts, and calling through dropped connections and restarts."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.cluster
import redis.exceptions
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from ..._secrets import scrub
from ...errors import ConfigurationError, StoreUnavailable

log = logging.getLogger("jobyard.redis")
T = TypeVar("T")

DEFAULT_PREFIX = "jobyard"
DEFAULT_RESULT_TTL = 24 * 3600.0  # completed jobs and their results: a day (see backend.py)
DEFAULT_FAILED_TTL = 0.0  # failed and cancelled jobs: kept until purged (the dead letter)
DEFAULT_RETRY_FOR = 20.0  # seconds a call keeps retrying while Redis is unreachable
DEFAULT_SOCKET_TIMEOUT = 30.0  # redis-py's 5 s would cut a long BLPOP or a big insert short

# Connection trouble worth waiting out: a killed connection, a restart (LOADING is a
# ConnectionError too), a Cluster failover or resharding in progress.
TRANSIENT: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
)

SCRIPT_NAMES: tuple[str, ...] = (
    "jobs_insert",
    "jobs_insert_one",
    "jobs_claim",
    "jobs_claim_one",
    "jobs_ack",
    "jobs_release",
    "jobs_unhold",
    "jobs_drop",
    "leases_renew",
    "leases_lapsed",
    "leases_reap",
    "jobs_expire",
    "jobs_cancel",
    "jobs_cancel_many",
    "jobs_retry",
    "jobs_resume",
    "jobs_retry_many",
    "jobs_list",
    "jobs_search",
    "dead_groups",
    "limits_walk",
    "jobs_purge",
    "stats_get",
    "throughput_get",
    "queues_configure",
    "seq_take",
    "batch_open",
    "batch_decide",
    "batch_close",
    "batches_reap",
    "jobs_stage",
    "jobs_publish",
    "stage_abort",
    "ready_merge",
    "wake",
    "workers_beat",
    "workers_list",
    "schedules_sync",
    "schedules_fire",
    "schedules_skip",
    "schedules_pause",
    "list_take",
    "list_settle",
    "list_recover",
)

# What each script has prepended (Redis runs a script's prelude, defining every helper in it, on
# each call: the job scripts' whole library costs 30-50 us of server time from cold, which an
# idle enqueue waits for): the job scripts the whole library, the lean ones only what they use,
# the scripts of lists other programs write their own helpers.
JOB_PRELUDE: tuple[str, ...] = ("_base.lua", "_lib.lua", "_flows.lua", "_gate.lua")
LEAN_PRELUDES: dict[str, tuple[str, ...]] = {
    "jobs_insert_one": ("_base.lua",),
    "jobs_claim_one": ("_base.lua", "_gate.lua"),
}
LIST_PRELUDE: tuple[str, ...] = ("_lists.lua",)


@dataclass(frozen=True, slots=True)
class Settings:
    """What a ``redis://``, ``rediss://`` or ``redis+cluster://`` URL asks for.

    jobyard's own query options are taken out; the rest go to redis-py as it reads them.
    """

    client_url: str  # for redis-py: scheme redis/rediss, jobyard's options removed
    cluster: bool
    # Cluster URLs may name several nodes (host1:7000,host2:7001): any one that answers will do.
    startup_nodes: tuple[tuple[str, int], ...]
    prefix: str
    result_ttl: float
    failed_ttl: float
    retry_for: float
    socket_timeout: float


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}= must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ConfigurationError(f"{name}= must not be negative, got {raw!r}")
    return value


def _nodes(hosts: str) -> tuple[tuple[str, int], ...]:
    nodes = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item, "", "6379")
        host = host.strip("[]") or "127.0.0.1"
        number = int(port) if port.isascii() and port.isdigit() else -1 if port else 6379
        if not 1 <= number <= 65535:
            raise ConfigurationError(f"bad port in Redis host {item!r}: a number from 1 to 65535")
        nodes.append((host, number))
    return tuple(nodes)


def _check_client_url(client_url: str) -> None:
    """Build one connection object as redis-py would for ``client_url``, without connecting:
    redis-py reads the URL's options only then, and an unknown one (a ``TypeError``) or a bad
    value would otherwise surface at the first command, where it reads like an outage."""
    try:
        redis.ConnectionPool.from_url(client_url).make_connection()
    except TypeError as exc:
        named = re.search(r"argument '(\w+)'", str(exc))
        what = repr(named.group(1)) if named else f"({exc})"
        raise ConfigurationError(f"invalid Redis URL: redis-py takes no option {what}") from None
    except (ValueError, redis.exceptions.RedisError) as exc:
        raise ConfigurationError(f"invalid Redis URL: {scrub(str(exc))}") from None


def parse_url(url: str) -> Settings:
    """Read a store URL; ``prefix``, ``result_ttl``, ``failed_ttl`` and ``retry_for`` are ours.
    A refusal never quotes the URL's credentials (a password redis-py split into an option
    name, a host's "port"), whichever URLs this process remembered before."""
    try:
        return _parse_url(url)
    except ConfigurationError as exc:
        raise ConfigurationError(scrub(str(exc), url)) from None


def _parse_url(url: str) -> Settings:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        raise ConfigurationError(f"not a Redis URL: scheme {scheme!r}")
    cluster = scheme.endswith("+cluster")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("prefix", "result_ttl", "failed_ttl", "retry_for", "socket_timeout"):
            ours[name] = value
        else:
            theirs.append((name, value))
    db = parts.path.strip("/")
    if (db and not (db.isascii() and db.isdigit())) or len(db) > 5:
        raise ConfigurationError(
            f"the Redis database must be a number (redis://host:6379/0), got {db[:20]!r}"
        )
    if cluster and (db not in ("", "0") or any(k == "db" and v != "0" for k, v in theirs)):
        raise ConfigurationError("Redis Cluster has database 0 only")
    client_scheme = "rediss" if scheme.startswith("rediss") else "redis"
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = _nodes(hosts)
    if len(nodes) > 1 and not cluster:
        raise ConfigurationError("several hosts in one URL need redis+cluster://")
    first = f"{userinfo}@{hosts.split(',')[0]}" if userinfo else hosts.split(",")[0]
    client_url = urlunsplit(
        parts._replace(scheme=client_scheme, netloc=first, query=urlencode(theirs))
    )
    _check_client_url(client_url)
    return Settings(
        client_url=client_url,
        cluster=cluster,
        startup_nodes=nodes,
        prefix=ours.get("prefix", DEFAULT_PREFIX),
        result_ttl=_seconds("result_ttl", ours.get("result_ttl", str(DEFAULT_RESULT_TTL))),
        failed_ttl=_seconds("failed_ttl", ours.get("failed_ttl", str(DEFAULT_FAILED_TTL))),
        retry_for=_seconds("retry_for", ours.get("retry_for", str(DEFAULT_RETRY_FOR))),
        socket_timeout=_seconds(
            "socket_timeout", ours.get("socket_timeout", str(DEFAULT_SOCKET_TIMEOUT))
        ),
    )


def make_client(settings: Settings, decode: bool = True, retries: bool = True) -> Any:
    """A thread-safe redis-py client (hiredis parses replies when it is installed).

    With ``retries``, redis-py sends a command again a few times over fresh connections (a
    killed connection costs one retry) and :func:`call` waits out longer outages such as a
    restart: for calls that are safe to repeat. Without, redis-py sends each command once
    (Cluster: no re-execution after a failed node either), for calls that are not (see
    ``_core.py``).
    """
    retry = (
        Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), 3)
        if retries
        else Retry(NoBackoff(), 0)
    )
    options: dict[str, Any] = {
        "decode_responses": decode,
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": 5.0,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": retry,
    }
    if settings.cluster:
        options.pop("health_check_interval")
        if len(settings.startup_nodes) > 1:
            parts = urlsplit(settings.client_url)
            return redis.cluster.RedisCluster(
                startup_nodes=[
                    redis.cluster.ClusterNode(h, p)  # type: ignore[no-untyped-call]
                    for h, p in settings.startup_nodes
                ],
                username=parts.username,
                password=parts.password,
                ssl=parts.scheme == "rediss",
                **options,
            )
        return redis.cluster.RedisCluster.from_url(settings.client_url, **options)
    return redis.Redis.from_url(settings.client_url, **options)


def probe(settings: Settings, timeout: float) -> None:
    """PING one node with ``timeout`` seconds to connect and answer, no retries; raise
    :class:`StoreUnavailable` naming the node and the cause (refused, timed out, failed
    authentication). Cluster: the first startup node that answers will do."""
    parts = urlsplit(settings.client_url)
    cause = ""
    for host, port in settings.startup_nodes:
        url = urlunsplit(parts._replace(netloc=_with_host(parts.netloc, host, port)))
        if settings.cluster:
            url = urlunsplit(urlsplit(url)._replace(path=""))  # Cluster has db 0 only
        client = redis.Redis.from_url(
            url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=None
        )
        try:
            client.ping()
            return
        except redis.exceptions.AuthenticationError as exc:
            raise StoreUnavailable(f"authentication failed at {host}:{port}: {exc}") from None
        except redis.exceptions.ResponseError as exc:  # NOAUTH, WRONGPASS in older servers
            raise StoreUnavailable(f"{host}:{port} refused the connection: {exc}") from None
        except redis.exceptions.RedisError as exc:
            cause = f"{_cause(exc)} at {host}:{port}"
        finally:
            client.close()
    raise StoreUnavailable(cause)


def _with_host(netloc: str, host: str, port: int) -> str:
    userinfo, at, _ = netloc.rpartition("@")
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{userinfo}{at}{where}"


def _cause(exc: BaseException) -> str:
    """redis-py's "Error 111 connecting to h:p. Connection refused." as "connection refused"."""
    text = str(exc).rstrip(".")
    _, sep, tail = text.rpartition(". ")
    return (tail if sep else text).lower() or type(exc).__name__


class Outage:
    """One log line per backoff step of an outage, however many threads are retrying.

    Every thread of a worker (claims, heartbeats, maintenance) retries on its own; logging each
    retry would print a few lines every second. Instead the first failure is logged with its
    cause, then again each time the outage has lasted twice as long as at the last line (1 s,
    2 s, 4 s, ... capped at a minute), and once when Redis answers again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._next = 0.0
        self._step = 1.0

    def failed(self, exc: BaseException) -> None:
        """A call failed with a transient error; log it if this step of the outage has not."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since, self._next, self._step = now, now + 1.0, 1.0
                log.warning("redis unreachable (%s: %s); retrying", type(exc).__name__, exc)
            elif now >= self._next:
                log.warning(
                    "redis still unreachable after %.0fs (%s: %s); retrying",
                    now - self._since,
                    type(exc).__name__,
                    exc,
                )
                self._step = min(self._step * 2, 60.0)
                self._next = now + self._step

    def answered(self) -> None:
        """A call succeeded: log the end of an outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.warning("redis reachable again after %.1fs", time.monotonic() - self._since)
                self._since = None


def never_sent(exc: BaseException) -> bool:
    """Whether a failed call surely did not run: the connection could not be opened (redis-py
    says "connecting to", or the pool found its connection not ready before sending), or Redis
    answered without running it (LOADING after a restart, TRYAGAIN or CLUSTERDOWN on Cluster).
    Any other failure may have come after Redis ran the command, its reply lost."""
    if isinstance(
        exc,
        redis.exceptions.BusyLoadingError
        | redis.exceptions.TryAgainError
        | redis.exceptions.ClusterDownError,
    ):
        return True
    text = str(exc)
    return "connecting to" in text or "Connection not ready" in text


def call(
    fn: Callable[[], T],
    retry_for: float,
    closed: Callable[[], bool],
    outage: Outage | None = None,
    retry_if: Callable[[BaseException], bool] | None = None,
) -> T:
    """Run ``fn``, retrying with capped exponential backoff while Redis is unreachable, for up
    to ``retry_for`` seconds; with ``retry_if``, only the failures it accepts (the others are
    raised at once). ``outage`` (one per backend) keeps the log to one line per step of an
    outage."""
    outage = outage or Outage()
    delay = 0.02
    deadline: float | None = None
    while True:
        try:
            result = fn()
        except TRANSIENT as exc:
            if isinstance(exc, redis.exceptions.AuthenticationError):
                raise  # wrong credentials do not heal by waiting
            if retry_if is not None and not retry_if(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + retry_for
            if closed() or now >= deadline:
                raise
            outage.failed(exc)
            time.sleep(min(delay, max(deadline - now, 0.0)))
            delay = min(delay * 2, 1.0)
        else:
            outage.answered()
            return result


class Scripts:
    """The Lua scripts, read once from ``scripts/*.lua`` and run with EVALSHA.

    redis-py's Script loads a script again after NOSCRIPT (a restarted or failed-over server
    starts with an empty script cache). Each script gets its prelude prepended: see
    :data:`JOB_PRELUDE`.
    """

    def __init__(self, client: Any) -> None:
        folder = resources.files(__package__).joinpath("scripts")

        def read(name: str) -> str:
            return folder.joinpath(name).read_text(encoding="utf-8")

        self._scripts: dict[str, Script] = {}
        for name in SCRIPT_NAMES:
            prelude = LEAN_PRELUDES.get(name, JOB_PRELUDE)
            if name.startswith("list_"):
                prelude = LIST_PRELUDE
            text = "\n".join([*(read(part) for part in prelude), read(f"{name}.lua")])
            self._scripts[name] = client.register_script(text)

    def __getitem__(self, name: str) -> Script:
        return self._scripts[name]
