"""Summaries of the training metrics a runs table may hold beside its evaluations.

Two kinds are summarised where present: the shares of samples a stabiliser filters, clips,
truncates, masks or drops (``FRACTION_METRICS``), which say how much of the data an algorithm
discarded to cope with lag, and per-update measures of how far the behaviour policy lagged
(``OFF_POLICY_METRICS``), which compare runs by the off-policyness they actually met.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

FRACTION_METRICS = {
    "filter_fraction": "Filter fraction",
    "clip_fraction": "Clip fraction",
    "is_truncated_fraction": "Truncated fraction",
    "is_masked_fraction": "Masked fraction",
    "stale_dropped_fraction": "Stale-dropped fraction",
}
"""Shares of samples a stabiliser filters, clips, truncates, masks or drops, plotted if present."""
OFF_POLICY_METRICS = {
    "tv_backward": "Backward TV",
    "tv_forward": "Forward TV",
    "behaviour_kl": "Behaviour KL",
    "approx_kl": "Approx. KL",
    "version_gap_mean": "Mean version gap",
}
"""Per-update measures of how far the behaviour policy lagged, summarised per run.
``version_gap_mean`` (versions between the learner and the behaviour policy, averaged over the
update's samples: the mean staleness) compares runs of different lag models, whose lag levels
mean different things, at equal measured staleness."""
ROBUST_SUFFIXES = ("_median", "_p90")
"""Per-update robust summaries of an off-policy metric, reported too when the table has them."""
RUN_QUANTILES = {"median": 0.5, "p90": 0.9}
"""Quantiles over each run's updates reported beside the mean."""
RUN_SUMMARIES = ("mean", *RUN_QUANTILES)


def fraction_means(table: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, lag): mean over runs of each run's training mean of each fraction metric."""
    present = [m for m in FRACTION_METRICS if m in table.columns]
    per_run = table.groupby(["variant", "lag", "run_id"])[present].mean()
    return per_run.groupby(["variant", "lag"]).mean()


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
                c: {name: _finite_or_none(row[summary_column(c, name)]) for name in RUN_SUMMARIES}
                for c in columns
            },
        }
        for (variant, lag), row in means.iterrows()
    ]


def _finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a metric no run logged a finite value of is ``null``."""
    return float(value) if np.isfinite(value) else None
