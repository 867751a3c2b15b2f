"""The report's figures of summaries against lag, and the drawing helpers every figure shares.

Each figure function returns a matplotlib ``Figure``, built without pyplot so that no figure
stays registered once the report is written, or a ``Skipped`` saying why the runs table has no
data for it. Variants keep one colour across every figure of a report.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vaco_jax.report.cells import AGGREGATES, CONFIDENCE
from vaco_jax.report.metrics import FRACTION_METRICS
from vaco_jax.report.runs_table import Score


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A figure that was not drawn, and why."""

    reason: str


def variant_colours(labels: Sequence[str]) -> dict[str, Any]:
    """One colour per label (a variant, a line), in order, from a palette with enough distinct
    colours."""
    palette = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {v: palette(i % palette.N) for i, v in enumerate(labels)}


def new_figure(
    panels: int,
    *,
    panel_size: tuple[float, float] = (5.0, 3.6),
    max_cols: int = 3,
    sharex: bool = False,
    sharey: bool | str = False,
) -> tuple[Figure, list[Axes]]:
    """A figure of ``panels`` axes in rows of at most ``max_cols``, with room for a legend."""
    cols = min(panels, max_cols)
    rows = math.ceil(panels / cols)
    size = (panel_size[0] * cols, panel_size[1] * rows + 0.8)
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False, sharex=sharex, sharey=sharey).ravel().tolist()
    for unused in axes[panels:]:
        unused.set_visible(False)
    return figure, axes[:panels]


def shared_legend(figure: Figure, axes: Sequence[Axes], order: Sequence[str]) -> None:
    """One legend below all panels, each label once, in ``order``."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    labels = [label for label in order if label in entries]
    if labels:
        handles = [entries[label] for label in labels]
        # As many columns as fit the figure's width (about 0.09 in a character at this size).
        column_width = 0.6 + 0.09 * max(len(label) for label in labels)
        fitting = max(1, int(figure.get_figwidth() // column_width))
        figure.legend(handles, labels, loc="outside lower center",
                      ncols=min(len(labels), 4, fitting))


def error_bars(intervals: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Points ``[n]`` and matplotlib's asymmetric error bars ``[2, n]``."""
    point, low, high = (np.array([i[k] for i in intervals]) for k in ("point", "low", "high"))
    return point, np.stack([point - low, high - point])


def _lag_axis(ax: Axes, lags: Sequence[float]) -> None:
    ax.set_xticks(lags, [f"{lag:g}" for lag in lags])
    ax.set_xlabel("lag level")
    ax.grid(alpha=0.3)


def _plot_against_lag(
    ax: Axes,
    summaries: Sequence[Mapping[str, Any]],
    key: str,
    colours: Mapping[str, Any],
    lags: Sequence[float],
) -> None:
    """One line per variant of ``summary[key]`` with its interval as error bars."""
    span = (max(lags) - min(lags)) or 1.0
    for i, (variant, colour) in enumerate(colours.items()):
        rows = sorted((s for s in summaries if s["variant"] == variant), key=lambda s: s["lag"])
        if not rows:
            continue
        # Shifted sideways a little per variant so that error bars at one lag do not overlap.
        dodge = 0.012 * span * (i - (len(colours) - 1) / 2)
        point, error = error_bars([s[key] for s in rows])
        x = np.array([s["lag"] for s in rows]) + dodge
        ax.errorbar(x, point, yerr=error, marker="o", capsize=3, color=colour, label=variant)
    _lag_axis(ax, lags)


