"""A study's board for one task: per method and lag level, the share of its synchronous gain
it keeps (``report.kept_gain``) beside its lagged score normalised to the task's one reference.

The kept share alone rewards a method that learns little without lag and keeps little of
little; the normalised score puts every method on the same scale (0: the mean initial policy
of all runs of the task, 1: the task's reference score), so the board ranks its rows by the
lagged score and shows the kept share beside it. Every number is the study's ``summary.json``
record, computed by the report layer from its runs table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vaco_jax.leaderboard.studies import Study
from vaco_jax.report.kept_gain import SYNC_LAG

Key = tuple[str, float]
"""A (variant, lag) cell of a board."""


@dataclasses.dataclass(frozen=True)
class TaskBoard:
    """One task of one study.

    ``scores`` holds per cell the normalised final score's IQM (``score``) and AUC's
    (``auc``), each ``{point, low, high}``, with the raw first evaluation and final IQM in the
    testbed's units (``raw_initial``, ``raw_final``; None where the report kept none);
    ``kept`` the cell's ``kept_gain`` record (empty where the study has none: ``kept_skipped``
    says why); ``order`` the variants best first (``ranked``).
    """

    study: Study
    task: str
    lags: tuple[float, ...]
    scores: Mapping[Key, Mapping[str, Any]]
    kept: Mapping[Key, Mapping[str, Any]]
    kept_skipped: str | None
    order: tuple[str, ...]

    @property
    def stem(self) -> str:
        """The file stem of its figure."""
        return f"board_{self.task}"


def score_records(summary: Mapping[str, Any], task: str) -> dict[Key, dict[str, Any]]:
    """Per cell of ``task``: its normalised and raw scores. A study of one task keeps them in
    its cells; one of several tasks in its per-task cells (its cells pool the tasks)."""
    if len(summary["run"]["tasks"]) > 1:
        return {(r["variant"], float(r["lag"])): {
            "score": r["iqm"], "auc": r["auc_iqm"], "runs": r["runs"],
            "raw_initial": r["raw_initial"], "raw_final": r["raw_iqm"],
        } for r in summary["task_cells"] if r["task"] == task}
    records = {}
    for r in summary["cells"]:
        # A report from before raw scores were kept has none: the pages say not recorded.
        raw = r.get("raw", {}).get(task) or {}
        records[(r["variant"], float(r["lag"]))] = {
            "score": r["iqm"], "auc": r["auc_iqm"], "runs": r["num_runs"],
            "raw_initial": raw.get("initial"), "raw_final": raw.get("iqm")}
    return records


def ranked(scores: Mapping[Key, Mapping[str, Any]], kept: Mapping[Key, Mapping[str, Any]],
           lags: Sequence[float]) -> list[str]:
    """Variants best first by their mean normalised score over the lag levels above 0 (over
    lag 0 in a study without lag), ties broken by their mean kept share of the final score."""
    lagged = [lag for lag in lags if lag != SYNC_LAG] or list(lags)

    def mean(records: Mapping[Key, Mapping[str, Any]], variant: str, key: str) -> float:
        points = [records[(variant, lag)][key]["point"] for lag in lagged
                  if (variant, lag) in records and records[(variant, lag)][key] is not None]
        return float(np.mean(points)) if points else -np.inf

    variants = sorted({variant for variant, _ in scores})
    return sorted(variants, key=lambda v: (-mean(scores, v, "score"), -mean(kept, v, "kept")))


def task_boards(study: Study) -> list[TaskBoard]:
    """The study's board of each of its tasks."""
    kept_gain = study.kept_gain
    boards = []
    for task in study.tasks:
        scores = score_records(study.summary, task)
        kept = {(r["variant"], float(r["lag"])): r for r in kept_gain.get("tasks", [])
                if r["task"] == task}
        boards.append(TaskBoard(study=study, task=task, lags=tuple(study.lags), scores=scores,
                                kept=kept, kept_skipped=kept_gain.get("skipped"),
                                order=tuple(ranked(scores, kept, study.lags))))
    return boards
