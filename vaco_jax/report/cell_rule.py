"""An experiment's cell rule, evaluated on its runs: which cells the synchronous baseline allows.

The project's rule for a scientific testbed: choose cells on the synchronous baseline alone,
before any stale run, where synchronous learning is still rising at the end of the budget (a
saturated score hides differences), and check that lag costs the baseline a clear share on
every task of the study. An experiment commits the rule as its ``[cell_rule]`` (``CellRule``)
before its runs; this module judges the runs against it.

A *cell* is the baseline's synchronous (lag 0) runs of one variant (its setting: the swept
hyper-parameters, config axes and forward setting) on one task. Each run's scores are
normalised on its own scale, ``(score - initial) / (reference - initial)``, with ``initial``
the run's first evaluation and ``reference`` the task's given reference score, so 0 is where
the run started and 1 the reference; a run's *final* score is the report's (its mean over the
last ``final_fraction`` of its evaluations). The criteria, each checked where the rule sets it:

- ``min_gain`` and ``min_seed_share``: at least ``ceil(min_seed_share x runs)`` of the cell's
  runs reach a normalised final score (its gain over its initial score) of ``min_gain``.
- ``max_final``: the IQM of the normalised final scores is at most ``max_final`` (above it
  the cell counts as saturated).
- ``rising_window`` ``w``: per run, the normalised final score less the normalised score at
  ``1 - w`` of the run's steps (its curve interpolated linearly there); the IQM of these
  paired differences has a 95% stratified-bootstrap interval whose lower end is above 0, so
  learning over the last ``w`` of the budget is told apart from noise.
- ``max_kept_gain``: at the study's largest lag level, the baseline's kept gain
  (``kept_gain``: the IQM of the lagged runs' raw gains over the cell's synchronous IQM raw
  gain, the interval resampling both) is at most ``max_kept_gain``, for every variant whose
  synchronous runs the cell's are (``kept_gain.synchronous_variants``); a cell without runs at
  that lag, or without a synchronous gain, fails it.

Thresholds compare point estimates, as the project's calibrations stated their bars; only
"still rising" asks for an interval, being a difference that noise alone makes positive half
the time. A cell passes where it meets every criterion; the verdict names, per task, the
variants whose cell passes, and the variants that pass on every task of the study (all
criteria, and the lag criterion alone).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from vaco_jax.report import cells, kept_gain, scoring, stats
from vaco_jax.report.runs_table import Score
from vaco_jax.report.summary_fields import Interval, parsed
from vaco_jax.report.rule_records import (CellRule, CellRuleVerdict, IntervalCheck, LagCheck,
                                          RuleCell, SeedShareCheck)

SHARE_TOLERANCE = 1e-9
"""Slack when a share of runs becomes a count: 0.9 x 10 is 9.000000000000002 in floats."""


def evaluate(runs: pd.DataFrame, rule: CellRule, *, score: Score = Score(),
             reference_scores: Mapping[str, float] | None = None,
             final_fraction: float = 0.1, reps: int = 2000, seed: int = 0) -> CellRuleVerdict:
    """The verdict of ``rule`` on a runs table (``write_report``'s ``runs``), its final scores
    and intervals as the report of the same table computes them.

    Raises ``ValueError`` where the rule has normalised criteria and a task of the baseline's
    synchronous runs has no reference score, or a run starts at or above its task's reference.
    """
    _, table, final, references = scoring.scored(runs, score, reference_scores, final_fraction)
    return verdict(table, scoring.run_table(table, final, references), rule,
                   reference_scores, reps, seed)


def verdict(table: pd.DataFrame, run_table: pd.DataFrame, rule: CellRule,
            reference_scores: Mapping[str, float] | None, reps: int,
            seed: int) -> CellRuleVerdict:
    """``evaluate`` on the report's scored tables: ``table`` (``scoring.with_scores``, one row
    per evaluation) and ``run_table`` (``scoring.run_table``, one row per run)."""
    tasks = tuple(sorted(run_table["task"].astype(str).unique()))
    baseline = run_table[run_table["algo"].astype(str) == rule.baseline]
    sync = normalised(baseline[baseline["lag"] == kept_gain.SYNC_LAG], table, rule,
                      reference_scores)
    largest, lagged = (_largest_lag(baseline, run_table) if rule.max_kept_gain is not None
                       else (None, None))
    judged = tuple(
        judge_cell(str(task), str(variant), runs, rule,
                   None if lagged is None else _lag_checks(
                       runs,
                       lagged[(lagged["task"] == task) & (lagged["sync_variant"] == variant)],
                       rule.max_kept_gain, reps, seed),
                   reps, seed)
        for (task, variant), runs in sync.groupby(["task", "variant"], sort=True))
    passing = {task: tuple(c.variant for c in judged if c.task == task and c.passed)
               for task in tasks}
    return CellRuleVerdict(
        rule=rule, tasks=tasks, cells=judged, passing=passing,
        every_task=_on_every_task(judged, tasks, lambda c: c.passed),
        largest_lag=largest,
        lag_every_task=None if largest is None else _on_every_task(
            judged, tasks, lambda c: "lag" not in c.failed()))


def _largest_lag(baseline: pd.DataFrame, run_table: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    """The baseline's largest lag level (the study's, read from every method's runs, where the
    baseline has no stale runs: a part of a sweep without them still names it) and the
    baseline's runs there (none where it is lag 0), each with the variant of its synchronous
    runs (``sync_variant``)."""
    largest = float(max(baseline["lag"], default=kept_gain.SYNC_LAG))
    if largest == kept_gain.SYNC_LAG:
        largest = float(max(run_table["lag"], default=kept_gain.SYNC_LAG))
    sync_of = kept_gain.synchronous_variants(baseline)
    lagged = baseline[(baseline["lag"] == largest) & (baseline["lag"] > kept_gain.SYNC_LAG)]
    return largest, lagged.assign(sync_variant=lagged["variant"].map(sync_of))


def normalised(sync: pd.DataFrame, table: pd.DataFrame, rule: CellRule,
               reference_scores: Mapping[str, float] | None) -> pd.DataFrame:
    """The synchronous runs with their normalised final score (``norm_final``) and, with
    ``rising_window``, its rise over the window (``norm_rise``), each on the run's own scale."""
    if not rule.normalised or sync.empty:  # empty: a part of a sweep without the baseline
        return sync
    references = dict(reference_scores or {})
    missing = sorted(set(sync["task"].astype(str)) - set(references))
    if missing:
        raise ValueError(f"the cell rule's {', '.join(rule.normalised)} are normalised by each "
                         f"task's reference score; tasks {missing} have none")
    scale = sync["task"].astype(str).map(references) - sync["raw_initial"]
    below = sync.loc[scale <= 0, "run_id"].tolist()
    if below:
        raise ValueError(f"runs {below} start at or above their task's reference score, so "
                         f"their gain cannot be normalised by it")
    normalised = sync.assign(norm_final=sync["gain"] / scale)
    if rule.rising_window is None:
        return normalised
    earlier = _scores_at(table[table["run_id"].isin(sync["run_id"])], 1.0 - rule.rising_window)
    return normalised.assign(
        norm_rise=(sync["raw_final"] - sync["run_id"].map(earlier)) / scale)


