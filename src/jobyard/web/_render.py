"""Rendering: the Jinja2 environment (autoescape always on) and the filters the templates use.

Every value that comes from a job (arguments, results, errors, names, keys, progress notes, who
cancelled) reaches a page through Jinja2's autoescaping; no template marks such a value
``|safe``. The filters below also write control characters, bidirectional overrides and lone
surrogates visibly (``\\x1b``, ``\\u202e``), as the CLI does (:mod:`jobyard._printable`), so no
value can reorder or hide what an operator reads. The only markup built in Python is the chart
(:mod:`jobyard.web._chart`), from numbers and from text escaped there.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from .._printable import printable

SHOW_MAX = 20_000  # characters of one value a page shows; the rest is cut, saying how much


def _ts(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def when(value: Any) -> str:
    """An instant as ``2026-01-31 09:00:05 UTC``."""
    ts = _ts(value)
    if ts is None:
        return ""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "out of range"


def duration(seconds: Any) -> str:
    """A span of seconds in a few characters: ``850 ms``, ``12 s``, ``3 min 4 s``, ``2 h 5 min``,
    ``3 d 4 h``."""
    if seconds is None:
        return ""
    s = float(seconds)
    if math.isnan(s):
        return ""
    if s < 0:
        s = 0.0
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    minutes, sec = divmod(int(s), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(value: Any, now: float) -> str:
    """How long before ``now`` an instant was: ``12 s ago`` (``in 3 min`` for the future)."""
    ts = _ts(value)
    if ts is None:
        return ""
    delta = now - ts
    if abs(delta) < 1:
        return "now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def number(value: Any) -> str:
    """An integer with thousands separators (``1,234,567``)."""
    if value is None:
        return ""
    return f"{int(value):,}"


def text(value: Any) -> str:
    """A one-line value: control characters (newlines included) written visibly."""
    if value is None:
        return ""
    return printable(value)


def block(value: Any) -> str:
    """A multi-line value (a traceback): newlines kept, other control characters visible, cut
    past :data:`SHOW_MAX` characters in the middle (its two ends say the most)."""
    if value is None:
        return ""
    out = printable(str(value).rstrip(), multiline=True)
    if len(out) > SHOW_MAX:
        half = SHOW_MAX // 2
        out = f"{out[:half]}\n… {len(out) - 2 * half:,} characters cut …\n{out[-half:]}"
    return out


def pretty(value: Any) -> str:
    """A JSON value indented, non-ASCII text kept readable, control characters visible."""
    try:
        dumped = json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=False)
    except (TypeError, ValueError, RecursionError):
        dumped = repr(value)
    return block(dumped)


def short_json(value: Any, limit: int = 120) -> str:
    """A JSON value on one line, cut at ``limit`` characters."""
    try:
        dumped = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    except (TypeError, ValueError, RecursionError):
        dumped = repr(value)
    out = printable(dumped)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def lastline(value: Any) -> str:
    """The last non-empty line of an error: the exception and its message."""
    if not value:
        return ""
    lines = [line for line in str(value).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def jobid(value: Any) -> str:
    """A job id as a path segment (Redis ids keep their ``:``)."""
    return quote(str(value), safe=":")


def percent(value: Any) -> str:
    """A fraction as a percentage: ``40%``."""
    if value is None:
        return ""
    return f"{float(value) * 100:.0f}%"


class _Loader(jinja2.BaseLoader):
    """Templates from the package's ``templates`` folder (a zip or a wheel included)."""

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str | None, Any]:
        if "/" in template or "\\" in template or template.startswith("."):
            raise jinja2.TemplateNotFound(template)
        node = resources.files("jobyard.web").joinpath("templates", template)
        if not node.is_file():
            raise jinja2.TemplateNotFound(template)
        return node.read_text(encoding="utf-8"), None, lambda: True


def environment() -> jinja2.Environment:
    """The dashboard's templates: autoescaping on for every template, undefined names errors."""
    env = jinja2.Environment(
        loader=_Loader(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        duration=duration,
        ago=ago,
        number=number,
        text=text,
        block=block,
        pretty=pretty,
        short_json=short_json,
        percent=percent,
        lastline=lastline,
        jobid=jobid,
    )
    return env


def markup(html: str) -> Markup:
    """Mark HTML built by the dashboard's own code (the chart) as safe to insert."""
    return Markup(html)
