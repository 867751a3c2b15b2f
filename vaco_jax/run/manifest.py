"""What vaco_jax wrote in a folder, so that an overwrite removes exactly that.

A run, sweep or report folder keeps `.vaco_jax.manifest.json`: each path vaco_jax writes there,
recorded before it is written, with its kind:
- `file`: a file (and the temporaries of its interrupted atomic writes);
- `tree`: a folder vaco_jax writes whole (a checkpoint's step folder, recorded when saved and
  forgotten when rotated away);
- `folder`: a folder vaco_jax made to hold recorded paths (`checkpoint/`, a sweep's `runs/`),
  whose other contents are not vaco_jax's;
- `run`: a folder with a manifest of its own (a sweep's batch folder).
A file written into a folder that keeps a manifest is recorded there by `vaco_jax.run.io`.
Anything else in the folder (a user's notes, their own `checkpoint/model.pt`) is *foreign*:
`remove_recorded` refuses to overwrite a folder holding a foreign path unless it is kept, and
refuses to keep a path vaco_jax wrote or is about to write.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import json
import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterator, Mapping, Sequence

from vaco_jax.run.lock import LOCK_FILE, folder_lock

MANIFEST_FILE = ".vaco_jax.manifest.json"
FILE, TREE, FOLDER, RUN = "file", "tree", "folder", "run"
KINDS = (FILE, TREE, FOLDER, RUN)
BOOKKEEPING = (MANIFEST_FILE, LOCK_FILE)
"""The files of a folder that are about the folder, not results: never foreign, never counted."""
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.\w+\.tmp")


def recorded(folder: str | os.PathLike) -> dict[str, str] | None:
    """The folder's entries (relative path -> kind), or None if it keeps no manifest."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"cannot read {str(path)!r} ({type(error).__name__}: {error}); it "
                         f"records what vaco_jax wrote in the folder: move the folder's "
                         f"results away by hand") from None
    return dict(entries)


def record(folder: str | os.PathLike, entries: Mapping[str, str]) -> None:
    """Adds `entries` to the folder's manifest, creating it: called before they are written."""
    unknown = {kind for kind in entries.values() if kind not in KINDS}
    if unknown:
        raise ValueError(f"manifest kinds must be one of {', '.join(KINDS)}, got {unknown}")
    folder = Path(folder)
    current = recorded(folder)
    if current is not None and all(current.get(k) == v for k, v in entries.items()):
        return
    _write(folder, {**(current or {}), **entries})


def extend(folder: str | os.PathLike, entries: Mapping[str, str]) -> None:
    """`record`, in a folder that keeps a manifest; a folder written before manifests is left
    without one (its files all count as foreign, rather than some of them)."""
    if recorded(folder) is not None:
        record(folder, entries)


def forget(folder: str | os.PathLike, keys: Sequence[str]) -> None:
    """Drops `keys` from the folder's manifest (paths vaco_jax has removed)."""
    current = recorded(folder)
    if current is not None and any(k in current for k in keys):
        _write(Path(folder), {k: v for k, v in current.items() if k not in keys})


def record_written(path: str | os.PathLike) -> None:
    """Records the file `path` in its folder's manifest, if the folder keeps one."""
    path = Path(path)
    if path.name not in BOOKKEEPING:
        extend(path.parent, {path.name: FILE})


def has_results(folder: str | os.PathLike) -> bool:
    """Whether the folder holds anything but its bookkeeping files."""
    folder = Path(folder)
    return folder.is_dir() and any(not _is_bookkeeping(p.name) for p in folder.iterdir())


def foreign(folder: str | os.PathLike, keep: Sequence[str] = ()) -> list[str]:
    """The paths in `folder` (relative, sorted) that vaco_jax did not write, but those at or
    under a `keep` path."""
    kept = [PurePosixPath(k.strip("/")) for k in keep]
    return [p for p in _foreign(Path(folder), PurePosixPath())
            if not any(PurePosixPath(p) == k or k in PurePosixPath(p).parents for k in kept)]


def remove_recorded(folder: str | os.PathLike, keep: Sequence[str] = (),
                    writes: Sequence[str] = ()) -> None:
    """Removes what the manifest records, after refusing (FileExistsError, naming the first
    one) a folder holding a foreign path that is not kept, and (ValueError) a `keep` path that
    vaco_jax wrote or writes (`writes`: glob patterns of what the writer about to start writes).
    Nothing is removed unless every batch folder inside can be locked."""
    folder = Path(folder)
    for kept in keep:
        key = PurePosixPath(kept.strip("/")).as_posix()
        if _is_recorded(folder, PurePosixPath(key)) or any(
                _matches(k, pattern) for k in [key, *_parents(key)] for pattern in writes):
            raise ValueError(f"--keep {kept}: vaco_jax writes {key!r} there, so it cannot be "
                             f"kept; move it out of the folder to keep it")
    with contextlib.ExitStack() as locks:
        for nested in nested_runs(folder):
            locks.enter_context(folder_lock(nested))
        strangers = foreign(folder, keep)
        if strangers:
            none = ("" if recorded(folder) is not None else
                    "; the folder keeps no record of what vaco_jax wrote there (it was written "
                    "by an earlier version, or not by vaco_jax)")
            raise FileExistsError(
                f"cannot overwrite {str(folder)!r}: it holds {strangers[0]!r}, which vaco_jax did "
                f"not write{none}; move it away, or keep it with --keep {strangers[0]}")
        _remove(folder)


