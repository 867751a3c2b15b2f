"""Atomic file output: results are written to a temporary file and renamed into place, and
recorded in the folder's manifest (`vaco_jax.infra.manifest`) where it keeps one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from vaco_jax.infra import manifest


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Calls `write(tmp_path)` on a temporary file beside `path`, then renames it over `path`."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        manifest.record_written(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes files private; results are for sharing
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(error, OSError) and str(path) not in str(error):
            # A full disk says "[Errno 28] Error writing bytes to file": name the file.
            failure = OSError(f"cannot write {str(path)!r}: {error.strerror or error}")
            failure.errno = error.errno  # a plain OSError: a failed write, not a refused input
            raise failure from error
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    return atomic_write(path, write)


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=False, default=jsonable) + "\n")


def write_table(path: str | os.PathLike, table: pd.DataFrame) -> Path:
    """Writes `table` as CSV or Parquet, chosen by the file suffix."""
    path = Path(path)
    if path.suffix == ".csv":
        return atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))
    if path.suffix == ".parquet":
        return atomic_write(path, lambda tmp: table.to_parquet(tmp, index=False))
    raise ValueError(f"table path {str(path)!r} must end in .csv or .parquet")


def jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def check_output_dir(path: str | os.PathLike) -> Path:
    """Refuses (ValueError) an output folder that names a file, lies under a file or cannot be
    created, before anything is computed."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"output folder {str(path)!r} is an existing file; choose another folder")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"cannot create output folder {str(path)!r}: {str(existing)!r} is a "
                         f"file; choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"cannot create output folder {str(path)!r}: {str(existing)!r} is not "
                         f"writable; choose another folder")
    return path


def prepare_output_dir(path: str | os.PathLike, *, overwrite: bool, keep: Sequence[str] = (),
                       writes: Sequence[str] = (), resumable: bool = True) -> Path:
    """Creates `path`, refusing a folder that holds results unless `overwrite` is set, which
    removes what vaco_jax wrote there and refuses a folder holding anything else but the `keep`
    paths, and a `keep` path that vaco_jax wrote or is about to write (`writes`, glob patterns):
    `vaco_jax.infra.manifest.remove_recorded`. `resumable`: whether the work written there can
    be continued (a run's, a sweep's), which the refusal then offers beside the overwrite."""
    path = check_output_dir(path)
    if manifest.has_results(path):
        if not overwrite:
            resume = " or resume (--resume) to continue the run" if resumable else ""
            raise FileExistsError(
                f"output folder {str(path)!r} already exists and is not empty; pass overwrite "
                f"(--overwrite) to replace its results{resume}")
        manifest.remove_recorded(path, keep, writes)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"cannot create output folder {str(path)!r} ({error.strerror}); choose "
                         f"another folder") from None
    return path
