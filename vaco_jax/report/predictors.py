"""Do a run's ESS and gradient norm, read early, predict that it will fail? ROC curves over runs.

A monitor that raises an alarm in every stale run is no predictor: the question is whether the
signal, read in the first ``window`` of a run's updates (live, from the run alone), separates the
runs that go on to fail from those that do not. Per run, on a scored runs table
(``scoring.scored``: ``score`` normalised, 0 the initial policies, 1 the reference):

Outcomes:
- ``failed``: the run's final normalised score is below ``kept_share`` (0.5) times the median
  final score of its own variant's lag-0 runs on its task in its study: it kept less than half
  of what synchronous learning reached. Runs of a variant without lag-0 runs, or whose lag-0
  median does not exceed 0, have no ``failed`` outcome (NaN).
- ``collapsed``: ``collapse.collapse_index`` on the score as a fraction of the task's reference,
  as the report's ESS-versus-collapse table judges it.

Predictors, each higher for a louder alarm, read over the evaluation periods after the first
(which no update precedes) up to ``window`` of the run's ``env_steps`` and before its collapse:
- ``ess_drop``: 1 minus the lowest ``ess_ratio``: 0 on-policy, towards 1 as the weights
  concentrate on a few sequences.
- ``grad_norm_fall``: log of the first period's ``grad_norm`` over the lowest: how far the
  gradient has shrunk since the run began (a clip or mask removing the signal).
- ``lag``: the run's configured lag, the baseline a live signal must beat: if the ESS predicts
  only as well as the lag it follows from, it adds nothing.

The ROC of a predictor traces the share of failing runs alarmed (true positive rate) against the
share of the others alarmed (false positive rate) over every threshold; its area is the chance
that a random failing run scores above a random other run, ties counted half (Mann-Whitney), with
a percentile bootstrap interval resampling the failing and the other runs separately. Each is
computed over all runs and over the stale runs alone (lag > 0), where the lag no longer gives the
answer away.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.report import collapse

PREDICTORS = ("ess_drop", "grad_norm_fall", "lag")
OUTCOMES = ("failed", "collapsed")
POPULATIONS = {"all runs": None, "stale runs (lag > 0)": 0.0}
"""Population name -> the lag runs must exceed to belong (None: every run)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """The early window, the failure threshold and the bootstrap of the analysis."""

    window: float = 0.25
    kept_share: float = 0.5
    reps: int = 2000
    confidence: float = 0.95
    seed: int = 0
    thresholds: collapse.Thresholds = collapse.Thresholds()

    def __post_init__(self) -> None:
        for name in ("window", "kept_share", "confidence"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0 and not (name == "window" and value == 1.0):
                raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
        if self.reps < 1:
            raise ValueError(f"reps must be at least 1, got {self.reps!r}")


def _early_signals(run: pd.DataFrame, until: float) -> dict[str, float]:
    """``ess_drop`` and ``grad_norm_fall`` over the run's periods with 0 < env_steps <= until."""
    early = run[(run["env_steps"] > 0) & (run["env_steps"] <= until)]
    ess = early["ess_ratio"].to_numpy(dtype=float)
    ess = ess[np.isfinite(ess)]
    grad = early["grad_norm"].to_numpy(dtype=float)
    grad = grad[np.isfinite(grad) & (grad > 0)]
    return {
        "ess_drop": 1.0 - float(ess.min()) if ess.size else math.nan,
        "grad_norm_fall": float(np.log(grad[0] / grad.min())) if grad.size else math.nan,
    }


def run_signals(table: pd.DataFrame, references: pd.DataFrame, score_column: str,
                options: Options = Options()) -> pd.DataFrame:
    """One row per run of a scored table (indexed by ``run_id``): ``task``, ``variant``, ``lag``,
    ``seed``, ``collapsed`` and the ``PREDICTORS`` (the lag as ``predictor_lag``).
    ``references`` is ``scoring.normalisation``'s; ``score_column`` the evaluations' column
    (NaN after a run diverged, which counts as a collapse)."""
    rows = {}
    for run_id, run in table.sort_values(["run_id", "env_steps"], kind="stable").groupby("run_id"):
        steps = run["env_steps"].to_numpy(dtype=float)
        reference = float(references.loc[run["task"].iloc[0], "reference"])
        collapsed_at = (collapse.collapse_index(run[score_column].to_numpy(dtype=float)
                                                / reference, options.thresholds)
                        if reference > 0 else None)
        until = options.window * steps.max()
        if collapsed_at is not None:
            until = min(until, np.nextafter(steps[collapsed_at], -np.inf))
        first = run.iloc[0]
        rows[run_id] = {
            "task": str(first["task"]), "variant": str(first["variant"]),
            "lag": float(first["lag"]), "seed": int(first["seed"]),
            "collapsed": collapsed_at is not None,
            **_early_signals(run, until),
        }
    signals = pd.DataFrame.from_dict(rows, orient="index")
    signals["predictor_lag"] = signals["lag"]
    return signals


def with_failures(signals: pd.DataFrame, final: pd.Series, options: Options = Options()
                  ) -> pd.DataFrame:
    """``signals`` with ``final`` (each run's final normalised score, indexed by ``run_id``)
    and ``failed`` (see the module's docstring)."""
    signals = signals.assign(final=final.reindex(signals.index).to_numpy(dtype=float))
    sync = signals[signals["lag"] == 0].groupby(["task", "variant"])["final"].median()
    keys = pd.MultiIndex.from_frame(signals[["task", "variant"]])
    sync_final = sync.reindex(keys).to_numpy(dtype=float)
    failed = np.where(sync_final > 0, signals["final"] < options.kept_share * sync_final, np.nan)
    return signals.assign(failed=failed.astype(float))


def area_under_roc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + half P(equal); NaN without both."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    positive, negative = scores[labels], scores[~labels]
    if not positive.size or not negative.size:
        return math.nan
    above = (positive[:, None] > negative[None, :]).mean()
    tied = (positive[:, None] == negative[None, :]).mean()
    return float(above + 0.5 * tied)


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False and true positive rates of the alarm ``score >= t`` at every distinct threshold,
    from (0, 0) (no alarm) to (1, 1) (every run alarmed)."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    thresholds = np.unique(scores)[::-1]
    alarmed = scores[None, :] >= thresholds[:, None]
    tpr = (alarmed & labels).sum(axis=1) / max(labels.sum(), 1)
    fpr = (alarmed & ~labels).sum(axis=1) / max((~labels).sum(), 1)
    return np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr])


