"""A report's summary (``summary.json``) as typed objects, and its one way to and from JSON.

``write_report`` assembles the summary from its steps' records and writes it with ``dumps``;
``report.md``, the commands and the sweeps read it by attribute (``loads`` reads a saved one,
``compat.summary_as_now`` first where it was written by an earlier version). Each class's
fields are its JSON object's keys in their written order, so the same results write the same
bytes. A field that is absent from its object, not null (a figure drawn or skipped), is marked
``absent_when_none``.

The off-policy records, whose keys are the runs table's own columns (``off_policy``), stay JSON
objects (``JsonObject``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from typing import Any, Mapping, TypeVar, Union

from vaco_jax.infra import records
from vaco_jax.report import compat
from vaco_jax.report.collapse import WARNING_RULES, Thresholds
from vaco_jax.report.metrics import MECHANISMS
from vaco_jax.report.runs_table import Score

T = TypeVar("T")

JsonObject = Mapping[str, Any]
"""A section kept as JSON: its keys are data (column or stabiliser names), not a schema."""


def absent_when_none() -> Any:
    """A field left out of its JSON object when None (not written as null)."""
    return dataclasses.field(default=None, metadata={"absent_when_none": True})


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; None where it is undefined (NaN)."""

    point: float | None
    low: float | None
    high: float | None


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
class TuningCandidate:
    """One value of one tuned method: the rule's IQM over its synchronous runs; for a rule
    that chooses within the cell rule, whether they meet it; for a cell rule with `max_final`,
    whether they saturate the task."""

    value: float
    iqm: float | None
    low: float | None
    high: float | None
    runs: int
    in_cell: bool | None = absent_when_none()
    saturated: bool | None = absent_when_none()


@dataclasses.dataclass(frozen=True)
class TuningChoice:
    """The value the rule chose for one method, with every candidate behind it."""

    method: str
    group: str
    point: dict[str, float]
    chosen: float
    candidates: tuple[TuningCandidate, ...]
    # With `[tune] extend`: the end of the grid its choice on the grid was ("below" or
    # "above"), and whether the values beyond it ran (they are then among the candidates).
    extension: str | None = absent_when_none()
    extended: bool | None = absent_when_none()

    @property
    def saturated(self) -> bool | None:
        """Whether the method's synchronous runs at its chosen value saturate the task."""
        return next((c.saturated for c in self.candidates if c.value == self.chosen), None)

    @property
    def grid_edge(self) -> str | None:
        """"smallest" or "largest" where the chosen value is that end of the candidates, so
        that a better value may lie beyond them; None where it lies inside."""
        values = sorted(c.value for c in self.candidates)
        if len(values) < 2 or values[0] < self.chosen < values[-1]:
            return None
        return "smallest" if self.chosen == values[0] else "largest"


@dataclasses.dataclass(frozen=True)
class Tuning:
    """A sweep's `[tune]`: each method's value chosen on its synchronous runs alone."""

    hparam: str
    rule: str
    statistic: str
    seeds: tuple[int, ...]
    column: str
    choices: tuple[TuningChoice, ...]
    extend: int | None = absent_when_none()  # grid steps past an end a choice there may take


@dataclasses.dataclass(frozen=True)
class CellRule:
    """An experiment's `[cell_rule]`, as committed before its runs: the criteria the baseline's
    synchronous runs of a cell must meet (``vaco_jax.report.cell_rule`` defines each); a
    criterion left out is None and not checked."""

    baseline: str
    min_gain: float | None = absent_when_none()
    min_seed_share: float | None = absent_when_none()
    max_final: float | None = absent_when_none()
    rising_window: float | None = absent_when_none()
    max_kept_gain: float | None = absent_when_none()

    @property
    def normalised(self) -> tuple[str, ...]:
        """The criteria measured in normalised scores, which need each task's reference."""
        return tuple(name for name in ("min_gain", "max_final", "rising_window")
                     if getattr(self, name) is not None)


@dataclasses.dataclass(frozen=True)
class SeedShareCheck:
    """How many of a cell's runs reached the rule's normalised gain."""

    reaching: int
    runs: int
    passed: bool


@dataclasses.dataclass(frozen=True)
class IntervalCheck:
    """A criterion measured as an IQM over a cell's runs, with its bootstrap interval."""

    measured: Interval
    passed: bool


