"""The Markdown text of a report (``report.md``) from its summary (``summary.json``): its
headline (the kept gain, and the methods at the largest lag ranked by their lagged score beside
it), what was run, the scores and the figures; the diagnostic sections are
``markdown_diagnostics``'."""

from __future__ import annotations

import math
from collections.abc import Sequence

from vaco_jax.report import markdown_diagnostics as diagnostics
from vaco_jax.report.markdown_text import (NOT_NORMALISED, fmt, fmt_interval, fmt_kept,
                                           fmt_optional, is_scale, table)
from vaco_jax.report.markdown_cell_rule import cell_rule_section
from vaco_jax.report.markdown_tuning import tuning_section
from vaco_jax.report.summary_fields import Interval
from vaco_jax.report.summary import KeptGain, PooledKeptGain, Summary, TaskCell, TaskKeptGain

Ranked = TaskKeptGain | PooledKeptGain
"""A kept-gain record, which carries the lagged score and backward TV the ranking sets beside
its kept gain."""


def _span(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def _md_overview(summary: Summary) -> list[str]:
    run = summary.run
    header = ["variant", "algorithm", "lag model", "epochs", "minibatches", "hyper-parameters", "runs"]
    rows = [
        [
            v.variant, v.algo, ", ".join(v.lag_models), v.epochs, v.minibatches,
            v.hyperparameters or "-", v.num_runs,
        ]
        for v in run.variants
    ]
    lags = ", ".join(f"{lag:g}" for lag in run.lags)
    return [
        "## What was run",
        "",
        f"- Tasks ({len(run.tasks)}): {', '.join(run.tasks)}",
        f"- Lag models: {', '.join(run.lag_models)}; lag levels: {lags}",
        f"- Seeds: {', '.join(str(s) for s in run.seeds)}",
        f"- Runs: {run.num_runs} ({run.num_diverged} diverged)",
        f"- {summary.score.steps.capitalize()} per run: {_span(run.final_env_steps)}; "
        f"evaluation points per run: {_span(run.eval_points)}",
        "",
        *table(header, rows),
        "",
    ]


def _md_normalisation(summary: Summary) -> list[str]:
    name, steps = summary.score.name, summary.score.steps
    rows = [
        [task, fmt(n.initial), fmt(n.reference), n.source] if is_scale(n)
        else [task, "-", "-", NOT_NORMALISED]
        for task, n in summary.normalisation.items()
    ]
    return [
        "## How scores are normalised",
        "",
        f"Each evaluated {name} `R` of a task is mapped to "
        "`(R - initial) / (reference - initial)`: "
        f"0 is the mean {name} of the initial policies (the evaluations at 0 {steps} of "
        f"every run of the task) and 1 is the task's reference {name}. Where no reference {name} "
        "was given, the reference is the best final (un-normalised) score of any run of the task, "
        "so a score of 1 means \"as good as the best run of this sweep\".",
        "",
        f"A run's final score is its mean normalised {name} over the last "
        f"{100 * summary.final_fraction:g}% of its evaluation points (at least one). Its AUC is "
        "the area under its normalised learning curve with training progress rescaled to [0, 1], "
        "so a run at score 1 throughout has AUC 1. A missing evaluation (every evaluation after a "
        "run diverged) takes the value of the run's last finite evaluation.",
        "",
        "For each variant and lag the final scores form a "
        "[runs per task x tasks] matrix, runs paired across tasks by seed order; where tasks have "
        "unequal run counts, every task keeps only as many runs (lowest seeds first) as the task "
        f"with the fewest. Intervals are {summary.confidence:.0%} percentile bootstrap "
        f"intervals over {summary.reps} resamples that draw runs with replacement "
        f"independently within each task (seed {summary.seed}). Median and mean are taken "
        "over the per-task mean scores and IQM is the mean of the middle 50% of the pooled scores, as in rliable; "
        "the optimality gap is the mean shortfall below a score of 1 (lower is better).",
        "",
        *table(["task", f"initial {name}", f"reference {name}", "reference"], rows),
        "",
    ]


def _raw_header(summary: Summary, what: str) -> str:
    """A raw column's header, ``what`` with ``{name}`` the score's; with several tasks its
    entries list them in the order the header names."""
    tasks = list(summary.normalisation)
    per_task = f" ({' / '.join(tasks)})" if len(tasks) > 1 else ""
    return f"raw {what.format(name=summary.score.name)}{per_task}"


def _md_scores(summary: Summary) -> list[str]:
    header = [
        "variant", "lag", "runs per task", "IQM [95% CI]", "median", "mean", "optimality gap",
        "AUC IQM [95% CI]", _raw_header(summary, "initial {name}"),
        _raw_header(summary, "final {name} IQM"),
    ]
    rows = [
        [
            c.variant, f"{c.lag:g}", c.runs_per_task, fmt_interval(c.iqm),
            fmt(c.median.point), fmt(c.mean.point),
            fmt(c.optimality_gap.point), fmt_interval(c.auc_iqm),
            " / ".join(fmt(r.initial) for r in c.raw.values()),
            " / ".join(fmt(r.iqm.point) for r in c.raw.values()),
        ]
        for c in summary.cells
    ]
    left_out = [
        f"- Left out: {c.variant} at lag {c.lag:g} has no run on "
        f"{', '.join(c.missing_tasks)}."
        for c in summary.incomplete_cells
    ]
    return [
        "## Final scores",
        "",
        *table(header, rows),
        "",
        "Normalised scores beside the raw ones, in the testbed's units "
        f"({summary.score.name}): the runs' mean first evaluation and the IQM of their "
        "final scores (per task; its interval, and those of the median, mean and optimality "
        "gap, are in `summary.json`).",
        "",
        *left_out,
        *([""] if left_out else []),
    ]


def _md_task_scores(summary: Summary) -> list[str]:
    rows_in = summary.task_cells
    if not rows_in:
        return []
    tasks = list(summary.normalisation)
    name = summary.score.name
    header = ["variant", "lag", "runs per task"] + [
        f"{task} {measure}" for task in tasks
        for measure in ("IQM [95% CI]", "AUC IQM [95% CI]", f"raw final {name} IQM [95% CI]")
    ]
    by_cell: dict[tuple[str, float], dict[str, TaskCell]] = {}
    for r in rows_in:
        by_cell.setdefault((r.variant, r.lag), {})[r.task] = r
    rows = []
    for (variant, lag), per_task in by_cell.items():
        counts = {per_task[task].runs if task in per_task else 0 for task in tasks}
        runs = str(counts.pop()) if len(counts) == 1 else " / ".join(
            str(per_task[task].runs) if task in per_task else "0" for task in tasks)
        rows.append([variant, f"{lag:g}", runs] + [
            fmt_interval(interval) if interval is not None else "-"
            for task in tasks for interval in _task_intervals(per_task.get(task))
        ])
    return [
        "## Final scores per task",
        "",
        "Each task's runs alone, every run of the task counted (its means are in `summary.json`, "
        "`task_cells`); a variant without runs on a task shows `-` there, and runs per task "
        "differing between tasks are listed in task order.",
        "",
        *table(header, rows),
        "",
    ]


def _task_intervals(cell: TaskCell | None) -> tuple[Interval | None, ...]:
    """A task's IQM, AUC IQM and raw final IQM, None each where the variant has no runs on it."""
    if cell is None:
        return (None, None, None)
    return (cell.iqm, cell.auc_iqm, cell.raw_iqm)


def _md_improvement(summary: Summary) -> list[str]:
    focus = summary.focus_algo
    lines = ["## Probability of improvement", ""]
    if not summary.probability_of_improvement:
        return lines + [
            f"Not computed: {focus!r} and another algorithm have no lag with runs on every task.",
            "",
        ]
    rows = [
        [f"{r.lag:g}", r.variant, r.baseline, fmt_interval(r.probability)]
        for r in summary.probability_of_improvement
    ]
    return lines + [
        f"P(X > Y) is the probability that a run of {focus} (X) scores higher than a run of the "
        "baseline (Y) on the same task, ties counting one half, averaged over tasks; 0.5 means "
        "neither is better. Each baseline runs under the same lag model and epochs x minibatches "
        "and at the same value of every hyper-parameter both sweep.",
        "",
        *table(["lag", focus, "baseline", "P(X > Y) [95% CI]"], rows),
        "",
    ]


def _image(summary: Summary, stem: str) -> list[str]:
    """The figure ``stem`` shown in place where it was drawn; nothing where it was skipped (the
    figures section says why) or the report predates it."""
    figure = summary.figures.get(stem)
    if figure is None or figure.png is None:
        return []
    return [f"![{figure.caption}]({figure.png})", ""]


def _md_kept_gain(summary: Summary) -> list[str]:
    """The study's headline: the share of its synchronous gain each method keeps under lag."""
    lines = ["## Share of the synchronous gain kept", ""]
    kept = summary.kept_gain
    if kept.skipped is not None:
        return lines + [f"Not computed: {kept.skipped}.", ""]
    name = summary.score.name
    header = ["task", "variant", "lag", "runs", f"raw initial {name}", f"raw final {name} IQM",
              "raw synchronous gain", "kept gain [95% CI]", "AUC kept gain [95% CI]"]
    rows = [
        [r.task, r.variant, f"{r.lag:g}", r.runs, fmt(r.raw_initial),
         fmt(r.raw_final_iqm), fmt(r.raw_sync_gain), fmt_kept(r.kept),
         fmt_kept(r.auc_kept)]
        for r in sorted(kept.tasks or (), key=lambda r: r.task)
    ]
    pooled = [
        [r.variant, f"{r.lag:g}", r.runs_per_task, fmt_kept(r.kept),
         fmt_kept(r.auc_kept)]
        for r in kept.pooled or ()
    ]
    pooled_lines = [
        "Pooled over tasks (IQM over every task's runs, paired across tasks as in the final-score "
        "table; near 1 rather than exactly 1 at lag 0):",
        "",
        *table(["variant", "lag", "runs per task", "kept gain [95% CI]",
                    "AUC kept gain [95% CI]"], pooled),
        "",
    ] if pooled else []
    return lines + [
        f"Each method (a variant: an algorithm at its swept values) is set against its own "
        f"synchronous runs on the same task (a variant under a lag model run only at lags "
        f"above 0, against those of the same algorithm and settings under the `fixed` lag "
        f"model). A run's gain is its final {name} less its first "
        f"evaluation (the initial policy), in the testbed's units; the synchronous gain is the "
        f"IQM of the gains of the method's lag-0 runs on the task; a run keeps its gain over the "
        f"synchronous gain (1: all of it, 0: none, below 0: it ended worse than it started). "
        f"The kept gain is the IQM of the runs' shares, 1 at lag 0 by construction, with a "
        f"{summary.confidence:.0%} percentile interval from {summary.reps} stratified "
        f"bootstrap resamples of both the lagged and the synchronous runs, so that the noise of "
        f"the synchronous gain is in it. The AUC kept gain is the same share of the mean {name} "
        f"over training less the first evaluation: lag that slows learning costs there even "
        f"where the end point catches up. Where the synchronous gain is not positive (the method "
        f"did not learn without lag) the share is undefined; where some resample's is not, the "
        f"interval is unbounded.",
        "",
        *_image(summary, "fig_kept_gain"),
        *table(header, rows),
        "",
        *pooled_lines,
        *_md_ranking(summary),
    ]


def ranks(points: Sequence[float | None]) -> list[int | None]:
    """Each value's place, largest first (1: the best; equal values share the better place);
    None where the value is."""
    defined = [p for p in points if p is not None]
    return [None if p is None else 1 + sum(q > p for q in defined) for p in points]


def _ranked_groups(kept: KeptGain) -> tuple[float, dict[str, list[Ranked]]]:
    """Of a kept gain that was computed (not skipped): the largest lag level and, per task in
    order and then pooled over tasks, its records there that carry their lagged score (none in a
    summary written before records did), best score first (ties by name)."""
    records = kept.tasks or ()
    lag = max(r.lag for r in records)
    groups: dict[str, list[Ranked]] = {
        f"On {task}": [r for r in records if r.task == task]
        for task in sorted({r.task for r in records})}
    if kept.pooled:
        groups["Pooled over tasks (runs paired across tasks, as in the final-score table)"] = \
            list(kept.pooled)

    def best_first(record: Ranked) -> tuple[float, str]:
        point = record.normalised_iqm.point
        return (-point if point is not None else math.inf, record.variant)

    ranked = {}
    for title, group in groups.items():
        at_lag = [r for r in group if r.lag == lag and r.normalised_iqm is not None]
        if at_lag:
            ranked[title] = sorted(at_lag, key=best_first)
    return lag, ranked


def _fmt_rank(place: int | None) -> str:
    return "-" if place is None else str(place)


def _ranking_table(records: Sequence[Ranked], lag: float, name: str) -> list[str]:
    """The records in their order: the score's rank, the kept gain's rank among them, both
    numbers and the backward TV."""
    at = f"at lag {lag:g}"
    header = ["score rank", "method", f"normalised {name} {at} [95% CI]",
              f"kept gain {at} [95% CI]", "kept-gain rank", f"backward TV {at}"]
    score_places = ranks([r.normalised_iqm.point for r in records])
    kept_places = ranks([None if r.kept is None else r.kept.point for r in records])
    rows = [[_fmt_rank(score), r.variant, fmt_interval(r.normalised_iqm), fmt_kept(r.kept),
             _fmt_rank(kept), fmt_optional(r.tv_backward)]
            for r, score, kept in zip(records, score_places, kept_places)]
    return table(header, rows)


def _md_ranking(summary: Summary) -> list[str]:
    """The methods at the largest lag ranked by their lagged score beside their kept gain and
    the staleness their runs met, with the figure of kept gain against that staleness."""
    lag, groups = _ranked_groups(summary.kept_gain)
    if not groups:
        return []
    name = summary.score.name
    tables = []
    for title, records in groups.items():
        tables += [*([f"{title}:", ""] if len(groups) > 1 else []),
                   *_ranking_table(records, lag, name), ""]
    return [
        f"### Ranked at lag {lag:g}: the lagged score beside the kept gain",
        "",
        "A kept share alone can rank first a method that learns little without lag and keeps "
        "little of little, and methods at one lag level need not have met equally stale data. "
        f"Here every method at the largest lag level is ranked by its lagged score itself: its "
        f"final {name} normalised to the task's one reference for every method (0: the task's "
        "initial policies, 1: its reference; the IQM over its lagged runs with its "
        f"{summary.confidence:.0%} interval, as in the final-score tables), beside its kept gain "
        "with the kept gain's own rank, and the backward TV its lagged runs measured (the mean "
        "over runs of each run's mean over updates, as in the off-policyness table; n/a: not "
        "recorded). Equal values share a rank.",
        "",
        *_image(summary, "fig_kept_gain_vs_tv"),
        *tables,
    ]


def _md_figures(summary: Summary) -> list[str]:
    lines = ["## Figures", ""]
    for figure in summary.figures.values():
        lines += [f"### {figure.caption}", ""]
        if figure.skipped is not None:
            lines += [f"Skipped: {figure.skipped}.", ""]
        else:
            image = f"![{figure.caption}]({figure.png})"
            lines += [image, "", f"([PDF]({figure.pdf}))", ""]
    return lines


def markdown(summary: Summary) -> str:
    sections = [
        [f"# {summary.title}", ""],
        _md_kept_gain(summary),
        cell_rule_section(summary),
        _md_overview(summary),
        _md_normalisation(summary),
        _md_scores(summary),
        _md_task_scores(summary),
        _md_improvement(summary),
        diagnostics.off_policy(summary),
        diagnostics.ess_collapse(summary),
        diagnostics.diverged(summary),
        _md_figures(summary),
        tuning_section(summary.tuning),
    ]
    return "\n".join(line for section in sections for line in section)
