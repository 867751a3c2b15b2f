"""Do a run's ESS and gradient norm, read early, predict that it will fail? ROC curves over runs.

A monitor that raises an alarm in every stale run is no predictor: the question is whether the
signal, read in the first ``window`` of a run's updates (live, from the run alone), separates the
runs that go on to fail from those that do not. Per run, on a scored runs table
(``scoring.scored``: ``score`` normalised, 0 the initial policies, 1 the reference):

Outcomes:
- ``failed``: the run's final normalised score is below ``kept_share`` (0.5) times the median
  final score of its method's synchronous runs on its task in its study (the variant's own
  lag-0 runs, or those of the same method under the ``fixed`` lag model:
  ``kept_gain.synchronous_variants``): it kept less than half of what synchronous learning
  reached. Judged only where that median is at least ``min_sync_gain`` (0.25): below it the
  synchronous runs barely learned and half of it is noise. Elsewhere NaN.
- ``collapsed``: ``collapse.collapse_index`` on the score as a fraction of the task's reference,
  as the report's ESS-versus-collapse table judges it; NaN on a task whose reference is not
  positive (a fraction of it has no meaning).

Predictors, each higher for a louder alarm, read over the evaluation periods after the first
(which no update precedes) up to ``window`` of the run's ``env_steps`` and before its collapse:
- ``ess_drop``: 1 minus the lowest ``ess_ratio``: 0 on-policy, towards 1 as the weights
  concentrate on a few sequences.
- ``grad_norm_fall``: log of the first period's ``grad_norm`` over the lowest: how far the
  gradient has shrunk since the run began (a clip or mask removing the signal).
- ``lag``: the run's configured lag, the baseline a live signal must beat: if the ESS predicts
  only as well as the lag it follows from, it adds nothing.
A run that collapses before any period is read has no signal: it is counted
(``without_signal``), not scored.

The ROC of a predictor traces the share of failing runs alarmed (true positive rate) against the
share of the others alarmed (false positive rate) over every threshold; its area is the chance
that a random failing run scores above a random other run, ties counted half (Mann-Whitney).
Each is computed over all runs and over the stale runs alone (lag > 0), on the runs every
predictor reads, and, for the stale runs, also *within strata*: only pairs of runs of the same
study, task and lag compared, where the lag cannot give the answer away (its own area there is
0.5 by construction). Intervals are percentile bootstrap intervals that resample *cells* (a
study's method at one lag on one task, whose seeds share everything else) rather than runs.
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
CELL = ("study", "task", "variant", "lag")
"""A cell: the runs that differ only in their seed, resampled together."""
STRATUM = ("study", "task", "lag")
"""The runs whose pairs the within-strata area compares."""


@dataclasses.dataclass(frozen=True)
class Options:
    """The early window, the failure rule and the bootstrap of the analysis."""

    window: float = 0.25
    kept_share: float = 0.5
    min_sync_gain: float = 0.25
    reps: int = 2000
    confidence: float = 0.95
    seed: int = 0
    thresholds: collapse.Thresholds = collapse.Thresholds()

    def __post_init__(self) -> None:
        if not 0.0 < self.window <= 1.0:
            raise ValueError(f"window must lie in (0, 1], got {self.window!r}")
        for name in ("kept_share", "min_sync_gain", "confidence"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
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
    ``seed``, ``collapsed`` (1, 0 or NaN) and the ``PREDICTORS`` (the lag as
    ``predictor_lag``). ``references`` is ``scoring.normalisation``'s; ``score_column`` the
    evaluations' column (NaN after a run diverged, which counts as a collapse)."""
    rows = {}
    for run_id, run in table.sort_values(["run_id", "env_steps"], kind="stable").groupby("run_id"):
        steps = run["env_steps"].to_numpy(dtype=float)
        reference = float(references.loc[run["task"].iloc[0], "reference"])
        judged = reference > 0
        collapsed_at = (collapse.collapse_index(run[score_column].to_numpy(dtype=float)
                                                / reference, options.thresholds)
                        if judged else None)
        until = options.window * steps.max()
        if collapsed_at is not None:
            until = min(until, np.nextafter(steps[collapsed_at], -np.inf))
        first = run.iloc[0]
        rows[run_id] = {
            "task": str(first["task"]), "variant": str(first["variant"]),
            "lag": float(first["lag"]), "seed": int(first["seed"]),
            "collapsed": float(collapsed_at is not None) if judged else math.nan,
            **_early_signals(run, until),
        }
    signals = pd.DataFrame.from_dict(rows, orient="index")
    signals["predictor_lag"] = signals["lag"]
    return signals


