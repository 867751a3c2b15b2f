"""The number formats and Markdown tables the sections of ``report.md`` share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vaco_jax.report.summary_fields import Interval
from vaco_jax.report.summary import Normalisation

NOT_NORMALISED = "not normalised"
"""What a report or board says of a task whose summary gives no scale to read its scores on."""


def fmt(value: float) -> str:
    return f"{value:.3f}"


def fmt_optional(value: float | None) -> str:
    return "n/a" if value is None else fmt(value)


def fmt_interval(interval: Interval) -> str:
    return f"{fmt(interval.point)} [{fmt(interval.low)}, {fmt(interval.high)}]"


def fmt_kept(interval: Interval | None) -> str:
    """A kept share, or why it has none: a ratio over no gain means nothing."""
    if interval is None:
        return "undefined (no synchronous gain)"
    if interval.low is None or interval.high is None:
        return f"{fmt(interval.point)} [unbounded]"
    return fmt_interval(interval)


def is_scale(normalisation: Normalisation) -> bool:
    """Whether a task's normalisation is a scale to read its scores on: two distinct finite
    ends, as the report writer makes them; a summary from someone else's folder may hold any
    numbers there (0 = nan, 1 = inf), never to be shown as a scale."""
    initial, reference = normalisation.initial, normalisation.reference
    return math.isfinite(initial) and math.isfinite(reference) and initial != reference


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
