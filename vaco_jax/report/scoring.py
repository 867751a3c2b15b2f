"""From a runs table's evaluations to normalised scores, per evaluation and per run.

The evaluations are a testbed's score (returns, held-out accuracy; see ``runs_table.Score``):

- A missing (NaN) evaluation, such as every evaluation after a run diverged, takes the value
  of the run's last finite evaluation (the ``filled_score``).
- Scores are normalised per task: 0 is the mean score of the initial policies (evaluations at
  ``env_steps == 0``) of all runs of the task, 1 the task's reference score: the given one,
  else the best final (un-normalised) score of any run of the task.
- A run's final score is its mean normalised score over the last ``final_fraction`` of its
  evaluation points (at least one); its AUC is the area under its normalised learning curve
  with training progress in [0, 1].
- Whether a run's ESS fell before its score collapsed is ``vaco_jax.report.collapse``'s
  analysis of the scores as fractions of the task's reference (NaN after divergence, not
  carried forward) and ``ess_ratio``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from vaco_jax.report import collapse, stats
from vaco_jax.report.runs_table import Score, check_runs, variant_names


def scored(
    runs: pd.DataFrame, score: Score, reference_scores: Mapping[str, float] | None,
    final_fraction: float,
) -> tuple[list[str], pd.DataFrame, pd.Series, pd.DataFrame]:
    """A runs table checked and scored as every report scores it: its tasks (sorted), its
    evaluations with their normalised scores (``prepared``, then ``with_scores``), each run's
    final score (``final_scores``) and each task's normalisation (``normalisation``)."""
    check_runs(runs, score)
    tasks = sorted(runs["task"].astype(str).unique())
    check_options(tasks, reference_scores, final_fraction)
    table = prepared(runs, score)
    final = final_scores(table, final_fraction)
    references = normalisation(table, final, reference_scores)
    return tasks, with_scores(table, references, score), final, references


def check_options(
    tasks: Sequence[str], reference_scores: Mapping[str, float] | None, final_fraction: float
) -> None:
    """Raises ``ValueError`` for a ``final_fraction`` outside (0, 1] or a reference score of a
    task the runs table does not hold (most likely a misspelt task)."""
    if not 0.0 < final_fraction <= 1.0:
        raise ValueError(f"final_fraction must lie in (0, 1], got {final_fraction!r}")
    unknown = sorted(set(reference_scores or {}) - set(tasks))
    if unknown:
        raise ValueError(
            f"reference_scores names tasks {unknown} not in runs; allowed: {list(tasks)}"
        )


def prepared(runs: pd.DataFrame, score: Score) -> pd.DataFrame:
    """Sorted copy with ``variant`` and ``filled_score``: the evaluations (``score.column``)
    with NaN ones carried forward."""
    table = runs.sort_values(["run_id", "env_steps"], kind="stable").reset_index(drop=True)
    table["variant"] = variant_names(table)
    table["diverged"] = table["diverged"].astype(bool)
    table["filled_score"] = table.groupby("run_id")[score.column].ffill()
    unscored = table.loc[table["filled_score"].isna(), "run_id"].unique().tolist()
    if unscored:
        raise ValueError(
            f"{score.column} must be finite at each run's first evaluation point; runs: {unscored}"
        )
    return table


def final_scores(table: pd.DataFrame, final_fraction: float) -> pd.Series:
    """Mean un-normalised score over each run's last ``final_fraction`` of evaluations."""
    runs = table.groupby("run_id")
    # The epsilon keeps e.g. 0.3 * 10 = 3.0000000000000004 from losing a point to rounding.
    window = np.maximum(1, np.floor(final_fraction * runs["env_steps"].transform("size") + 1e-9))
    in_window = runs.cumcount(ascending=False) < window
    return table[in_window].groupby("run_id")["filled_score"].mean()


def normalisation(
    table: pd.DataFrame, final: pd.Series, reference_scores: Mapping[str, float] | None
) -> pd.DataFrame:
    """Per task: ``initial`` (mean score at env_steps 0), ``reference`` and its ``source``;
    ``final`` is each run's un-normalised final score (``final_scores``)."""
    initial = table[table["env_steps"] == 0].groupby("task")["filled_score"].mean()
    run_task = table.drop_duplicates("run_id").set_index("run_id")["task"]
    best_final = final.groupby(run_task).max()
    given = pd.Series(dict(reference_scores or {}), dtype=float)
    references = pd.DataFrame(
        {"initial": initial, "reference": best_final, "source": "best final score"}
    )
    references.loc[given.index, "reference"] = given
    references.loc[given.index, "source"] = "given"
    flat = references.index[references["reference"] == references["initial"]].tolist()
    if flat:
        raise ValueError(
            f"tasks {flat} have a reference score equal to their initial score, so scores "
            "cannot be normalised; pass reference_scores for them"
        )
    return references


def with_scores(table: pd.DataFrame, references: pd.DataFrame, score: Score) -> pd.DataFrame:
    """Adds ``score``, the normalised ``filled_score``, and ``evaluated_score``, the same but
    NaN where the evaluation is missing (after a run diverged)."""
    task = references.loc[table["task"]]
    scores = stats.normalize_scores(
        table["filled_score"].to_numpy(), task["initial"].to_numpy(), task["reference"].to_numpy()
    )
    evaluated = np.where(table[score.column].isna(), np.nan, scores)
    return table.assign(score=scores, evaluated_score=evaluated)


def collapse_events(
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


def _run_auc(table: pd.DataFrame, column: str) -> pd.Series:
    """Per run: the area under ``column`` over training progress in [0, 1]."""
    return table.groupby("run_id")[[column, "env_steps"]].apply(
        lambda run: float(stats.area_under_curve(run[column], run["env_steps"]))
    )


def run_table(table: pd.DataFrame, final: pd.Series, references: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its last row of ``table`` plus ``final_score``, the normalised ``final``
    (``final_scores``), and ``auc``; and in the testbed's own units (un-normalised) its first
    evaluation ``raw_initial``, ``raw_final`` (``final``), ``raw_auc`` (its mean score over
    training, the area under its curve) and the gains over its first evaluation, ``gain`` and
    ``auc_gain``, that the kept share of the synchronous gain divides (``kept_gain``)."""
    runs = table.groupby("run_id").tail(1).set_index("run_id")
    task = references.loc[runs["task"]]
    runs["raw_final"] = final.reindex(runs.index)
    runs["final_score"] = stats.normalize_scores(
        runs["raw_final"].to_numpy(), task["initial"].to_numpy(), task["reference"].to_numpy(),
    )
    runs["auc"] = _run_auc(table, "score")
    # check_runs guarantees that each run's first evaluation is at env_steps 0.
    runs["raw_initial"] = table.groupby("run_id")["filled_score"].first()
    runs["raw_auc"] = _run_auc(table, "filled_score")
    runs["gain"] = runs["raw_final"] - runs["raw_initial"]
    runs["auc_gain"] = runs["raw_auc"] - runs["raw_initial"]
    return runs.reset_index()
