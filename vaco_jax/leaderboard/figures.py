"""The board's figure of one task of one study: three heatmaps side by side, methods as rows
(best first by lagged score where the study's cell rule holds, else in name order) and lag
levels as columns, drawn with the report's heatmap panel on its one colour scale (white at 0,
blue at 1, red graded below 0: `COLOUR_RANGE`), so that a score at the reference and a share
that kept everything look alike:

- the normalised final score, IQM [95% CI], on the task's one reference (0 initial, 1 reference);
- the share of the synchronous gain kept in the final score;
- the share kept in the AUC (learning that lag slowed costs too).

The score comes first: it is what the rows are ranked by, and it keeps a method that learns
little synchronously from topping the board by keeping little of little.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping
from typing import Any

from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from vaco_jax.leaderboard.board import Key, TaskBoard
from vaco_jax.report.cells import CONFIDENCE
from vaco_jax.report.figures_heatmap import COLOUR_RANGE, panel

SCORE_PANEL = ("score", "normalised final score", "scores", COLOUR_RANGE,
               "score (0: initial, 1: reference)")
KEPT_PANELS = (
    ("kept", "kept share: final score", "kept", COLOUR_RANGE, "share of the synchronous gain kept"),
    ("auc_kept", "kept share: AUC", "kept", COLOUR_RANGE, "share of the synchronous gain kept"),
)
"""(record field, title, the board's records it reads, colour range, colour bar label) of each
panel, left to right."""


def panel_records(records: Mapping[Key, Any], field: str) -> dict[Key, dict[str, Any]]:
    """Each cell's interval ``field`` as the report's heatmap panel reads a cell: a JSON object
    (None where it is undefined) under the key ``field``."""
    return {cell: {field: None if (value := getattr(record, field)) is None
                   else dataclasses.asdict(value)}
            for cell, record in records.items()}


def figure_board(board: TaskBoard) -> Figure:
    """The task's three panels; a study without a kept gain has its score panel alone
    (``board.kept_skipped`` says why)."""
    lags = list(board.lags)
    panels = (SCORE_PANEL, *KEPT_PANELS) if board.kept else (SCORE_PANEL,)
    label_width = 0.075 * max(len(v) for v in board.order)
    # About 1.2 inches a cell holds its interval at this font; the height leaves room for
    # the title and the colour bars when a study has one or two methods.
    figure = Figure(figsize=(label_width + max(1.2 * len(lags), 2.6) * len(panels) + 1.0,
                             max(3.6, 1.9 + 0.42 * len(board.order))), layout="constrained")
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (key, title, source, colour_range, label) in zip(axes, panels):
        records = panel_records(board.scores if source == "scores" else board.kept, key)
        image = panel(ax, records, board.order, key, lags, Normalize(*colour_range))
        ax.set_title(title, fontsize="medium")
        figure.colorbar(image, ax=ax, location="bottom", extend="both", shrink=0.8,
                        aspect=30, pad=0.02, label=label)
    for ax in axes[1:]:
        ax.tick_params(labelleft=False)
    note = (f"IQM over runs [{CONFIDENCE:.0%} CI]. Score: 0 = mean initial policy of the task's "
            f"runs, 1 = its reference"
            + ("; kept share: (score - initial) / synchronous (score - initial)"
               if board.kept else "")
            + (f". Not ranked ({board.unranked}): rows in name order" if board.unranked
               else ". Rows by mean score over lags > 0, best first")
            + "; grey: not run or undefined.")
    if board.kept_skipped:
        note += f" No kept share: {board.kept_skipped}."
    width = int(11 * figure.get_figwidth())
    figure.suptitle("\n".join([f"{board.study.name}: {board.task}",
                               *textwrap.wrap(note, width)]), fontsize="medium")
    return figure