def _scores_at(table: pd.DataFrame, fraction: float) -> pd.Series:
    """Per run: its (filled) score at ``fraction`` of its last evaluation's steps, interpolated
    linearly between its evaluations."""
    return table.groupby("run_id")[["env_steps", "filled_score"]].apply(
        lambda run: float(np.interp(fraction * run["env_steps"].max(), run["env_steps"],
                                    run["filled_score"])))


def _iqm(values: np.ndarray, reps: int, seed: int) -> Interval:
    return parsed(Interval, cells.bootstrap_interval(values[:, None], stats.aggregate_iqm,
                                                     reps, seed))


def judge_cell(task: str, variant: str, runs: pd.DataFrame, rule: CellRule,
               lag: tuple[LagCheck, ...] | None, reps: int, seed: int) -> RuleCell:
    """A cell's verdict on each criterion of ``rule`` (``runs``: one row per run, as
    ``normalised`` gives them); ``lag``: its lag checks, measured apart."""
    gain = final = rising = None
    if rule.min_gain is not None:
        reaching = int((runs["norm_final"] >= rule.min_gain).sum())
        required = math.ceil(rule.min_seed_share * len(runs) - SHARE_TOLERANCE)
        gain = SeedShareCheck(reaching=reaching, runs=len(runs), passed=reaching >= required)
    if rule.max_final is not None:
        measured = _iqm(runs["norm_final"].to_numpy(), reps, seed)
        final = IntervalCheck(measured=measured, passed=measured.point <= rule.max_final)
    if rule.rising_window is not None:
        measured = _iqm(runs["norm_rise"].to_numpy(), reps, seed)
        rising = IntervalCheck(measured=measured, passed=measured.low > 0)
    cell = RuleCell(task=task, variant=variant, runs=len(runs), passed=False, gain=gain,
                    final=final, rising=rising, lag=lag)
    return dataclasses.replace(cell, passed=not cell.failed())


def _lag_checks(sync: pd.DataFrame, lagged: pd.DataFrame, bound: float, reps: int,
                seed: int) -> tuple[LagCheck, ...]:
    """Per lagged variant of the cell (``lagged``: its runs at the largest lag on the task): its
    kept gain of the raw gain of ``sync``, the cell's synchronous runs."""
    sync_gains = sync[["gain"]].to_numpy()
    learned = stats.task_iqm(sync_gains)[0] > 0
    checks = []
    for variant, runs in lagged.groupby("variant", sort=True):
        kept = (parsed(Interval, kept_gain.kept_interval(runs[["gain"]].to_numpy(), sync_gains,
                                                         reps, seed)) if learned else None)
        checks.append(LagCheck(variant=str(variant), lag=float(runs["lag"].iloc[0]),
                               runs=len(runs), kept=kept,
                               passed=kept is not None and kept.point <= bound))
    return tuple(checks)


def _on_every_task(judged: Sequence[RuleCell], tasks: Sequence[str],
                   ok: Callable[[RuleCell], bool]) -> tuple[str, ...]:
    """The variants with a cell on every task of the study, each of them ``ok``."""
    variants = sorted({c.variant for c in judged})
    return tuple(v for v in variants
                 if all(any(c.variant == v and c.task == t and ok(c) for c in judged)
                        for t in tasks))
