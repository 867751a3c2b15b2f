"""The section of ``report.md`` on a sweep's ``[tune]``: per method, every value's synchronous
score with its interval, the value the rule chose, whether it saturates the task, where an
extension of the grid stopped, and the choices at an end of the values tried."""

from __future__ import annotations

from vaco_jax.report.runs_table import RUNS_FILE
from vaco_jax.report.rule_records import Tuning


def _number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def _yes(flag: bool | None) -> str:
    return "" if flag is None else "yes" if flag else "no"


def _extension_lines(tuning: Tuning) -> list[str]:
    """Where each method's grid was extended past an end and where the extension stopped."""
    if not tuning.extend:
        return []
    lines = ["", f"A choice at an end of the grid extends it by {tuning.extend} value(s) past "
             f"that end, in steps of the grid's own ratio there, and the rule chooses again "
             f"among all; the extension stops there."]
    for choice in tuning.choices:
        if choice.extension is None:
            continue
        if not choice.extended:
            lines.append(f"- {choice.method}: at the grid's end ({choice.extension}); its "
                         f"extension has not run yet, so this choice is not final.")
            continue
        beyond = sorted(c.value for c in choice.candidates)
        last = beyond[0] if choice.extension == "below" else beyond[-1]
        lines.append(f"- {choice.method}: extended {choice.extension} the grid to "
                     f"{last:g}; chose {choice.chosen:g}"
                     + (" (the extension's end: a value beyond may score higher)"
                        if choice.chosen == last else "") + ".")
    return lines


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
    judged = any(c.saturated is not None for choice in tuning.choices
                 for c in choice.candidates)
    columns = [*(["meets the cell rule"] if in_cell else []),
               *(["saturates"] if judged else [])]
    lines += [f"| method | {tuning.hparam} | IQM {tuning.statistic} [95% CI] | runs |"
              + "".join(f" {c} |" for c in columns) + " |",
              "|---|---|---|---|" + "---|" * len(columns) + "---|"]
    for choice in tuning.choices:
        for c in choice.candidates:
            mark = "**chosen**" if c.value == choice.chosen else ""
            flags = ([_yes(c.in_cell)] if in_cell else []) + ([_yes(c.saturated)] if judged
                                                              else [])
            lines.append(f"| {choice.method} | {c.value:g} | {_number(c.iqm)} "
                         f"[{_number(c.low)}, {_number(c.high)}] | {c.runs} |"
                         + "".join(f" {f} |" for f in flags) + f" {mark} |")
    if not tuning.choices:
        lines.append("| (no tuning group has finished) | | | | |")  # so no other column
    outside = ([c.method for c in tuning.choices if not any(k.in_cell for k in c.candidates)]
               if in_cell else [])
    if outside:
        lines += ["", f"No value meets the cell rule for: {', '.join(outside)}; each was chosen "
                  f"among all its values."]
    lines += _extension_lines(tuning)
    saturated = [c.method for c in tuning.choices if c.saturated]
    if saturated:
        lines += ["", f"Saturated at the chosen value (its lag-0 runs' normalised final IQM "
                  f"above the cell rule's `max_final`): {', '.join(saturated)}. A saturated "
                  f"score hides what lag costs: these methods' kept gains say less than the "
                  f"others'."]
    at_edges = [f"{c.method} ({c.grid_edge})" for c in tuning.choices if c.grid_edge]
    if at_edges:
        lines += ["", f"At an end of the grid: {', '.join(at_edges)}. A value beyond it may "
                  f"score higher; the choice is the best of the candidates, not an optimum."]
    return lines + [""]