def _matches(key: str, pattern: str) -> bool:
    """Whether `key` matches the glob `pattern` component by component (`*` stops at `/`)."""
    keys, patterns = PurePosixPath(key).parts, PurePosixPath(pattern).parts
    return len(keys) == len(patterns) and all(
        fnmatch.fnmatchcase(k, p) for k, p in zip(keys, patterns))


def _parents(key: str) -> list[str]:
    return [p.as_posix() for p in PurePosixPath(key).parents if p.parts]


def _is_recorded(root: Path, key: PurePosixPath) -> bool:
    """Whether `key` is, lies in or holds a path the manifests of `root` record as vaco_jax's."""
    entries = recorded(root) or {}
    if any(k.startswith(key.as_posix() + "/") for k in entries):
        return True
    for depth in range(1, len(key.parts) + 1):
        head = PurePosixPath(*key.parts[:depth]).as_posix()
        kind = entries.get(head)
        if kind in (FILE, TREE) or (kind is not None and depth == len(key.parts)):
            return True
        if kind == RUN and depth < len(key.parts):
            return _is_recorded(root / head, PurePosixPath(*key.parts[depth:]))
    return False


def nested_runs(root: Path) -> Iterator[Path]:
    """The nested run folders of `root`, at every depth."""
    for key, kind in (recorded(root) or {}).items():
        if kind == RUN and (root / key).is_dir():
            yield root / key
            yield from nested_runs(root / key)


def _foreign(root: Path, relative: PurePosixPath) -> Iterator[str]:
    entries = recorded(root) or {}
    directory = root / relative
    for child in sorted(directory.iterdir()):
        name = relative / child.name
        key = name.as_posix()
        kind = entries.get(key)
        if kind in (FILE, TREE) or (not relative.parts and _is_bookkeeping(child.name)):
            continue
        if kind is None and _is_temporary(entries, name):
            continue
        if kind == RUN and child.is_dir():
            yield from (f"{key}/{p}" for p in _foreign(child, PurePosixPath()))
        elif child.is_dir() and (kind == FOLDER or (
                kind is None and any(k.startswith(key + "/") for k in entries))):
            yield from _foreign(root, name)
        else:
            yield from _all_files(child, key)


def _is_bookkeeping(name: str) -> bool:
    return name in BOOKKEEPING or (name.startswith(MANIFEST_FILE) and name.endswith(".tmp"))


def _is_temporary(entries: Mapping[str, str], name: PurePosixPath) -> bool:
    """Whether `name` is a temporary of an atomic write of a recorded file (`.NAME.XXXX.tmp`)."""
    match = _TEMPORARY.fullmatch(name.name)
    return match is not None and entries.get((name.parent / match["name"]).as_posix()) == FILE


def _all_files(path: Path, key: str) -> Iterator[str]:
    """`key` for a file or empty folder, else the keys of every file under the folder."""
    if path.is_dir() and not path.is_symlink():
        children = sorted(path.iterdir())
        if not children:
            yield key
        for child in children:
            yield from _all_files(child, f"{key}/{child.name}")
    else:
        yield key


def _remove(root: Path) -> None:
    """Removes every recorded path of `root` (nested run folders through their own manifest),
    the folders that this leaves empty, and the manifest."""
    entries = recorded(root) or {}
    for key, kind in sorted(entries.items(), key=lambda item: -len(item[0])):
        target = root / key
        if kind in (FILE, TREE):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            for temporary in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
                temporary.unlink()
        elif kind == RUN and target.is_dir():
            _remove(target)
            (target / LOCK_FILE).unlink(missing_ok=True)  # held by this process, released next
        _remove_empty_parents(root, target)
    (root / MANIFEST_FILE).unlink(missing_ok=True)


def _remove_empty_parents(root: Path, target: Path) -> None:
    """Removes `target` if it is an empty folder, then each emptied parent below `root`."""
    for folder in [target, *target.parents]:
        if folder == root or root not in folder.parents:
            return
        if not folder.is_dir() or any(folder.iterdir()):
            return
        folder.rmdir()


def _write(folder: Path, entries: Mapping[str, str]) -> None:
    """Writes the manifest atomically (a temporary renamed into place)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f"{MANIFEST_FILE}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"written_by": "vaco_jax", "entries": dict(sorted(entries.items()))}, f,
                      indent=1)
        os.chmod(temporary, 0o644)
        os.replace(temporary, folder / MANIFEST_FILE)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
