"""Checkpoints of the complete training state between chunks, each tied to its run.

`checkpoint/<step>/` holds the Orbax tree (`tree/`) and `identity.json`: the identity of the
run that wrote it and the size and SHA-256 of every file of the tree, checked before the tree
is handed to Orbax, so a truncated or altered checkpoint is recognised (and skipped) without
reading it. One whose leaves differ from the state restored into (written by a version of the
package whose training state differs) is not damaged: resuming from it is refused. A checkpoint
is written into `<step>.partial/` and renamed into place only once complete, so a process
killed mid-write leaves a `.partial` folder (removed when the run folder is next opened) and
never a half-written `<step>/`. Only the newest `keep` checkpoints are kept, the older ones
deleted after a new one is committed. The run folder's manifest records each step folder
while it exists, so an overwrite removes those and nothing else. A folder may come from someone
else: a `checkpoint/` that is a link is refused, a step folder that is a link is no checkpoint,
and a resume whose checkpoints are all damaged is refused rather than started again. Across
processes only process 0 writes and reads checkpoints (`vaco_jax.run.distributed`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import orbax.checkpoint as ocp

from vaco_jax.infra.orbax_options import this_process_only
from vaco_jax.infra import io, manifest, records

IDENTITY_FILE = "identity.json"
PARTIAL_SUFFIX = ".partial"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (full disk, ...); the previous ones are intact."""


