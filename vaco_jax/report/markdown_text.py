"""The number formats and Markdown tables the sections of ``report.md`` share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vaco_jax.report.summary import Interval


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


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
