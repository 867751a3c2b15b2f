"""Runs tables as earlier versions of vaco_jax wrote them, read as today's."""

from __future__ import annotations

from collections.abc import Callable, Collection

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
