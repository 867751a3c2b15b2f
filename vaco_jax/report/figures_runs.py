"""The report's figures of single runs: over training, against the forward setting, and
against the off-policyness each run measured.

Summaries against the lag level hide what happens within a run (a collapse, an ESS that falls
first) and across lag models whose levels mean different things; these figures show each run.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from vaco_jax.report.cells import CONFIDENCE
from vaco_jax.report.figures import (
    LineStyle,
    Skipped,
    error_bars,
    new_figure,
    percentile_limits,
    shared_legend,
    steps_axis,
    style_legend,
    variant_colours,
)
from vaco_jax.report.metrics import FRACTION_METRICS, OFF_POLICY_METRICS, summary_column
from vaco_jax.report.runs_table import Score, variant_names

STALENESS_METRICS = {"ess_ratio": "ESS ratio", "grad_norm": "gradient norm (log)"}
"""Per-update metrics drawn over training beside the score, per run, if present."""
LOG_SCALE_METRICS = ("grad_norm",)
"""Heavy-tailed metrics: log scale, and y limits at their finite 1st to 99th percentile
(``percentile_limits``) so that one diverging run does not stretch the axis to 1e9."""
EVENT_MARKERS = {
    "collapse": ("evaluated_score", "collapse_env_steps", "score", "x"),
    "ESS warning (drop rule)": ("ess_ratio", "drop_warning_env_steps", "ess_ratio", "v"),
}
"""Marker key -> (column of the panel row's run lines, event column of
``collapse.run_events``, column of the marked value, marker) of each run's marked events."""
OFF_POLICY_AXES = ("tv_backward", "behaviour_kl", "version_gap_mean")
"""Metrics on the x axes of the score-against-off-policyness figure."""


# ---------------------------------------------------------------- over training


