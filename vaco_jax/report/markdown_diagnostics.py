"""The diagnostic sections of ``report.md``: off-policyness and the stabilisers, whether the ESS
falls before a collapse, and the diverged runs."""

from __future__ import annotations

from collections.abc import Sequence

from vaco_jax.report.collapse import WARNING_RULES
from vaco_jax.report.markdown_text import fmt, fmt_optional, table
from vaco_jax.report.metrics import MECHANISM_WORDS, MECHANISMS
from vaco_jax.report.summary import Stabilisers, StabiliserShare, Summary


def off_policy(summary: Summary) -> list[str]:
    return ["## Off-policyness", "", *_off_policy_metrics(summary), *_stabilisers(summary)]


def _off_policy_metrics(summary: Summary) -> list[str]:
    rows_in = summary.off_policy
    columns = summary.off_policy_metrics
    if not columns:
        return ["Not measured: the runs table has no off-policy metric.", ""]
    header = ["variant", "lag", *columns]
    rows = [
        [
            r["variant"], f"{r['lag']:g}",
            *(" / ".join(fmt_optional(value) for value in r[c].values()) for c in columns),
        ]
        for r in rows_in
    ]
    return [
        "Each entry is mean / median / 90th percentile over a run's updates, averaged over runs.",
        "",
        *table(header, rows),
        "",
    ]


def _stabilisers(summary: Summary) -> list[str]:
    """The stabilisers' table, then which never acted: a run whose stabiliser never acted tested
    its algorithm without it, and a reader comparing algorithms must know."""
    records = summary.mechanisms
    present = [m for m in MECHANISMS if any(m in r.present() for r in records)]
    lines = [
        "### Stabilisers: share of samples touched / share of gradient steps at which it acted",
        "",
    ]
    if not present:
        return lines + ["Not measured: the runs table records no stabiliser's fraction.", ""]
    header = ["variant", "lag", *(MECHANISM_WORDS[m] for m in present)]
    rows = [
        [r.variant, f"{r.lag:g}", *(_fmt_share(r.present().get(m)) for m in present)]
        for r in records
    ]
    unrecorded = any(share.acted is None for r in records for share in r.present().values())
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
        *table(header, rows),
        "",
        *_acted_sentences(records, present),
        "",
    ]


def _fmt_share(share: StabiliserShare | None) -> str:
    if share is None:
        return "-"
    shares = f"{fmt_optional(share.fraction)} / {fmt_optional(share.acted)}"
    return f"{shares} ({share.runs_acted}/{share.runs})"


def _acted_sentences(records: Sequence[Stabilisers], present: Sequence[str]) -> list[str]:
    """One sentence per (variant, lag, stabiliser) that never acted or acted in some runs only;
    one sentence in all where every stabiliser acted in every run."""
    sentences = []
    for r in records:
        where = f"`{r.variant}` at lag {r.lag:g}"
        shares = r.present()
        for m in (m for m in present if m in shares):
            share, words = shares[m], MECHANISM_WORDS[m]
            if share.never_acted:
                runs = share.runs
                which = "in its only run" if runs == 1 else f"in none of {runs} runs"
                if share.acted is None:
                    which += ": its fraction was 0 in every evaluation period"
                sentences.append(f"- {where}: its {words} never acted ({which}): these runs test "
                                 f"{r.variant} without it.")
            elif share.runs_acted < share.runs:
                sentences.append(f"- {where}: its {words} acted in {share.runs_acted} of "
                                 f"{share.runs} runs only.")
    return sentences or ["Every stabiliser acted in every run that recorded it."]


def _fmt_steps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def ess_collapse(summary: Summary) -> list[str]:
    lines = ["## Does the ESS fall before the score collapses?", ""]
    analysis = summary.ess_collapse
    if analysis.skipped is not None:
        return lines + [f"Not analysed: {analysis.skipped}.", ""]
    t, steps = analysis.thresholds, summary.score.steps
    header = ["variant", "lag", "runs", "collapsed"] + [
        f"{column} ({rule})" for rule in WARNING_RULES
        for column in ("warned in time", "median lead", "false alarms")
    ]
    rows = [
        [c.variant, f"{c.lag:g}", c.runs, c.collapsed] + [
            value for counts in c.by_rule().values()
            for value in (counts.warned_in_time, _fmt_steps(counts.median_lead),
                          counts.false_alarms)
        ]
        for c in analysis.cells or ()
    ]
    return lines + [
        "A run collapses at the first evaluation at which its score, as a fraction of the "
        "task's reference, is below "
        f"{t.collapse_fraction:g} x its best earlier score (once that best is at least "
        f"{t.min_peak:g}), or at which it has diverged. The ESS warns, by the drop rule, at the "
        f"first evaluation period whose mean ESS ratio is below {t.ess_drop:g} x the run's "
        f"first period's, and by the floor rule below {t.ess_floor:g}. Read it as: of the "
        "collapsed runs, how many were warned at or before their collapse, and by how many "
        f"{steps} (median lead, collapse minus warning, over the collapsed runs with a warning; "
        "negative: the ESS fell only after the collapse); false alarms are runs warned that "
        "never collapsed. The ESS predicts collapse where collapsed runs are warned in time and "
        "false alarms are few. Each run's events are in `summary.json` (`ess_collapse`).",
        "",
        *table(header, rows),
        "",
    ]


def diverged(summary: Summary) -> list[str]:
    lines = ["## Diverged runs", ""]
    runs = summary.diverged_runs
    if not runs:
        return lines + ["None.", ""]
    header = ["run", "task", "variant", "lag", "seed", "diverged at update",
              f"last finite {summary.score.name}"]
    rows = [
        [
            d.run_id, d.task, d.variant, f"{d.lag:g}", d.seed, d.diverged_at,
            fmt(d.last_finite_score),
        ]
        for d in runs
    ]
    return lines + [
        "These runs are scored with their last finite evaluation.",
        "",
        *table(header, rows),
        "",
    ]
