"""Cells, the (variant, lag) groups of runs, and their bootstrap summaries.

For each (variant, lag) the final scores form a ``[runs per task, num_tasks]`` matrix: runs
are paired across tasks by seed order, and tasks with more runs than the smallest count keep
their lowest seeds. Every confidence interval is a 95% stratified percentile bootstrap drawn
with the same ``seed``, so that intervals of one report differ by their runs only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.report import stats
from vaco_jax.report.runs_table import setting_columns, setting_name

CONFIDENCE = 0.95
AGGREGATES: dict[str, tuple[str, stats.Aggregate]] = {
    "median": ("Median", stats.aggregate_median),
    "iqm": ("IQM", stats.aggregate_iqm),
    "mean": ("Mean", stats.aggregate_mean),
    "optimality_gap": ("Optimality gap", stats.aggregate_optimality_gap),
}
CURVE_POINTS = 50
"""Most evaluation points per learning curve in the curve figure (each costs one bootstrap)."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """The runs of one (variant, lag) that enter its score matrices.

    ``condition`` is what a baseline must share besides the lag level: the lag model and the
    forward setting (``lag_model``, ``epochs``, ``minibatches``); ``settings`` the values of the
    swept hyper-parameters and config axes its runs set (NaN, unset, left out). ``runs`` holds
    the paired runs with a ``slot`` column (their row in the matrices); ``scores`` and ``auc``
    (normalised), ``raw_scores`` (final scores in the testbed's units) and ``gains`` and
    ``auc_gains`` (raw final score and raw AUC less the run's first evaluation) are
    ``[runs per task, num_tasks]``.
    """

    variant: str
    algo: str
    condition: tuple[str, int, int]
    settings: Mapping[str, float]
    lag: float
    num_runs: int
    num_diverged: int
    runs: pd.DataFrame
    scores: np.ndarray
    auc: np.ndarray
    raw_scores: np.ndarray
    gains: np.ndarray
    auc_gains: np.ndarray


def _paired(cell_runs: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    """Keeps the lowest-seed ``min count`` runs of each task; ``slot`` pairs them across tasks."""
    ordered = cell_runs.sort_values(["seed", "run_id"])
    ordered = ordered.assign(slot=ordered.groupby("task").cumcount())
    per_task = ordered.groupby("task").size().reindex(tasks, fill_value=0)
    return ordered[ordered["slot"] < per_task.min()]


def _matrix(paired: pd.DataFrame, column: str, tasks: Sequence[str]) -> np.ndarray:
    return paired.pivot(index="slot", columns="task", values=column)[list(tasks)].to_numpy()


def cells(run_table: pd.DataFrame, tasks: Sequence[str]) -> tuple[list[Cell], list[dict[str, Any]]]:
    """Cells with runs on every task, and the (variant, lag) pairs that lack some task."""
    complete, incomplete = [], []
    for (variant, lag), cell_runs in run_table.groupby(["variant", "lag"], sort=True):
        missing = sorted(set(tasks) - set(cell_runs["task"]))
        if missing:
            incomplete.append({"variant": variant, "lag": float(lag), "missing_tasks": missing})
            continue
        paired = _paired(cell_runs, tasks)
        complete.append(
            Cell(
                variant=variant,
                algo=str(cell_runs["algo"].iloc[0]),
                condition=(
                    str(cell_runs["lag_model"].iloc[0]),
                    int(cell_runs["epochs"].iloc[0]),
                    int(cell_runs["minibatches"].iloc[0]),
                ),
                settings={
                    setting_name(column): float(value)
                    for column, value in cell_runs[setting_columns(cell_runs)].iloc[0].items()
                    if np.isfinite(value)
                },
                lag=float(lag),
                num_runs=len(cell_runs),
                num_diverged=int(cell_runs["diverged"].sum()),
                runs=paired,
                scores=_matrix(paired, "final_score", tasks),
                auc=_matrix(paired, "auc", tasks),
                raw_scores=_matrix(paired, "raw_final", tasks),
                gains=_matrix(paired, "gain", tasks),
                auc_gains=_matrix(paired, "auc_gain", tasks),
            )
        )
    return complete, incomplete


def _interval(estimate: tuple[float, float, float]) -> dict[str, float]:
    point, low, high = estimate
    return {"point": point, "low": low, "high": high}


def bootstrap_interval(
    scores: np.ndarray, aggregate: stats.Aggregate, reps: int, seed: int
) -> dict[str, float]:
    """``aggregate`` of ``scores`` ``[runs, tasks]`` with its stratified bootstrap interval at
    ``CONFIDENCE``, as a JSON object (``point``, ``low``, ``high``)."""
    estimate = stats.stratified_bootstrap_ci(
        scores, aggregate, reps=reps, confidence=CONFIDENCE, seed=seed
    )
    return _interval(estimate)


def _raw_by_task(
    raw_scores: np.ndarray, initial: np.ndarray, tasks: Sequence[str], reps: int, seed: int
) -> dict[str, dict[str, Any]]:
    """Per task, in the testbed's units: the mean first evaluation and the final score's IQM with
    its interval. Normalised numbers pooled over tasks have no raw twin (tasks differ in units),
    so the raw ones beside them are per task."""
    return {
        task: {
            "initial": float(initial[:, m].mean()),
            "iqm": bootstrap_interval(raw_scores[:, [m]], stats.aggregate_iqm, reps, seed),
        }
        for m, task in enumerate(tasks)
    }


def cell_summary(cell: Cell, tasks: Sequence[str], reps: int, seed: int) -> dict[str, Any]:
    """A cell's run counts, the interval of every aggregate of its final scores and of the IQM of
    its AUC, and per task its raw initial and final scores (``raw``)."""
    return {
        "variant": cell.variant,
        "algo": cell.algo,
        "lag": cell.lag,
        "num_runs": cell.num_runs,
        "runs_per_task": int(cell.scores.shape[0]),
        "num_diverged": cell.num_diverged,
        **{
            key: bootstrap_interval(cell.scores, aggregate, reps, seed)
            for key, (_, aggregate) in AGGREGATES.items()
        },
        "auc_iqm": bootstrap_interval(cell.auc, stats.aggregate_iqm, reps, seed),
        "raw": _raw_by_task(cell.raw_scores, cell.raw_scores - cell.gains, tasks, reps, seed),
    }


def task_summaries(
    run_table: pd.DataFrame, tasks: Sequence[str], reps: int, seed: int
) -> list[dict[str, Any]]:
    """Each (variant, lag)'s scores on each task alone, when there are several tasks.

    Pooled aggregates can hide a task: one task at its maximum at every lag and another that
    degrades average to a mild slope. A task's entry is what the report of that task's runs
    alone gives (every run of the task, same bootstrap seed), so it exists even where the
    variant has no runs on another task yet. Beside the normalised scores, in the testbed's
    units: the mean first evaluation (``raw_initial``) and the final score's IQM (``raw_iqm``).
    """
    if len(tasks) < 2:
        return []
    records = []
    for (variant, lag, task), runs in run_table.groupby(["variant", "lag", "task"], sort=True):
        ordered = runs.sort_values(["seed", "run_id"])
        scores, auc, raw = (
            ordered[[column]].to_numpy() for column in ("final_score", "auc", "raw_final")
        )
        records.append({
            "variant": variant,
            "algo": str(ordered["algo"].iloc[0]),
            "lag": float(lag),
            "task": str(task),
            "runs": len(ordered),
            "iqm": bootstrap_interval(scores, stats.aggregate_iqm, reps, seed),
            "mean": bootstrap_interval(scores, stats.aggregate_mean, reps, seed),
            "auc_iqm": bootstrap_interval(auc, stats.aggregate_iqm, reps, seed),
            "raw_initial": float(ordered["raw_initial"].mean()),
            "raw_iqm": bootstrap_interval(raw, stats.aggregate_iqm, reps, seed),
        })
    return records


def improvements(
    complete: Sequence[Cell], focus_algo: str, reps: int, seed: int
) -> list[dict[str, Any]]:
    """P(focus variant > baseline) per lag, for each focus_algo variant and each baseline.

    Baselines are the variants of every other algorithm at the same lag under the same lag
    model (a level means another lag distribution under another model) and forward setting
    (epochs and minibatches set how far the learner moves from the data, as the lag does), at
    the same value of every swept hyper-parameter and config axis both set (a learning rate
    swept for every algorithm pairs like with like; a threshold only the focus sweeps pairs with
    every baseline).
    """
    def comparable(focus: Cell, baseline: Cell) -> bool:
        shared = focus.settings.keys() & baseline.settings.keys()
        return (baseline.algo != focus_algo and baseline.lag == focus.lag
                and baseline.condition == focus.condition
                and all(focus.settings[name] == baseline.settings[name] for name in shared))

    focus_cells = sorted(
        (c for c in complete if c.algo == focus_algo), key=lambda c: (c.lag, c.variant)
    )
    records = []
    for focus in focus_cells:
        for baseline in (c for c in complete if comparable(focus, c)):
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
    paired: pd.DataFrame, table: pd.DataFrame, tasks: Sequence[str], reps: int, seed: int
) -> dict[str, np.ndarray]:
    """IQM normalised score with its interval at up to ``CURVE_POINTS`` env-step values.

    Runs are interpolated linearly onto the union of their evaluation steps, up
    to the shortest run's last step so that no run is extrapolated.
    """
    rows = table[table["run_id"].isin(paired["run_id"])]
    by_run = dict(tuple(rows.groupby("run_id")))
    end = min(run["env_steps"].max() for run in by_run.values())
    grid = np.unique(rows["env_steps"].to_numpy(dtype=float))
    grid = grid[grid <= end]
    grid = grid[np.unique(np.linspace(0, len(grid) - 1, min(len(grid), CURVE_POINTS)).round().astype(int))]
    curves = np.empty((int(paired["slot"].max()) + 1, len(tasks), len(grid)))
    column = {task: m for m, task in enumerate(tasks)}
    for run in paired.itertuples():
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


def task_learning_curves(
    run_table: pd.DataFrame, table: pd.DataFrame, reps: int, seed: int
) -> dict[tuple[str, float, str], dict[str, np.ndarray]]:
    """Per (variant, lag, task), every run of the task: its IQM learning curve. Per task, as
    an IQM over tasks of which one saturates and one does not draws a plateau neither has."""
    return {
        (str(variant), float(lag), str(task)): _learning_curve(
            _paired(runs, [task]), table, [task], reps, seed
        )
        for (variant, lag, task), runs in run_table.groupby(["variant", "lag", "task"], sort=True)
    }