def _runs_as_one_line(rows: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """x (env steps) and y of every run of ``rows`` in turn, NaN-separated: one plot call."""
    xs, ys = [], []
    for _, run in rows.groupby("run_id", sort=False):
        xs += [run["env_steps"].to_numpy(dtype=float), [np.nan]]
        ys += [run[column].to_numpy(dtype=float), [np.nan]]
    return np.concatenate(xs), np.concatenate(ys)


def _event_points(
    table: pd.DataFrame, events: pd.DataFrame, steps_column: str, value_column: str
) -> pd.DataFrame:
    """Per run of ``table`` with an event at ``events[steps_column]``: its ``variant``,
    ``env_steps`` and ``value``, its ``value_column`` there."""
    at = events[steps_column].dropna().rename("env_steps").rename_axis("run_id").reset_index()
    values = table[["run_id", "variant", "env_steps", value_column]].astype({"env_steps": float})
    return at.merge(values, on=["run_id", "env_steps"]).rename(columns={value_column: "value"})


def _staleness_rows(table: pd.DataFrame, score: Score) -> dict[str, tuple[str, str]]:
    """Metric -> (column of the per-run lines, column of the median line): the score
    (runs left NaN after diverging, the median over runs carried forward), then each finite
    ``STALENESS_METRICS`` column."""
    present = [m for m in STALENESS_METRICS if m in table.columns and table[m].notna().any()]
    return {f"normalised {score.name}": ("evaluated_score", "score")} | {
        STALENESS_METRICS[m]: (m, m) for m in present
    }


def _mark_events(
    ax: Axes, rows: pd.DataFrame, events: pd.DataFrame | None, run_column: str,
    styles: Mapping[str, LineStyle],
) -> None:
    for label, (row_column, steps_column, value_column, marker) in EVENT_MARKERS.items():
        if events is None or row_column != run_column:
            continue
        points = _event_points(rows, events, steps_column, value_column)
        ax.scatter(
            points["env_steps"], points["value"], marker=marker, s=28, zorder=3,
            color=[styles[v].colour for v in points["variant"]],
        )


def _staleness_panel(
    ax: Axes, at_lag: pd.DataFrame, events: pd.DataFrame | None, columns: tuple[str, str],
    styles: Mapping[str, LineStyle],
) -> None:
    """Each run's line (thin) and the median over runs (thick) of each variant at one lag and
    task: a median over tasks would average two curves of different shapes into neither."""
    run_column, median_column = columns
    for variant, runs in at_lag.groupby("variant", sort=True):
        style = styles[variant]
        ax.plot(*_runs_as_one_line(runs, run_column), color=style.colour, lw=0.6, alpha=0.3)
        median = runs.groupby("env_steps")[median_column].median()
        ax.plot(median.index, median.to_numpy(), lw=2, label=variant, **style.curve())
    _mark_events(ax, at_lag, events, run_column, styles)
    if run_column in LOG_SCALE_METRICS:
        ax.set_yscale("log")
    elif run_column == "ess_ratio":
        # A ratio in [0, 1]: runs at 1 throughout must not turn into an axis of 1 +- 1e-7.
        ax.set_ylim(0.0, 1.05)
    ax.grid(alpha=0.3)


def _log_ticks(ax: Axes, limits: tuple[float, float]) -> None:
    """Plain labels on a log axis (shared along its row): 1, 2 and 5 of each decade where the
    range spans at most about two decades (a clipped range often spans less than one), else
    decades alone, at most six, so that the labels never run into each other."""
    subs = (1.0, 2.0, 5.0) if limits[1] / limits[0] <= 150 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(subs=subs, numticks=6))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def figure_staleness(
    table: pd.DataFrame,
    events: pd.DataFrame | None,
    styles: Mapping[str, LineStyle],
    lags: Sequence[float],
    score: Score,
) -> Figure | Skipped:
    """Per task (its rows together) and metric a row of panels, one per lag level."""
    metrics = _staleness_rows(table, score)
    if len(metrics) == 1:
        return Skipped(f"the runs table has no finite {' or '.join(STALENESS_METRICS)}")
    tasks = sorted(table["task"].astype(str).unique())
    rows = [(task, label) for task in tasks for label in metrics]
    # At least 8 inches wide in all, for the title and the legend of a single lag level.
    figure, axes = new_figure(
        len(rows) * len(lags), panel_size=(max(4.2, 8.0 / len(lags)), 2.8), max_cols=len(lags),
        sharex=True, sharey="row",
    )
    grid = np.array(axes, dtype=object).reshape(len(rows), len(lags))
    for row_axes, (task, label) in zip(grid, rows):
        of_task = table[table["task"] == task]
        for ax, lag in zip(row_axes, lags):
            _staleness_panel(ax, of_task[of_task["lag"] == lag], events, metrics[label], styles)
        row_axes[0].set_ylabel(label if len(tasks) == 1 else f"{task}\n{label}")
        run_column = metrics[label][0]
        limits = percentile_limits(of_task[run_column], log=True) \
            if run_column in LOG_SCALE_METRICS else None
        if limits is not None:
            row_axes[0].set_ylim(*limits)
            _log_ticks(row_axes[0], limits)
    for ax, lag in zip(grid[0], lags):
        ax.set_title(f"lag {lag:g}")
    for ax in grid[-1]:
        steps_axis(ax, score.steps)
    figure.suptitle("Over training: each run (thin) and the median over its task's runs (thick)"
                    "\ngradient-norm axes at their finite 1st to 99th percentile")
    markers = [(Line2D([], [], color="grey", marker=marker, linestyle=""), label)
               for label, (*_, marker) in EVENT_MARKERS.items()]
    style_legend(figure, {v: styles[v] for v in sorted(table["variant"].unique())},
                 extra=markers)
    return figure


# ---------------------------------------------------------------- forward lag


def _forward_settings(run_table: pd.DataFrame) -> pd.DataFrame:
    """Per variant (index): ``line``, its name without epochs and minibatches (the variants
    that differ only in those are one line), and its ``epochs`` and ``minibatches``."""
    first = run_table.drop_duplicates("variant").reset_index(drop=True)
    lines = variant_names(first.assign(epochs=0, minibatches=0))
    return pd.DataFrame(
        {"line": lines.to_numpy(), "epochs": first["epochs"].to_numpy(),
         "minibatches": first["minibatches"].to_numpy()},
        index=first["variant"].to_numpy(),
    )