@dataclasses.dataclass(frozen=True)
class LagCheck:
    """The baseline's kept gain at the study's largest lag, against a cell's synchronous runs:
    of ``variant`` (the cell's own, or one under a lag model run only above lag 0)."""

    variant: str
    lag: float
    runs: int
    kept: Interval | None  # None where the synchronous gain is not positive
    passed: bool


FAILURES = {"gain": "too few runs gain", "final": "saturated", "rising": "not rising",
            "lag": "keeps too much under lag"}
"""What a cell failing each criterion (``RuleCell.failed``) is, in words."""


@dataclasses.dataclass(frozen=True)
class RuleCell:
    """One cell: the baseline's synchronous runs of one variant (its setting) on one task, each
    criterion of the rule measured on them (absent where the rule has no such criterion)."""

    task: str
    variant: str
    runs: int
    passed: bool
    gain: SeedShareCheck | None = absent_when_none()
    final: IntervalCheck | None = absent_when_none()
    rising: IntervalCheck | None = absent_when_none()
    lag: tuple[LagCheck, ...] | None = absent_when_none()  # empty: no run at the largest lag

    def failed(self) -> list[str]:
        """The names of the criteria the cell fails, in the rule's order."""
        checks = {"gain": self.gain, "final": self.final, "rising": self.rising}
        failed = [name for name, check in checks.items() if check is not None and not check.passed]
        # No run at the largest lag measures no cost of lag: that fails too.
        lag_passed = self.lag is None or (len(self.lag) > 0 and all(c.passed for c in self.lag))
        return failed + ([] if lag_passed else ["lag"])

    def failures(self) -> str:
        """The criteria the cell fails, in words (``FAILURES``)."""
        return ", ".join(FAILURES[name] for name in self.failed())


@dataclasses.dataclass(frozen=True)
class CellRuleVerdict:
    """The rule as committed, every cell's verdict, per task the variants whose cell passes,
    the variants whose cell passes on every task and, with ``max_kept_gain``, the largest lag
    and the variants whose lag criterion passes on every task."""

    rule: CellRule
    tasks: tuple[str, ...]
    cells: tuple[RuleCell, ...]
    passing: dict[str, tuple[str, ...]]
    every_task: tuple[str, ...]
    largest_lag: float | None = absent_when_none()
    lag_every_task: tuple[str, ...] | None = absent_when_none()


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
    return _to_json(summary)


def from_json(value: JsonObject) -> Summary:
    """The summary of a JSON object ``to_json`` made."""
    return parsed(Summary, value)


def parsed(cls: type[T], value: JsonObject) -> T:
    """A JSON object (a step's record, or loaded JSON) as ``cls``, one of these classes."""
    return _from_json(cls, value)


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("absent_when_none") and getattr(value, f.name) is None)}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_json(v) for k, v in value.items()}
    return value


def _from_json(annotation: Any, value: Any) -> Any:
    """``value`` (loaded JSON) as ``annotation`` says: dataclasses by their fields, containers
    by their items, anything else (numbers, strings, ``JsonObject``) as loaded, so that writing
    it again gives the same text."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _from_json(inner, value)
    if origin is tuple:
        _check_type(value, list, "a list")
        return tuple(_from_json(typing.get_args(annotation)[0], v) for v in value)
    if origin is dict:
        _check_type(value, dict, "a table")
        item = typing.get_args(annotation)[1]
        return {k: _from_json(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        _check_type(value, dict, "a table")
        return _dataclass_from_json(annotation, value)
    if annotation in _SCALARS and not _SCALARS[annotation](value):
        raise ValueError(f"{records.shown(value, 60)!r} is not a {annotation.__name__}")
    return value


def _check_type(value: Any, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise ValueError(f"{records.shown(value, 60)!r} is not {what}")


_SCALARS = {float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            int: lambda v: isinstance(v, int) and not isinstance(v, bool),
            str: lambda v: isinstance(v, str), bool: lambda v: isinstance(v, bool)}
"""The checks of the scalar annotations of a summary's classes."""


def _dataclass_from_json(cls: type, value: JsonObject) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ValueError(f"{cls.__name__}: keys {unknown} are not part of a summary this "
                         f"version writes")
    # Named here: the constructor's own error would not say it is the summary's key.
    missing = [name for name, f in fields.items()
               if name not in value and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{cls.__name__}: keys {missing} are missing")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _from_json(hints[name], v) for name, v in value.items()})
