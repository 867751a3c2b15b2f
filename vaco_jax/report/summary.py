"""A report's summary (``summary.json``) as typed objects, and its one way to and from JSON.

``write_report`` assembles the summary from its steps' records and writes it with ``dumps``;
``report.md``, the commands and the sweeps read it by attribute (``loads`` reads a saved one,
``compat.summary_as_now`` first where it was written by an earlier version). Each class's
fields are its JSON object's keys in their written order, so the same results write the same
bytes. A field that is absent from its object, not null (a figure drawn or skipped), is marked
``absent_when_none``. The pieces every record is made of and the codec are
``summary_fields``; the records of tuning and the cell rule are ``rule_records``.

The off-policy records, whose keys are the runs table's own columns (``off_policy``), stay JSON
objects (``JsonObject``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from vaco_jax.infra import records
from vaco_jax.report import compat
from vaco_jax.report.collapse import WARNING_RULES, Thresholds
from vaco_jax.report.metrics import MECHANISMS
from vaco_jax.report.rule_records import CellRuleVerdict, Tuning
from vaco_jax.report.runs_table import Score
from vaco_jax.report.summary_fields import Interval, JsonObject, absent_when_none, as_json, parsed

@dataclasses.dataclass(frozen=True)
class TaskRaw:
    """A cell's scores on one task in the task's own units."""

    initial: float | None  # the runs' mean first evaluation
    iqm: Interval  # of the runs' final scores


@dataclasses.dataclass(frozen=True)
class CellSummary:
    """One (variant, lag) with runs on every task: its normalised aggregates."""

    variant: str
    algo: str
    lag: float
    num_runs: int
    runs_per_task: int
    num_diverged: int
    median: Interval
    iqm: Interval
    mean: Interval
    optimality_gap: Interval
    auc_iqm: Interval
    raw: dict[str, TaskRaw]


@dataclasses.dataclass(frozen=True)
class TaskCell:
    """One (variant, lag)'s scores on one task alone, every run of the task counted."""

    variant: str
    algo: str
    lag: float
    task: str
    runs: int
    iqm: Interval
    mean: Interval
    auc_iqm: Interval
    raw_initial: float  # in the task's own units, as `raw_iqm`
    raw_iqm: Interval


@dataclasses.dataclass(frozen=True)
class IncompleteCell:
    variant: str
    lag: float
    missing_tasks: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Improvement:
    """The probability that ``variant`` beats ``baseline`` at ``lag``."""

    lag: float
    variant: str
    baseline: str
    probability: Interval


@dataclasses.dataclass(frozen=True)
class Variant:
    """What defines a variant, and its number of runs."""

    variant: str
    algo: str
    lag_models: tuple[str, ...]
    epochs: int
    minibatches: int
    hyperparameters: str
    num_runs: int


@dataclasses.dataclass(frozen=True)
class RunOverview:
    """What was run."""

    tasks: tuple[str, ...]
    lag_models: tuple[str, ...]
    lags: tuple[float, ...]
    seeds: tuple[int, ...]
    num_runs: int
    num_diverged: int
    final_env_steps: tuple[int, ...]
    eval_points: tuple[int, ...]
    variants: tuple[Variant, ...]


@dataclasses.dataclass(frozen=True)
class Normalisation:
    """A task's scale: its initial score maps to 0, ``reference`` to 1."""

    initial: float
    reference: float
    source: str  # where the reference comes from


@dataclasses.dataclass(frozen=True)
class TaskKeptGain:
    """A variant's kept gain on one task at one lag, and the raw numbers it comes from."""

    variant: str
    algo: str
    sync_variant: str
    task: str
    lag: float
    runs: int
    sync_runs: int
    raw_initial: float
    raw_final_iqm: float
    raw_sync_gain: float
    raw_sync_auc_gain: float
    kept: Interval | None  # None where the synchronous gain is not positive (`undefined`)
    auc_kept: Interval | None
    undefined: str | None
    # The lagged runs' normalised score (the IQM of `task_cells`, of `cells` with one task) and
    # mean backward TV; a summary written before records carried them has neither, and one of
    # runs that recorded no backward TV has no `tv_backward`.
    normalised_iqm: Interval | None = absent_when_none()
    tv_backward: float | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class PooledKeptGain:
    """A variant's kept gain at one lag, pooled over tasks."""

    variant: str
    algo: str
    sync_variant: str
    lag: float
    runs_per_task: int
    kept: Interval | None
    auc_kept: Interval | None
    undefined: str | None
    normalised_iqm: Interval | None = absent_when_none()  # the IQM of `cells`
    tv_backward: float | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class KeptGain:
    """The share of the synchronous gain each method keeps, or why it is skipped."""

    sync_lag: float | None = absent_when_none()
    tasks: tuple[TaskKeptGain, ...] | None = absent_when_none()
    pooled: tuple[PooledKeptGain, ...] | None = absent_when_none()
    skipped: str | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class WarningCounts:
    """Of a (variant, lag)'s runs, by one ESS warning rule: the collapses warned of in time, the
    median lead of the warned ones (None without any) and the warnings of no collapse."""

    warned_in_time: int
    median_lead: float | None
    false_alarms: int


