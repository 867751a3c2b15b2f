"""A study's board for one task: per method and lag level, the share of its synchronous gain
it keeps (``report.kept_gain``) beside its lagged score normalised to the task's one reference.

The kept share alone rewards a method that learns little without lag and keeps little of
little; the normalised score puts every method on the same scale (0: the mean initial policy
of all runs of the task, 1: the task's reference score), so the board ranks its rows by the
lagged score and shows the kept share beside it. It ranks them only where the study's
committed cell rule holds on the task (``unranked`` says why not): where the baseline does not
learn, saturates or keeps its gain under lag, an order of the methods says nothing of lag.
Every number is the study's ``summary.json`` record, computed by the report layer from its
runs table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from vaco_jax.leaderboard.studies import Study
from vaco_jax.report.kept_gain import SYNC_LAG
from vaco_jax.report.summary_fields import Interval
from vaco_jax.report.summary import Summary, TaskKeptGain

Key = tuple[str, float]
"""A (variant, lag) cell of a board."""


@dataclasses.dataclass(frozen=True)
class CellScore:
    """A cell's normalised final score (``score``) and AUC (``auc``), IQMs over its ``runs``,
    with its mean first evaluation and final IQM in the testbed's units (``raw_initial``,
    ``raw_final``; None where the report kept none)."""

    score: Interval
    auc: Interval
    runs: int
    raw_initial: float | None
    raw_final: Interval | None


@dataclasses.dataclass(frozen=True)
class TaskBoard:
    """One task of one study.

    ``scores`` holds each cell's scores; ``kept`` the cell's kept gain record (empty where the
    study has none: ``kept_skipped`` says why); ``order`` the variants best first
    (``ranked``), or in name order where they are not ranked (``unranked`` says why).
    """

    study: Study
    task: str
    lags: tuple[float, ...]
    scores: Mapping[Key, CellScore]
    kept: Mapping[Key, TaskKeptGain]
    kept_skipped: str | None
    order: tuple[str, ...]
    unranked: str | None = None

    @property
    def stem(self) -> str:
        """The file stem of its figure."""
        return f"board_{self.task}"


def score_records(summary: Summary, task: str) -> dict[Key, CellScore]:
    """Per cell of ``task``: its normalised and raw scores. A study of one task keeps them in
    its cells; one of several tasks in its per-task cells (its cells pool the tasks)."""
    if len(summary.run.tasks) > 1:
        return {(c.variant, float(c.lag)): CellScore(c.iqm, c.auc_iqm, c.runs, c.raw_initial,
                                                     c.raw_iqm)
                for c in summary.task_cells if c.task == task}
    records = {}
    for c in summary.cells:
        # A report from before raw scores were kept has none: the pages say not recorded.
        raw = c.raw.get(task)
        records[(c.variant, float(c.lag))] = CellScore(
            c.iqm, c.auc_iqm, c.num_runs, None if raw is None else raw.initial,
            None if raw is None else raw.iqm)
    return records


def _mean_point(intervals: Iterable[Interval | None]) -> float:
    """The mean point of the defined intervals; below every number where none is."""
    points = [interval.point for interval in intervals if interval is not None]
    return float(np.mean(points)) if points else -np.inf


def ranked(scores: Mapping[Key, CellScore], kept: Mapping[Key, TaskKeptGain],
           lags: Sequence[float]) -> list[str]:
    """Variants best first by their mean normalised score over the lag levels above 0 (over
    lag 0 in a study without lag), ties broken by their mean kept share of the final score."""
    lagged = [lag for lag in lags if lag != SYNC_LAG] or list(lags)

    def rank(variant: str) -> tuple[float, float]:
        cells = [(variant, lag) for lag in lagged]
        return (-_mean_point(scores[c].score for c in cells if c in scores),
                -_mean_point(kept[c].kept for c in cells if c in kept))

    return sorted(sorted({variant for variant, _ in scores}), key=rank)


def unranked_because(summary: Summary, task: str) -> str | None:
    """Why a study's methods on ``task`` are not ranked; None where its committed cell rule
    holds there (the baseline's cell passes every criterion)."""
    verdict = summary.cell_rule
    if verdict is None:
        return "the study committed no cell rule"
    if not verdict.passing.get(task):
        return f"its committed cell rule does not hold on {task}"
    return None


def task_boards(study: Study) -> list[TaskBoard]:
    """The study's board of each of its tasks."""
    kept_gain = study.kept_gain
    boards = []
    for task in study.tasks:
        scores = score_records(study.summary, task)
        kept = {(r.variant, float(r.lag)): r for r in kept_gain.tasks or () if r.task == task}
        unranked = unranked_because(study.summary, task)
        order = (sorted({variant for variant, _ in scores}) if unranked
                 else ranked(scores, kept, study.lags))
        boards.append(TaskBoard(study=study, task=task, lags=tuple(study.lags), scores=scores,
                                kept=kept, kept_skipped=kept_gain.skipped, order=tuple(order),
                                unranked=unranked))
    return boards
