"""The throughput chart, drawn on the server as inline SVG: no chart library, no script.

Bars per bucket, completed stacked under failed, a y scale rounded to a readable number, a few
time labels, and a native tooltip (``<title>``) per bar. Colours come from the stylesheet
(classes ``done`` and ``fail``). Every number is formatted here; the only text is the labels and
tooltips, escaped with :func:`html.escape`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from ._data import Bucket


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (min 1)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= value:
            return math.ceil(float(m * power))
    return int(10 * power)  # pragma: no cover - the loop always returns


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


def _per(step: int) -> str:
    return "min" if step == 60 else f"{step // 60} min"


def chart(buckets: Sequence[Bucket], step: int, *, label: str) -> str:
    """The large chart: ``buckets`` oldest first, ``step`` seconds each."""
    width, height = 960, 200
    left, right, top, bottom = 44, 8, 10, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(len(buckets), 1)
    peak = max((b.completed + b.failed for b in buckets), default=0)
    ymax = nice_ceiling(peak)
    slot = plot_w / n
    bar = max(slot * 0.78, 1.0)
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'preserveAspectRatio="none" aria-label="{escape(label)}">'
    ]
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        out.append(
            f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_tick(ymax * frac)}</text>"
        )
    for i, b in enumerate(buckets):
        x = left + i * slot + (slot - bar) / 2
        total = b.completed + b.failed
        h_done = plot_h * b.completed / ymax
        h_fail = plot_h * b.failed / ymax
        tip = (
            f"{_clock(b.start)} UTC, per {_per(step)}: {b.completed:,} completed, "
            f"{b.failed:,} failed"
        )
        out.append(f"<g><title>{escape(tip)}</title>")
        # The hover target spans the whole slot, so a thin or empty bar still has a tooltip.
        out.append(
            f'<rect class="hit" x="{left + i * slot:.2f}" y="{top}" width="{slot:.2f}" '
            f'height="{plot_h}"/>'
        )
        if total:
            y_done = top + plot_h - h_done
            out.append(
                f'<rect class="done" x="{x:.2f}" y="{y_done:.2f}" width="{bar:.2f}" '
                f'height="{h_done:.2f}"/>'
            )
            if b.failed:
                out.append(
                    f'<rect class="fail" x="{x:.2f}" y="{y_done - h_fail:.2f}" '
                    f'width="{bar:.2f}" height="{max(h_fail, 1.0):.2f}"/>'
                )
        out.append("</g>")
    if buckets:
        marks = [0, len(buckets) // 2, len(buckets) - 1]
        for i, anchor in zip(marks, ("start", "middle", "end"), strict=True):
            x = left + i * slot + slot / 2
            out.append(
                f'<text class="axis" x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}">'
                f"{_clock(buckets[i].start)}</text>"
            )
    out.append(
        f'<line class="base" x1="{left}" x2="{width - right}" y1="{top + plot_h}" '
        f'y2="{top + plot_h}"/>'
    )
    out.append("</svg>")
    return "".join(out)


def _tick(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def sparkline(buckets: Sequence[Bucket], step: int, *, label: str) -> str:
    """A small chart for a table row: the same bars, no axes."""
    width, height = 120, 26
    n = max(len(buckets), 1)
    peak = max((b.completed + b.failed for b in buckets), default=0)
    ymax = max(peak, 1)
    slot = width / n
    bar = max(slot * 0.8, 0.6)
    done = sum(b.completed for b in buckets)
    failed = sum(b.failed for b in buckets)
    tip = f"{label}: {done:,} completed, {failed:,} failed, per {_per(step)} bars"
    out = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" preserveAspectRatio="none" '
        f'role="img" aria-label="{escape(tip)}"><title>{escape(tip)}</title>'
    ]
    for i, b in enumerate(buckets):
        if not b.completed and not b.failed:
            continue
        x = i * slot + (slot - bar) / 2
        h_done = (height - 1) * b.completed / ymax
        h_fail = (height - 1) * b.failed / ymax
        if b.completed:
            out.append(
                f'<rect class="done" x="{x:.2f}" y="{height - h_done:.2f}" width="{bar:.2f}" '
                f'height="{h_done:.2f}"/>'
            )
        if b.failed:
            out.append(
                f'<rect class="fail" x="{x:.2f}" y="{height - h_done - h_fail:.2f}" '
                f'width="{bar:.2f}" height="{max(h_fail, 1.0):.2f}"/>'
            )
    out.append(f'<line class="base" x1="0" x2="{width}" y1="{height - 0.5}" y2="{height - 0.5}"/>')
    out.append("</svg>")
    return "".join(out)
