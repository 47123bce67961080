"""Flow control: the one place where limits are read, checked and assigned to their scope.

Users write ``@app.job(rate_limit="100/s", key_concurrency=1, key_rate_limit="5/s")``,
``fn.options(key="customer:42")`` and ``app.configure_queue("reports", rate_limit="600/m",
fair=True)``; this module turns those values into the store's :class:`~jobyard.backends.base.
QueueLimits` and :class:`~jobyard.backends.base.JobLimits` (or refuses them, naming the value),
and the store's claim enforces them (its *gate*: see ``jobs_claim`` in
``docs/backend-contract.md``). What each limit means:

- a **rate** (``"N/unit"``, unit ``s``, ``m``, ``h`` or ``d``, optionally with a multiple:
  ``"5/10s"``) caps the starts of a queue's jobs, or of one job name's, across every worker,
  smoothed (a GCRA bucket kept in the store: :class:`~jobyard.backends.base.Rate`);
- **key_concurrency** caps the running jobs sharing one key (``.options(key=...)``), and
  **key_rate_limit** their starts;
- **fair** takes a queue's jobs in turns between their keys, up to
  :data:`~jobyard.backends.base.FAIR_TURN` jobs of a key per round.

A queue "without keys", refused with ``fair=True``: a queue for which this App registers jobs,
none of which can carry a key by declaration (``@app.job(key=...)``, ``key_concurrency`` or
``key_rate_limit``). The App checks it when ``configure_queue`` is called, against the jobs
registered by then; a queue with no job registered here (a producer or an admin script) is
taken on trust. ``.options(key=...)`` sets a key on any job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .backends.base import (
    MAX_KEY_CONCURRENCY,
    MAX_LIMIT_KEY,
    RATE_MAX_COUNT,
    RATE_MAX_PER,
    JobLimits,
    QueueLimits,
    Rate,
)
from .errors import ConfigurationError

__all__ = [
    "check_fair",
    "check_key",
    "check_key_concurrency",
    "job_limits",
    "parse_rate",
    "queue_limits",
]

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+?)s?\s*\Z")
RATE_RULE = '"N/s", "N/m", "N/h" or "N/d" (or "N/10s"), N from 1'


def parse_rate(value: object, label: str = "rate_limit") -> Rate | None:
    """``None``, a :class:`Rate`, or text such as ``"100/s"``, ``"600/m"``, ``"5/10s"``; else
    :class:`ConfigurationError` naming ``label`` and the value."""
    if value is None or isinstance(value, Rate):
        return value
    if not isinstance(value, str):
        raise ConfigurationError(f'{label} must be text such as "100/s", got {value!r}')
    match = _RATE_RE.match(value.lower())
    unit = None if match is None else _UNITS.get(match.group(3))
    if match is None or unit is None:
        raise ConfigurationError(f"{label} must look like {RATE_RULE}, got {value!r}")
    count, times = int(match.group(1)), int(match.group(2) or 1)
    if count < 1:
        raise ConfigurationError(f"{label} must allow at least 1 start per period, got {value!r}")
    if count > RATE_MAX_COUNT or times < 1 or unit * times > RATE_MAX_PER:
        raise ConfigurationError(
            f"{label} must be at most {RATE_MAX_COUNT} per period and the period from 1 s to "
            f"7 days, got {value!r}"
        )
    return Rate(count, unit * times)


def check_key_concurrency(value: object, label: str = "key_concurrency") -> int | None:
    """``None`` or a whole number from 1 to :data:`MAX_KEY_CONCURRENCY`, else
    :class:`ConfigurationError` with the value."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{label} must be a whole number of at least 1, got {value!r}")
    if value > MAX_KEY_CONCURRENCY:
        raise ConfigurationError(f"{label} must be at most {MAX_KEY_CONCURRENCY}, got {value!r}")
    return value


def check_key(value: object) -> str:
    """A limit key every store can hold: text of 1 to :data:`MAX_LIMIT_KEY` characters, UTF-8
    encodable, without NUL; else :class:`ConfigurationError` with the value."""
    ok = isinstance(value, str) and 0 < len(value) <= MAX_LIMIT_KEY and "\x00" not in value
    if ok and isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            ok = False
    if not ok:
        raise ConfigurationError(
            f"a limit key must be text of 1 to {MAX_LIMIT_KEY} characters without NUL or lone "
            f"surrogates, got {value!r:.80}"
        )
    return value  # type: ignore[return-value]


def queue_limits(
    rate_limit: object = None,
    key_concurrency: object = None,
    key_rate_limit: object = None,
    fair: object = False,
) -> QueueLimits:
    """The limits of ``configure_queue``, each checked (``fair`` must be a bool)."""
    if not isinstance(fair, bool):
        raise ConfigurationError(f"fair must be True or False, got {fair!r}")
    return QueueLimits(
        rate=parse_rate(rate_limit, "rate_limit"),
        key_concurrency=check_key_concurrency(key_concurrency),
        key_rate=parse_rate(key_rate_limit, "key_rate_limit"),
        fair=fair,
    )


def job_limits(
    queue: str, name: str, rate_limit: object, key_concurrency: object, key_rate_limit: object
) -> JobLimits:
    """The limits of ``@app.job``, each checked."""
    return JobLimits(queue, name, queue_limits(rate_limit, key_concurrency, key_rate_limit))


def check_fair(queue: str, fair: bool, keyed_jobs: Iterable[bool]) -> None:
    """Refuse ``fair=True`` for ``queue`` when this App registers jobs for it and none of them
    can carry a key by declaration (``keyed_jobs``: one bool per job registered for the queue).
    No job registered at all: taken on trust."""
    keyed = list(keyed_jobs)
    if fair and keyed and not any(keyed):
        raise ConfigurationError(
            f"fair=True on queue {queue!r}, whose jobs have no keys: declare one on a job of the "
            "queue (@app.job(key=...), key_concurrency or key_rate_limit), or turns between keys "
            "take none"
        )
