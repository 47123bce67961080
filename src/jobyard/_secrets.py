"""Keeping a store URL's credentials out of everything printed: output, logs, reprs, errors.

A URL can carry a secret in its userinfo (``redis://:pw@host``, a password that may hold an
unencoded ``@``) and in its query (``password=``, ``sslpassword=``, ``passfile=``, tokens).
:func:`mask_url` masks both. :func:`remember` records the literal secrets of every URL an App
opens, so :func:`scrub` can also take them out of text jobyard did not write (a driver's error,
a connection pool's warning), and :func:`check_url` refuses a URL whose password holds a
delimiter that would split it, before any parser can quote the pieces.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import ConfigurationError

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A query parameter whose value is a credential, or names where one is kept (passfile).
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|credential", re.IGNORECASE)
_PARAM = re.compile(r"(?<=[?&;])([^=&?#;\s]+)=([^&\s]*)")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_KEYWORD_IN_TEXT = re.compile(
    r"\b((?:ssl)?password|passfile)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"]+)", re.IGNORECASE
)
_MIN_LITERAL = 3  # shorter literals are not scrubbed from free text: they would maul it

_known: set[str] = set()
_lock = threading.Lock()


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """Where the credentials of ``url`` are, as [start, end) ranges: the password (from the
    userinfo's first ``:`` to the URL's last ``@``) and the value of every secret parameter.
    Where a URL is ambiguous both readings are masked: more is hidden, never less."""
    spans: list[tuple[int, int]] = []
    m = _SCHEME.match(url)
    start = m.end() if m else 0
    if m is not None:
        at = url.rfind("@", start)
        colon = url.find(":", start, at) if at >= 0 else -1
        if colon >= 0:
            spans.append((colon + 1, at))
    for p in _PARAM.finditer(url, start):
        if _SECRET_NAME.search(p.group(1)):
            spans.append(p.span(2))
    return spans


def mask_url(url: str) -> str:
    """The URL with every credential replaced by ``***``, safe to print or log.

    The userinfo runs to the last ``@`` (a password may hold an unencoded one): a URL whose
    query holds an ``@`` loses more than its password, never less."""
    masked = [False] * len(url)
    for a, b in _secret_spans(url):
        for i in range(a, b):
            masked[i] = True
    out: list[str] = []
    for i, ch in enumerate(url):
        if not masked[i]:
            out.append(ch)
        elif i == 0 or not masked[i - 1]:
            out.append(MASK)
    return "".join(out)


def secrets_of(url: str) -> set[str]:
    """The literal credentials in ``url`` (raw and percent-decoded), for :func:`scrub`."""
    found: set[str] = set()
    for a, b in _secret_spans(url):
        found.add(url[a:b])
        # the pieces a parser would see if a delimiter splits it
        found.update(re.split(r"[@#/?:&=]", url[a:b]))
    found |= {unquote(s) for s in found}
    return {s for s in found if len(s) >= _MIN_LITERAL}


def remember(url: str) -> None:
    """Record the credentials of a URL in use, so :func:`scrub` takes them out of any text."""
    new = secrets_of(url)
    if new:
        with _lock:
            _known.update(new)
        _install_filter()


def scrub(text: str, url: str | None = None) -> str:
    """``text`` with URLs masked, ``password=...`` keywords masked and every remembered
    credential replaced by ``***``: for messages that quote a driver or a pool. ``url``: the
    URL the text is about, whose credentials are taken out whether or not it was remembered
    (a parser's refusal must not depend on which URLs this process opened before)."""
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
    text = _KEYWORD_IN_TEXT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    with _lock:
        known = set(_known)
    if url is not None:
        known |= secrets_of(url)
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def forget() -> None:
    """Drop every remembered credential (for tests: each case then starts from no memory, so
    a refusal that is clean only thanks to an earlier URL's secrets is caught)."""
    with _lock:
        _known.clear()


def check_url(url: str) -> None:
    """Refuse a URL whose password holds an unencoded ``#``, ``/`` or ``?``: a parser would
    split the password there and quote a piece of it (in a "bad port" error, as a host name)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        port_text = netloc.rpartition(":")[2] if ":" in netloc.rpartition("]")[2] else ""
    except ValueError:
        parts, netloc, port_text = None, "", ""
    split = parts is not None and "@" not in netloc and "@" in url[len(parts.scheme) + 3 :]
    bad = parts is None or bool(parts.fragment)
    # userinfo, then an "@" after a "/": a password's "@" and "/" left unencoded ("S3CR@/T0KN")
    bad = bad or (parts is not None and "@" in netloc and "@" in parts.path)
    if split and parts is not None:
        # the userinfo ended early: at a "/" (the rest is in the path), a "?" (in the query) or
        # a "#": the "port" is then the password's head, or an "@" lies in the path
        bad = bad or "@" in parts.path or netloc.startswith(":")
        bad = bad or (port_text != "" and not port_text.isdigit())
        bad = bad or any("@" in k and not v for k, v in parse_qsl(parts.query, True))
    if bad:
        raise ConfigurationError(
            f"invalid store URL {mask_url(url)!r}: percent-encode the characters # / ? @ in a "
            "user name or password (%23 %2F %3F %40), and give no #fragment"
        )


class _ScrubFilter(logging.Filter):
    """Takes remembered credentials out of the records of the store drivers' loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is the logging module's to report
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _ScrubFilter()
# psycopg_pool warns with its pool's name and libpq's message; redis-py logs connection errors.
_DRIVER_LOGGERS = ("psycopg", "psycopg.pool", "redis", "redis.cluster", "redis.connection")


def _install_filter() -> None:
    for name in _DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
