"""Summaries of the training metrics a runs table may hold beside its evaluations.

Three kinds are summarised where present: the shares of samples a stabiliser filters, clips,
truncates, masks or drops (``FRACTION_METRICS``), which say how much of the data an algorithm
discarded to cope with lag; the shares of gradient steps at which each stabiliser acted
(``phase.ACTED_METRICS``), which say whether a run tested its algorithm with the stabiliser or
in effect without it; and per-update measures of how far the behaviour policy lagged
(``OFF_POLICY_METRICS``), which compare runs by the off-policyness they actually met.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.core.phase import MECHANISM_FRACTIONS, acted_name

FRACTION_METRICS = {
    "filter_fraction": "Filter fraction",
    "clip_fraction": "Clip fraction",
    "is_truncated_fraction": "Truncated fraction",
    "is_masked_fraction": "Masked fraction",
    "is_tapered_fraction": "Tapered fraction",
    "stale_dropped_fraction": "Stale-dropped fraction",
    "skipped_step_fraction": "Skipped-step fraction",
}
"""Shares of samples a stabiliser filters, clips, truncates, masks or drops, plotted if present."""
OFF_POLICY_METRICS = {
    "tv_backward": "Backward TV",
    "tv_forward": "Forward TV",
    "behaviour_kl": "Behaviour KL",
    "approx_kl": "Approx. KL",
    "version_gap_mean": "Mean version gap",
    "initial_policy_share": "Initial-policy data share",
    "sequence_log_ratio": "Sequence log-ratio",
}
"""Per-update measures of how far the behaviour policy lagged, summarised per run.
``version_gap_mean`` (versions between the learner and the behaviour policy, averaged over the
update's samples: the mean staleness) compares runs of different lag models, whose lag levels
mean different things, at equal measured staleness; ``initial_policy_share`` (the share of
the update's samples the initial policy, version 0, produced) shows how much of a run's data
came from the initial policy, which lag warm-up `clip` inflates while the buffer fills;
``sequence_log_ratio`` (token runs: each response's ``log(pi_T / beta)`` summed over its
tokens, recorded by its median and 99th percentile over the update's responses) shows the heavy
tail of the sequence importance weight that grows with lag and with the answer's length."""
ROBUST_SUFFIXES = ("_median", "_p90", "_p99")
"""Per-update quantile summaries of an off-policy metric, reported too when the table has them."""
RUN_QUANTILES = {"median": 0.5, "p90": 0.9}
"""Quantiles over each run's updates reported beside the mean."""
RUN_SUMMARIES = ("mean", *RUN_QUANTILES)


def fraction_means(table: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, lag): mean over runs of each run's training mean of each fraction metric."""
    present = [m for m in FRACTION_METRICS if m in table.columns]
    per_run = table.groupby(["variant", "lag", "run_id"])[present].mean()
    return per_run.groupby(["variant", "lag"]).mean()


def mechanism_name(fraction: str) -> str:
    """The key of the stabiliser of ``fraction`` in ``summary.json``: ``clip`` of
    ``clip_fraction``."""
    return fraction.removesuffix("_fraction")


MECHANISMS = tuple(mechanism_name(f) for f in MECHANISM_FRACTIONS)
"""Every stabiliser a trainer records, by its ``summary.json`` key, in the trainers' order."""

MECHANISM_WORDS = {
    "clip": "clip",
    "is_truncated": "importance-weight truncation",
    "is_masked": "mask",
    "is_tapered": "TOPR's taper",
    "stale_dropped": "freshness bound",
    "filter": "TV filter",
    "skipped_step": "skip of a step that kept no sample",
}
"""Each stabiliser of ``MECHANISMS`` in the report's words."""


def mechanism_columns(table: pd.DataFrame) -> list[str]:
    """The stabilisers' fraction and acted-share metrics in ``table``; a table written before
    trainers recorded the acted shares has the fractions alone."""
    candidates = [c for f in MECHANISM_FRACTIONS for c in (f, acted_name(f))]
    return [c for c in candidates if c in table.columns]


def run_mechanisms(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: the mean over its rows of each stabiliser's fraction and acted share, as
    ``{metric}[mean]``; a run's mean acted share is the share of its gradient steps at which the
    stabiliser acted, as each row averages its evaluation period's updates. NaN rows are left
    out and a run without a finite value (an algorithm without the stabiliser) gets NaN."""
    columns = mechanism_columns(table)
    means = table.groupby("run_id")[columns].mean()
    return means.rename(columns=lambda c: summary_column(c, "mean"))


def mechanism_summaries(run_table: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (variant, lag): for each stabiliser with a finite value in its runs, whether and how
    much it acted (``_mechanism_summary``); stabilisers the variant lacks are left out, so a
    variant without any has its coordinates alone. A stabiliser that never acted leaves its
    runs a test of the algorithm without it, which the report must say."""
    records = []
    for (variant, lag), runs in run_table.groupby(["variant", "lag"]):
        record: dict[str, Any] = {"variant": variant, "lag": float(lag)}
        for fraction in MECHANISM_FRACTIONS:
            summary = _mechanism_summary(runs, fraction)
            if summary is not None:
                record[mechanism_name(fraction)] = summary
        records.append(record)
    return records


def _run_means(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Each run's mean of ``metric`` (``run_mechanisms``), NaN where the table lacks it."""
    column = summary_column(metric, "mean")
    return runs[column] if column in runs.columns else pd.Series(np.nan, index=runs.index)


def _mechanism_summary(runs: pd.DataFrame, fraction: str) -> dict[str, Any] | None:
    """Over one (variant, lag)'s runs: the mean of the run means of ``fraction`` and of its acted
    share, the runs in which the stabiliser ever acted, the runs that recorded it and whether it
    never acted; None where no run recorded it.

    A run without an acted share (a table from before trainers recorded it) has ``acted`` null,
    and whether it ever acted is read from its fraction instead: the stabiliser touched a sample
    at some step exactly where some period's mean fraction is above 0.
    """
    fractions, acted = _run_means(runs, fraction), _run_means(runs, acted_name(fraction))
    ever = acted.where(acted.notna(), fractions)
    recorded = ever.notna()
    if not recorded.any():
        return None
    runs_acted = int((ever[recorded] > 0).sum())
    return {
        "fraction": finite_or_none(fractions.mean()),
        "acted": finite_or_none(acted.mean()),
        "runs_acted": runs_acted,
        "runs": int(recorded.sum()),
        "never_acted": runs_acted == 0,
    }


def off_policy_columns(table: pd.DataFrame) -> list[str]:
    """The off-policy metrics in ``table``, each followed by its robust per-update summaries."""
    columns = []
    for metric in OFF_POLICY_METRICS:
        candidates = [metric, *(metric + suffix for suffix in ROBUST_SUFFIXES)]
        columns += [c for c in candidates if c in table.columns]
    return columns


def summary_column(metric: str, summary: str) -> str:
    """The run-table column of one summary of a metric over a run's updates."""
    return f"{metric}[{summary}]"


def run_off_policy(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: mean, median and 90th percentile over its logged updates of each off-policy metric.

    Columns are ``{metric}[{summary}]``, e.g. ``tv_backward[p90]`` (brackets
    keep them apart from per-update columns such as ``tv_backward_p90``); NaN
    updates are left out and a run with none finite gets NaN.
    """
    columns = off_policy_columns(table)
    grouped = table.groupby("run_id")[columns]
    means = grouped.mean()
    parts = {summary_column(c, "mean"): means[c] for c in columns}
    for name, level in RUN_QUANTILES.items():
        quantiles = grouped.quantile(level)
        parts.update({summary_column(c, name): quantiles[c] for c in columns})
    return pd.DataFrame(parts, index=means.index)


def off_policy_summaries(run_table: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Per (variant, lag): mean over runs of each run's off-policy summaries."""
    summarised = [summary_column(c, name) for c in columns for name in RUN_SUMMARIES]
    means = run_table.groupby(["variant", "lag"])[summarised].mean()
    return [
        {
            "variant": variant,
            "lag": float(lag),
            **{
                c: {name: finite_or_none(row[summary_column(c, name)]) for name in RUN_SUMMARIES}
                for c in columns
            },
        }
        for (variant, lag), row in means.iterrows()
    ]


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a metric no run logged a finite value of is ``null``."""
    return float(value) if np.isfinite(value) else None
