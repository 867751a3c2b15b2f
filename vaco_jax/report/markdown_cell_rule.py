"""The section of ``report.md`` on an experiment's ``[cell_rule]``: the rule as committed, each
cell's measured values with their intervals and verdicts, and the cells that pass per task and
on every task (``vaco_jax.report.cell_rule`` defines the criteria)."""

from __future__ import annotations

from collections.abc import Callable

from vaco_jax.report.markdown_text import fmt_interval, fmt_kept, table
from vaco_jax.report.rule_records import (CellRule, CellRuleVerdict, IntervalCheck, LagCheck,
                                          RuleCell, SeedShareCheck)
from vaco_jax.report.summary import Summary


def _percent(share: float) -> str:
    return f"{100 * share:g}%"


def _verdict(passed: bool) -> str:
    return "pass" if passed else "**fail**"


def _criteria(rule: CellRule, largest_lag: float | None, summary: Summary) -> list[str]:
    """The rule's criteria in words, one bullet each, as ``cell_rule`` checks them."""
    name = summary.score.name
    lines = []
    if rule.min_gain is not None:
        lines.append(f"- Gain: at least {_percent(rule.min_seed_share)} of the cell's runs "
                     f"(rounded up) reach a normalised final {name} of {rule.min_gain:g}.")
    if rule.max_final is not None:
        lines.append(f"- Not saturated: the IQM of the runs' normalised final {name} is at most "
                     f"{rule.max_final:g}.")
    if rule.rising_window is not None:
        lines.append(f"- Still rising: per run, the normalised final {name} less the normalised "
                     f"{name} at {_percent(1 - rule.rising_window)} of the run's "
                     f"{summary.score.steps} (interpolated between evaluations); the IQM of "
                     f"these differences has a {summary.confidence:.0%} interval whose lower "
                     f"end is above 0.")
    if rule.max_kept_gain is not None:
        lines.append(f"- Lag costs a clear share: at the study's largest lag level "
                     f"({largest_lag:g}), {rule.baseline}'s kept gain (the IQM of the lagged "
                     f"runs' raw gains over the cell's synchronous IQM raw gain, both resampled "
                     f"for its interval) is at most {rule.max_kept_gain:g}; a cell without runs "
                     f"at that lag fails it.")
    return lines


def _seed_share(check: SeedShareCheck) -> str:
    return f"{check.reaching} of {check.runs} ({_verdict(check.passed)})"


def _interval(check: IntervalCheck) -> str:
    return f"{fmt_interval(check.measured)} ({_verdict(check.passed)})"


def _lag(checks: tuple[LagCheck, ...], variant: str) -> str:
    """Each lagged variant's kept gain, named where it is not the cell's own variant."""
    if not checks:
        return f"no runs ({_verdict(False)})"
    return "; ".join(f"{'' if c.variant == variant else f'{c.variant}: '}{fmt_kept(c.kept)} "
                     f"({_verdict(c.passed)})" for c in checks)


Column = tuple[str, Callable[[RuleCell], str]]


def _columns(verdict: CellRuleVerdict, name: str) -> list[Column]:
    """A column per criterion the rule sets: its header and each cell's entry (a header is
    formatted only where its criterion is set: an unset one has no value to show)."""
    rule = verdict.rule
    columns: list[Column] = []
    if rule.min_gain is not None:
        columns.append((f"runs reaching gain {rule.min_gain:g}", lambda c: _seed_share(c.gain)))
    if rule.max_final is not None:
        columns.append((f"normalised final {name} IQM [95% CI]", lambda c: _interval(c.final)))
    if rule.rising_window is not None:
        columns.append((f"rise over the last {_percent(rule.rising_window)} [95% CI]",
                        lambda c: _interval(c.rising)))
    if rule.max_kept_gain is not None:
        columns.append((f"kept gain at lag {verdict.largest_lag:g} [95% CI]",
                        lambda c: _lag(c.lag, c.variant)))
    return columns


def _listed(variants: tuple[str, ...]) -> str:
    return ", ".join(variants) if variants else "none"


def cell_rule_section(summary: Summary) -> list[str]:
    """The section's lines; none for a report without a cell rule."""
    verdict = summary.cell_rule
    if verdict is None:
        return []
    rule, name = verdict.rule, summary.score.name
    columns = _columns(verdict, name)
    header = ["task", "cell", "runs", *(h for h, _ in columns), "verdict"]
    rows = [[c.task, c.variant, c.runs, *(entry(c) for _, entry in columns),
             "**passes**" if c.passed else f"fails: {c.failures()}"]
            for c in verdict.cells]
    lag_line = ([f"- Lag costs a clear share on every task: {_listed(verdict.lag_every_task)}"]
                if verdict.lag_every_task is not None else [])
    return [
        "## Cell rule",
        "",
        f"The rule the experiment committed (`[cell_rule]`) before its runs, judged on "
        f"{rule.baseline}'s runs: a cell is its synchronous (lag 0) runs of one variant (a "
        f"setting) on one task. Each run's {name} is normalised on its own scale, "
        f"`(score - initial) / (reference - initial)`, its first evaluation mapping to 0 and "
        f"the task's reference {name} to 1; its final {name} is its mean over the last "
        f"{_percent(summary.final_fraction)} of its evaluations (at least one). Intervals are "
        f"{summary.confidence:.0%} stratified bootstrap intervals ({summary.reps} resamples). "
        f"A cell passes where it meets every criterion:",
        "",
        *_criteria(rule, verdict.largest_lag, summary),
        "",
        *(table(header, rows) if rows else [f"No synchronous run of {rule.baseline}: no cell "
                                            f"to judge."]),
        "",
        *[f"- Passing on {task}: {_listed(verdict.passing[task])}" for task in verdict.tasks],
        f"- Passing on every task ({', '.join(verdict.tasks)}): {_listed(verdict.every_task)}",
        *lag_line,
        "",
    ]
