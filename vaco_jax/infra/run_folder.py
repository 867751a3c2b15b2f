"""A run folder's files: their names (as its manifest records them), writing the results table
and status, and reading the saved config and status back."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vaco_jax.infra import io, manifest

CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.parquet"
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
    """The run's saved `config.json`, refusing a missing or unreadable one."""
    path = out / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {str(path)!r} does not exist")
    saved = io.read_json(path, "the run cannot be resumed; start it again with --overwrite")
    if not isinstance(saved, dict):
        raise ValueError(f"cannot resume: {str(path)!r} does not describe a run; start the run "
                         f"again with --overwrite")
    return saved


def read_status(folder: str | os.PathLike) -> dict[str, Any] | None:
    """A run folder's `status.json`, or None if it is missing or unreadable (with a warning:
    it is rebuilt from the run's checkpoint when the run is resumed)."""
    path = Path(folder) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        status = io.read_json(path, "it is rewritten from the checkpoint when the run resumes")
        if isinstance(status, dict) and "updates_done" in status:
            return status
        raise ValueError(f"{str(path)!r} is not a run status; it is rewritten from the "
                         f"checkpoint when the run resumes")
    except ValueError as error:
        warn(str(error))
        return None


def latest_finite(values: np.ndarray) -> np.ndarray:
    """Per run, the last finite entry (NaN where there is none)."""
    finite = np.isfinite(values)
    index = np.where(finite.any(axis=1), values.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1), 0)
    latest = values[np.arange(values.shape[0]), index]
    return np.where(finite.any(axis=1), latest, np.nan)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
