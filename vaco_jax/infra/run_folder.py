"""A run folder's files: their names (as its manifest records them), writing the results table
and status, and reading the saved config and status back."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.infra import io, manifest, records

CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.parquet"
METRICS_INDEX = ("run", "update")
"""The columns a metrics table is read by: its rows are one run's one update."""
CHECKPOINT_DIR = "checkpoint"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"  # W&B's own name for its folder under the run folder
RUN_FILES = {CONFIG_FILE: manifest.FILE, "metrics.csv": manifest.FILE,
             METRICS_FILE: manifest.FILE, STATUS_FILE: manifest.FILE,
             CHECKPOINT_DIR: manifest.FOLDER}
"""What a run writes into its folder, as recorded in its manifest (the checkpoint's step folders
are recorded as they are saved): `overwrite` removes these and nothing else."""
RUN_WRITES = (*(name for name, kind in RUN_FILES.items() if kind == manifest.FILE),
              f"{CHECKPOINT_DIR}/[0-9]*", TENSORBOARD_DIR, WANDB_DIR)
"""Glob patterns of what a run writes: paths an overwrite refuses to keep (a kept
`checkpoint/9/` would be read as a checkpoint)."""


def write_results(out: Path, table: pd.DataFrame, status: dict[str, Any]) -> None:
    """The metrics table (CSV and Parquet) and the status, each written atomically."""
    io.write_table(out / "metrics.csv", table)
    io.write_table(out / METRICS_FILE, table)
    io.write_json(out / STATUS_FILE, status)


def check_to_resume(out: Path) -> None:
    """Refuses (ValueError) a run folder whose checkpoint or tracker folder is a symbolic link,
    through which a resumed run would write outside it; a damaged manifest is warned about (the
    run resumes, and an overwrite refuses the folder until the manifest is moved away)."""
    manifest.refuse_links(out, (CHECKPOINT_DIR, TENSORBOARD_DIR, WANDB_DIR))
    try:
        manifest.recorded(out)
    except manifest.DamagedManifest as damaged:
        warn(f"{str(damaged.path)!r} is damaged ({damaged.problem}): the run resumes without "
             f"recording its files there, and --overwrite refuses the folder until it is moved "
             f"away")


def saved_config(out: Path) -> dict[str, Any]:
    """The run's saved `config.json` as a table (its config's own `from_dict` validates the
    values), refusing a missing or unreadable one."""
    path = out / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {str(path)!r} does not exist")
    saved = records.load_json(path, records.RUN_CONFIG,
                              "the run cannot be resumed; start it again with --overwrite")
    return dict(saved.table())


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """One run of a run folder, as its status records it."""

    diverged: bool
    diverged_at: int


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """A run folder's `status.json`: how far its runs got."""

    updates_done: int
    num_updates: int
    complete: bool
    runs: tuple[RunOutcome, ...]

    @property
    def finished(self) -> bool:
        """Complete, or stopped early because every run diverged."""
        return self.complete or all(r.diverged for r in self.runs)

    @classmethod
    def from_json(cls, saved: records.Field) -> "RunStatus":
        num_updates = saved["num_updates"].integer(0, MAX_UPDATES)
        runs = tuple(RunOutcome(diverged=r["diverged"].boolean(),
                                diverged_at=r["diverged_at"].integer(-1, num_updates))
                     for r in saved["runs"].items(MAX_STATUS_RUNS))
        return cls(updates_done=saved["updates_done"].integer(0, num_updates),
                   num_updates=num_updates, complete=saved["complete"].boolean(), runs=runs)


MAX_UPDATES = 1 << 40
"""The most updates a status may count."""
MAX_STATUS_RUNS = 1 << 20
"""The most runs a status may list."""


def read_status(folder: str | os.PathLike, *, runs: int | None = None,
                num_updates: int | None = None) -> RunStatus | None:
    """A run folder's `status.json`, or None if it is missing or damaged (with a warning: it is
    rebuilt from the run's checkpoint when the run is resumed); damaged too where it lists
    other than `runs` runs or counts other than `num_updates` updates, when given (what the
    folder's own plan says it holds)."""
    path = Path(folder) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        saved = records.load_json(path, records.RUN_STATUS)
        status = RunStatus.from_json(saved)
        if runs is not None and len(status.runs) != runs:
            raise saved["runs"].refuse(f"lists {len(status.runs)} runs where the folder holds "
                                       f"{runs}")
        if num_updates is not None and status.num_updates != num_updates:
            raise saved["num_updates"].refuse(f"{status.num_updates} where the run has "
                                              f"{num_updates}")
        return status
    except ValueError as error:
        warn(f"{error}; it is rewritten from the checkpoint when the run resumes")
        return None


def latest_finite(values: np.ndarray) -> np.ndarray:
    """Per run, the last finite entry (NaN where there is none)."""
    finite = np.isfinite(values)
    index = np.where(finite.any(axis=1), values.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1), 0)
    latest = values[np.arange(values.shape[0]), index]
    return np.where(finite.any(axis=1), latest, np.nan)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
