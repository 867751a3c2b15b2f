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

With `[tune] extend = N`, each tuning group has an *extension* past each end of its grid: N
values in steps of the grid's own ratio at that end (`Tune.beyond`). A method whose choice on
the grid is an end runs that extension (its other runs alike), and the rule chooses again among
the grid and the extension; the extension no choice needs never runs. Where an experiment's
`[cell_rule]` sets `max_final`, every candidate is marked saturated or not, so the report can
say which methods' own synchronous runs saturate the task at their chosen value.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from vaco_jax.experiment import spec, tune_spec
from vaco_jax.experiment.groups import Group, grid_points
from vaco_jax.experiment.tune_spec import FINAL_FRACTION, filled
from vaco_jax.report import cell_rule, scoring, stats
from vaco_jax.report.rule_records import CellRule, RuleCell


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One value of one method: the IQM of its runs' scores and its 95% interval; with an
    `in_cell` rule, whether its runs meet the cell rule; with a `[cell_rule]` `max_final`,
    whether they saturate the task (their normalised final IQM above it)."""

    value: float
    iqm: float
    low: float
    high: float
    runs: int
    in_cell: bool | None = None
    saturated: bool | None = None


@dataclasses.dataclass(frozen=True)
class Choice:
    """The value the rule chose for one method (a tuning group at one point of the other
    grids), with every candidate behind it. `extension` is the group that extends the grid
    past the end its choice on the grid was (None inside the grid, or without `extend`), and
    `extended` whether that group's runs are among the candidates: until they are, the choice
    is the grid's end and not final."""

    group: str
    point: Mapping[str, float]
    candidates: tuple[Candidate, ...]
    chosen: float
    extension: str | None = None
    extended: bool = False

    @property
    def key(self) -> tuple[str, tuple[float, ...]]:
        """The method: its tuning group and the values of its other grids."""
        return self.group, tuple(self.point.values())

    @property
    def pending(self) -> bool:
        """Whether the choice waits for its extension's runs."""
        return self.extension is not None and not self.extended

    @property
    def saturated(self) -> bool | None:
        """Whether the method's synchronous runs at its chosen value saturate the task."""
        return next(c.saturated for c in self.candidates if c.value == self.chosen)


def _cell_judgement(rows: pd.DataFrame, column: str, rule: CellRule, task: str,
                    reference: float) -> RuleCell:
    """The cell rule's synchronous criteria judged on one method's runs at one value (`rows`:
    their evaluations) on `task`, each run normalised by its first evaluation and the task's
    `reference`, as the rule judges the baseline's cells."""
    evaluations = filled(rows, column)
    runs = evaluations.groupby("run_id")["filled_score"]
    sync = pd.DataFrame({"raw_initial": runs.first(),
                         "raw_final": scoring.final_scores(evaluations, FINAL_FRACTION)})
    sync = sync.assign(gain=sync["raw_final"] - sync["raw_initial"], task=task).reset_index()
    return cell_rule.judge_cell(
        task, "", cell_rule.normalised(sync, evaluations, rule, {task: reference}), rule, None,
        reps=2000, seed=0)


def _candidates(experiment: spec.Experiment, group: Group, rows: pd.DataFrame, score: str,
                named: Mapping[str, float], task: str) -> list[Candidate]:
    """The candidates of `group`'s values at the other grids' point `named` (`rows`: the
    group's evaluations)."""
    tune = experiment.tune
    scores = tune.rule.run_scores(rows, score)
    judged = experiment.cell_rule is not None and experiment.cell_rule.normalised
    made = []
    for value in dict.fromkeys(r.hparams[tune.hparam] for r in group.runs):
        ids = [r.run_id for r in group.runs if r.hparams[tune.hparam] == value
               and all(r.hparams[n] == v for n, v in named.items())]
        cell = (_cell_judgement(rows[rows["run_id"].isin(ids)], score, experiment.cell_rule,
                                task, experiment.reference_scores[task]) if judged else None)
        iqm, low, high = stats.stratified_bootstrap_ci(np.array([scores[i] for i in ids])[:, None],
                                                       stats.aggregate_iqm)
        made.append(Candidate(
            value=value, iqm=float(iqm), low=float(low), high=float(high), runs=len(ids),
            in_cell=cell.passed if tune.rule.in_cell else None,
            saturated=(None if cell is None or cell.final is None else not cell.final.passed)))
    return made


def _choose(rule: tune_spec.Rule, candidates: Sequence[Candidate]) -> float:
    return rule.choose({c.value: c.iqm for c in candidates},
                       frozenset(c.value for c in candidates if c.in_cell))


def _complete(group: Group, runs: pd.DataFrame) -> pd.DataFrame | None:
    """`group`'s rows of `runs`, or None unless every run of it is there."""
    ids = {r.run_id for r in group.runs}
    rows = runs[runs["run_id"].isin(ids)]
    return rows if set(rows["run_id"]) == ids else None


def choices(experiment: spec.Experiment, runs: pd.DataFrame, score: str) -> list[Choice]:
    """The rule's choice for every method whose tuning runs are all in `runs` (a runs table;
    any rows but the tuning groups' are ignored, so stale runs never count). A method whose
    choice on the grid is its end (with `extend`) chooses again with the extension past that
    end once its runs are all in `runs`, keeping the grid's choice until then (`pending`)."""
    tune = experiment.tune
    made = []
    for group in experiment.groups:
        if group.name not in experiment.tuned_by.values():
            continue
        rows = _complete(group, runs)
        if rows is None:
            continue
        task = experiment.testbed.task(group.config)
        for point in grid_points(dataclasses.replace(group, swept=group.swept[1:])):
            named = dict(zip(group.swept[1:], point))
            candidates = _candidates(experiment, group, rows, score, named, task)
            chosen = _choose(tune.rule, candidates)
            side = tune.edge(chosen)
            extension = experiment.extensions[group.name][side] if side else None
            further = _complete(experiment.group(extension), runs) if extension else None
            if further is not None:
                candidates += _candidates(experiment, experiment.group(extension), further,
                                          score, named, task)
                chosen = _choose(tune.rule, candidates)
            made.append(Choice(group=group.name, point=named, candidates=tuple(candidates),
                               chosen=chosen, extension=extension,
                               extended=further is not None))
    return made


def unneeded_extensions(experiment: spec.Experiment, made: Sequence[Choice]) -> set[str]:
    """The extension groups no choice of `made` needs: those a sweep leaves unrun. An
    extension of a tuning group with no choice yet is kept (it may be needed)."""
    chosen = {c.group for c in made}
    needed = {c.extension for c in made if c.extension}
    return {name for tuning, sides in experiment.extensions.items() if tuning in chosen
            for name in sides.values() if name not in needed}


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