def figure_aggregates(
    summaries: Sequence[Mapping[str, Any]], colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure:
    figure, axes = new_figure(len(AGGREGATES), max_cols=2)
    for ax, (key, (label, _)) in zip(axes, AGGREGATES.items()):
        _plot_against_lag(ax, summaries, key, colours, lags)
        ax.set_title(label + (" (lower is better)" if key == "optimality_gap" else ""))
        ax.set_ylabel(f"{label} of normalised final score")
    figure.suptitle(f"Final scores against lag ({CONFIDENCE:.0%} stratified bootstrap CIs)")
    shared_legend(figure, axes, list(colours))
    return figure


def figure_curves(
    curves: Mapping[tuple[str, float], Mapping[str, np.ndarray]],
    colours: Mapping[str, Any],
    lags: Sequence[float],
    score: Score,
) -> Figure:
    # A shared score axis, so that panels compare across lag levels at a glance.
    figure, axes = new_figure(len(lags), sharey=True)
    for ax, lag in zip(axes, lags):
        for variant, colour in colours.items():
            curve = curves.get((variant, lag))
            if curve is None:
                continue
            steps = curve["env_steps"]
            ax.plot(steps, curve["point"], color=colour, label=variant)
            ax.fill_between(steps, curve["low"], curve["high"], color=colour, alpha=0.2, lw=0)
        ax.set_title(f"lag {lag:g}")
        ax.set_xlabel(score.steps)
        ax.set_ylabel(f"IQM normalised {score.name}")
        ax.grid(alpha=0.3)
    figure.suptitle(f"Learning curves (IQM over runs and tasks, shaded {CONFIDENCE:.0%} CI)")
    shared_legend(figure, axes, list(colours))
    return figure


def figure_auc(
    summaries: Sequence[Mapping[str, Any]], colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure:
    figure, (ax,) = new_figure(1, panel_size=(6.5, 4.2))
    _plot_against_lag(ax, summaries, "auc_iqm", colours, lags)
    ax.set_ylabel("IQM of normalised AUC")
    ax.set_title(f"Area under the learning curve ({CONFIDENCE:.0%} CIs)")
    shared_legend(figure, [ax], list(colours))
    return figure


def figure_tasks(
    task_summaries: Sequence[Mapping[str, Any]],
    tasks: Sequence[str],
    colours: Mapping[str, Any],
    lags: Sequence[float],
) -> Figure:
    figure, axes = new_figure(
        2 * len(tasks), panel_size=(4.4, 3.4), max_cols=len(tasks), sharex=True
    )
    rows = (("iqm", "IQM of normalised final score"), ("auc_iqm", "IQM of normalised AUC"))
    for row, (key, label) in enumerate(rows):
        for column, task in enumerate(tasks):
            ax = axes[row * len(tasks) + column]
            summaries = [s for s in task_summaries if s["task"] == task]
            _plot_against_lag(ax, summaries, key, colours, lags)
            ax.set_title(task)
            ax.set_ylabel(label)
    figure.suptitle(f"Final score and AUC against lag, per task ({CONFIDENCE:.0%} bootstrap CIs)")
    shared_legend(figure, axes, list(colours))
    return figure


def figure_fractions(
    means: pd.DataFrame, colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure | Skipped:
    drawn = [m for m in means.columns if means[m].notna().any()]
    if not drawn:
        return Skipped(f"the runs table has no finite {' or '.join(FRACTION_METRICS)}")
    figure, axes = new_figure(len(drawn), max_cols=2)
    for ax, metric in zip(axes, drawn):
        by_variant = means[metric].dropna()
        for variant, colour in colours.items():
            if variant in by_variant.index.get_level_values("variant"):
                series = by_variant.loc[variant]
                ax.plot(series.index, series.to_numpy(), marker="o", color=colour, label=variant)
        _lag_axis(ax, lags)
        ax.set_ylabel(f"{FRACTION_METRICS[metric].lower()} (mean over runs and training)")
        ax.set_title(FRACTION_METRICS[metric])
    figure.suptitle("Share of samples filtered, clipped, truncated, masked or dropped against lag")
    shared_legend(figure, axes, list(colours))
    return figure


def figure_improvement(
    improvements: Sequence[Mapping[str, Any]],
    focus_algo: str,
    colours: Mapping[str, Any],
    lags: Sequence[float],
) -> Figure | Skipped:
    if not improvements:
        return Skipped(
            f"no lag has complete cells of both {focus_algo!r} and another algorithm"
        )
    panel_lags = [lag for lag in lags if any(r["lag"] == lag for r in improvements)]
    single_focus = len({r["variant"] for r in improvements}) == 1
    labels = [r["baseline"] if single_focus else f"{r['variant']} vs {r['baseline']}"
              for r in improvements]
    bars = max(sum(r["lag"] == lag for r in improvements) for lag in panel_lags)
    # Wide enough for the bar labels beside a 3.5-inch plot (about 0.08 in a character).
    width = 3.5 + 0.08 * max(len(label) for label in labels)
    figure, axes = new_figure(len(panel_lags), panel_size=(width, 0.9 + 0.4 * bars), max_cols=2)
    for ax, lag in zip(axes, panel_lags):
        at_lag = [i for i, r in enumerate(improvements) if r["lag"] == lag]
        point, error = error_bars([improvements[i]["probability"] for i in at_lag])
        positions = np.arange(len(at_lag))[::-1]
        # Coloured by the focus variant, to tell several of them apart.
        bar_colours = [colours[improvements[i]["variant"]] for i in at_lag]
        ax.barh(positions, point, xerr=error, capsize=3, color=bar_colours, alpha=0.8)
        ax.set_yticks(positions, [labels[i] for i in at_lag])
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel(f"P({focus_algo} > baseline)")
        ax.set_title(f"lag {lag:g}")
    figure.suptitle(f"Probability of improvement of {focus_algo} ({CONFIDENCE:.0%} CIs)")
    return figure