@dataclasses.dataclass(frozen=True)
class CollapseCell:
    """A (variant, lag)'s collapses and, per rule (``collapse.WARNING_RULES``), its warnings."""

    variant: str
    lag: float
    runs: int
    collapsed: int
    drop: WarningCounts
    floor: WarningCounts

    def by_rule(self) -> dict[str, WarningCounts]:
        return {rule: getattr(self, rule) for rule in WARNING_RULES}


@dataclasses.dataclass(frozen=True)
class RunWarning:
    """When one rule warned of a run's ESS, and how long before its collapse (None: never)."""

    warning_env_steps: float | None
    lead: float | None


@dataclasses.dataclass(frozen=True)
class RunCollapse:
    """One run's collapse, if any, and each rule's warning."""

    run_id: str
    task: str
    variant: str
    lag: float
    seed: int
    collapsed: bool
    collapse_env_steps: float | None
    drop: RunWarning
    floor: RunWarning


@dataclasses.dataclass(frozen=True)
class EssCollapse:
    """Whether the ESS fell before the score collapsed, or why it is skipped."""

    thresholds: Thresholds
    cells: tuple[CollapseCell, ...] | None = absent_when_none()
    runs: tuple[RunCollapse, ...] | None = absent_when_none()
    skipped: str | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class StabiliserShare:
    """How much one stabiliser acted over a (variant, lag)'s runs that recorded it."""

    fraction: float | None  # the share of samples it touched, a run's mean averaged over runs
    acted: float | None  # the share of gradient steps at which it acted; None: not recorded
    runs_acted: int  # the runs in which it ever acted
    runs: int
    never_acted: bool


@dataclasses.dataclass(frozen=True)
class Stabilisers:
    """A (variant, lag)'s stabilisers (``metrics.MECHANISMS``, in its order), each absent where
    the variant has none."""

    variant: str
    lag: float
    clip: StabiliserShare | None = absent_when_none()
    is_truncated: StabiliserShare | None = absent_when_none()
    is_masked: StabiliserShare | None = absent_when_none()
    is_tapered: StabiliserShare | None = absent_when_none()
    stale_dropped: StabiliserShare | None = absent_when_none()
    filter: StabiliserShare | None = absent_when_none()
    skipped_step: StabiliserShare | None = absent_when_none()

    def present(self) -> dict[str, StabiliserShare]:
        """The stabilisers the variant has, by their ``metrics.MECHANISMS`` name."""
        return {name: share for name in MECHANISMS
                if (share := getattr(self, name)) is not None}


@dataclasses.dataclass(frozen=True)
class DivergedRun:
    run_id: str
    task: str
    variant: str
    lag: float
    seed: int
    diverged_at: int
    last_finite_score: float


@dataclasses.dataclass(frozen=True)
class FigureRecord:
    """A figure's caption, and its files (by format) or why it has none."""

    caption: str
    png: str | None = absent_when_none()
    pdf: str | None = absent_when_none()
    skipped: str | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class Summary:
    """Every number of a report."""

    title: str
    score: Score
    focus_algo: str
    final_fraction: float
    confidence: float
    reps: int
    seed: int
    run: RunOverview
    normalisation: dict[str, Normalisation]
    kept_gain: KeptGain
    cells: tuple[CellSummary, ...]
    task_cells: tuple[TaskCell, ...]
    incomplete_cells: tuple[IncompleteCell, ...]
    probability_of_improvement: tuple[Improvement, ...]
    off_policy_metrics: tuple[str, ...]
    off_policy: tuple[JsonObject, ...]
    mechanisms: tuple[Stabilisers, ...]
    diverged_runs: tuple[DivergedRun, ...]
    ess_collapse: EssCollapse
    figures: dict[str, FigureRecord]
    provenance: JsonObject
    tuning: Tuning | None = absent_when_none()  # a sweep's `[tune]`, where it has one
    cell_rule: CellRuleVerdict | None = absent_when_none()  # an experiment's `[cell_rule]`


def dumps(summary: Summary) -> str:
    """The text of ``summary.json``."""
    return json.dumps(to_json(summary), indent=2, allow_nan=False) + "\n"


def load(path: str | os.PathLike) -> Summary:
    """The summary in the file ``path`` (a ``summary.json``), bounded as a summary record, one
    an earlier version wrote read as today's (``compat.summary_as_now``); ValueError for keys no
    version wrote or keys it lacks."""
    return _read(records.load_json(path, records.SUMMARY))


def loads(text: str) -> Summary:
    """A summary from the text of a ``summary.json`` (``load``)."""
    return _read(records.parse_json(text, "summary.json", records.SUMMARY))


def _read(saved: records.Field) -> Summary:
    try:  # an older version's keys renamed, on a record that may be of any shape
        now = compat.summary_as_now(saved.value)
    except (TypeError, AttributeError, KeyError) as error:
        raise saved.refuse(f"not a summary any version wrote ({type(error).__name__}: "
                           f"{records.shown(error, 100)})") from None
    return from_json(now)


def to_json(summary: Summary) -> dict[str, Any]:
    """The JSON object of ``summary`` (as ``summary.json`` holds it, and as it travels between
    processes)."""
    return as_json(summary)


def from_json(value: JsonObject) -> Summary:
    """The summary of a JSON object ``to_json`` made."""
    return parsed(Summary, value)
