"""Values from jobs, printed as text: control characters escaped wherever such a value reaches a
terminal or a log line.

A job's error, idempotency key, cancel-by, progress note, arguments and result hold whatever a
caller or a handler put there (an error message often quotes user input). Written raw, an ESC or
C1 sequence would clear the screen, recolour it, retitle the window or move the cursor; a raw
newline would forge a log line. So every such value goes through :func:`printable` on its way
out: C0 controls, DEL, C1 controls, the line and paragraph separators, the bidirectional
overrides and isolates (which reorder what a reader sees) and lone surrogates are written as
Python writes them in a string literal (``\\x1b``, ``\\n``, ``\\u202e``). A multi-line section
(a traceback in ``jobyard show``) keeps its newlines; a one-line context (a table cell, a log
line) escapes them too. A backslash is left as it is: the text stays readable (Windows paths,
regular expressions), and what it shows is never a control character.

:func:`json_text` is the JSON form (``--json``), and :func:`guard_logs` puts the one-line rule
on every jobyard logger, so no log line of the library carries a control character whoever
wrote the value it quotes.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

# What a terminal or a log reader could act on. JSON escapes C0 inside its strings already;
# the rest it leaves raw when not asked to escape all non-ASCII text.
_NOT_JSON_ESCAPED = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ONE_LINE = re.compile(f"[\x00-\x1f{_NOT_JSON_ESCAPED}]")
_MULTI_LINE = re.compile(f"[\x00-\x09\x0b-\x1f{_NOT_JSON_ESCAPED}]")
_IN_JSON = re.compile(f"[{_NOT_JSON_ESCAPED}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, *, multiline: bool = False) -> str:
    """``value`` as text safe to write to a terminal or a log line: every control character
    escaped in a visible form, newlines too unless ``multiline``."""
    text = value if isinstance(value, str) else str(value)
    return (_MULTI_LINE if multiline else _ONE_LINE).sub(_escape, text)


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON that keeps non-ASCII text readable, with every character a terminal
    could act on written as a ``\\uXXXX`` escape (JSON itself escapes only C0 controls)."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=str)
    return _IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class PrintableFilter(logging.Filter):
    """Escapes control characters in a record's message (newlines included: one record, one
    line) and in its traceback and stack (newlines kept), before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record where it holds a control character; always True (keep it)."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is the logging module's to report
            return True
        clean = printable(message)
        if clean != message:
            # The JSON format (_logjson) escapes the original itself.
            record.jobyard_raw_message = message
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            trace = logging.Formatter().formatException(record.exc_info)
            clean = printable(trace, multiline=True)
            if clean != trace:  # else the handler's own formatter renders it, as it would
                record.exc_text = clean
        if record.stack_info:
            record.stack_info = printable(record.stack_info, multiline=True)
        return True


_FILTER = PrintableFilter()
# Every logger of the library (tests/contract/test_printable.py checks that none is missing).
# A filter applies to the records of its own logger only, not to those of its children.
LOGGERS = (
    "jobyard",
    "jobyard.cli",
    "jobyard.cron",
    "jobyard.events",
    "jobyard.hooks",
    "jobyard.jobs",
    "jobyard.postgres",
    "jobyard.redis",
    "jobyard.redis.consumers",
    "jobyard.store",
    "jobyard.web",
    "jobyard.worker",
)


def guard_logs() -> None:
    """Put :class:`PrintableFilter` on every jobyard logger (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
