"""The Markdown text of a report (``report.md``) from its summary (``summary.json``): its
headline, what was run, the scores and the figures; the diagnostic sections are
``markdown_diagnostics``'."""

from __future__ import annotations

from collections.abc import Sequence

from vaco_jax.report import markdown_diagnostics as diagnostics
from vaco_jax.report.markdown_text import fmt, fmt_interval, table
from vaco_jax.report.markdown_tuning import tuning_section
from vaco_jax.report.summary import Interval, Summary, TaskCell


def _fmt_kept(interval: Interval | None) -> str:
    """A kept share, or why it has none: a ratio over no gain means nothing."""
    if interval is None:
        return "undefined (no synchronous gain)"
    if interval.low is None or interval.high is None:
        return f"{fmt(interval.point)} [unbounded]"
    return fmt_interval(interval)


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
        [task, fmt(n.initial), fmt(n.reference), n.source]
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


def _md_kept_gain(summary: Summary) -> list[str]:
    """The study's headline: the share of its synchronous gain each method keeps under lag."""
    lines = ["## Share of the synchronous gain kept", ""]
    kept = summary.kept_gain
    if kept.skipped is not None:
        return lines + [f"Not computed: {kept.skipped}.", ""]
    name = summary.score.name
    figure = summary.figures.get("fig_kept_gain")
    image = ([f"![{figure.caption}]({figure.png})", ""]
             if figure is not None and figure.png is not None else [])
    header = ["task", "variant", "lag", "runs", f"raw initial {name}", f"raw final {name} IQM",
              "raw synchronous gain", "kept gain [95% CI]", "AUC kept gain [95% CI]"]
    rows = [
        [r.task, r.variant, f"{r.lag:g}", r.runs, fmt(r.raw_initial),
         fmt(r.raw_final_iqm), fmt(r.raw_sync_gain), _fmt_kept(r.kept),
         _fmt_kept(r.auc_kept)]
        for r in sorted(kept.tasks or (), key=lambda r: r.task)
    ]
    pooled = [
        [r.variant, f"{r.lag:g}", r.runs_per_task, _fmt_kept(r.kept),
         _fmt_kept(r.auc_kept)]
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
        *image,
        *table(header, rows),
        "",
        *pooled_lines,
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
