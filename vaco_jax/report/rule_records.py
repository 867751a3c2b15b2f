"""The records of what a study settles before its runs, as its summary keeps them: each
method's tuned value (`[tune]`) and the cell rule's verdict on the baseline's cells
(`[cell_rule]`)."""

from __future__ import annotations

import dataclasses

from vaco_jax.report.summary_fields import Interval, absent_when_none


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
