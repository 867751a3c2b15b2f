"""The headline figure of a lag study: per task, the share of its synchronous gain each method
keeps at each lag level (``kept_gain``), as a table of colours with the numbers written in.

A heatmap, not lines: twenty methods at three lags are sixty numbers a reader must compare
within a lag and along a method, which text in cells sorted by rank shows at once and twenty
overlapping lines do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure

from vaco_jax.report.cells import CONFIDENCE
from vaco_jax.report.figures import Skipped
from vaco_jax.report.kept_gain import SYNC_LAG

COLOUR_RANGE = (0.0, 2.0)
"""Kept gain at either end of the colour map, centred on 1 (all of the synchronous gain kept):
red lost gain, blue gained more than without lag; values beyond are clipped to the end colour."""
UNDEFINED_COLOUR = "lightgrey"


def _colour_map() -> Colormap:
    """Red below 1 (gain lost), white at 1, blue above; beyond the range deeper shades."""
    return colormaps["RdBu"].with_extremes(under="#4a0010", over="#001a4a")


def row_order(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The variants of one task's records, best first by their mean kept gain over the lag
    levels above 0 (lag 0 is 1 by construction); variants without a synchronous gain last."""
    means: dict[str, float] = {}
    for variant in sorted({r["variant"] for r in records}):
        points = [r["kept"]["point"] for r in records
                  if r["variant"] == variant and r["lag"] != SYNC_LAG and r["kept"] is not None]
        means[variant] = float(np.mean(points)) if points else -np.inf
    return sorted(means, key=lambda v: -means[v])


def _cell_text(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return ""
    kept = record["kept"]
    if kept is None:
        return "undefined:\nno sync gain"
    if kept["low"] is None or kept["high"] is None:
        return f"{kept['point']:.2f}\n[unbounded]"
    return f"{kept['point']:.2f}\n[{kept['low']:.2f}, {kept['high']:.2f}]"


def figure_kept_gain(kept_gain: Mapping[str, Any], lags: Sequence[float]) -> Figure | Skipped:
    """One panel per task: methods as rows sorted by ``row_order``, lag levels as columns, each
    cell coloured by its IQM kept gain with the value and its interval written in it."""
    if "skipped" in kept_gain:
        return Skipped(kept_gain["skipped"])
    records = kept_gain["tasks"]
    tasks = sorted({r["task"] for r in records})
    orders = {task: row_order([r for r in records if r["task"] == task]) for task in tasks}
    rows = max(len(order) for order in orders.values())
    label_width = 0.075 * max(len(v) for order in orders.values() for v in order)
    panel_width = label_width + 1.05 * len(lags)
    # At least wide enough for the title and tall enough for the colour bar's label.
    figure = Figure(figsize=(max(7.5, len(tasks) * panel_width + 1.2), max(4.0, 1.5 + 0.42 * rows)),
                    layout="constrained")
    axes = figure.subplots(1, len(tasks), squeeze=False)[0]
    norm = Normalize(*COLOUR_RANGE, clip=False)
    cmap = _colour_map()
    image = None
    for ax, task in zip(axes, tasks):
        order = orders[task]
        by_cell = {(r["variant"], r["lag"]): r for r in records if r["task"] == task}
        values = np.array([[np.nan if by_cell.get((v, lag)) is None
                            or by_cell[(v, lag)]["kept"] is None
                            else by_cell[(v, lag)]["kept"]["point"] for lag in lags]
                           for v in order])
        ax.set_facecolor(UNDEFINED_COLOUR)
        image = ax.imshow(values, cmap=cmap, norm=norm, aspect="auto")
        for i, variant in enumerate(order):
            for j, lag in enumerate(lags):
                value = values[i, j]
                dark = np.isfinite(value) and abs(norm(value) - 0.5) > 0.35
                ax.text(j, i, _cell_text(by_cell.get((variant, lag))), ha="center", va="center",
                        fontsize=7, color="white" if dark else "black")
        ax.set_xticks(range(len(lags)), [f"{lag:g}" for lag in lags])
        ax.set_yticks(range(len(order)), order)
        ax.set_xlabel("lag level")
        ax.set_title(task)
        ax.tick_params(length=0)
    figure.colorbar(image, ax=list(axes), extend="both", shrink=min(1.0, 6.0 / rows + 0.3),
                    label="share of the synchronous gain kept (IQM)")
    figure.suptitle(
        f"Share of the synchronous gain kept, IQM over runs [{CONFIDENCE:.0%} CI]\n"
        "(final - initial) / synchronous (final - initial); best mean over lags > 0 first; "
        "grey: undefined"
    )
    return figure
