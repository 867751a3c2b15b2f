"""The kept gain against the staleness each method's runs met: per task (and pooled over tasks),
each (method, lag level above 0) a point at its runs' mean backward TV and its kept gain.

A table of kept shares compares methods at one lag level as if they had met equally stale
data; they need not (a method that barely moves its policy sees a small backward TV at any
lag), and a method that keeps its gain by not learning or by not moving shows here at a small
TV. Lag 0 is left out: its TV is 0 and its kept gain 1 by definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from vaco_jax.report.cells import CONFIDENCE
from vaco_jax.report.figures import (LineStyle, Skipped, new_figure, style_legend,
                                     wrapped_suptitle)
from vaco_jax.report.kept_gain import SYNC_LAG

POOLED = "pooled over tasks"
"""The title of the panel of the pooled records."""
MARKER_AREAS = (30.0, 130.0)
"""Marker areas (points squared) of the smallest and the largest lag level above 0."""
COLUMNS = 3
"""Panels per row."""
NO_TV = "the runs table records no backward TV (tv_backward)"
NO_KEPT = "no method has a defined kept gain at a lag level above 0"


def marker_areas(lags: Sequence[float]) -> dict[float, float]:
    """Each lag level above 0's marker area, growing with the level's rank, so that a method's
    points at several levels read in order."""
    lagged = sorted(lag for lag in lags if lag != SYNC_LAG)
    return dict(zip(lagged, np.linspace(*MARKER_AREAS, len(lagged)) if len(lagged) > 1
                    else [np.mean(MARKER_AREAS)]))


def drawn(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records a panel draws: above lag 0, with a kept gain and a backward TV."""
    return [r for r in records if r["lag"] != SYNC_LAG and r["kept"] is not None
            and r.get("tv_backward") is not None]


def kept_axis(records: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The kept-gain axis: the points and both reference lines (0 and 1) with a quarter of their
    span to spare. Not the intervals: a method whose synchronous gain is near 0 has an interval
    many times wider than the others', which would squash every point into a line."""
    points = [r["kept"]["point"] for r in records]
    low, high = min(0.0, *points), max(1.0, *points)
    margin = 0.25 * (high - low)
    return low - margin, high + margin


def _panel(ax: Axes, records: Sequence[Mapping[str, Any]], styles: Mapping[str, LineStyle],
           areas: Mapping[float, float]) -> None:
    """Per variant its points in lag order, joined by a thin line, each with its interval as an
    error bar; an unbounded interval (``kept_gain``) has no bar and a hollow marker instead."""
    for variant, style in styles.items():
        points = sorted((r for r in records if r["variant"] == variant), key=lambda r: r["lag"])
        if not points:
            continue
        x = np.array([r["tv_backward"] for r in points])
        kept = [r["kept"] for r in points]
        y = np.array([k["point"] for k in kept])
        ax.plot(x, y, color=style.colour, linestyle=style.linestyle, linewidth=0.8, alpha=0.5)
        bounded = [k["low"] is not None and k["high"] is not None for k in kept]
        if any(bounded):
            low = np.array([k["low"] for k, b in zip(kept, bounded) if b])
            high = np.array([k["high"] for k, b in zip(kept, bounded) if b])
            ax.errorbar(x[bounded], y[bounded], yerr=[y[bounded] - low, high - y[bounded]],
                        fmt="none", ecolor=style.colour, elinewidth=0.9, capsize=2, alpha=0.8,
                        label=variant)
        ax.scatter(x, y, s=[areas[r["lag"]] for r in points], marker=style.marker,
                   edgecolors=[style.colour] * len(points), linewidths=1.2, zorder=3,
                   facecolors=[style.colour if b else "none" for b in bounded], label=variant)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.axhline(0.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlim(left=0.0)
    ax.set_xlabel("backward TV (mean over runs of each run's mean)")
    ax.grid(alpha=0.3)


def figure_kept_gain_vs_tv(
    kept_gain: Mapping[str, Any], styles: Mapping[str, LineStyle], lags: Sequence[float]
) -> Figure | Skipped:
    """A panel per task, then one of the records pooled over tasks where there are some."""
    if "skipped" in kept_gain:
        return Skipped(kept_gain["skipped"])
    records = [*kept_gain["tasks"], *kept_gain["pooled"]]
    if all(r.get("tv_backward") is None for r in records):
        return Skipped(NO_TV)
    if not drawn(records):
        return Skipped(NO_KEPT)
    panels = {task: drawn([r for r in kept_gain["tasks"] if r["task"] == task])
              for task in sorted({r["task"] for r in kept_gain["tasks"]})}
    if kept_gain["pooled"]:
        panels[POOLED] = drawn(kept_gain["pooled"])
    areas = marker_areas(lags)
    # At least 8.5 inches in all: room for two columns of the legend's settings.
    figure, axes = new_figure(len(panels), panel_size=(max(5.0, 8.5 / len(panels)), 4.4),
                              max_cols=COLUMNS, sharey=True)
    for ax, (title, panel_records) in zip(axes, panels.items()):
        _panel(ax, panel_records, styles, areas)
        ax.set_title(title)
    axes[0].set_ylim(*kept_axis([r for panel_records in panels.values() for r in panel_records]))
    for ax in axes[::COLUMNS]:
        ax.set_ylabel(f"kept gain (IQM, {CONFIDENCE:.0%} CI)")
    wrapped_suptitle(figure, (
        "Kept gain against the backward TV its runs measured, lag levels above 0",
        "dashed: all of the synchronous gain kept, dotted: none; marker size: lag level; "
        "hollow: unbounded interval; intervals may run past the y axis"))
    sizes = [(Line2D([], [], color="grey", marker="o", linestyle="",
                     markersize=float(np.sqrt(area))), f"lag {lag:g}")
             for lag, area in areas.items()]
    shown = {r["variant"] for panel_records in panels.values() for r in panel_records}
    style_legend(figure, {v: s for v, s in styles.items() if v in shown}, extra=sizes)
    return figure
