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
from matplotlib.colors import Colormap, LinearSegmentedColormap, Normalize
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from vaco_jax.report.cells import CONFIDENCE
from vaco_jax.report.figures import Skipped, wrapped_suptitle
from vaco_jax.report.kept_gain import SYNC_LAG

COLOUR_RANGE = (-1.0, 1.0)
"""The one colour scale of every share of a gain (a kept share, a normalised score): white at 0
(nothing kept; the initial policies' level), blue at 1 (all of the synchronous gain kept; the
reference reached), red graded below 0 down to -1, so that -0.3 and -63 differ; beyond either
end, that end's deeper shade (a share above 1, gained more than without lag, or below -1)."""
UNDEFINED_COLOUR = "lightgrey"
UNDEFINED_HATCH = "//"
"""Undefined cells (no synchronous gain, or not run) are hatched grey: no colour of the scale,
not even 0's white, reads as one of them."""


def colour_map() -> Colormap:
    """Red below the centre, pure white at it, blue above; beyond the range deeper shades.
    RdBu's own centre is a light grey (#f7f7f7), which a panel of cells all at the centre shows
    as a grey block, the colour of undefined cells; RdBu's eleven colours with a white centre
    are RdBu otherwise."""
    anchors = colormaps["RdBu"](np.linspace(0.0, 1.0, 11))
    anchors[5] = (1.0, 1.0, 1.0, 1.0)
    # An odd number of levels has one at the centre: the centre is white itself.
    return LinearSegmentedColormap.from_list("kept_gain", anchors, N=255).with_extremes(
        under="#4a0010", over="#001a4a")


def row_order(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The variants of one task's records, best first by their mean kept gain over the lag
    levels above 0 (lag 0 is 1 by construction), ties (several methods that all reach the
    maximum) broken by their mean AUC kept gain; variants without a synchronous gain last."""
    def mean_over_lags(variant: str, key: str) -> float:
        points = [r[key]["point"] for r in records
                  if r["variant"] == variant and r["lag"] != SYNC_LAG and r[key] is not None]
        return float(np.mean(points)) if points else -np.inf

    variants = sorted({r["variant"] for r in records})
    return sorted(variants, key=lambda v: (-mean_over_lags(v, "kept"),
                                           -mean_over_lags(v, "auc_kept")))


MEASURES = {"kept": "final score", "auc_kept": "AUC"}
"""The kept shares drawn side by side for each task: of the end point, and of the area, which
also shows learning that lag slowed."""


def _cell_text(record: Mapping[str, Any] | None, key: str) -> str:
    if record is None:
        return ""
    kept = record[key]
    if kept is None:
        return "undefined:\nno sync gain"
    if kept["low"] is None or kept["high"] is None:
        return f"{kept['point']:.2f}\n[unbounded]"
    return f"{kept['point']:.2f}\n[{kept['low']:.2f}, {kept['high']:.2f}]"


def panel(
    ax: Axes, by_cell: Mapping[tuple[str, float], Mapping[str, Any]], order: Sequence[str],
    key: str, lags: Sequence[float], norm: Normalize,
) -> AxesImage:
    """One task's shares of one measure (``key`` of each record): a row per variant in
    ``order``, a column per lag, coloured under ``norm`` with the value and its interval
    written in (the leaderboard draws its normalised scores with it too)."""
    def point(variant: str, lag: float) -> float:
        record = by_cell.get((variant, lag))
        return np.nan if record is None or record[key] is None else record[key]["point"]

    values = np.array([[point(v, lag) for lag in lags] for v in order])
    ax.set_facecolor(UNDEFINED_COLOUR)  # shows through the undefined cells (NaN)
    ax.patch.set_hatch(UNDEFINED_HATCH)
    ax.patch.set_hatchcolor("grey")
    image = ax.imshow(values, cmap=colour_map(), norm=norm, aspect="auto")
    for i, variant in enumerate(order):
        for j, lag in enumerate(lags):
            dark = np.isfinite(values[i, j]) and abs(norm(values[i, j]) - 0.5) > 0.35
            ax.text(j, i, _cell_text(by_cell.get((variant, lag)), key), ha="center",
                    va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(lags)), [f"{lag:g}" for lag in lags])
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("lag level")
    ax.tick_params(length=0)
    return image


def figure_kept_gain(kept_gain: Mapping[str, Any], lags: Sequence[float]) -> Figure | Skipped:
    """A row of two panels per task, the kept share of the final score and of the AUC: methods
    as rows in ``row_order`` (by the final score's, in both panels), lag levels as columns,
    each cell coloured by its IQM kept share with the value and its interval written in it."""
    if "skipped" in kept_gain:
        return Skipped(kept_gain["skipped"])
    records = kept_gain["tasks"]
    tasks = sorted({r["task"] for r in records})
    orders = {task: row_order([r for r in records if r["task"] == task]) for task in tasks}
    label_width = 0.075 * max(len(v) for order in orders.values() for v in order)
    heights = [1.0 + 0.42 * len(orders[task]) for task in tasks]
    # At least tall enough for the colour bar's label (the title wraps to the width).
    figure = Figure(figsize=(max(7.5, label_width + 2.6 * len(lags) + 1.6),
                             max(4.0, 1.0 + sum(heights))), layout="constrained")
    grid = figure.subplots(len(tasks), len(MEASURES), squeeze=False, sharey="row",
                           gridspec_kw={"height_ratios": heights})
    norm = Normalize(*COLOUR_RANGE, clip=False)
    for row_axes, task in zip(grid, tasks):
        by_cell = {(r["variant"], r["lag"]): r for r in records if r["task"] == task}
        for ax, (key, measure) in zip(row_axes, MEASURES.items()):
            image = panel(ax, by_cell, orders[task], key, lags, norm)
            ax.set_title(f"{task}: {measure}", fontsize="medium")
        row_axes[1].tick_params(labelleft=False)
    figure.colorbar(image, ax=grid.ravel().tolist(), extend="both",
                    shrink=min(1.0, 6.0 / sum(len(o) for o in orders.values()) + 0.3),
                    label="share of the synchronous gain kept (IQM)")
    sentences = (f"Share of the synchronous gain kept, IQM over runs [{CONFIDENCE:.0%} CI]: "
                 "(score - initial) / synchronous (score - initial)",
                 "AUC: the mean score over training; rows by mean kept final score over lags > 0, "
                 "best first; hatched grey: undefined or not run")
    wrapped_suptitle(figure, sentences)
    return figure
