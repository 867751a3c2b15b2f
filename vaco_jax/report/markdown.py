"""The Markdown text of a report (``report.md``) from its summary (``summary.json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vaco_jax.report.collapse import WARNING_RULES
from vaco_jax.report.metrics import MECHANISMS


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def _fmt_interval(interval: Mapping[str, float]) -> str:
    return f"{_fmt(interval['point'])} [{_fmt(interval['low'])}, {_fmt(interval['high'])}]"


def _fmt_kept(interval: Mapping[str, float | None] | None) -> str:
    """A kept share, or why it has none: a ratio over no gain means nothing."""
    if interval is None:
        return "undefined (no synchronous gain)"
    if interval["low"] is None or interval["high"] is None:
        return f"{_fmt(interval['point'])} [unbounded]"
    return _fmt_interval(interval)  # type: ignore[arg-type]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _span(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def _md_overview(summary: Mapping[str, Any]) -> list[str]:
    run = summary["run"]
    header = ["variant", "algorithm", "lag model", "epochs", "minibatches", "hyper-parameters", "runs"]
    rows = [
        [
            v["variant"], v["algo"], ", ".join(v["lag_models"]), v["epochs"], v["minibatches"],
            v["hyperparameters"] or "-", v["num_runs"],
        ]
        for v in run["variants"]
    ]
    lags = ", ".join(f"{lag:g}" for lag in run["lags"])
    return [
        "## What was run",
        "",
        f"- Tasks ({len(run['tasks'])}): {', '.join(run['tasks'])}",
        f"- Lag models: {', '.join(run['lag_models'])}; lag levels: {lags}",
        f"- Seeds: {', '.join(str(s) for s in run['seeds'])}",
        f"- Runs: {run['num_runs']} ({run['num_diverged']} diverged)",
        f"- {summary['score']['steps'].capitalize()} per run: {_span(run['final_env_steps'])}; "
        f"evaluation points per run: {_span(run['eval_points'])}",
        "",
        *_md_table(header, rows),
        "",
    ]


def _md_normalisation(summary: Mapping[str, Any]) -> list[str]:
    name, steps = summary["score"]["name"], summary["score"]["steps"]
    rows = [
        [task, _fmt(n["initial"]), _fmt(n["reference"]), n["source"]]
        for task, n in summary["normalisation"].items()
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
        f"{100 * summary['final_fraction']:g}% of its evaluation points (at least one). Its AUC is "
        "the area under its normalised learning curve with training progress rescaled to [0, 1], "
        "so a run at score 1 throughout has AUC 1. A missing evaluation (every evaluation after a "
        "run diverged) takes the value of the run's last finite evaluation.",
        "",
        "For each variant and lag the final scores form a "
        "[runs per task x tasks] matrix, runs paired across tasks by seed order; where tasks have "
        "unequal run counts, every task keeps only as many runs (lowest seeds first) as the task "
        f"with the fewest. Intervals are {summary['confidence']:.0%} percentile bootstrap "
        f"intervals over {summary['reps']} resamples that draw runs with replacement "
        f"independently within each task (seed {summary['seed']}). Median and mean are taken "
        "over the per-task mean scores and IQM is the mean of the middle 50% of the pooled scores, as in rliable; "
        "the optimality gap is the mean shortfall below a score of 1 (lower is better).",
        "",
        *_md_table(["task", f"initial {name}", f"reference {name}", "reference"], rows),
        "",
    ]


def _raw_header(summary: Mapping[str, Any], what: str) -> str:
    """A raw column's header, ``what`` with ``{name}`` the score's; with several tasks its
    entries list them in the order the header names."""
    tasks = list(summary["normalisation"])
    per_task = f" ({' / '.join(tasks)})" if len(tasks) > 1 else ""
    return f"raw {what.format(name=summary['score']['name'])}{per_task}"


def _md_scores(summary: Mapping[str, Any]) -> list[str]:
    header = [
        "variant", "lag", "runs per task", "IQM [95% CI]", "median", "mean", "optimality gap",
        "AUC IQM [95% CI]", _raw_header(summary, "initial {name}"),
        _raw_header(summary, "final {name} IQM"),
    ]
    rows = [
        [
            c["variant"], f"{c['lag']:g}", c["runs_per_task"], _fmt_interval(c["iqm"]),
            _fmt(c["median"]["point"]), _fmt(c["mean"]["point"]),
            _fmt(c["optimality_gap"]["point"]), _fmt_interval(c["auc_iqm"]),
            " / ".join(_fmt(r["initial"]) for r in c["raw"].values()),
            " / ".join(_fmt(r["iqm"]["point"]) for r in c["raw"].values()),
        ]
        for c in summary["cells"]
    ]
    left_out = [
        f"- Left out: {c['variant']} at lag {c['lag']:g} has no run on "
        f"{', '.join(c['missing_tasks'])}."
        for c in summary["incomplete_cells"]
    ]
    return [
        "## Final scores",
        "",
        *_md_table(header, rows),
        "",
        "Normalised scores beside the raw ones, in the testbed's units "
        f"({summary['score']['name']}): the runs' mean first evaluation and the IQM of their "
        "final scores (per task; its interval, and those of the median, mean and optimality "
        "gap, are in `summary.json`).",
        "",
        *left_out,
        *([""] if left_out else []),
    ]


def _md_task_scores(summary: Mapping[str, Any]) -> list[str]:
    rows_in = summary["task_cells"]
    if not rows_in:
        return []
    tasks = list(summary["normalisation"])
    name = summary["score"]["name"]
    header = ["variant", "lag", "runs per task"] + [
        f"{task} {measure}" for task in tasks
        for measure in ("IQM [95% CI]", "AUC IQM [95% CI]", f"raw final {name} IQM [95% CI]")
    ]
    by_cell: dict[tuple[str, float], dict[str, Mapping[str, Any]]] = {}
    for r in rows_in:
        by_cell.setdefault((r["variant"], r["lag"]), {})[r["task"]] = r
    rows = []
    for (variant, lag), per_task in by_cell.items():
        counts = {per_task[task]["runs"] if task in per_task else 0 for task in tasks}
        runs = str(counts.pop()) if len(counts) == 1 else " / ".join(
            str(per_task[task]["runs"]) if task in per_task else "0" for task in tasks)
        rows.append([variant, f"{lag:g}", runs] + [
            _fmt_interval(per_task[task][key]) if task in per_task else "-"
            for task in tasks for key in ("iqm", "auc_iqm", "raw_iqm")
        ])
    return [
        "## Final scores per task",
        "",
        "Each task's runs alone, every run of the task counted (its means are in `summary.json`, "
        "`task_cells`); a variant without runs on a task shows `-` there, and runs per task "
        "differing between tasks are listed in task order.",
        "",
        *_md_table(header, rows),
        "",
    ]


def _md_improvement(summary: Mapping[str, Any]) -> list[str]:
    focus = summary["focus_algo"]
    lines = ["## Probability of improvement", ""]
    if not summary["probability_of_improvement"]:
        return lines + [
            f"Not computed: {focus!r} and another algorithm have no lag with runs on every task.",
            "",
        ]
    rows = [
        [f"{r['lag']:g}", r["variant"], r["baseline"], _fmt_interval(r["probability"])]
        for r in summary["probability_of_improvement"]
    ]
    return lines + [
        f"P(X > Y) is the probability that a run of {focus} (X) scores higher than a run of the "
        "baseline (Y) on the same task, ties counting one half, averaged over tasks; 0.5 means "
        "neither is better. Each baseline runs under the same lag model and epochs x minibatches "
        "and at the same value of every hyper-parameter both sweep.",
        "",
        *_md_table(["lag", focus, "baseline", "P(X > Y) [95% CI]"], rows),
        "",
    ]


def _md_kept_gain(summary: Mapping[str, Any]) -> list[str]:
    """The study's headline: the share of its synchronous gain each method keeps under lag."""
    lines = ["## Share of the synchronous gain kept", ""]
    kept = summary["kept_gain"]
    if "skipped" in kept:
        return lines + [f"Not computed: {kept['skipped']}.", ""]
    name = summary["score"]["name"]
    figure = summary["figures"].get("fig_kept_gain", {})
    image = [f"![{figure['caption']}]({figure['png']})", ""] if "png" in figure else []
    header = ["task", "variant", "lag", "runs", f"raw initial {name}", f"raw final {name} IQM",
              "raw synchronous gain", "kept gain [95% CI]", "AUC kept gain [95% CI]"]
    rows = [
        [r["task"], r["variant"], f"{r['lag']:g}", r["runs"], _fmt(r["raw_initial"]),
         _fmt(r["raw_final_iqm"]), _fmt(r["raw_sync_gain"]), _fmt_kept(r["kept"]),
         _fmt_kept(r["auc_kept"])]
        for r in sorted(kept["tasks"], key=lambda r: r["task"])
    ]
    pooled = [
        [r["variant"], f"{r['lag']:g}", r["runs_per_task"], _fmt_kept(r["kept"]),
         _fmt_kept(r["auc_kept"])]
        for r in kept["pooled"]
    ]
    pooled_lines = [
        "Pooled over tasks (IQM over every task's runs, paired across tasks as in the final-score "
        "table; near 1 rather than exactly 1 at lag 0):",
        "",
        *_md_table(["variant", "lag", "runs per task", "kept gain [95% CI]",
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
        f"{summary['confidence']:.0%} percentile interval from {summary['reps']} stratified "
        f"bootstrap resamples of both the lagged and the synchronous runs, so that the noise of "
        f"the synchronous gain is in it. The AUC kept gain is the same share of the mean {name} "
        f"over training less the first evaluation: lag that slows learning costs there even "
        f"where the end point catches up. Where the synchronous gain is not positive (the method "
        f"did not learn without lag) the share is undefined; where some resample's is not, the "
        f"interval is unbounded.",
        "",
        *image,
        *_md_table(header, rows),
        "",
        *pooled_lines,
    ]


MECHANISM_WORDS = {
    "clip": "clip",
    "is_truncated": "importance-weight truncation",
    "is_masked": "mask",
    "is_tapered": "TOPR's taper",
    "stale_dropped": "freshness bound",
    "filter": "TV filter",
}
"""Each stabiliser of ``metrics.MECHANISMS`` in the report's words."""


def _md_off_policy(summary: Mapping[str, Any]) -> list[str]:
    return ["## Off-policyness", "", *_md_off_policy_metrics(summary), *_md_stabilisers(summary)]


def _md_off_policy_metrics(summary: Mapping[str, Any]) -> list[str]:
    rows_in = summary["off_policy"]
    columns = summary["off_policy_metrics"]
    if not columns:
        return ["Not measured: the runs table has no off-policy metric.", ""]
    header = ["variant", "lag", *columns]
    rows = [
        [
            r["variant"], f"{r['lag']:g}",
            *(" / ".join(_fmt_optional(value) for value in r[c].values()) for c in columns),
        ]
        for r in rows_in
    ]
    return [
        "Each entry is mean / median / 90th percentile over a run's updates, averaged over runs.",
        "",
        *_md_table(header, rows),
        "",
    ]


def _md_stabilisers(summary: Mapping[str, Any]) -> list[str]:
    """The stabilisers' table, then which never acted: a run whose stabiliser never acted tested
    its algorithm without it, and a reader comparing algorithms must know."""
    records = summary["mechanisms"]
    present = [m for m in MECHANISMS if any(m in r for r in records)]
    lines = [
        "### Stabilisers: share of samples touched / share of gradient steps at which it acted",
        "",
    ]
    if not present:
        return lines + ["Not measured: the runs table records no stabiliser's fraction.", ""]
    header = ["variant", "lag", *(MECHANISM_WORDS[m] for m in present)]
    rows = [
        [r["variant"], f"{r['lag']:g}", *(_fmt_mechanism(r.get(m)) for m in present)]
        for r in records
    ]
    unrecorded = any(r[m]["acted"] is None for r in records for m in present if m in r)
    fallback = [
        "`n/a`: the runs table records no share of steps at which the stabiliser acted "
        "(`*_acted`, missing from tables written before trainers recorded it); whether it ever "
        "acted in a run is then read from its fraction, which is 0 in every evaluation period "
        "exactly where it touched no sample.",
        "",
    ] if unrecorded else []
    return lines + [
        "Each entry is the share of samples the stabiliser clipped, truncated, masked, dropped or "
        "filtered / the share of gradient steps at which it acted (touched at least one sample), "
        "each a run's mean over training averaged over runs; in brackets, the runs in which it "
        "ever acted of those that recorded it. `-`: the variant has no such stabiliser.",
        "",
        *fallback,
        *_md_table(header, rows),
        "",
        *_acted_sentences(records, present),
        "",
    ]


def _fmt_mechanism(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "-"
    shares = f"{_fmt_optional(record['fraction'])} / {_fmt_optional(record['acted'])}"
    return f"{shares} ({record['runs_acted']}/{record['runs']})"


def _acted_sentences(records: Sequence[Mapping[str, Any]], present: Sequence[str]) -> list[str]:
    """One sentence per (variant, lag, stabiliser) that never acted or acted in some runs only;
    one sentence in all where every stabiliser acted in every run."""
    sentences = []
    for r in records:
        where = f"`{r['variant']}` at lag {r['lag']:g}"
        for m in (m for m in present if m in r):
            mechanism, words = r[m], MECHANISM_WORDS[m]
            if mechanism["never_acted"]:
                runs = mechanism["runs"]
                which = "in its only run" if runs == 1 else f"in none of {runs} runs"
                if mechanism["acted"] is None:
                    which += ": its fraction was 0 in every evaluation period"
                sentences.append(f"- {where}: its {words} never acted ({which}): these runs test "
                                 f"{r['variant']} without it.")
            elif mechanism["runs_acted"] < mechanism["runs"]:
                sentences.append(f"- {where}: its {words} acted in {mechanism['runs_acted']} of "
                                 f"{mechanism['runs']} runs only.")
    return sentences or ["Every stabiliser acted in every run that recorded it."]


def _fmt_optional(value: float | None) -> str:
    return "n/a" if value is None else _fmt(value)


def _fmt_steps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _md_ess_collapse(summary: Mapping[str, Any]) -> list[str]:
    lines = ["## Does the ESS fall before the score collapses?", ""]
    analysis = summary["ess_collapse"]
    if "skipped" in analysis:
        return lines + [f"Not analysed: {analysis['skipped']}.", ""]
    t, steps = analysis["thresholds"], summary["score"]["steps"]
    header = ["variant", "lag", "runs", "collapsed"] + [
        f"{column} ({rule})" for rule in WARNING_RULES
        for column in ("warned in time", "median lead", "false alarms")
    ]
    rows = [
        [c["variant"], f"{c['lag']:g}", c["runs"], c["collapsed"]] + [
            value for rule in WARNING_RULES
            for value in (c[rule]["warned_in_time"], _fmt_steps(c[rule]["median_lead"]),
                          c[rule]["false_alarms"])
        ]
        for c in analysis["cells"]
    ]
    return lines + [
        "A run collapses at the first evaluation at which its score, as a fraction of the "
        "task's reference, is below "
        f"{t['collapse_fraction']:g} x its best earlier score (once that best is at least "
        f"{t['min_peak']:g}), or at which it has diverged. The ESS warns, by the drop rule, at the "
        f"first evaluation period whose mean ESS ratio is below {t['ess_drop']:g} x the run's "
        f"first period's, and by the floor rule below {t['ess_floor']:g}. Read it as: of the "
        "collapsed runs, how many were warned at or before their collapse, and by how many "
        f"{steps} (median lead, collapse minus warning, over the collapsed runs with a warning; "
        "negative: the ESS fell only after the collapse); false alarms are runs warned that "
        "never collapsed. The ESS predicts collapse where collapsed runs are warned in time and "
        "false alarms are few. Each run's events are in `summary.json` (`ess_collapse`).",
        "",
        *_md_table(header, rows),
        "",
    ]


def _md_diverged(summary: Mapping[str, Any]) -> list[str]:
    lines = ["## Diverged runs", ""]
    diverged = summary["diverged_runs"]
    if not diverged:
        return lines + ["None.", ""]
    header = ["run", "task", "variant", "lag", "seed", "diverged at update",
              f"last finite {summary['score']['name']}"]
    rows = [
        [
            d["run_id"], d["task"], d["variant"], f"{d['lag']:g}", d["seed"], d["diverged_at"],
            _fmt(d["last_finite_score"]),
        ]
        for d in diverged
    ]
    return lines + [
        "These runs are scored with their last finite evaluation.",
        "",
        *_md_table(header, rows),
        "",
    ]


def _md_figures(summary: Mapping[str, Any]) -> list[str]:
    lines = ["## Figures", ""]
    for figure in summary["figures"].values():
        lines += [f"### {figure['caption']}", ""]
        if "skipped" in figure:
            lines += [f"Skipped: {figure['skipped']}.", ""]
        else:
            image = f"![{figure['caption']}]({figure['png']})"
            lines += [image, "", f"([PDF]({figure['pdf']}))", ""]
    return lines


def markdown(summary: Mapping[str, Any]) -> str:
    sections = [
        [f"# {summary['title']}", ""],
        _md_kept_gain(summary),
        _md_overview(summary),
        _md_normalisation(summary),
        _md_scores(summary),
        _md_task_scores(summary),
        _md_improvement(summary),
        _md_off_policy(summary),
        _md_ess_collapse(summary),
        _md_diverged(summary),
        _md_figures(summary),
    ]
    return "\n".join(line for section in sections for line in section)