def committed_steps(directory: str | os.PathLike) -> list[int]:
    """The steps of the checkpoints committed in `directory`, newest first (a `<step>.partial/`
    being written is not one)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((int(p.name) for p in directory.iterdir()
                   if _STEP.fullmatch(p.name) and p.is_dir() and not p.is_symlink()),
                  reverse=True)


_STEP = re.compile("[0-9]{1,18}")
"""A committed step's folder name: ASCII digits only (`str.isdigit` takes other scripts' digits
too), few enough for an exact integer."""


class Checkpoints:
    """The checkpoints of the run `identity` in `directory`, the newest `keep` kept."""

    def __init__(self, directory: str | os.PathLike, identity: str, keep: int = 2,
                 writer: bool = True):
        if keep < 1:
            raise ValueError(f"keep_checkpoints must be a positive integer, got {keep}")
        self.directory = Path(directory).absolute()
        if self.directory.is_symlink() or (self.directory.exists() and not self.directory.is_dir()):
            raise ValueError(f"cannot use {str(self.directory)!r}: it is "
                             f"{'a symbolic link' if self.directory.is_symlink() else 'a file'}, "
                             f"and vaco_jax keeps its checkpoints in a folder of the run's own; "
                             f"replace it by a folder, or start the run in another folder")
        self.identity, self.keep, self._writer = identity, keep, writer
        self._damage_found: dict[int, str | None] = {}
        # Across processes only process 0 saves and restores, NumPy trees (`vaco_jax.run.driver`).
        alone = this_process_only()
        self._checkpointer = ocp.Checkpointer(
            ocp.StandardCheckpointHandler(multiprocessing_options=alone),
            multiprocessing_options=alone)
        if writer and self.directory.is_dir():
            for partial in self.directory.glob(f"*{PARTIAL_SUFFIX}"):
                _remove(partial)

    def steps(self) -> list[int]:
        """The committed steps, newest first."""
        return committed_steps(self.directory)

    def save(self, step: int, tree: Any, before_commit: Callable[[], None] | None = None) -> None:
        """Writes `tree` as checkpoint `step`; `before_commit` runs once it is complete but not
        yet committed (a fault-injection point)."""
        if not self._writer:
            return
        final = self.directory / str(step)
        partial = self.directory / f"{step}{PARTIAL_SUFFIX}"
        try:
            _remove(partial)
            self._record({final.name: manifest.TREE, partial.name: manifest.TREE})
            self.directory.mkdir(parents=True, exist_ok=True)
            with _thread_tracebacks_silenced():
                self._checkpointer.save(partial / "tree", args=ocp.args.StandardSave(
                    _without_empty(tree)))
            io.write_json(partial / IDENTITY_FILE, {"run_identity": self.identity, "step": step,
                                                    "files": _manifest(partial / "tree")})
            if before_commit is not None:
                before_commit()
            _remove(final)  # the same step written again by a resumed run
            os.replace(partial, final)
        except Exception as error:
            with _thread_tracebacks_silenced():
                self._checkpointer.close()  # waits for the writer threads the error left running
            _remove(partial)
            self._forget([partial.name])
            kept = self.steps()
            raise CheckpointWriteError(
                f"could not write checkpoint {str(final)!r}: {_reason(error)}; "
                + (f"the previous checkpoint (step {kept[0]}) is intact, free some space and "
                   f"resume" if kept else "no checkpoint was kept")) from error
        self._forget([partial.name])
        for old in self.steps()[self.keep:]:
            shutil.rmtree(self.directory / str(old), ignore_errors=True)
            self._forget([str(old)])

    def _record(self, steps: dict[str, str]) -> None:
        """Records step folders in the run folder's manifest (`vaco_jax.infra.manifest`)."""
        manifest.extend(self.directory.parent,
                        {f"{self.directory.name}/{name}": kind for name, kind in steps.items()})

    def _forget(self, names: list[str]) -> None:
        """Drops removed step folders from the manifest; on a full disk the entries stay, which
        is harmless (an entry whose path is gone is skipped)."""
        with contextlib.suppress(OSError):
            manifest.forget(self.directory.parent, [f"{self.directory.name}/{n}" for n in names])

    def restore_latest(self, like: Any, warn: Callable[[str], None]) -> tuple[int, Any] | None:
        """The newest readable checkpoint as `(step, tree)` in the structure, shapes and dtypes
        of `like` (arrays), or None if there is none; a damaged one is skipped with a warning,
        one of another run refused, and so is a folder whose checkpoints are all damaged."""
        steps, damaged = self.steps(), []
        for index, step in enumerate(steps):
            path = self.directory / str(step)
            problem = self._damage(step)
            if problem is None:
                try:
                    saved = self._checkpointer.metadata(path / "tree").item_metadata
                    unlike = _layout_difference(_leaf_paths(saved),
                                                _leaf_paths(_without_empty(like)))
                    if unlike is None:
                        return step, self._restore(path / "tree", like)
                except Exception as error:  # Orbax/TensorStore raise many types for damaged files
                    problem = _first_line(error)
                else:  # Not damaged: written by a version whose training state differs.
                    raise ValueError(
                        f"cannot resume: checkpoint {str(path)!r} holds a training state laid "
                        f"out otherwise than this version of vaco_jax's ({unlike}); the version "
                        f"that wrote it (the run folder's config.json names it under "
                        f"provenance) can continue it, or start the run again with --overwrite")
            damaged.append(f"{str(path)!r} ({problem})")
            if index + 1 < len(steps):
                warn(f"skipping damaged checkpoint {str(path)!r} ({problem}); trying the "
                     f"previous one (step {steps[index + 1]})")
        if damaged:
            raise ValueError(self._none_usable(damaged))
        return None

    def check_usable(self) -> None:
        """Refuses (ValueError) a folder holding checkpoints none of which is intact, or one of
        another run, before anything is compiled; reads identities and file digests only."""
        damaged = []
        for step in self.steps():
            problem = self._damage(step)
            if problem is None:
                return
            damaged.append(f"{str(self.directory / str(step))!r} ({problem})")
        if damaged:
            raise ValueError(self._none_usable(damaged))

    def _none_usable(self, damaged: list[str]) -> str:
        return (f"cannot resume: no usable checkpoint in {str(self.directory)!r}, "
                f"{'every one is' if len(damaged) > 1 else 'the only one is'} damaged: "
                f"{'; '.join(damaged)}; nothing was removed: start the run again with "
                f"--overwrite, which removes them")

    def _damage(self, step: int) -> str | None:
        """Why checkpoint `step` is damaged (its identity unreadable, its files not those
        written), or None; one of another run is refused. Checked once per step."""
        if step not in self._damage_found:
            path = self.directory / str(step)
            linked = [name for name in (IDENTITY_FILE, "tree") if (path / name).is_symlink()]
            if linked:  # read through, it would restore another folder's arrays
                self._damage_found[step] = f"{linked[0]} is a symbolic link"
                return self._damage_found[step]
            try:
                identity = records.load_json(path / IDENTITY_FILE, records.CHECKPOINT_IDENTITY)
                owner = identity["run_identity"].value
                files = dict(identity["files"].table())
            except ValueError as error:
                self._damage_found[step] = f"{IDENTITY_FILE} unreadable: {_first_line(error)}"
                return self._damage_found[step]
            if owner != self.identity:
                raise ValueError(
                    f"cannot resume: checkpoint {str(path)!r} belongs to another run (identity "
                    f"{str(owner)[:40]!r}, this run is {self.identity}); start the run again "
                    f"with --overwrite")
            self._damage_found[step] = _first_mismatch(path / "tree", files)
        return self._damage_found[step]

    def _restore(self, path: Path, like: Any) -> Any:
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _without_empty(like))
        restored = self._checkpointer.restore(path, args=ocp.args.StandardRestore(abstract))
        return jax.tree.map(lambda empty, x: empty if x is None else x, like, restored)

    def close(self) -> None:
        self._checkpointer.close()


