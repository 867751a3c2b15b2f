"""The runs table a report reads: its columns, its file name, its variants and its checks.

The table is long format, one row per run per evaluation point (see ``required_columns``):
the run coordinates, ``run_id``, ``update``, ``env_steps``, the evaluations (the column a
``Score`` names) and the run's outcome, the coordinates and the outcome constant within a run;
the swept settings' columns follow, hyper-parameters prefixed ``hp_`` and config axes (a
config field an experiment sweeps, ``Config.axes``) ``cfg_``, and training metrics may follow.
Both testbeds write it, so it names what the evaluations measure through ``Score`` rather than
assuming returns.

A *variant* is an algorithm plus every run coordinate that varies within that algorithm apart
from lag and seed (``lag_model``, ``epochs``, ``minibatches``, ``hp_*``, ``cfg_*``), e.g.
``vaco[tv_delta=0.1]`` or ``grpo[bf16_behaviour=True]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

HP_PREFIX = "hp_"
CONFIG_PREFIX = "cfg_"
SETTING_PREFIXES = (HP_PREFIX, CONFIG_PREFIX)
"""The prefixes of the swept settings' columns: hyper-parameters and config axes."""
RUNS_FILE = "runs.parquet"
REPORT_WRITES = (RUNS_FILE, "summary.json", "report.md", "fig_*.png", "fig_*.pdf")
"""Glob patterns of the files a report (`write.write_report`) writes into its folder."""
RUN_COORDINATES = ("task", "algo", "lag_model", "lag", "epochs", "minibatches", "seed")
VARIANT_COORDINATES = ("lag_model", "epochs", "minibatches")
"""Run coordinates that name a variant when they vary within an algorithm (with ``hp_*``)."""
PER_RUN_COLUMNS = ("diverged", "diverged_at")


@dataclasses.dataclass(frozen=True)
class Score:
    """What a runs table's evaluations measure: their ``column``, its ``name`` in the report's
    words, and what the ``env_steps`` column counts (``steps``)."""

    column: str = "eval_return"
    name: str = "return"
    steps: str = "environment steps"


def required_columns(score: Score = Score()) -> tuple[str, ...]:
    """The columns every runs table scored by ``score`` holds, in the order the sweep writes
    them."""
    return (*RUN_COORDINATES, "run_id", "update", "env_steps", score.column, *PER_RUN_COLUMNS)


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The swept settings' columns of ``runs`` (``hp_*`` and ``cfg_*``), sorted so that variant
    names are stable."""
    return sorted(c for c in runs.columns if c.startswith(SETTING_PREFIXES))


def setting_name(column: str) -> str:
    """A column's name in a variant's name: a swept setting's without its prefix, any other's
    as it is."""
    return next((column.removeprefix(p) for p in SETTING_PREFIXES if column.startswith(p)),
                column)


def _format_value(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:g}"
    return str(value)


def assignments(columns: Sequence[str], values: Sequence[Any]) -> str:
    """``"name=value,..."`` with the ``hp_`` or ``cfg_`` prefix dropped from names."""
    return ",".join(f"{setting_name(c)}={_format_value(v)}" for c, v in zip(columns, values))


def variant_names(runs: pd.DataFrame) -> pd.Series:
    """Readable variant name for every row of a runs table, indexed like ``runs``.

    The name is the algorithm, followed in brackets by each coordinate (from
    ``lag_model``, ``epochs``, ``minibatches``, ``hp_*`` and ``cfg_*``, prefix dropped)
    that takes more than one value among that algorithm's runs:
    ``ppo``, ``vaco[tv_delta=0.1]``, ``ppo[epochs=8,minibatches=4]``.
    """
    coordinates = [*VARIANT_COORDINATES, *setting_columns(runs)]
    first_rows = runs.drop_duplicates("run_id").set_index("run_id")
    names = first_rows["algo"].astype(str)
    for algo, rows in first_rows.groupby("algo", sort=False):
        varying = [c for c in coordinates if rows[c].nunique(dropna=False) > 1]
        if varying:
            names.loc[rows.index] = [
                f"{algo}[{assignments(varying, values)}]"
                for values in rows[varying].itertuples(index=False)
            ]
    return pd.Series(runs["run_id"].map(names).to_numpy(), index=runs.index, name="variant")


def check_runs(runs: pd.DataFrame, score: Score) -> None:
    """Raises ``ValueError`` unless ``runs`` is a runs table the report can score: every
    required column, per-run columns constant within a run, and each run evaluated at
    ``env_steps`` 0 (the initial policy, which normalisation needs) and at least once more."""
    if not isinstance(runs, pd.DataFrame) or runs.empty:
        raise ValueError("runs must be a non-empty pandas DataFrame")
    required = required_columns(score)
    missing = [c for c in required if c not in runs.columns]
    if missing:
        raise ValueError(f"runs is missing columns {missing}; required: {list(required)}")
    constant = [*RUN_COORDINATES, *PER_RUN_COLUMNS, *setting_columns(runs)]
    per_run = runs.groupby("run_id")[constant].nunique(dropna=False)
    varying = [c for c in constant if (per_run[c] > 1).any()]
    if varying:
        raise ValueError(f"runs columns {varying} must be constant within each run_id")
    first_steps = runs.groupby("run_id")["env_steps"].min()
    late = first_steps.index[first_steps != 0].tolist()
    if late:
        raise ValueError(f"every run must start with an evaluation at env_steps 0; runs: {late}")
    counts = runs.groupby("run_id")["env_steps"].nunique()
    short = counts.index[counts < 2].tolist()
    if short:
        raise ValueError(f"every run needs 2 or more distinct env_steps evaluations; runs: {short}")
