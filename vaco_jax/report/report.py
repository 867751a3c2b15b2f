"""Turns a sweep's runs table into summary statistics, figures and a Markdown report.

The runs table is long format, one row per run per evaluation point (see
``required_columns``; hyper-parameter columns are prefixed ``hp_``). Evaluations
are returns by default; a ``Score`` names another measure (the token testbed's
held-out accuracy) and what ``env_steps`` counts. Scoring:

- A *variant* is an algorithm plus every run coordinate that varies within
  that algorithm apart from lag and seed (``lag_model``, ``epochs``,
  ``minibatches``, ``hp_*``), e.g. ``vaco[tv_delta=0.1]``.
- Evaluation returns are normalised per task: 0 is the mean return of the
  initial policies (evaluations at ``env_steps == 0``) of all runs of the
  task, 1 the task's reference return: the given one, else the best final
  (un-normalised) score of any run of the task.
- A missing (NaN) evaluation, such as every evaluation after a run diverged,
  takes the value of the run's last finite evaluation.
- A run's final score is its mean normalised return over the last
  ``final_fraction`` of its evaluation points (at least one); its AUC is the
  area under its normalised learning curve with training progress in [0, 1].
- For each (variant, lag) the scores form a ``[runs per task, num_tasks]``
  matrix: runs are paired across tasks by seed order, and tasks with more runs
  than the smallest count keep their lowest seeds. Every confidence interval
  is a 95% stratified percentile bootstrap drawn with the same ``seed``.
- Whether a run's ESS fell before its score collapsed is ``vaco_jax.report.collapse``'s analysis of
  the scores as fractions of the task's reference (NaN after divergence, not carried forward)
  and ``ess_ratio``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vaco_jax.report import collapse, markdown as report_markdown, stats
from vaco_jax.run import io

HP_PREFIX = "hp_"
RUNS_FILE = "runs.parquet"
RUN_COORDINATES = ("task", "algo", "lag_model", "lag", "epochs", "minibatches", "seed")
VARIANT_COORDINATES = ("lag_model", "epochs", "minibatches")
"""Run coordinates that name a variant when they vary within an algorithm (with ``hp_*``)."""
PER_RUN_COLUMNS = ("diverged", "diverged_at")
CONFIDENCE = 0.95
AGGREGATES: dict[str, tuple[str, stats.Aggregate]] = {
    "median": ("Median", stats.aggregate_median),
    "iqm": ("IQM", stats.aggregate_iqm),
    "mean": ("Mean", stats.aggregate_mean),
    "optimality_gap": ("Optimality gap", stats.aggregate_optimality_gap),
}
FRACTION_METRICS = {
    "filter_fraction": "Filter fraction",
    "clip_fraction": "Clip fraction",
    "is_truncated_fraction": "Truncated fraction",
    "is_masked_fraction": "Masked fraction",
    "stale_dropped_fraction": "Stale-dropped fraction",
}
"""Shares of samples a stabiliser filters, clips, truncates, masks or drops, plotted if present."""
STALENESS_METRICS = {"ess_ratio": "ESS ratio", "grad_norm": "gradient norm (log)"}
"""Per-update metrics drawn over training beside the score, per run, if present."""
LOG_SCALE_METRICS = ("grad_norm",)
EVENT_MARKERS = {
    "collapse": ("evaluated_score", "collapse_env_steps", "score", "x"),
    "ESS warning (drop rule)": ("ess_ratio", "drop_warning_env_steps", "ess_ratio", "v"),
}
"""Marker key -> (column of the panel row's run lines, event column of
``collapse.run_events``, column of the marked value, marker) of each run's marked events."""
OFF_POLICY_METRICS = {
    "tv_backward": "Backward TV",
    "tv_forward": "Forward TV",
    "behaviour_kl": "Behaviour KL",
    "approx_kl": "Approx. KL",
    "version_gap_mean": "Mean version gap",
}
"""Per-update measures of how far the behaviour policy lagged, summarised per run.
``version_gap_mean`` (versions between the learner and the behaviour policy, averaged over the
update's samples: the mean staleness) compares runs of different lag models, whose lag levels
mean different things, at equal measured staleness."""
ROBUST_SUFFIXES = ("_median", "_p90")
"""Per-update robust summaries of an off-policy metric, reported too when the table has them."""
RUN_QUANTILES = {"median": 0.5, "p90": 0.9}
"""Quantiles over each run's updates reported beside the mean."""
RUN_SUMMARIES = ("mean", *RUN_QUANTILES)
OFF_POLICY_AXES = ("tv_backward", "behaviour_kl", "version_gap_mean")
"""Metrics on the x axes of the score-against-off-policyness figure."""
CURVE_POINTS = 50
"""Most evaluation points per learning curve in the curve figure (each costs one bootstrap)."""
DEFAULT_TITLE = "Policy-lag benchmark report"


@dataclasses.dataclass(frozen=True)
class Score:
    """What a runs table's evaluations measure: their ``column``, its ``name`` in the report's
    words, and what the ``env_steps`` column counts (``steps``)."""

    column: str = "eval_return"
    name: str = "return"
    steps: str = "environment steps"


def required_columns(score: Score = Score()) -> tuple[str, ...]:
    return (*RUN_COORDINATES, "run_id", "update", "env_steps", score.column, *PER_RUN_COLUMNS)


# ---------------------------------------------------------------- variants


def _hp_columns(runs: pd.DataFrame) -> list[str]:
    return sorted(c for c in runs.columns if c.startswith(HP_PREFIX))