class _WriterThreadErrors(logging.Filter):
    """Drops the records of Orbax's writer threads that fail: the error reaches the caller of
    `save` too, which reports it in one line, and a thread that outlives the failed save would
    print its traceback after that line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR
                    and "_SignalingThread.run() raised an exception" in record.getMessage())


logging.getLogger("absl").addFilter(_WriterThreadErrors())


@contextlib.contextmanager
def _thread_tracebacks_silenced() -> Iterator[None]:
    """Within the block, the exceptions Orbax's and TensorStore's threads raise as a failed
    save unwinds ("Event loop is closed") print nothing: the save's own error is reported."""
    hooks = threading.excepthook, sys.unraisablehook
    threading.excepthook = sys.unraisablehook = lambda *_: None
    try:
        yield
    finally:
        threading.excepthook, sys.unraisablehook = hooks


def _remove(path: Path) -> None:
    """Removes a step folder vaco_jax writes; a link there is removed as a link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _reason(error: BaseException) -> str:
    """Why a write failed, short: a full disk says so, whatever layer raised it."""
    if "No space left on device" in str(error) or getattr(error, "errno", None) == errno.ENOSPC:
        return "No space left on device"
    return _first_line(error)


def _first_line(error: BaseException, limit: int = 240) -> str:
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}"
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _manifest(tree: Path) -> dict[str, list]:
    """`{relative path: [size, sha256]}` of every file under `tree`."""
    return {str(f.relative_to(tree)): [f.stat().st_size, _sha256(f)]
            for f in sorted(tree.rglob("*")) if f.is_file()}


def _first_mismatch(tree: Path, manifest: dict[str, list]) -> str | None:
    """What differs first between the files under `tree` and `manifest`, or None; a name
    outside `tree`, or reached through a link, is a difference too."""
    for name, entry in manifest.items():
        f = tree / name
        if (not isinstance(name, str) or name.startswith("/") or ".." in name.split("/")
                or not isinstance(entry, list) or len(entry) != 2):
            return f"{name!r} is no file of a checkpoint"
        size, digest = entry
        if any(p.is_symlink() for p in [f, *f.parents][:len(Path(name).parts)]):
            return f"{name} is a symbolic link"
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, {size} were written"
        if _sha256(f) != digest:
            return f"{name} differs from what was written"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _leaf_paths(tree: Any) -> set[str]:
    """The dotted paths of `tree`'s leaves (attribute names, dictionary keys, indices), as
    alike for a state and for the metadata Orbax saved of it."""
    return {jax.tree_util.keystr(path, simple=True, separator=".")
            for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _layout_difference(saved: set[str], expected: set[str]) -> str | None:
    """What differs between the leaf paths of a saved tree and of the tree expected, or None."""
    missing, unexpected = sorted(expected - saved), sorted(saved - expected)
    if not missing and not unexpected:
        return None
    parts = [f"{len(paths)} leaves {what}, e.g. {paths[0]}"
             for paths, what in ((missing, "missing"), (unexpected, "not expected")) if paths]
    return "; ".join(parts)


def _without_empty(tree: Any) -> Any:
    """`tree` with zero-size arrays (MJX states hold some) replaced by None: Orbax cannot save
    them, and they carry no data; `restore` puts them back from its `like` tree."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)
