"""Tuning: each method at its own learning rate, chosen on its synchronous runs alone.

An experiment's `[tune]` table names a numeric hyper-parameter (`hparam`, `learning_rate` by
default), a grid of positive `values`, a selection `rule` and the `seeds` of the tuning runs.
For every (task, algorithm, epochs, minibatches) the experiment gains a *tuning group*: lag 0
under the `fixed` lag model, each grid value x each point of the experiment's other grids x
each tuning seed one run, all vmapped in one program like any other group (the tuned value is
a traced leaf of the hyper-parameters). A sweep runs the tuning groups first, picks each
method's value by the rule from their results only, then runs the experiment's own groups (the
lagged cells and the lag-0 cell) at that value. A method is an algorithm at one point of the
other grids: each such point is tuned on its own.

The rule is read from nothing but the tuning groups' runs, which are synchronous by
construction, so no stale run can sway the choice. A rule `..._in_cell` chooses only among the
values whose synchronous runs meet the experiment's `[cell_rule]` criteria (gain, not
saturated, still rising: `vaco_jax.report.cell_rule`), judged for each method on its own
tuning runs as the rule judges the baseline, so that a method is not tuned into a saturated
cell; where no value meets them, it chooses among all, and the report says so.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from vaco_jax.core.lag_models import Fixed
from vaco_jax.experiment import fields, spec
from vaco_jax.report import cell_rule, scoring, stats
from vaco_jax.report.summary import CellRule
from vaco_jax.testbeds import Testbed

TUNE_KEYS = ("hparam", "values", "rule", "seeds")
DEFAULT_HPARAM = "learning_rate"
GROUP_PREFIX = "tune-"
FINAL_FRACTION = 0.1
"""The share of a run's last evaluations its final score averages: the report's default."""


def _filled(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The runs' rows in order, with `filled_score`: a missing evaluation (after a run
    diverged) takes the run's last one, as the report scores it."""
    ordered = runs.sort_values(["run_id", "env_steps"], kind="stable")
    return ordered.assign(filled_score=ordered.groupby("run_id")[column].ffill())


def _final_scores(runs: pd.DataFrame, column: str) -> pd.Series:
    """Per run: its mean score over the last `FINAL_FRACTION` of its evaluations."""
    return scoring.final_scores(_filled(runs, column), FINAL_FRACTION)


def _auc_scores(runs: pd.DataFrame, column: str) -> pd.Series:
    """Per run: its mean score over training, the area under its curve."""
    return _filled(runs, column).groupby("run_id")[["filled_score", "env_steps"]].apply(
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
    Rule("best_sync_auc", "AUC", _auc_scores),
    Rule("best_sync_final", "final score", _final_scores),
    Rule("best_sync_final_in_cell", "final score", _final_scores, in_cell=True))}


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
    return Tune(hparam=hparam, values=values, rule=RULES[rule], seeds=spec._seeds(table["seeds"]))


def check_not_fixed(tune: Tune, hparams: Mapping[str, Any], where: str) -> None:
    """Refuses a tuned hyper-parameter that `[hparams]` or an override also sets."""
    if tune.hparam in hparams:
        raise ValueError(f"[tune] hparam: {tune.hparam} is tuned, so {where} may not set it")


def _grid_points(group: spec.Group) -> list[tuple[float, ...]]:
    """The distinct points of the group's other grids, in order."""
    return list(dict.fromkeys(tuple(r.hparams[n] for n in group.swept) for r in group.runs))


def _tuning_name(group: spec.Group, testbed: Testbed) -> str:
    """One per task, algorithm, config axis value and forward variant."""
    config = group.config
    return (f"{GROUP_PREFIX}{testbed.task(config)}-{config.algo}{group.axes_part}-"
            f"e{config.epochs}m{config.minibatches}")


def _tuning_group(name: str, group: spec.Group, tune: Tune, testbed: Testbed) -> spec.Group:
    """Lag 0 under `fixed`: grid value x other grid point x tuning seed, seed fastest."""
    config = group.config.replace(lag_model=Fixed(), lag_preset=None)
    points = itertools.product(tune.values, _grid_points(group), tune.seeds)
    runs = tuple(spec.RunSpec(run_id=f"{name}-r{i}", seed=seed, lag=0.0,
                              hparams={tune.hparam: value, **dict(zip(group.swept, point))})
                 for i, (value, point, seed) in enumerate(points))
    return spec.validated(spec.Group(name=name, config=config, fixed=group.fixed,
                                     swept=(tune.hparam, *group.swept), runs=runs,
                                     axes=group.axes), testbed)


