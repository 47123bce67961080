"""A handler's progress report, brought within the bounds every store holds.

``base.Progress`` refuses a fraction outside 0..1 or a note past ``MAX_PROGRESS_NOTE``
characters: that is the contract's guard, so no store ever receives either. A handler's own
report must never fail its job on it, so ``current_job().progress`` passes it through
:func:`fit_progress` first."""

from __future__ import annotations

import math
import numbers

from ..backends.base import MAX_PROGRESS_NOTE


def fit_progress(
    fraction: object, note: object
) -> tuple[float | None, str | None, list[tuple[str, str]]]:
    """A progress report brought within the bounds every store holds (``base.Progress``): the
    fraction (None: not a number, ignore the report), the note, and what was changed, as
    (kind, message) pairs for the log."""
    problems: list[tuple[str, str]] = []
    value: float | None = None
    if isinstance(fraction, numbers.Number) and not isinstance(fraction, bool):
        try:
            value = float(fraction)  # type: ignore[arg-type]
        except OverflowError:  # an integer past a float's range: far outside 0..1
            value = math.inf if fraction > 0 else -math.inf  # type: ignore[operator]
        except (TypeError, ValueError):  # a complex number
            value = None
    if value is None:
        kind = type(fraction).__name__
        problems.append(("number", f"progress of type {kind} is not a number; report ignored"))
        return None, None, problems
    if math.isnan(value):
        problems.append(("nan", "progress NaN is not a number; report ignored"))
        return None, None, problems
    if not 0.0 <= value <= 1.0:
        clamped = min(max(value, 0.0), 1.0)
        problems.append(("range", f"progress {value!r} is outside 0..1; recorded as {clamped}"))
        value = clamped
    text: str | None = None
    if note is not None:
        if isinstance(note, str):
            text = note
        else:
            try:
                text = str(note)
            except Exception:  # noqa: BLE001 - a broken __str__ must not fail the job
                text = None
            kind = type(note).__name__
            kept = "dropped" if text is None else "stored as its str()"
            problems.append(("text", f"progress note of type {kind} is not text; {kept}"))
        if text is not None and len(text) > MAX_PROGRESS_NOTE:
            problems.append(
                (
                    "length",
                    f"progress note of {len(text)} characters cut to {MAX_PROGRESS_NOTE}",
                )
            )
            text = text[: MAX_PROGRESS_NOTE - 1] + "\u2026"
    return value, text, problems
