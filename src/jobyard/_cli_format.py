"""Parsing and printing for the ``jobyard`` command: durations, JSON options, tables."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.text import Text

from ._printable import json_text, printable

# --- parsing ------------------------------------------------------------------------------------

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw])")
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a bare number of seconds (``3600``, ``0.5``) or amounts with units
    ``s m h d w`` (``30s``, ``15m``, ``7d``, ``1h30m``). ``ValueError`` otherwise."""
    value = text.strip().lower()
    if _NUMBER.fullmatch(value):
        return float(value)
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{text!r} is not a duration: use seconds (3600) or 30s, 15m, 2h, 7d")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it (``1d``, ``6h``, ``90s``)."""
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


if TYPE_CHECKING:
    _ParamType = click.ParamType[float]
else:  # click before 8.4 has no generic ParamType
    _ParamType = click.ParamType


class Duration(_ParamType):
    """A click parameter holding a duration in seconds (see :func:`parse_duration`)."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a job's arguments are stored as JSON)")


def _json_option(kind: type) -> Any:
    """A click callback parsing an option's value as a JSON array or object."""
    label = "array" if kind is list else "object"

    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return kind()
        try:
            data = json.loads(value, parse_constant=_no_constant)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON ({exc}): {value!r}") from None
        if not isinstance(data, kind):
            raise click.BadParameter(f"must be a JSON {label}, got {value!r}")
        return data

    return parse


# --- output -------------------------------------------------------------------------------------


def cell(value: object, style: str = "") -> Text:
    """A value from a job (or a store) as one line of a table or of output: its control
    characters escaped (:mod:`jobyard._printable`), and never read as rich markup."""
    return Text("" if value is None else printable(value), style=style)


def block(value: str, style: str = "") -> Text:
    """A multi-line value (a traceback) for output: newlines kept, every other control
    character escaped, never read as rich markup."""
    return Text(printable(value, multiline=True), style=style)


def _console() -> Console:
    # Piped output keeps whole ids and names rather than folding them at 80 columns.
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=200 if wide else None, soft_wrap=False)


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _at(epoch: float | None) -> Text:
    """A stored epoch time for a table, in UTC; one no datetime can hold (past year 9999,
    NaN: written by something else) as the number it is."""
    if epoch is None:
        return Text("")
    try:
        moment = datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, ValueError, OSError, TypeError):
        return cell(f"not a time: {epoch!r}")
    return Text(_when(moment))


def _ago(epoch: float) -> str:
    seconds = max(time.time() - epoch, 0.0)
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _last_line(error: str | None, width: int = 70) -> str:
    lines = (error or "").strip().splitlines()
    line = lines[-1].strip() if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _iso(epoch: float | None) -> str | None:
    """An epoch time as every ``--json`` output writes times: ISO 8601 in UTC, as
    ``datetime.isoformat`` writes them (``2026-01-31T09:00:00.123456+00:00``). A stored time
    no datetime can hold (past year 9999, NaN: written by something else) is written as the
    number it is, as text, rather than failing the whole listing."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat()
    except (OverflowError, ValueError, OSError, TypeError):
        return f"not a time: {epoch!r}"


def _dumps(value: Any) -> str:
    return json_text(value)