def with_failures(signals: pd.DataFrame, final: pd.Series, synchronous: Mapping[str, str],
                  options: Options = Options()) -> pd.DataFrame:
    """``signals`` with ``final`` (each run's final normalised score, indexed by ``run_id``),
    ``sync_final`` (the median final score of its method's synchronous runs on its task: the
    variant ``synchronous`` maps its variant to, as ``kept_gain.synchronous_variants`` gives)
    and ``failed`` (see the module's docstring)."""
    signals = signals.assign(final=final.reindex(signals.index).to_numpy(dtype=float),
                             sync_variant=signals["variant"].map(synchronous))
    sync = signals[signals["lag"] == 0].groupby(["task", "variant"])["final"].median()
    keys = pd.MultiIndex.from_arrays([signals["task"], signals["sync_variant"]])
    sync_final = sync.reindex(keys).to_numpy(dtype=float)
    judged = sync_final >= options.min_sync_gain  # False for NaN
    failed = np.where(judged, signals["final"] < options.kept_share * sync_final, np.nan)
    return signals.assign(sync_final=sync_final, failed=failed.astype(float))


def _pair_counts(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """The Mann-Whitney count of (positive, negative) pairs the positive wins, ties counted
    half, and the number of pairs, from average ranks."""
    positives = int(labels.sum())
    negatives = labels.size - positives
    order = np.argsort(scores, kind="mergesort")
    values, first, counts = np.unique(scores[order], return_index=True, return_counts=True)
    ranks = (first + (counts + 1) / 2.0)[np.searchsorted(values, scores)]
    return float(ranks[labels].sum() - positives * (positives + 1) / 2.0), positives * negatives


def area_under_roc(scores: np.ndarray, labels: np.ndarray,
                   strata: np.ndarray | None = None) -> float:
    """P(score of a positive > score of a negative) + half P(equal); with ``strata``, over the
    pairs within one stratum only. NaN without a pair."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    strata = np.zeros(scores.size, int) if strata is None else np.asarray(strata)
    won = pairs = 0.0
    for stratum in np.unique(strata):
        member = strata == stratum
        stratum_won, stratum_pairs = _pair_counts(scores[member], labels[member])
        won, pairs = won + stratum_won, pairs + stratum_pairs
    return won / pairs if pairs else math.nan


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False and true positive rates of the alarm ``score >= t`` at every distinct threshold,
    from (0, 0) (no alarm) to (1, 1) (every run alarmed)."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    thresholds = np.unique(scores)[::-1]
    alarmed = scores[None, :] >= thresholds[:, None]
    tpr = (alarmed & labels).sum(axis=1) / max(labels.sum(), 1)
    fpr = (alarmed & ~labels).sum(axis=1) / max((~labels).sum(), 1)
    return np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr])


def _codes(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    return frame.groupby(list(columns), sort=False, dropna=False).ngroup().to_numpy()


def _bootstrap_area(scores: np.ndarray, labels: np.ndarray, strata: np.ndarray | None,
                    cells: np.ndarray, options: Options) -> tuple[float, float] | None:
    """Percentile interval of the area over resamples of whole cells, those in which it is
    defined (a resample may draw runs of one class only); None if it is in none."""
    rng = np.random.default_rng(options.seed)
    members = [np.flatnonzero(cells == cell) for cell in np.unique(cells)]
    areas = np.empty(options.reps)
    for rep in range(options.reps):
        drawn = np.concatenate([members[i] for i in rng.integers(len(members),
                                                                 size=len(members))])
        areas[rep] = area_under_roc(scores[drawn], labels[drawn],
                                    None if strata is None else strata[drawn])
    areas = areas[~np.isnan(areas)]
    if not areas.size:
        return None
    tail = (1.0 - options.confidence) / 2.0
    low, high = np.quantile(areas, [tail, 1.0 - tail])
    return float(low), float(high)


def format_area(record: Mapping[str, Any] | None) -> str:
    """An area with its interval, as ``0.77 [0.75, 0.79]``; ``n/a`` where it is undefined."""
    if record is None or record["auc"] is None:
        return "n/a"
    interval = record["auc_ci"]
    return f"{record['auc']:.2f}" + ("" if interval is None else
                                      f" [{interval[0]:.2f}, {interval[1]:.2f}]")


def _column(predictor: str) -> str:
    return "predictor_lag" if predictor == "lag" else predictor


def _area_record(scores: np.ndarray, labels: np.ndarray, strata: np.ndarray | None,
                 cells: np.ndarray, options: Options) -> dict[str, Any]:
    area = area_under_roc(scores, labels, strata)
    if math.isnan(area):
        return {"auc": None, "auc_ci": None}
    interval = _bootstrap_area(scores, labels, strata, cells, options)
    return {"auc": area, "auc_ci": None if interval is None else list(interval)}


def curves(signals: pd.DataFrame, options: Options = Options()) -> list[dict[str, Any]]:
    """Per outcome, population and predictor: the runs counted (those with the outcome and every
    predictor), the positives, the runs with the outcome but no signal (and their positives),
    the area with its interval and the ROC points, and for the stale runs the area within
    strata; None areas where a class is empty. ``signals`` has a ``study`` column."""
    results = []
    for outcome in OUTCOMES:
        for population, above in POPULATIONS.items():
            members = signals if above is None else signals[signals["lag"] > above]
            known = members[members[outcome].notna()]
            # The runs every predictor reads, so that their curves compare on the same runs.
            read = known[list(map(_column, PREDICTORS))].notna().all(axis=1).to_numpy()
            usable, unread = known[read], known[~read]
            labels = usable[outcome].to_numpy(dtype=float) > 0.5
            cells = _codes(usable, CELL)
            strata = _codes(usable, STRATUM) if above is not None else None
            for predictor in PREDICTORS:
                scores = usable[_column(predictor)].to_numpy(dtype=float)
                record: dict[str, Any] = {
                    "outcome": outcome, "population": population, "predictor": predictor,
                    "runs": int(len(usable)), "positives": int(labels.sum()),
                    "without_signal": int(len(unread)),
                    "positives_without_signal": int((unread[outcome] > 0.5).sum()),
                    **_area_record(scores, labels, None, cells, options),
                    "fpr": [], "tpr": [], "within_strata": None}
                if record["auc"] is not None:
                    fpr, tpr = roc_curve(scores, labels)
                    record.update(fpr=fpr.tolist(), tpr=tpr.tolist())
                if strata is not None:
                    record["within_strata"] = _area_record(scores, labels, strata, cells,
                                                           options)
                results.append(record)
    return results


def pooled(studies: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The signals of ``studies`` (study name -> its ``with_failures`` signals) in one table, a
    row per run with its ``run_id`` and ``study`` as columns: run ids are unique within a study
    only."""
    return pd.concat([s.rename_axis("run_id").reset_index().assign(study=name)
                      for name, s in studies.items()], ignore_index=True)


def summary(studies: Mapping[str, pd.DataFrame], options: Options = Options()) -> dict[str, Any]:
    """The analysis of ``studies`` (study name -> its ``with_failures`` signals) JSON-ready:
    the options, the studies' run counts and the ``curves`` over their runs ``pooled``."""
    return {
        "options": {**{k: v for k, v in dataclasses.asdict(options).items()
                       if k != "thresholds"},
                    "collapse": dataclasses.asdict(options.thresholds)},
        "studies": {name: int(len(s)) for name, s in studies.items()},
        "curves": curves(pooled(studies), options),
    }
