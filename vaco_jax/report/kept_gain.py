"""The headline of a lag study: the share of its synchronous gain a method keeps under lag.

A method is a variant (an algorithm and its swept hyper-parameter values), judged against its
own synchronous runs (lag 0) on the same task, so that a method that learns little without lag
is not credited for losing little with it:

- A run's gain is its final score less its first evaluation (the initial policy or warm start),
  in the testbed's own units; its AUC gain is its mean score over training (the area under its
  learning curve, training progress in [0, 1]) less the same first evaluation, so that learning
  slowed by lag costs too, not only a lower end point.
- The synchronous gain of a (variant, task) is the IQM of the gains of its lag-0 runs; a
  variant without any (one under a lag model the study runs only at lags above 0) is set
  against the lag-0 runs of the same algorithm and settings under the ``fixed`` lag model,
  which are synchronous (``synchronous_variants``).
- A run's kept gain is its gain divided by the synchronous gain of its variant and task: 1 keeps
  all of it, 0 none, below 0 ends worse than it started.
- The kept gain of a (variant, task, lag) is the IQM of its runs' kept gains, so it equals the
  IQM of their gains over the synchronous one, and exactly 1 at lag 0. Its 95% percentile
  interval draws both the lagged and the synchronous runs with replacement
  (``stats.stratified_bootstrap_ci_pair`` of ``stats.kept_gain``), so that the noise of the
  denominator is in it. With several tasks the pooled kept gain is the IQM over the runs of
  every task (runs paired across tasks as in ``cells``; about 1 at lag 0, as the pooled IQM of
  per-task shares need not be exactly 1).
- Where the synchronous gain is not positive (the method did not learn without lag) the share
  is undefined, recorded as such and never printed as a number; where it is positive but some
  bootstrap resample's is not, the interval is unbounded (its ends are null).

A kept share alone hides two things, so each record carries them beside it: how much the method
reached under lag (``normalised_iqm``, the lagged runs' final score normalised to the task's one
reference for every method, the IQM with its interval as the final-score tables give it), as a
method that learns little without lag can top a board of shares by keeping little of little;
and the staleness its runs met (``tv_backward``, the mean over the lagged runs of each run's
mean backward TV, as the off-policy table averages it; absent where the runs recorded none), as
methods at one lag level need not see equally stale data.

A study without a lag-0 level has no synchronous runs to divide by, and skips all of this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.report import stats
from vaco_jax.report.cells import CONFIDENCE, Cell
from vaco_jax.report.metrics import finite_or_none, summary_column
from vaco_jax.report.runs_table import setting_columns

SYNC_LAG = 0.0
MEASURES = {"kept": "gain", "auc_kept": "auc_gain"}
"""Each kept share's key -> the run-table column of the gain it divides."""
MEASURE_NAMES = {"kept": "final score", "auc_kept": "AUC"}
TV_BACKWARD = summary_column("tv_backward", "mean")
"""The run-table column of each run's mean backward TV over its updates."""


def skip_reason(lags: Sequence[float]) -> str | None:
    """Why the study has no kept gain, or None where it has one."""
    if SYNC_LAG not in lags:
        return "the study has no synchronous (lag 0) runs to measure the kept gain against"
    if len(lags) < 2:
        return "the study has no lag level besides lag 0"
    return None


def synchronous_variants(run_table: pd.DataFrame) -> dict[str, str]:
    """Each variant's synchronous runs, by variant: its own where it has lag-0 runs, else those
    of the variant of the same algorithm, forward setting and hyper-parameters under the
    ``fixed`` lag model, where that one has lag-0 runs; variants with neither are left out."""
    settings = ["algo", "epochs", "minibatches", *setting_columns(run_table)]
    first = run_table.drop_duplicates("variant").set_index("variant")

    def key(variant: str) -> tuple:
        return tuple(None if pd.isna(v) else v for v in first.loc[variant, settings])

    has_sync = set(run_table.loc[run_table["lag"] == SYNC_LAG, "variant"])
    fixed = {key(v): v for v in has_sync if first.loc[v, "lag_model"] == "fixed"}
    found = {v: v if v in has_sync else fixed.get(key(v)) for v in first.index}
    return {v: sync for v, sync in found.items() if sync is not None}


def kept_interval(
    gains: np.ndarray, sync_gains: np.ndarray, reps: int, seed: int
) -> dict[str, float | None]:
    """``stats.kept_gain`` of ``gains`` against ``sync_gains`` with its interval, both samples
    resampled; call it where every task's synchronous IQM gain is positive (else NaN)."""
    point, low, high = stats.stratified_bootstrap_ci_pair(
        gains, sync_gains, stats.kept_gain, reps=reps, confidence=CONFIDENCE, seed=seed
    )
    # JSON has no NaN: an end of an unbounded interval is null.
    return {"point": point, **{k: v if np.isfinite(v) else None
                               for k, v in (("low", low), ("high", high))}}


def _kept_shares(
    lagged: dict[str, np.ndarray], sync: dict[str, np.ndarray], reps: int, seed: int
) -> dict[str, Any]:
    """``kept`` and ``auc_kept`` of one (variant, lag), each an interval or None where the
    synchronous gain is not positive (``undefined`` then says which)."""
    record: dict[str, Any] = {}
    undefined = []
    for key, column in MEASURES.items():
        sync_gain = stats.task_iqm(sync[column])
        if np.all(sync_gain > 0):
            record[key] = kept_interval(lagged[column], sync[column], reps, seed)
        else:
            record[key] = None
            undefined.append(MEASURE_NAMES[key])
    record["undefined"] = (f"no synchronous gain in the {' and the '.join(undefined)} (IQM gain "
                           f"at lag 0 not positive)" if undefined else None)
    return record


