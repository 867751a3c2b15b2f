"""The `[tune]` table of an experiment: the tuned hyper-parameter, its grid, the selection rule
and the tuning seeds, parsed and validated before anything compiles (`vaco_jax.experiment.tune`
says how tuning runs and chooses).

A rule scores each synchronous run (`final_scores`, `auc_scores`) and picks the grid value whose
runs have the highest IQM; `..._in_cell` rules compete only the values whose runs meet the
experiment's `[cell_rule]` criteria.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from vaco_jax.experiment import fields
from vaco_jax.report import scoring, stats
from vaco_jax.testbeds import Testbed

TUNE_KEYS = ("hparam", "values", "rule", "seeds")
DEFAULT_HPARAM = "learning_rate"
GROUP_PREFIX = "tune-"
FINAL_FRACTION = 0.1
"""The share of a run's last evaluations its final score averages: the report's default."""


def filled(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The runs' rows in order, with `filled_score`: a missing evaluation (after a run
    diverged) takes the run's last one, as the report scores it."""
    ordered = runs.sort_values(["run_id", "env_steps"], kind="stable")
    return ordered.assign(filled_score=ordered.groupby("run_id")[column].ffill())


def final_scores(runs: pd.DataFrame, column: str) -> pd.Series:
    """Per run: its mean score over the last `FINAL_FRACTION` of its evaluations."""
    return scoring.final_scores(filled(runs, column), FINAL_FRACTION)


def auc_scores(runs: pd.DataFrame, column: str) -> pd.Series:
    """Per run: its mean score over training, the area under its curve."""
    return filled(runs, column).groupby("run_id")[["filled_score", "env_steps"]].apply(
        lambda run: float(stats.area_under_curve(run["filled_score"], run["env_steps"])))


@dataclasses.dataclass(frozen=True)
class Rule:
    """A selection rule: the grid value whose synchronous runs have the highest IQM of
    `run_scores` (in the testbed's units: one method on one task needs no normalisation).
    Equal IQMs go to the smaller value, the more cautious step; a value whose every run
    diverged (IQM NaN) ranks below any other. With `in_cell`, only the values in `allowed`
    (those meeting the cell rule) compete, unless none does."""

    name: str
    statistic: str
    run_scores: Callable[[pd.DataFrame, str], pd.Series]
    in_cell: bool = False

    def choose(self, iqms: Mapping[float, float], allowed: frozenset[float] = frozenset()
               ) -> float:
        competing = [v for v in iqms if v in allowed] or list(iqms)
        return min(competing, key=lambda v: (-np.nan_to_num(iqms[v], nan=-np.inf), v))


RULES = {rule.name: rule for rule in (
    Rule("best_sync_auc", "AUC", auc_scores),
    Rule("best_sync_final", "final score", final_scores),
    Rule("best_sync_final_in_cell", "final score", final_scores, in_cell=True))}


@dataclasses.dataclass(frozen=True)
class Tune:
    """The `[tune]` table: the tuned hyper-parameter, its grid, the rule and the seeds."""

    hparam: str
    values: tuple[float, ...]
    rule: Rule
    seeds: tuple[int, ...]

    @property
    def column(self) -> str:
        """The runs table's column of the value each run used, tuning and tuned runs alike."""
        return f"tuned_{self.hparam}"


def parse_tune(table: Any, testbed: Testbed) -> Tune:
    """The `[tune]` table, validated; errors name the field."""
    if not isinstance(table, dict):
        raise ValueError(f"must be a table ([tune]), got {fields.quoted(table)}")
    fields.check_keys(table, TUNE_KEYS)
    missing = [k for k in ("values", "rule", "seeds") if k not in table]
    if missing:
        raise ValueError(f"missing key(s) {missing}")
    hparam = fields.values("hparam", table.get("hparam", DEFAULT_HPARAM), str)[0]
    if hparam == "lag":
        raise ValueError("hparam: lag is set by [lag] levels, it cannot be tuned")
    testbed.hparams.create(**{hparam: 0.0})  # refuses an unknown name, listing the known ones
    if isinstance(table["values"], list) and not table["values"]:
        raise ValueError("values: the grid is empty; give at least one value")
    values = tuple(float(v) for v in fields.values("values", table["values"]))
    if any(v <= 0 for v in values):
        raise ValueError(f"values must all be positive, got {fields.quoted(list(values))}")
    rule = fields.values("rule", table["rule"], str, tuple(RULES))[0]
    return Tune(hparam=hparam, values=values, rule=RULES[rule], seeds=fields.seeds(table["seeds"]))


def check_not_fixed(tune: Tune, hparams: Mapping[str, Any], where: str) -> None:
    """Refuses a tuned hyper-parameter that `[hparams]` or an override also sets."""
    if tune.hparam in hparams:
        raise ValueError(f"[tune] hparam: {tune.hparam} is tuned, so {where} may not set it")
