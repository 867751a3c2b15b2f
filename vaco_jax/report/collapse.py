"""Does a run's effective sample size fall before its score collapses?

Works on a runs table (one row per run per evaluation, columns ``run_id``, ``task``,
``variant``, ``lag``, ``seed``, ``env_steps``, a score and ``ess_ratio``: the mean
over the evaluation period's updates of the sequence-level ESS ratio of ``pi_T / beta``).
Each run's rows are read in ``env_steps`` order. With the defaults of ``Thresholds``:

- A run *collapses* at the first evaluation at which its score is below
  ``collapse_fraction`` (0.5) times the best score of its earlier evaluations (the running
  maximum, the current evaluation left out), provided that best is at least ``min_peak``
  (0.2), so that a run that never learned does not "collapse". The report judges the score
  as a fraction of the task's reference, so that a run that starts at half the reference
  collapses when it falls below a quarter of it, whether or not it gained first. A NaN score
  (every evaluation after a run diverged) is a collapse at that evaluation.
- An *ESS warning* is raised by two rules, each at the first evaluation period at which it
  holds: ``drop``, the period's ``ess_ratio`` is below ``ess_drop`` (0.5) times that of the
  run's first period with a finite ``ess_ratio`` (a fall relative to the level the run's lag
  sets); ``floor``, the ``ess_ratio`` is below ``ess_floor`` (0.2). Periods without a finite
  ``ess_ratio`` (the evaluation at ``env_steps`` 0, which no update precedes) never warn.
- A run's *lead* under a rule is its collapse's ``env_steps`` minus its warning's: positive
  when the ESS fell first. A collapsed run is *warned in time* when its warning comes at or
  before its collapse; a run that did not collapse but was warned is a *false alarm*.

``cell_counts`` summarises this per (variant, lag): runs, collapsed runs, and per rule the
collapsed runs warned in time, the median lead over the collapsed runs with a warning (a
negative median: the ESS fell after the collapse) and the false alarms.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

WARNING_RULES = ("drop", "floor")
"""The ESS warning rules: below ``ess_drop`` x the first period's level; below ``ess_floor``."""
RUN_COORDINATES = ("task", "variant", "lag", "seed")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """When a run collapses and when its ESS warns (see the module's docstring)."""

    collapse_fraction: float = 0.5
    min_peak: float = 0.2
    ess_drop: float = 0.5
    ess_floor: float = 0.2

    def __post_init__(self) -> None:
        for name in ("collapse_fraction", "ess_drop", "ess_floor"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
        if not 0.0 < self.min_peak < math.inf:
            raise ValueError(f"min_peak must be positive and finite, got {self.min_peak!r}")


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def collapse_index(scores: np.ndarray, thresholds: Thresholds = Thresholds()) -> int | None:
    """Index of the evaluation at which ``scores`` (one run's, in order) collapses, or None."""
    scores = np.asarray(scores, dtype=float)
    # fmax skips NaN, so the running best is that of the finite earlier scores.
    best_before = np.concatenate([[-np.inf], np.fmax.accumulate(scores)[:-1]])
    fell = (best_before >= thresholds.min_peak) & (
        scores < thresholds.collapse_fraction * best_before
    )
    return _first(fell | np.isnan(scores))


def warning_indices(
    ess: np.ndarray, thresholds: Thresholds = Thresholds()
) -> dict[str, int | None]:
    """Index of the first evaluation period that each rule of ``WARNING_RULES`` flags in
    ``ess`` (one run's ``ess_ratio`` per period, in order), or None."""
    ess = np.asarray(ess, dtype=float)
    first = _first(np.isfinite(ess))
    if first is None:
        return dict.fromkeys(WARNING_RULES)
    return {
        "drop": _first(ess < thresholds.ess_drop * ess[first]),
        "floor": _first(ess < thresholds.ess_floor),
    }


def _steps_at(env_steps: np.ndarray, index: int | None) -> float:
    return math.nan if index is None else float(env_steps[index])


def _run_events(run: pd.DataFrame, score_column: str, thresholds: Thresholds) -> dict[str, Any]:
    env_steps = run["env_steps"].to_numpy(dtype=float)
    collapse_steps = _steps_at(env_steps, collapse_index(run[score_column].to_numpy(), thresholds))
    events: dict[str, Any] = {
        "collapsed": not math.isnan(collapse_steps),
        "collapse_env_steps": collapse_steps,
    }
    for rule, index in warning_indices(run["ess_ratio"].to_numpy(), thresholds).items():
        warning_steps = _steps_at(env_steps, index)
        events[f"{rule}_warning_env_steps"] = warning_steps
        events[f"{rule}_lead"] = collapse_steps - warning_steps
    return events


def run_events(
    runs: pd.DataFrame, *, score_column: str = "score", thresholds: Thresholds = Thresholds()
) -> pd.DataFrame | None:
    """One row per run (indexed by ``run_id``, with ``RUN_COORDINATES``): ``collapsed``,
    ``collapse_env_steps`` and per rule ``{rule}_warning_env_steps`` and ``{rule}_lead``
    (NaN where there is no collapse or no warning); None when ``runs`` has no finite
    ``ess_ratio``."""
    if "ess_ratio" not in runs.columns or not np.isfinite(runs["ess_ratio"]).any():
        return None
    ordered = runs.sort_values(["run_id", "env_steps"], kind="stable")
    coordinates = ordered.groupby("run_id")[list(RUN_COORDINATES)].first()
    events = pd.DataFrame.from_dict(
        {
            run_id: _run_events(run, score_column, thresholds)
            for run_id, run in ordered.groupby("run_id")
        },
        orient="index",
    )
    return coordinates.join(events)


def _rule_counts(cell: pd.DataFrame, rule: str) -> dict[str, Any]:
    warned = cell[f"{rule}_warning_env_steps"].notna()
    lead = cell[f"{rule}_lead"]
    warned_collapses = lead[cell["collapsed"] & warned]
    return {
        "warned_in_time": int((warned_collapses >= 0).sum()),
        "median_lead": float(warned_collapses.median()) if len(warned_collapses) else None,
        "false_alarms": int((~cell["collapsed"] & warned).sum()),
    }


def cell_counts(events: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (variant, lag) of ``run_events``: ``runs``, ``collapsed`` and per rule
    ``warned_in_time``, ``median_lead`` (None without a warned collapse) and ``false_alarms``."""
    return [
        {
            "variant": str(variant),
            "lag": float(lag),
            "runs": len(cell),
            "collapsed": int(cell["collapsed"].sum()),
            **{rule: _rule_counts(cell, rule) for rule in WARNING_RULES},
        }
        for (variant, lag), cell in events.groupby(["variant", "lag"], sort=True)
    ]


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _run_record(run_id: str, run: pd.Series) -> dict[str, Any]:
    return {
        "run_id": str(run_id),
        "task": str(run["task"]),
        "variant": str(run["variant"]),
        "lag": float(run["lag"]),
        "seed": int(run["seed"]),
        "collapsed": bool(run["collapsed"]),
        "collapse_env_steps": _finite_or_none(run["collapse_env_steps"]),
        **{
            rule: {
                "warning_env_steps": _finite_or_none(run[f"{rule}_warning_env_steps"]),
                "lead": _finite_or_none(run[f"{rule}_lead"]),
            }
            for rule in WARNING_RULES
        },
    }


def summary(events: pd.DataFrame | None, thresholds: Thresholds) -> dict[str, Any]:
    """The analysis JSON-ready: ``thresholds``, and either ``cells`` (``cell_counts``) and
    ``runs`` (each run's events), or ``skipped`` (why not) when ``events`` is None."""
    recorded: dict[str, Any] = {"thresholds": dataclasses.asdict(thresholds)}
    if events is None:
        return {**recorded, "skipped": "the runs table has no finite ess_ratio"}
    ordered = events.sort_values(["variant", "lag", "task", "seed"], kind="stable")
    return {
        **recorded,
        "cells": cell_counts(events),
        "runs": [_run_record(run_id, run) for run_id, run in ordered.iterrows()],
    }