def task_scores(
    cell_summaries: Sequence[Mapping[str, Any]], task_summaries: Sequence[Mapping[str, Any]],
    tasks: Sequence[str],
) -> dict[tuple[str, str, float], Mapping[str, Any]]:
    """Per (variant, task, lag): the IQM normalised final score of every run of the task with its
    interval, as the report gives it: its per-task cells' with several tasks, its cells' with
    one (whose cells hold every run of the task)."""
    if len(tasks) > 1:
        return {(s["variant"], s["task"], s["lag"]): s["iqm"] for s in task_summaries}
    (task,) = tasks
    return {(s["variant"], task, s["lag"]): s["iqm"] for s in cell_summaries}


def mean_tv_backward(runs: pd.DataFrame) -> float | None:
    """The mean over ``runs`` of each run's mean backward TV; None where none recorded it."""
    return finite_or_none(runs[TV_BACKWARD].mean()) if TV_BACKWARD in runs.columns else None


def task_kept_gains(
    run_table: pd.DataFrame, lags: Sequence[float], sync_variants: Mapping[str, str],
    scores: Mapping[tuple[str, str, float], Mapping[str, Any]], reps: int, seed: int,
) -> list[dict[str, Any]]:
    """Per (variant, task, lag), every run of the task counted: the kept gain and AUC kept gain
    with their intervals, beside them the raw (un-normalised) numbers they come from (the
    lagged runs' mean first evaluation and IQM final score, and the synchronous IQM gain), the
    normalised score of ``scores`` (``task_scores``) and the lagged runs' mean backward TV.
    Variants without synchronous runs on a task (``synchronous_variants``) are left out of
    that task."""
    records = []
    synchronous = run_table[run_table["lag"] == SYNC_LAG]
    for (variant, task), runs in run_table.groupby(["variant", "task"], sort=True):
        sync_runs = synchronous[(synchronous["variant"] == sync_variants.get(variant))
                                & (synchronous["task"] == task)]
        if sync_runs.empty:
            continue
        sync = {c: sync_runs[[c]].to_numpy() for c in MEASURES.values()}
        for lag in (lag for lag in lags if lag in set(runs["lag"])):
            lagged_runs = runs[runs["lag"] == lag]
            lagged = {c: lagged_runs[[c]].to_numpy() for c in MEASURES.values()}
            records.append({
                "variant": variant,
                "algo": str(runs["algo"].iloc[0]),
                "sync_variant": sync_variants[variant],
                "task": str(task),
                "lag": float(lag),
                "runs": len(lagged_runs),
                "sync_runs": len(sync_runs),
                "raw_initial": float(lagged_runs["raw_initial"].mean()),
                "raw_final_iqm": float(stats.aggregate_iqm(lagged_runs[["raw_final"]].to_numpy())),
                "raw_sync_gain": float(stats.task_iqm(sync["gain"])[0]),
                "raw_sync_auc_gain": float(stats.task_iqm(sync["auc_gain"])[0]),
                **_kept_shares(lagged, sync, reps, seed),
                "normalised_iqm": scores[(variant, str(task), float(lag))],
                "tv_backward": mean_tv_backward(lagged_runs),
            })
    return records


def pooled_kept_gains(
    complete: Sequence[Cell], tasks: Sequence[str], sync_variants: Mapping[str, str],
    cell_summaries: Sequence[Mapping[str, Any]], reps: int, seed: int,
) -> list[dict[str, Any]]:
    """Per (variant, lag) with runs on every task at that lag and synchronous runs on every
    task (``synchronous_variants``): the kept gain and AUC kept gain pooled over tasks, beside
    them the cell's IQM normalised score (of ``cell_summaries``) and the mean backward TV of
    its runs (those paired across tasks, which the pooled kept gain counts). Empty with one
    task, where it is the task's own."""
    if len(tasks) < 2:
        return []
    sync_cells = {c.variant: c for c in complete if c.lag == SYNC_LAG}
    scores = {(s["variant"], s["lag"]): s["iqm"] for s in cell_summaries}
    records = []
    for cell in complete:
        sync = sync_cells.get(sync_variants.get(cell.variant))
        if sync is None:
            continue
        records.append({
            "variant": cell.variant,
            "algo": cell.algo,
            "sync_variant": sync.variant,
            "lag": cell.lag,
            "runs_per_task": int(cell.gains.shape[0]),
            **_kept_shares(
                {"gain": cell.gains, "auc_gain": cell.auc_gains},
                {"gain": sync.gains, "auc_gain": sync.auc_gains}, reps, seed,
            ),
            "normalised_iqm": scores[(cell.variant, cell.lag)],
            "tv_backward": mean_tv_backward(cell.runs),
        })
    return records


def summary(
    run_table: pd.DataFrame, complete: Sequence[Cell], tasks: Sequence[str],
    lags: Sequence[float], reps: int, seed: int, *,
    cell_summaries: Sequence[Mapping[str, Any]], task_summaries: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """``summary.json``'s ``kept_gain``: the skip reason, or the per-task and pooled records,
    their normalised scores those of ``cell_summaries`` and ``task_summaries``
    (``cells.cell_summary``, ``cells.task_summaries``)."""
    reason = skip_reason(lags)
    if reason is not None:
        return {"skipped": reason}
    sync_variants = synchronous_variants(run_table)
    scores = task_scores(cell_summaries, task_summaries, tasks)
    return {
        "sync_lag": SYNC_LAG,
        "tasks": task_kept_gains(run_table, lags, sync_variants, scores, reps, seed),
        "pooled": pooled_kept_gains(complete, tasks, sync_variants, cell_summaries, reps, seed),
    }