def _bootstrap_auc(scores: np.ndarray, labels: np.ndarray, options: Options
                   ) -> tuple[float, float]:
    """Percentile interval of the area, positives and negatives resampled separately."""
    rng = np.random.default_rng(options.seed)
    positive, negative = scores[labels], scores[~labels]
    areas = np.empty(options.reps)
    for rep in range(options.reps):
        p = rng.choice(positive, positive.size)
        n = rng.choice(negative, negative.size)
        areas[rep] = area_under_roc(np.concatenate([p, n]),
                                    np.concatenate([np.ones(p.size, bool), np.zeros(n.size, bool)]))
    tail = (1.0 - options.confidence) / 2.0
    low, high = np.quantile(areas, [tail, 1.0 - tail])
    return float(low), float(high)


def _column(predictor: str) -> str:
    return "predictor_lag" if predictor == "lag" else predictor


def curves(signals: pd.DataFrame, options: Options = Options()) -> list[dict[str, Any]]:
    """Per outcome, population and predictor: the runs counted (those with the outcome and every
    predictor), the positives, the area with its interval and the ROC points; None areas where a
    class is empty."""
    results = []
    for outcome in OUTCOMES:
        for population, above in POPULATIONS.items():
            members = signals if above is None else signals[signals["lag"] > above]
            # The runs every predictor reads, so that their curves compare on the same runs.
            usable = members[members[[outcome, *map(_column, PREDICTORS)]].notna().all(axis=1)]
            for predictor in PREDICTORS:
                scores = usable[_column(predictor)].to_numpy(dtype=float)
                labels = usable[outcome].to_numpy(dtype=float) > 0.5
                record: dict[str, Any] = {
                    "outcome": outcome, "population": population, "predictor": predictor,
                    "runs": int(len(usable)), "positives": int(labels.sum()),
                    "auc": None, "auc_ci": None, "fpr": [], "tpr": []}
                if labels.any() and not labels.all():
                    fpr, tpr = roc_curve(scores, labels)
                    record.update(auc=area_under_roc(scores, labels),
                                  auc_ci=list(_bootstrap_auc(scores, labels, options)),
                                  fpr=fpr.tolist(), tpr=tpr.tolist())
                results.append(record)
    return results


def summary(studies: Mapping[str, pd.DataFrame], options: Options = Options()) -> dict[str, Any]:
    """The analysis of ``studies`` (study name -> its ``with_failures`` signals) JSON-ready:
    the options, the studies' run counts and the ``curves`` over their runs pooled."""
    pooled = pd.concat([s.assign(study=name) for name, s in studies.items()])
    return {
        "options": {**{k: v for k, v in dataclasses.asdict(options).items()
                       if k != "thresholds"},
                    "collapse": dataclasses.asdict(options.thresholds)},
        "studies": {name: int(len(s)) for name, s in studies.items()},
        "curves": curves(pooled, options),
    }
