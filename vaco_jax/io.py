"""Atomic file output: results are written to a temporary file and renamed into place."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import pandas as pd


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Calls `write(tmp_path)` on a temporary file beside `path`, then renames it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes files private; results are for sharing
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    return atomic_write(path, write)


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")


def write_table(path: str | os.PathLike, table: pd.DataFrame) -> Path:
    """Writes `table` as CSV or Parquet, chosen by the file suffix."""
    path = Path(path)
    if path.suffix == ".csv":
        return atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
    if path.suffix == ".parquet":
        return atomic_write(path, lambda tmp: table.to_parquet(tmp, index=False))
    raise ValueError(f"table path {str(path)!r} must end in .csv or .parquet")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def prepare_output_dir(path: str | os.PathLike, *, overwrite: bool) -> Path:
    """Creates `path`, refusing a non-empty existing folder unless `overwrite` is set."""
    path = Path(path)
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(
            f"output folder {str(path)!r} already exists and is not empty; pass overwrite "
            f"(--overwrite) to replace its results or resume (--resume) to continue the run")
    path.mkdir(parents=True, exist_ok=True)
    return path
