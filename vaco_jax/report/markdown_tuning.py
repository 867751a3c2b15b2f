"""The section of ``report.md`` on a sweep's ``[tune]``: per method, every grid value's
synchronous score with its interval, the value the rule chose, and the choices at an end of
the grid."""

from __future__ import annotations

from vaco_jax.report.runs_table import RUNS_FILE
from vaco_jax.report.summary import Tuning


def _number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def tuning_section(tuning: Tuning | None) -> list[str]:
    """The section's lines; none for a sweep without `[tune]`."""
    if tuning is None:
        return []
    in_cell = any(c.in_cell is not None for choice in tuning.choices for c in choice.candidates)
    within = (" Only the values whose lag-0 runs meet the cell rule's gain, saturation and "
              "rising criteria (those of the \"Cell rule\" section, judged on each method's own "
              "tuning runs) compete, unless none does." if in_cell else "")
    lines = [f"## {tuning.hparam} chosen on synchronous runs", "",
             f"Each method's {tuning.hparam} was chosen before any stale run, by the rule "
             f"`{tuning.rule}`: the highest IQM, in the testbed's units, of the "
             f"{tuning.statistic} of its lag-0 runs on seeds {list(tuning.seeds)} (the AUC being "
             f"the mean score over training), equal IQMs going to the smaller value.{within} "
             f"Every other run of the report used the chosen value (`{tuning.column}` in "
             f"`{RUNS_FILE}`).", ""]
    cell_column = " meets the cell rule |" if in_cell else ""
    lines += [f"| method | {tuning.hparam} | IQM {tuning.statistic} [95% CI] | runs |"
              f"{cell_column} |", "|---|---|---|---|" + ("---|" if in_cell else "") + "---|"]
    for choice in tuning.choices:
        for c in choice.candidates:
            mark = "**chosen**" if c.value == choice.chosen else ""
            meets = (" yes |" if c.in_cell else " no |") if in_cell else ""
            lines.append(f"| {choice.method} | {c.value:g} | {_number(c.iqm)} "
                         f"[{_number(c.low)}, {_number(c.high)}] | {c.runs} |{meets} {mark} |")
    if not tuning.choices:
        lines.append("| (no tuning group has finished) | | | | |")  # so no cell column
    outside = ([c.method for c in tuning.choices if not any(k.in_cell for k in c.candidates)]
               if in_cell else [])
    if outside:
        lines += ["", f"No value meets the cell rule for: {', '.join(outside)}; each was chosen "
                  f"among all its values."]
    at_edges = [f"{c.method} ({c.grid_edge})" for c in tuning.choices if c.grid_edge]
    if at_edges:
        lines += ["", f"At an end of the grid: {', '.join(at_edges)}. A value beyond it may "
                  f"score higher; the choice is the best of the candidates, not an optimum."]
    return lines + [""]
