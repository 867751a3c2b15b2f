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
from typing import Mapping

import numpy as np
import pandas as pd

from vaco_jax.experiment import spec
from vaco_jax.experiment.groups import Group, grid_points
from vaco_jax.experiment.tune_spec import FINAL_FRACTION, filled
from vaco_jax.report import cell_rule, scoring, stats
from vaco_jax.report.summary import CellRule

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
    evaluations = filled(rows, column)
    runs = evaluations.groupby("run_id")["filled_score"]
    sync = pd.DataFrame({"raw_initial": runs.first(),
                         "raw_final": scoring.final_scores(evaluations, FINAL_FRACTION)})
    sync = sync.assign(gain=sync["raw_final"] - sync["raw_initial"], task=task).reset_index()
    judged = cell_rule.judge_cell(
        task, "", cell_rule.normalised(sync, evaluations, rule, {task: reference}), rule, None,
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
        for point in grid_points(dataclasses.replace(group, swept=group.swept[1:])):
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

    def at_chosen(group: Group) -> Group:
        tuning = experiment.tuned_by.get(group.name)
        keys = [(tuning, tuple(r.hparams[n] for n in group.swept)) for r in group.runs]
        if tuning is None or not all(k in chosen for k in keys):
            return group
        runs = tuple(dataclasses.replace(r, hparams={**r.hparams, tune.hparam: chosen[k]})
                     for r, k in zip(group.runs, keys))
        return dataclasses.replace(group, swept=(*group.swept, tune.hparam), runs=runs)
    return dataclasses.replace(experiment, groups=tuple(at_chosen(g) for g in experiment.groups))
