"""Runs tables and report summaries as earlier versions of vaco_jax wrote them, read as
today's."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.core.phase import MECHANISM_FRACTIONS, acted_name


def without_absent_mechanisms(table: pd.DataFrame,
                              mechanisms: Callable[[str], Collection[str]]) -> pd.DataFrame:
    """``table`` with each stabiliser's fraction and acted share NaN in the rows of algorithms
    without it (``mechanisms(algo)``, KeyError for an algorithm it does not know, whose rows
    stay as recorded): runs tables written before trainers recorded NaN there hold 0, which
    would read as a stabiliser that never acted."""
    known = {}
    for algo in table["algo"].astype(str).unique():
        try:
            known[algo] = mechanisms(algo)
        except KeyError:
            pass
    algos = table["algo"].astype(str)
    table = table.copy()
    for fraction in MECHANISM_FRACTIONS:
        columns = [c for c in (fraction, acted_name(fraction)) if c in table.columns]
        lacking = [algo for algo, has in known.items() if fraction not in has]
        if columns and lacking:
            table.loc[algos.isin(lacking), columns] = np.nan
    return table


SUMMARY_BEFORE_KEPT_GAIN = "the report was written before vaco_jax measured the kept gain"
"""The reason a summary written before the kept gain existed gives for having none."""


def summary_as_now(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A ``summary.json``'s object as today's report writes it: one written before the kept
    gain existed says so, and its cells, written before they kept the raw scores, have none."""
    now = dict(summary)
    now.setdefault("kept_gain", {"skipped": SUMMARY_BEFORE_KEPT_GAIN})
    now["cells"] = [{"raw": {}, **cell} for cell in summary.get("cells", [])]
    return now
