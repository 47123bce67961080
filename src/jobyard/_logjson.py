"""The worker's log lines: human-readable (the default) or one JSON object per line
(``jobyard worker --log-format json``), through ``logging`` either way.

A JSON line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``; a job's outcome
line (``jobyard.jobs``) adds ``id``, ``name``, ``queue``, ``attempt``, ``max_attempts``,
``outcome``, ``duration`` (seconds), ``error`` (the exception's last line), ``worker_id`` and
``workflow_id``; a line with a traceback adds ``exc``. Values are written as JSON escapes them,
and every character a terminal could act on as a ``\\uXXXX`` escape (``_printable.json_text``),
so a job's text can neither break a line nor forge one. The human format keeps the escaping
filter of ``_printable`` (control characters written visibly).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ._printable import json_text

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object (see the module's docstring)."""
        # The escaping filter keeps the message it rewrote for the human format: JSON escapes
        # it here instead, losing nothing.
        message = getattr(record, "jobyard_raw_message", None)
        if message is None:
            message = record.getMessage()
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        fields = getattr(record, "jobyard", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json_text(line)


def configure(level: str | int, log_format: str = "text") -> None:
    """Send every log line to stderr in ``log_format`` ("text" or "json") from ``level`` up."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