def tuning_groups(groups: tuple[spec.Group, ...], tune: Tune, testbed: Testbed
                  ) -> tuple[tuple[spec.Group, ...], dict[str, str]]:
    """The tuning groups of the experiment's `groups` (one per task, algorithm, config axis
    value and forward variant, shared by its lag models), and the tuning group of each of
    `groups`."""
    tuned_by = {g.name: _tuning_name(g, testbed) for g in groups}
    first = {name: next(g for g in groups if tuned_by[g.name] == name)
             for name in dict.fromkeys(tuned_by.values())}
    spec._check_num_runs(sum(len(g.runs) for g in groups) + sum(
        len(tune.values) * len(_grid_points(g)) * len(tune.seeds) for g in first.values()))
    return (tuple(_tuning_group(name, group, tune, testbed) for name, group in first.items()),
            tuned_by)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One grid value of one method: the IQM of its runs' scores and its 95% interval; with an
    `in_cell` rule, whether its runs meet the cell rule."""

    value: float
    iqm: float
    low: float
    high: float
    runs: int
    in_cell: bool | None = None


@dataclasses.dataclass(frozen=True)
class Choice:
    """The value the rule chose for one method (a tuning group at one point of the other
    grids), with every candidate behind it."""

    group: str
    point: Mapping[str, float]
    candidates: tuple[Candidate, ...]
    chosen: float

    @property
    def key(self) -> tuple[str, tuple[float, ...]]:
        """The method: its tuning group and the values of its other grids."""
        return self.group, tuple(self.point.values())


def _candidate(value: float, scores: np.ndarray, in_cell: bool | None) -> Candidate:
    iqm, low, high = stats.stratified_bootstrap_ci(scores[:, None], stats.aggregate_iqm)
    return Candidate(value=value, iqm=float(iqm), low=float(low), high=float(high),
                     runs=len(scores), in_cell=in_cell)


def _meets_cell_rule(rows: pd.DataFrame, column: str, rule: CellRule, task: str,
                     reference: float) -> bool:
    """Whether one method's synchronous runs at one value (`rows`: their evaluations) meet the
    cell rule's criteria on `task`, each run normalised by its first evaluation and the task's
    `reference`, as the rule judges the baseline's cells."""
    filled = _filled(rows, column)
    runs = filled.groupby("run_id")["filled_score"]
    sync = pd.DataFrame({"raw_initial": runs.first(),
                         "raw_final": scoring.final_scores(filled, FINAL_FRACTION)})
    sync = sync.assign(gain=sync["raw_final"] - sync["raw_initial"], task=task).reset_index()
    judged = cell_rule.judge_cell(
        task, "", cell_rule.normalised(sync, filled, rule, {task: reference}), rule, None,
        reps=2000, seed=0)
    return judged.passed


def choices(experiment: spec.Experiment, runs: pd.DataFrame, score: str) -> list[Choice]:
    """The rule's choice for every method whose tuning runs are all in `runs` (a runs table;
    any rows but the tuning groups' are ignored, so stale runs never count)."""
    tune = experiment.tune
    made = []
    for group in experiment.tuning_groups:
        ids = {r.run_id for r in group.runs}
        rows = runs[runs["run_id"].isin(ids)]
        if set(rows["run_id"]) != ids:
            continue
        scores = tune.rule.run_scores(rows, score)
        task = experiment.testbed.task(group.config)
        for point in _grid_points(dataclasses.replace(group, swept=group.swept[1:])):
            named = dict(zip(group.swept[1:], point))
            candidates = []
            for value in tune.values:
                ids = [r.run_id for r in group.runs if r.hparams[tune.hparam] == value
                       and all(r.hparams[n] == v for n, v in named.items())]
                in_cell = (_meets_cell_rule(rows[rows["run_id"].isin(ids)], score,
                                            experiment.cell_rule, task,
                                            experiment.reference_scores[task])
                           if tune.rule.in_cell else None)
                candidates.append(_candidate(value, np.array([scores[i] for i in ids]), in_cell))
            chosen = tune.rule.choose({c.value: c.iqm for c in candidates},
                                      frozenset(c.value for c in candidates if c.in_cell))
            made.append(Choice(group=group.name, point=named, candidates=tuple(candidates),
                               chosen=chosen))
    return made


def resolved(experiment: spec.Experiment,
             chosen: Mapping[tuple[str, tuple[float, ...]], float]) -> spec.Experiment:
    """The experiment with each tuned group's runs at their method's `chosen` value (by
    `Choice.key`); groups whose method has no choice yet are left as they are."""
    tune = experiment.tune

    def at_chosen(group: spec.Group) -> spec.Group:
        tuning = experiment.tuned_by.get(group.name)
        keys = [(tuning, tuple(r.hparams[n] for n in group.swept)) for r in group.runs]
        if tuning is None or not all(k in chosen for k in keys):
            return group
        runs = tuple(dataclasses.replace(r, hparams={**r.hparams, tune.hparam: chosen[k]})
                     for r, k in zip(group.runs, keys))
        return dataclasses.replace(group, swept=(*group.swept, tune.hparam), runs=runs)
    return dataclasses.replace(experiment, groups=tuple(at_chosen(g) for g in experiment.groups))