def figure_forward_lag(
    cell_summaries: Sequence[Mapping[str, Any]],
    fraction_means: pd.DataFrame,
    run_table: pd.DataFrame,
    lags: Sequence[float],
) -> Figure | Skipped:
    settings = _forward_settings(run_table)
    combos = sorted(
        set(zip(settings["epochs"], settings["minibatches"])), key=lambda c: (c[0] * c[1], c[0])
    )
    if len(combos) < 2:
        return Skipped("every run takes the same epochs x minibatches")
    position = {combo: i for i, combo in enumerate(combos)}

    def exact(value: float) -> dict[str, float]:
        return {"point": value, "low": value, "high": value}

    # Each panel: (variant, lag) -> interval; the score's is its IQM's, the means have none.
    panels: dict[str, dict[tuple[str, float], Mapping[str, float]]] = {
        "IQM of normalised final score": {(s["variant"], s["lag"]): s["iqm"] for s in cell_summaries}
    }
    for metric in ("clip_fraction", "filter_fraction"):
        if metric in fraction_means.columns and fraction_means[metric].notna().any():
            panels[f"{FRACTION_METRICS[metric]} (mean over runs and training)"] = {
                key: exact(value) for key, value in fraction_means[metric].dropna().items()
            }
    tv_forward = summary_column("tv_forward", "mean")
    if tv_forward in run_table.columns and run_table[tv_forward].notna().any():
        means = run_table.groupby(["variant", "lag"])[tv_forward].mean().dropna()
        panels["Forward TV (mean over runs and updates)"] = {
            key: exact(value) for key, value in means.items()
        }

    def label(line: str, lag: float) -> str:
        return line if len(lags) == 1 else f"{line}, lag {lag:g}"

    labels = sorted({label(settings.at[v, "line"], lag) for v, lag in panels[next(iter(panels))]})
    line_colours = variant_colours(labels)
    figure, axes = new_figure(len(panels), max_cols=2)
    for ax, (title, values) in zip(axes, panels.items()):
        lines: dict[str, list[tuple[int, Mapping[str, float]]]] = {}
        for (variant, lag), interval in values.items():
            row = settings.loc[variant]
            lines.setdefault(label(row["line"], lag), []).append(
                (position[(row["epochs"], row["minibatches"])], interval)
            )
        for i, name in enumerate(labels):
            if name not in lines:
                continue
            at, intervals = zip(*sorted(lines[name], key=lambda p: p[0]))
            point, error = error_bars(intervals)
            # Shifted sideways a little per line so that error bars at one setting do not overlap.
            x = np.array(at) + 0.04 * (i - (len(labels) - 1) / 2)
            ax.errorbar(x, point, yerr=error, marker="o", capsize=3, color=line_colours[name],
                        label=name)
        ax.set_title(title)
        ax.set_xticks(range(len(combos)), [f"{e}x{m} ({e * m})" for e, m in combos])
        ax.set_xlabel("epochs x minibatches (gradient steps per batch)")
        ax.grid(alpha=0.3)
    figure.suptitle(
        f"Against forward lag: final score ({CONFIDENCE:.0%} stratified bootstrap CIs), "
        "clip and filter fractions, forward TV"
    )
    shared_legend(figure, axes, labels)
    return figure


# ---------------------------------------------------------------- measured off-policyness


def figure_off_policy(
    run_table: pd.DataFrame, styles: Mapping[str, LineStyle], lags: Sequence[float]
) -> Figure | Skipped:
    means = {m: summary_column(m, "mean") for m in OFF_POLICY_AXES}
    drawn = [m for m, c in means.items() if c in run_table.columns and run_table[c].notna().any()]
    if not drawn:
        return Skipped(f"the runs table has no finite {' or '.join(OFF_POLICY_AXES)}")
    markers = dict(zip(lags, itertools.cycle("os^Dv<>p*")))
    figure, axes = new_figure(len(drawn), max_cols=2, sharey=True)
    for ax, metric in zip(axes, drawn):
        for (variant, lag), runs in run_table.groupby(["variant", "lag"], sort=True):
            ax.scatter(
                runs[means[metric]], runs["final_score"], color=styles[variant].colour,
                marker=markers[lag], alpha=0.8, label=variant,
            )
        # Behaviour KL runs to hundreds in a run that diverges; the axis keeps the others'.
        limits = percentile_limits(run_table[means[metric]], log=False)
        if limits is not None:
            ax.set_xlim(*limits)
        ax.set_xlabel(f"{OFF_POLICY_METRICS[metric]} (run mean over updates)")
        ax.set_title(f"Final score against measured {OFF_POLICY_METRICS[metric]}")
    axes[0].set_ylabel("final normalised score")
    lag_markers = [(Line2D([], [], color="grey", marker=markers[lag], linestyle=""), f"lag {lag:g}")
                   for lag in lags]
    figure.suptitle("Final score per run against measured off-policyness (x axes at the runs' "
                    "1st to 99th percentile)")
    # Colour is the algorithm and marker the lag: a variant's swept setting is not told apart.
    style_legend(figure, styles, settings=False, extra=lag_markers)
    return figure