def _format_value(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:g}"
    return str(value)


def _assignments(columns: Sequence[str], values: Sequence[Any]) -> str:
    """``"name=value,..."`` with the ``hp_`` prefix dropped from names."""
    return ",".join(f"{c.removeprefix(HP_PREFIX)}={_format_value(v)}" for c, v in zip(columns, values))


def variant_names(runs: pd.DataFrame) -> pd.Series:
    """Readable variant name for every row of a runs table, indexed like ``runs``.

    The name is the algorithm, followed in brackets by each coordinate (from
    ``lag_model``, ``epochs``, ``minibatches`` and ``hp_*``, prefix dropped)
    that takes more than one value among that algorithm's runs:
    ``ppo``, ``vaco[tv_delta=0.1]``, ``ppo[epochs=8,minibatches=4]``.
    """
    coordinates = [*VARIANT_COORDINATES, *_hp_columns(runs)]
    first_rows = runs.drop_duplicates("run_id").set_index("run_id")
    names = first_rows["algo"].astype(str)
    for algo, rows in first_rows.groupby("algo", sort=False):
        varying = [c for c in coordinates if rows[c].nunique(dropna=False) > 1]
        if varying:
            names.loc[rows.index] = [
                f"{algo}[{_assignments(varying, values)}]"
                for values in rows[varying].itertuples(index=False)
            ]
    return pd.Series(runs["run_id"].map(names).to_numpy(), index=runs.index, name="variant")


# ---------------------------------------------------------------- checking input


def _check_runs(runs: pd.DataFrame, score: Score) -> None:
    if not isinstance(runs, pd.DataFrame) or runs.empty:
        raise ValueError("runs must be a non-empty pandas DataFrame")
    required = required_columns(score)
    missing = [c for c in required if c not in runs.columns]
    if missing:
        raise ValueError(f"runs is missing columns {missing}; required: {list(required)}")
    constant = [*RUN_COORDINATES, *PER_RUN_COLUMNS, *_hp_columns(runs)]
    per_run = runs.groupby("run_id")[constant].nunique(dropna=False)
    varying = [c for c in constant if (per_run[c] > 1).any()]
    if varying:
        raise ValueError(f"runs columns {varying} must be constant within each run_id")
    first_steps = runs.groupby("run_id")["env_steps"].min()
    late = first_steps.index[first_steps != 0].tolist()
    if late:
        raise ValueError(f"every run must start with an evaluation at env_steps 0; runs: {late}")
    counts = runs.groupby("run_id")["env_steps"].nunique()
    short = counts.index[counts < 2].tolist()
    if short:
        raise ValueError(f"every run needs 2 or more distinct env_steps evaluations; runs: {short}")


def _check_options(
    tasks: Sequence[str], reference_returns: Mapping[str, float] | None, final_fraction: float
) -> None:
    if not 0.0 < final_fraction <= 1.0:
        raise ValueError(f"final_fraction must lie in (0, 1], got {final_fraction!r}")
    unknown = sorted(set(reference_returns or {}) - set(tasks))
    if unknown:
        raise ValueError(
            f"reference_returns names tasks {unknown} not in runs; allowed: {list(tasks)}"
        )


# ---------------------------------------------------------------- per-run scores


def _prepared(runs: pd.DataFrame, score: Score) -> pd.DataFrame:
    """Sorted copy with ``variant`` and ``filled_return``: the evaluations (``score.column``)
    with NaN ones carried forward."""
    table = runs.sort_values(["run_id", "env_steps"], kind="stable").reset_index(drop=True)
    table["variant"] = variant_names(table)
    table["diverged"] = table["diverged"].astype(bool)
    table["filled_return"] = table.groupby("run_id")[score.column].ffill()
    unscored = table.loc[table["filled_return"].isna(), "run_id"].unique().tolist()
    if unscored:
        raise ValueError(
            f"{score.column} must be finite at each run's first evaluation point; runs: {unscored}"
        )
    return table


def _final_returns(table: pd.DataFrame, final_fraction: float) -> pd.Series:
    """Mean un-normalised return over each run's last ``final_fraction`` of evaluations."""
    runs = table.groupby("run_id")
    # The epsilon keeps e.g. 0.3 * 10 = 3.0000000000000004 from losing a point to rounding.
    window = np.maximum(1, np.floor(final_fraction * runs["env_steps"].transform("size") + 1e-9))
    in_window = runs.cumcount(ascending=False) < window
    return table[in_window].groupby("run_id")["filled_return"].mean()


def _normalisation(
    table: pd.DataFrame, final_returns: pd.Series, reference_returns: Mapping[str, float] | None
) -> pd.DataFrame:
    """Per task: ``initial`` (mean return at env_steps 0), ``reference`` and its ``source``."""
    initial = table[table["env_steps"] == 0].groupby("task")["filled_return"].mean()
    run_task = table.drop_duplicates("run_id").set_index("run_id")["task"]
    best_final = final_returns.groupby(run_task).max()
    given = pd.Series(dict(reference_returns or {}), dtype=float)
    references = pd.DataFrame(
        {"initial": initial, "reference": best_final, "source": "best final score"}
    )
    references.loc[given.index, "reference"] = given
    references.loc[given.index, "source"] = "given"
    flat = references.index[references["reference"] == references["initial"]].tolist()
    if flat:
        raise ValueError(
            f"tasks {flat} have a reference return equal to their initial return, so scores "
            "cannot be normalised; pass reference_returns for them"
        )
    return references


