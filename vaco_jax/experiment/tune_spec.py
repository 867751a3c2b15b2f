"""The `[tune]` table of an experiment: the tuned hyper-parameter, its grid, the selection rule
and the tuning seeds, parsed and validated before anything compiles (`vaco_jax.experiment.tune`
says how tuning runs and chooses).

A rule scores each synchronous run (`final_scores`, `auc_scores`) and picks the grid value whose
runs have the highest IQM; `..._in_cell` rules compete only the values whose runs meet the
experiment's `[cell_rule]` criteria. With `extend`, a method whose choice is an end of the grid
is tuned again at up to that many values beyond that end, in steps of the grid's own ratio there
(`Tune.beyond`), and chooses among them and the grid.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from vaco_jax.experiment import fields
from vaco_jax.report import scoring, stats
from vaco_jax.testbeds import Testbed

TUNE_KEYS = ("hparam", "values", "rule", "seeds", "extend")
DEFAULT_HPARAM = "learning_rate"
GROUP_PREFIX = "tune-"
MAX_EXTENSION = 2
"""The most grid steps a choice at the grid's end extends it by."""
SIDES = ("below", "above")
"""The grid's two ends, as extension groups are named."""
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
    extend: int = 0

    @property
    def column(self) -> str:
        """The runs table's column of the value each run used, tuning and tuned runs alike."""
        return f"tuned_{self.hparam}"

    def edge(self, value: float) -> str | None:
        """The end of the grid `value` is (`"below"`: its smallest, `"above"`: its largest),
        where an extension would look; None inside the grid or without `extend`."""
        if not self.extend:
            return None
        return {min(self.values): "below", max(self.values): "above"}.get(value)

    def beyond(self, side: str) -> tuple[float, ...]:
        """The `extend` values past the grid's end on `side`, nearest first, each one step of
        the ratio between that end and its neighbour (3 significant digits): below
        `[1e-4, 3e-4, 1e-3]` lie 3.33e-5 and 1.11e-5."""
        ordered = sorted(self.values)
        end, neighbour = (ordered[0], ordered[1]) if side == "below" else (ordered[-1],
                                                                           ordered[-2])
        return tuple(float(f"{end * (end / neighbour) ** k:.3g}")
                     for k in range(1, self.extend + 1))


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
    extend = table.get("extend", 0)
    if isinstance(extend, bool) or not isinstance(extend, int) or not 0 <= extend <= MAX_EXTENSION:
        raise ValueError(f"extend must be a whole number of grid steps from 0 to {MAX_EXTENSION}, "
                         f"got {fields.quoted(extend)}")
    if extend and len(values) < 2:
        raise ValueError("extend: a grid of one value has no step to extend it by; give at "
                         "least two values")
    return Tune(hparam=hparam, values=values, rule=RULES[rule],
                seeds=fields.seeds(table["seeds"]), extend=extend)


PROTOCOL = 1
"""The version of the project's study protocol: an experiment that says `protocol = 1` tunes
every method by `PROTOCOL_RULE` with at least `PROTOCOL_SEEDS` tuning seeds and the grid
extended by `MAX_EXTENSION` values past an end its choice is (experiments/README.md, "The
tuning rule")."""
PROTOCOL_RULE = "best_sync_final"
PROTOCOL_SEEDS = 4


def check_protocol(value: Any, tune: Tune | None) -> int:
    """The experiment's `protocol`, refused unless its `[tune]` is the protocol's rule."""
    if isinstance(value, bool) or value != PROTOCOL:
        raise ValueError(f"protocol must be {PROTOCOL} (the only version so far), got "
                         f"{fields.quoted(value)}")
    if tune is None:
        raise ValueError(f"protocol {PROTOCOL} tunes every method's rate: add a [tune] table "
                         f"(rule = {PROTOCOL_RULE!r}, extend = {MAX_EXTENSION}, at least "
                         f"{PROTOCOL_SEEDS} seeds)")
    wrong = [f"{key} = {shown!r} (the protocol's: {wanted!r})" for key, shown, wanted in (
        ("rule", tune.rule.name, PROTOCOL_RULE), ("extend", tune.extend, MAX_EXTENSION))
             if shown != wanted]
    if len(tune.seeds) < PROTOCOL_SEEDS:
        wrong.append(f"seeds = {list(tune.seeds)} (the protocol's: at least {PROTOCOL_SEEDS})")
    if wrong:
        raise ValueError(f"[tune]: protocol {PROTOCOL} tunes every method alike, so it sets "
                         f"{'; '.join(wrong)}")
    return PROTOCOL


def check_not_fixed(tune: Tune, hparams: Mapping[str, Any], where: str) -> None:
    """Refuses a tuned hyper-parameter that `[hparams]` or an override also sets."""
    if tune.hparam in hparams:
        raise ValueError(f"[tune] hparam: {tune.hparam} is tuned, so {where} may not set it")
