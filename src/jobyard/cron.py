"""The rules of recurring schedules, pure: which cron expressions are valid, and when the next
tick after an instant is. Expressions are evaluated in UTC. Syncing schedules to the store and
firing their ticks is the workers' part: ``worker/recurring.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import croniter

from .errors import ConfigurationError


def check_cron(expression: str) -> str:
    """Validate a cron expression (5 fields, or 6 with seconds); ConfigurationError if bad."""
    if not isinstance(expression, str) or not expression.strip():
        raise ConfigurationError(f"invalid cron expression {expression!r}: it is empty")
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ConfigurationError(
            f"invalid cron expression {expression!r}: expected 5 fields "
            "(minute hour day month weekday) or 6 (with seconds)"
        )
    try:
        valid = croniter.is_valid(expression)
        if valid:
            next_tick(expression, 0.0)
    except Exception as exc:  # noqa: BLE001 - croniter raises many kinds of error on odd input
        raise ConfigurationError(f"invalid cron expression {expression!r}: {exc}") from None
    if not valid:
        raise ConfigurationError(f"invalid cron expression {expression!r}")
    return expression


def next_tick(expression: str, after: float) -> float:
    """The first tick of ``expression`` strictly after ``after`` (epoch seconds, UTC)."""
    start = datetime.fromtimestamp(after, UTC)
    second_first = len(expression.split()) == 6
    it = croniter(expression, start, second_at_beginning=second_first)
    nxt: datetime = it.get_next(datetime)
    return nxt.timestamp()