def _with_scores(table: pd.DataFrame, references: pd.DataFrame, score: Score) -> pd.DataFrame:
    """Adds ``score``, the normalised ``filled_return``, and ``evaluated_score``, the same but
    NaN where the evaluation is missing (after a run diverged)."""
    task = references.loc[table["task"]]
    scores = stats.normalize_scores(
        table["filled_return"].to_numpy(), task["initial"].to_numpy(), task["reference"].to_numpy()
    )
    evaluated = np.where(table[score.column].isna(), np.nan, scores)
    return table.assign(score=scores, evaluated_score=evaluated)


def _collapse_events(
    table: pd.DataFrame, references: pd.DataFrame, score: Score,
    thresholds: collapse.Thresholds,
) -> pd.DataFrame | None:
    """``collapse.run_events`` judged on the score as a fraction of the task's reference, not on
    the normalised score: a warm-started run that falls below its initial level without gaining
    first must count as a collapse. Tasks with a reference that is not positive (a fraction of
    it has no meaning) are left out."""
    judged = table[table["task"].isin(references.index[references["reference"] > 0])]
    fraction = judged[score.column] / references.loc[judged["task"], "reference"].to_numpy()
    return collapse.run_events(judged.assign(reference_fraction=fraction),
                               score_column="reference_fraction", thresholds=thresholds)


def _run_table(
    table: pd.DataFrame, final_returns: pd.Series, references: pd.DataFrame
) -> pd.DataFrame:
    """One row per run: its last row of ``table`` plus ``final_return``, ``final_score``, ``auc``."""
    runs = table.groupby("run_id").tail(1).set_index("run_id")
    runs["final_return"] = final_returns
    task = references.loc[runs["task"]]
    runs["final_score"] = stats.normalize_scores(
        runs["final_return"].to_numpy(), task["initial"].to_numpy(), task["reference"].to_numpy()
    )
    runs["auc"] = table.groupby("run_id")[["score", "env_steps"]].apply(
        lambda run: float(stats.area_under_curve(run["score"], run["env_steps"]))
    )
    return runs.reset_index()


# ---------------------------------------------------------------- cells


@dataclasses.dataclass(frozen=True)
class _Cell:
    """The runs of one (variant, lag) that enter its score matrices.

    ``condition`` is what a baseline must share besides the lag level: the lag model and the
    forward setting (``lag_model``, ``epochs``, ``minibatches``); ``hparams`` the values of the
    swept hyper-parameters its runs set (NaN, unset, left out). ``runs`` holds the paired
    runs with a ``slot`` column (their row in the matrices); ``scores`` and ``auc`` are
    ``[runs per task, num_tasks]``.
    """

    variant: str
    algo: str
    condition: tuple[str, int, int]
    hparams: Mapping[str, float]
    lag: float
    num_runs: int
    num_diverged: int
    runs: pd.DataFrame
    scores: np.ndarray
    auc: np.ndarray


def _paired(cell_runs: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    """Keeps the lowest-seed ``min count`` runs of each task; ``slot`` pairs them across tasks."""
    ordered = cell_runs.sort_values(["seed", "run_id"])
    ordered = ordered.assign(slot=ordered.groupby("task").cumcount())
    per_task = ordered.groupby("task").size().reindex(tasks, fill_value=0)
    return ordered[ordered["slot"] < per_task.min()]


def _matrix(paired: pd.DataFrame, column: str, tasks: Sequence[str]) -> np.ndarray:
    return paired.pivot(index="slot", columns="task", values=column)[list(tasks)].to_numpy()


def _cells(
    run_table: pd.DataFrame, tasks: Sequence[str]
) -> tuple[list[_Cell], list[dict[str, Any]]]:
    """Cells with runs on every task, and the (variant, lag) pairs that lack some task."""
    cells, incomplete = [], []
    for (variant, lag), cell_runs in run_table.groupby(["variant", "lag"], sort=True):
        missing = sorted(set(tasks) - set(cell_runs["task"]))
        if missing:
            incomplete.append({"variant": variant, "lag": float(lag), "missing_tasks": missing})
            continue
        paired = _paired(cell_runs, tasks)
        cells.append(
            _Cell(
                variant=variant,
                algo=str(cell_runs["algo"].iloc[0]),
                condition=(
                    str(cell_runs["lag_model"].iloc[0]),
                    int(cell_runs["epochs"].iloc[0]),
                    int(cell_runs["minibatches"].iloc[0]),
                ),
                hparams={
                    column.removeprefix(HP_PREFIX): float(value)
                    for column, value in cell_runs[_hp_columns(cell_runs)].iloc[0].items()
                    if np.isfinite(value)
                },
                lag=float(lag),
                num_runs=len(cell_runs),
                num_diverged=int(cell_runs["diverged"].sum()),
                runs=paired,
                scores=_matrix(paired, "final_score", tasks),
                auc=_matrix(paired, "auc", tasks),
            )
        )
    return cells, incomplete


def _interval(estimate: tuple[float, float, float]) -> dict[str, float]:
    point, low, high = estimate
    return {"point": point, "low": low, "high": high}


def _bootstrap_interval(
    scores: np.ndarray, aggregate: stats.Aggregate, reps: int, seed: int
) -> dict[str, float]:
    estimate = stats.stratified_bootstrap_ci(
        scores, aggregate, reps=reps, confidence=CONFIDENCE, seed=seed
    )
    return _interval(estimate)


def _cell_summary(cell: _Cell, reps: int, seed: int) -> dict[str, Any]:
    return {
        "variant": cell.variant,
        "algo": cell.algo,
        "lag": cell.lag,
        "num_runs": cell.num_runs,
        "runs_per_task": int(cell.scores.shape[0]),
        "num_diverged": cell.num_diverged,
        **{
            key: _bootstrap_interval(cell.scores, aggregate, reps, seed)
            for key, (_, aggregate) in AGGREGATES.items()
        },
        "auc_iqm": _bootstrap_interval(cell.auc, stats.aggregate_iqm, reps, seed),
    }


def _task_summaries(
    run_table: pd.DataFrame, tasks: Sequence[str], reps: int, seed: int
) -> list[dict[str, Any]]:
    """Each (variant, lag)'s scores on each task alone, when there are several tasks.

    Pooled aggregates can hide a task: one task at its maximum at every lag and another that
    degrades average to a mild slope. A task's entry is what the report of that task's runs
    alone gives (every run of the task, same bootstrap seed), so it exists even where the
    variant has no runs on another task yet.
    """
    if len(tasks) < 2:
        return []
    records = []
    for (variant, lag, task), runs in run_table.groupby(["variant", "lag", "task"], sort=True):
        ordered = runs.sort_values(["seed", "run_id"])
        scores, auc = (ordered[[column]].to_numpy() for column in ("final_score", "auc"))
        records.append({
            "variant": variant,
            "algo": str(ordered["algo"].iloc[0]),
            "lag": float(lag),
            "task": str(task),
            "runs": len(ordered),
            "iqm": _bootstrap_interval(scores, stats.aggregate_iqm, reps, seed),
            "mean": _bootstrap_interval(scores, stats.aggregate_mean, reps, seed),
            "auc_iqm": _bootstrap_interval(auc, stats.aggregate_iqm, reps, seed),
        })
    return records


def _improvements(
    cells: Sequence[_Cell], focus_algo: str, reps: int, seed: int
) -> list[dict[str, Any]]:
    """P(focus variant > baseline) per lag, for each focus_algo variant and each baseline.

    Baselines are the variants of every other algorithm at the same lag under the same lag
    model (a level means another lag distribution under another model) and forward setting
    (epochs and minibatches set how far the learner moves from the data, as the lag does), at
    the same value of every swept hyper-parameter both set (a learning rate swept for every
    algorithm pairs like with like; a threshold only the focus sweeps pairs with every baseline).
    """
    def comparable(focus: _Cell, baseline: _Cell) -> bool:
        shared = focus.hparams.keys() & baseline.hparams.keys()
        return (baseline.algo != focus_algo and baseline.lag == focus.lag
                and baseline.condition == focus.condition
                and all(focus.hparams[name] == baseline.hparams[name] for name in shared))

    focus_cells = sorted((c for c in cells if c.algo == focus_algo), key=lambda c: (c.lag, c.variant))
    records = []
    for focus in focus_cells:
        for baseline in (c for c in cells if comparable(focus, c)):
            estimate = stats.stratified_bootstrap_ci_pair(
                focus.scores,
                baseline.scores,
                stats.probability_of_improvement,
                reps=reps,
                confidence=CONFIDENCE,
                seed=seed,
            )
            records.append(
                {
                    "lag": focus.lag,
                    "variant": focus.variant,
                    "baseline": baseline.variant,
                    "probability": _interval(estimate),
                }
            )
    return records


def _learning_curve(
    cell: _Cell, table: pd.DataFrame, tasks: Sequence[str], reps: int, seed: int
) -> dict[str, np.ndarray]:
    """IQM normalised return with its interval at up to ``CURVE_POINTS`` env-step values.

    Runs are interpolated linearly onto the union of their evaluation steps, up
    to the shortest run's last step so that no run is extrapolated.
    """
    rows = table[table["run_id"].isin(cell.runs["run_id"])]
    by_run = dict(tuple(rows.groupby("run_id")))
    end = min(run["env_steps"].max() for run in by_run.values())
    grid = np.unique(rows["env_steps"].to_numpy(dtype=float))
    grid = grid[grid <= end]
    grid = grid[np.unique(np.linspace(0, len(grid) - 1, min(len(grid), CURVE_POINTS)).round().astype(int))]
    curves = np.empty((cell.scores.shape[0], len(tasks), len(grid)))
    column = {task: m for m, task in enumerate(tasks)}
    for run in cell.runs.itertuples():
        points = by_run[run.run_id]
        curves[run.slot, column[run.task]] = np.interp(grid, points["env_steps"], points["score"])
    estimates = np.array(
        [
            stats.stratified_bootstrap_ci(
                curves[..., p], stats.aggregate_iqm, reps=reps, confidence=CONFIDENCE, seed=seed
            )
            for p in range(len(grid))
        ]
    )
    point, low, high = estimates.T
    return {"env_steps": grid, "point": point, "low": low, "high": high}


def _fraction_means(table: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, lag): mean over runs of each run's training mean of each fraction metric."""
    present = [m for m in FRACTION_METRICS if m in table.columns]
    per_run = table.groupby(["variant", "lag", "run_id"])[present].mean()
    return per_run.groupby(["variant", "lag"]).mean()


def _off_policy_columns(table: pd.DataFrame) -> list[str]:
    """The off-policy metrics in ``table``, each followed by its robust per-update summaries."""
    columns = []
    for metric in OFF_POLICY_METRICS:
        candidates = [metric, *(metric + suffix for suffix in ROBUST_SUFFIXES)]
        columns += [c for c in candidates if c in table.columns]
    return columns


def _run_off_policy(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: mean, median and 90th percentile over its logged updates of each off-policy metric.

    Columns are ``{metric}[{summary}]``, e.g. ``tv_backward[p90]`` (brackets
    keep them apart from per-update columns such as ``tv_backward_p90``); NaN
    updates are left out and a run with none finite gets NaN.
    """
    columns = _off_policy_columns(table)
    grouped = table.groupby("run_id")[columns]
    means = grouped.mean()
    parts = {_summary_column(c, "mean"): means[c] for c in columns}
    for name, level in RUN_QUANTILES.items():
        quantiles = grouped.quantile(level)
        parts.update({_summary_column(c, name): quantiles[c] for c in columns})
    return pd.DataFrame(parts, index=means.index)


def _summary_column(metric: str, summary: str) -> str:
    return f"{metric}[{summary}]"


def _off_policy_summaries(run_table: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Per (variant, lag): mean over runs of each run's off-policy summaries."""
    summarised = [_summary_column(c, name) for c in columns for name in RUN_SUMMARIES]
    means = run_table.groupby(["variant", "lag"])[summarised].mean()
    return [
        {
            "variant": variant,
            "lag": float(lag),
            **{
                c: {name: _finite_or_none(row[_summary_column(c, name)]) for name in RUN_SUMMARIES}
                for c in columns
            },
        }
        for (variant, lag), row in means.iterrows()
    ]


def _finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


# ---------------------------------------------------------------- figures


@dataclasses.dataclass(frozen=True)
class _Skipped:
    """A figure that was not drawn, and why."""

    reason: str


def _colours(variants: Sequence[str]) -> dict[str, Any]:
    palette = matplotlib.colormaps["tab10" if len(variants) <= 10 else "tab20"]
    return {v: palette(i % palette.N) for i, v in enumerate(variants)}


def _new_figure(
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


def _shared_legend(figure: Figure, axes: Sequence[Axes], order: Sequence[str]) -> None:
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


def _error_bars(intervals: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
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
        point, error = _error_bars([s[key] for s in rows])
        x = np.array([s["lag"] for s in rows]) + dodge
        ax.errorbar(x, point, yerr=error, marker="o", capsize=3, color=colour, label=variant)
    _lag_axis(ax, lags)


def _figure_aggregates(
    summaries: Sequence[Mapping[str, Any]], colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure:
    figure, axes = _new_figure(len(AGGREGATES), max_cols=2)
    for ax, (key, (label, _)) in zip(axes, AGGREGATES.items()):
        _plot_against_lag(ax, summaries, key, colours, lags)
        ax.set_title(label + (" (lower is better)" if key == "optimality_gap" else ""))
        ax.set_ylabel(f"{label} of normalised final score")
    figure.suptitle(f"Final scores against lag ({CONFIDENCE:.0%} stratified bootstrap CIs)")
    _shared_legend(figure, axes, list(colours))
    return figure


def _figure_curves(
    curves: Mapping[tuple[str, float], Mapping[str, np.ndarray]],
    colours: Mapping[str, Any],
    lags: Sequence[float],
    score: Score,
) -> Figure:
    # A shared score axis, so that panels compare across lag levels at a glance.
    figure, axes = _new_figure(len(lags), sharey=True)
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
    _shared_legend(figure, axes, list(colours))
    return figure


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
    """Panel row -> (column of the per-run lines, column of the median line): the score
    (runs left NaN after diverging, the median over runs carried forward), then each finite
    ``STALENESS_METRICS`` column."""
    present = [m for m in STALENESS_METRICS if m in table.columns and table[m].notna().any()]
    return {f"normalised {score.name}": ("evaluated_score", "score")} | {
        STALENESS_METRICS[m]: (m, m) for m in present
    }


def _mark_events(
    ax: Axes, rows: pd.DataFrame, events: pd.DataFrame | None, run_column: str,
    colours: Mapping[str, Any],
) -> None:
    for label, (row_column, steps_column, value_column, marker) in EVENT_MARKERS.items():
        if events is None or row_column != run_column:
            continue
        points = _event_points(rows, events, steps_column, value_column)
        ax.scatter(
            points["env_steps"], points["value"], marker=marker, s=28, zorder=3,
            color=[colours[v] for v in points["variant"]],
        )
        ax.scatter([], [], marker=marker, color="grey", label=label)


def _staleness_panel(
    ax: Axes, at_lag: pd.DataFrame, events: pd.DataFrame | None, columns: tuple[str, str],
    colours: Mapping[str, Any],
) -> None:
    """Each run's line (thin) and the median over runs (thick) of each variant at one lag."""
    run_column, median_column = columns
    for variant, runs in at_lag.groupby("variant", sort=True):
        ax.plot(*_runs_as_one_line(runs, run_column), color=colours[variant], lw=0.6, alpha=0.3)
        median = runs.groupby("env_steps")[median_column].median()
        ax.plot(median.index, median.to_numpy(), color=colours[variant], lw=2, label=variant)
    _mark_events(ax, at_lag, events, run_column, colours)
    if run_column in LOG_SCALE_METRICS:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)


def _figure_staleness(
    table: pd.DataFrame,
    events: pd.DataFrame | None,
    colours: Mapping[str, Any],
    lags: Sequence[float],
    score: Score,
) -> Figure | _Skipped:
    rows = _staleness_rows(table, score)
    if len(rows) == 1:
        return _Skipped(f"the runs table has no finite {' or '.join(STALENESS_METRICS)}")
    figure, axes = _new_figure(
        len(rows) * len(lags), panel_size=(4.2, 2.8), max_cols=len(lags), sharex=True,
        sharey="row",
    )
    grid = np.array(axes, dtype=object).reshape(len(rows), len(lags))
    for row_axes, (label, columns) in zip(grid, rows.items()):
        for ax, lag in zip(row_axes, lags):
            _staleness_panel(ax, table[table["lag"] == lag], events, columns, colours)
        row_axes[0].set_ylabel(label)
    for ax, lag in zip(grid[0], lags):
        ax.set_title(f"lag {lag:g}")
    for ax in grid[-1]:
        ax.set_xlabel(score.steps)
    figure.suptitle("Over training: each run (thin) and the median over runs (thick)")
    _shared_legend(figure, axes, [*colours, *EVENT_MARKERS])
    return figure


def _figure_auc(
    summaries: Sequence[Mapping[str, Any]], colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure:
    figure, (ax,) = _new_figure(1, panel_size=(6.5, 4.2))
    _plot_against_lag(ax, summaries, "auc_iqm", colours, lags)
    ax.set_ylabel("IQM of normalised AUC")
    ax.set_title(f"Area under the learning curve ({CONFIDENCE:.0%} CIs)")
    _shared_legend(figure, [ax], list(colours))
    return figure


def _figure_tasks(
    task_summaries: Sequence[Mapping[str, Any]],
    tasks: Sequence[str],
    colours: Mapping[str, Any],
    lags: Sequence[float],
) -> Figure:
    figure, axes = _new_figure(
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
    _shared_legend(figure, axes, list(colours))
    return figure


def _figure_fractions(
    means: pd.DataFrame, colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure | _Skipped:
    drawn = [m for m in means.columns if means[m].notna().any()]
    if not drawn:
        return _Skipped(f"the runs table has no finite {' or '.join(FRACTION_METRICS)}")
    figure, axes = _new_figure(len(drawn), max_cols=2)
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
    _shared_legend(figure, axes, list(colours))
    return figure


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


def _figure_forward_lag(
    cell_summaries: Sequence[Mapping[str, Any]],
    fraction_means: pd.DataFrame,
    run_table: pd.DataFrame,
    lags: Sequence[float],
) -> Figure | _Skipped:
    settings = _forward_settings(run_table)
    combos = sorted(
        set(zip(settings["epochs"], settings["minibatches"])), key=lambda c: (c[0] * c[1], c[0])
    )
    if len(combos) < 2:
        return _Skipped("every run takes the same epochs x minibatches")
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
    tv_forward = _summary_column("tv_forward", "mean")
    if tv_forward in run_table.columns and run_table[tv_forward].notna().any():
        means = run_table.groupby(["variant", "lag"])[tv_forward].mean().dropna()
        panels["Forward TV (mean over runs and updates)"] = {
            key: exact(value) for key, value in means.items()
        }

    def label(line: str, lag: float) -> str:
        return line if len(lags) == 1 else f"{line}, lag {lag:g}"

    labels = sorted({label(settings.at[v, "line"], lag) for v, lag in panels[next(iter(panels))]})
    colours = _colours(labels)
    figure, axes = _new_figure(len(panels), max_cols=2)
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
            point, error = _error_bars(intervals)
            # Shifted sideways a little per line so that error bars at one setting do not overlap.
            x = np.array(at) + 0.04 * (i - (len(labels) - 1) / 2)
            ax.errorbar(x, point, yerr=error, marker="o", capsize=3, color=colours[name],
                        label=name)
        ax.set_title(title)
        ax.set_xticks(range(len(combos)), [f"{e}x{m} ({e * m})" for e, m in combos])
        ax.set_xlabel("epochs x minibatches (gradient steps per batch)")
        ax.grid(alpha=0.3)
    figure.suptitle(
        f"Against forward lag: final score ({CONFIDENCE:.0%} stratified bootstrap CIs), "
        "clip and filter fractions, forward TV"
    )
    _shared_legend(figure, axes, labels)
    return figure


def _figure_improvement(
    improvements: Sequence[Mapping[str, Any]],
    focus_algo: str,
    colours: Mapping[str, Any],
    lags: Sequence[float],
) -> Figure | _Skipped:
    if not improvements:
        return _Skipped(
            f"no lag has complete cells of both {focus_algo!r} and another algorithm"
        )
    panel_lags = [lag for lag in lags if any(r["lag"] == lag for r in improvements)]
    single_focus = len({r["variant"] for r in improvements}) == 1
    labels = [r["baseline"] if single_focus else f"{r['variant']} vs {r['baseline']}"
              for r in improvements]
    bars = max(sum(r["lag"] == lag for r in improvements) for lag in panel_lags)
    # Wide enough for the bar labels beside a 3.5-inch plot (about 0.08 in a character).
    width = 3.5 + 0.08 * max(len(label) for label in labels)
    figure, axes = _new_figure(len(panel_lags), panel_size=(width, 0.9 + 0.4 * bars), max_cols=2)
    for ax, lag in zip(axes, panel_lags):
        at_lag = [i for i, r in enumerate(improvements) if r["lag"] == lag]
        point, error = _error_bars([improvements[i]["probability"] for i in at_lag])
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


# ---------------------------------------------------------------- writing


def _figure_off_policy(
    run_table: pd.DataFrame, colours: Mapping[str, Any], lags: Sequence[float]
) -> Figure | _Skipped:
    means = {m: _summary_column(m, "mean") for m in OFF_POLICY_AXES}
    drawn = [m for m, c in means.items() if c in run_table.columns and run_table[c].notna().any()]
    if not drawn:
        return _Skipped(f"the runs table has no finite {' or '.join(OFF_POLICY_AXES)}")
    markers = dict(zip(lags, itertools.cycle("os^Dv<>p*")))
    figure, axes = _new_figure(len(drawn), max_cols=2, sharey=True)
    for ax, metric in zip(axes, drawn):
        for (variant, lag), runs in run_table.groupby(["variant", "lag"], sort=True):
            ax.scatter(
                runs[means[metric]], runs["final_score"], color=colours[variant],
                marker=markers[lag], alpha=0.8, label=variant,
            )
        ax.set_xlabel(f"{OFF_POLICY_METRICS[metric]} (run mean over updates)")
        ax.set_title(f"Final score against measured {OFF_POLICY_METRICS[metric]}")
    axes[0].set_ylabel("final normalised score")
    lag_labels = [f"lag {lag:g}" for lag in lags]
    for lag, label in zip(lags, lag_labels):  # marker key: empty grey series
        axes[0].scatter([], [], color="grey", marker=markers[lag], label=label)
    figure.suptitle("Final score per run against measured off-policyness")
    _shared_legend(figure, axes, [*colours, *lag_labels])
    return figure


def _save_figure(figure: Figure, out_dir: Path, stem: str) -> dict[str, str]:
    """Writes ``stem.png`` and ``stem.pdf``; returns their names by format."""
    files = {}
    for fmt in ("png", "pdf"):
        files[fmt] = f"{stem}.{fmt}"
        io.atomic_write(
            out_dir / files[fmt], lambda temporary: figure.savefig(temporary, format=fmt, dpi=150)
        )
        # The first save fixed the layout; solving it again for every format doubles the cost.
        figure.set_layout_engine("none")
    return files


# ---------------------------------------------------------------- summary


def _variant_records(run_table: pd.DataFrame) -> list[dict[str, Any]]:
    hp_columns = _hp_columns(run_table)
    records = []
    for variant, rows in run_table.groupby("variant", sort=True):
        first = rows.iloc[0]
        set_hps = [c for c in hp_columns if pd.notna(first[c])]
        records.append(
            {
                "variant": variant,
                "algo": str(first["algo"]),
                "lag_models": sorted(rows["lag_model"].astype(str).unique()),
                "epochs": int(first["epochs"]),
                "minibatches": int(first["minibatches"]),
                "hyperparameters": _assignments(set_hps, [first[c] for c in set_hps]),
                "num_runs": len(rows),
            }
        )
    return records


def _run_overview(table: pd.DataFrame, run_table: pd.DataFrame) -> dict[str, Any]:
    return {
        "tasks": sorted(run_table["task"].astype(str).unique()),
        "lag_models": sorted(run_table["lag_model"].astype(str).unique()),
        "lags": sorted(float(lag) for lag in run_table["lag"].unique()),
        "seeds": sorted(int(seed) for seed in run_table["seed"].unique()),
        "num_runs": len(run_table),
        "num_diverged": int(run_table["diverged"].sum()),
        "final_env_steps": sorted({int(s) for s in run_table["env_steps"]}),
        "eval_points": sorted({int(n) for n in table.groupby("run_id").size()}),
        "variants": _variant_records(run_table),
    }


def _diverged_runs(run_table: pd.DataFrame) -> list[dict[str, Any]]:
    diverged = run_table[run_table["diverged"]].sort_values(["variant", "lag", "task", "seed"])
    return [
        {
            "run_id": str(r.run_id),
            "task": str(r.task),
            "variant": r.variant,
            "lag": float(r.lag),
            "seed": int(r.seed),
            "diverged_at": int(r.diverged_at),
            "last_finite_return": float(r.filled_return),
        }
        for r in diverged.itertuples()
    ]


def _figure_builders(
    cell_summaries: Sequence[Mapping[str, Any]],
    task_summaries: Sequence[Mapping[str, Any]],
    tasks: Sequence[str],
    curves: Mapping[tuple[str, float], Mapping[str, np.ndarray]],
    fraction_means: pd.DataFrame,
    table: pd.DataFrame,
    events: pd.DataFrame | None,
    run_table: pd.DataFrame,
    improvements: Sequence[Mapping[str, Any]],
    focus_algo: str,
    colours: Mapping[str, Any],
    lags: Sequence[float],
    score: Score,
) -> dict[str, tuple[str, Callable[[], Figure | _Skipped]]]:
    """File stem -> (caption, drawing function) of every figure, in report order.

    The per-task figure is drawn only for several tasks: with one, it is the aggregate figure.
    """
    per_task = {
        "fig_tasks": (
            "Final score and AUC against lag, per task",
            lambda: _figure_tasks(task_summaries, tasks, colours, lags),
        ),
    } if len(tasks) > 1 else {}
    return {
        "fig_aggregates": (
            "Aggregate final scores against lag",
            lambda: _figure_aggregates(cell_summaries, colours, lags),
        ),
        **per_task,
        "fig_learning_curves": (
            "IQM learning curves per lag level",
            lambda: _figure_curves(curves, colours, lags, score),
        ),
        "fig_staleness_diagnostics": (
            f"Normalised {score.name}, ESS ratio and gradient norm over training, per run and "
            "median, with each run's collapse and ESS warning marked",
            lambda: _figure_staleness(table, events, colours, lags, score),
        ),
        "fig_auc": (
            "IQM of the area under the learning curve against lag",
            lambda: _figure_auc(cell_summaries, colours, lags),
        ),
        "fig_filter_clip": (
            "Filtered, clipped, truncated, masked and dropped fractions against lag",
            lambda: _figure_fractions(fraction_means, colours, lags),
        ),
        "fig_forward_lag": (
            "Final score, clip and filter fractions and forward TV against epochs x minibatches",
            lambda: _figure_forward_lag(cell_summaries, fraction_means, run_table, lags),
        ),
        "fig_score_vs_off_policy": (
            "Final score per run against measured backward TV, behaviour KL and mean version gap",
            lambda: _figure_off_policy(run_table, colours, lags),
        ),
        "fig_probability_of_improvement": (
            f"Probability of improvement of {focus_algo} over each baseline",
            lambda: _figure_improvement(improvements, focus_algo, colours, lags),
        ),
    }


def write_report(
    runs: pd.DataFrame,
    out_dir: str | os.PathLike[str],
    *,
    score: Score = Score(),
    reference_returns: dict[str, float] | None = None,
    focus_algo: str = "vaco",
    final_fraction: float = 0.1,
    reps: int = 2000,
    seed: int = 0,
    title: str | None = None,
    collapse_thresholds: collapse.Thresholds = collapse.Thresholds(),
) -> dict[str, Any]:
    """Scores a sweep's runs table and writes the report into ``out_dir``.

    Args:
      runs: the runs table, one row per run per evaluation point: the columns
        of ``required_columns(score)``, any ``hp_*`` columns, and training metrics of
        which those of ``FRACTION_METRICS`` are plotted against lag and those of
        ``STALENESS_METRICS`` over training per run, if present; the off-policy
        metrics of ``OFF_POLICY_METRICS`` (with any ``*_median``/``*_p90``
        per-update summaries of them) are summarised per run and per (variant,
        lag), and the final score plotted against the run means of
        ``tv_backward``, ``behaviour_kl`` and ``version_gap_mean``, if present;
        ``ess_ratio``, if present, is set against each run's collapse
        (``vaco_jax.report.collapse``).
      out_dir: folder of the report, created if needed; report files already
        there are replaced, each atomically.
      score: what the evaluations measure (default: returns in ``eval_return``
        at environment steps).
      reference_returns: per-task evaluation that normalises to 1; tasks left out
        use the best final score of any of their runs.
      focus_algo: algorithm whose probability of improvement over the variants
        of every other algorithm is reported.
      final_fraction: share of each run's last evaluation points averaged into
        its final score, in (0, 1].
      reps: bootstrap resamples per confidence interval.
      seed: seed of every bootstrap.
      title: heading of ``report.md``.
      collapse_thresholds: when a run collapses and when its ESS warns, for the
        ESS-versus-collapse table (``vaco_jax.report.collapse``).

    Writes ``runs.parquet`` (``runs`` as given), ``summary.json``, ``report.md``
    and each figure as ``fig_*.png`` and ``fig_*.pdf``; a figure without data
    is skipped and the report says why. Returns the summary written to
    ``summary.json``.
    """
    _check_runs(runs, score)
    tasks = sorted(runs["task"].astype(str).unique())
    _check_options(tasks, reference_returns, final_fraction)
    table = _prepared(runs, score)
    final_returns = _final_returns(table, final_fraction)
    references = _normalisation(table, final_returns, reference_returns)
    table = _with_scores(table, references, score)
    off_policy_columns = _off_policy_columns(table)
    run_table = _run_table(table, final_returns, references).join(
        _run_off_policy(table), on="run_id"
    )
    cells, incomplete = _cells(run_table, tasks)
    cell_summaries = [_cell_summary(cell, reps, seed) for cell in cells]
    task_summaries = _task_summaries(run_table, tasks, reps, seed)
    improvements = _improvements(cells, focus_algo, reps, seed)
    overview = _run_overview(table, run_table)
    events = _collapse_events(table, references, score, collapse_thresholds)
    builders = _figure_builders(
        cell_summaries,
        task_summaries,
        tasks,
        {(c.variant, c.lag): _learning_curve(c, table, tasks, reps, seed) for c in cells},
        _fraction_means(table),
        table,
        events,
        run_table,
        improvements,
        focus_algo,
        _colours(sorted(run_table["variant"].unique())),
        overview["lags"],
        score,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[str, str]] = {}
    for stem, (caption, draw) in builders.items():
        drawn = draw() if cells else _Skipped("no variant has runs on every task at any lag")
        if isinstance(drawn, _Skipped):
            figures[stem] = {"caption": caption, "skipped": drawn.reason}
        else:
            figures[stem] = {"caption": caption, **_save_figure(drawn, out, stem)}

    summary = {
        "title": title or DEFAULT_TITLE,
        "score": dataclasses.asdict(score),
        "focus_algo": focus_algo,
        "final_fraction": final_fraction,
        "confidence": CONFIDENCE,
        "reps": reps,
        "seed": seed,
        "run": overview,
        "normalisation": {
            str(task): {
                "initial": float(row.initial),
                "reference": float(row.reference),
                "source": str(row.source),
            }
            for task, row in references.iterrows()
        },
        "cells": cell_summaries,
        "task_cells": task_summaries,
        "incomplete_cells": incomplete,
        "probability_of_improvement": improvements,
        "off_policy_metrics": off_policy_columns,
        "off_policy": _off_policy_summaries(run_table, off_policy_columns),
        "diverged_runs": _diverged_runs(run_table),
        "ess_collapse": collapse.summary(events, collapse_thresholds),
        "figures": figures,
    }
    io.write_table(out / RUNS_FILE, runs)
    io.write_text(out / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    io.write_text(out / "report.md", report_markdown.markdown(summary))
    return summary
