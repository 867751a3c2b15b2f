"""What vaco_jax wrote in a folder, so that an overwrite removes exactly that.

A run, sweep or report folder keeps `.vaco_jax.manifest.json`: each path vaco_jax writes there,
recorded before it is written, with its kind:
- `file`: a file (and the temporaries of its interrupted atomic writes);
- `tree`: a folder vaco_jax writes whole (a checkpoint's step folder, recorded when saved and
  forgotten when rotated away);
- `folder`: a folder vaco_jax made to hold recorded paths (`checkpoint/`, a sweep's `runs/`),
  whose other contents are not vaco_jax's;
- `run`: a folder with a manifest of its own (a sweep's batch folder).
A file written into a folder that keeps a manifest is recorded there by `vaco_jax.infra.io`.
Anything else in the folder (a user's notes, their own `checkpoint/model.pt`) is *foreign*:
`remove_recorded` refuses to overwrite a folder holding a foreign path unless it is kept, and
refuses to keep a path vaco_jax wrote or is about to write.

A folder may come from someone else, so its manifest is untrusted input: an entry must be a
normalised relative path inside the folder (no `..`, no absolute path) or the manifest is
damaged, and nothing is removed through a symbolic link. A link the manifest records is removed
as a link; a recorded path reached through a link, or a recorded folder that is a link, stops
the overwrite before anything is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterator, Mapping, Sequence

from vaco_jax.infra import records
from vaco_jax.infra.lock import LOCK_FILE, folder_lock

MANIFEST_FILE = ".vaco_jax.manifest.json"
FILE, TREE, FOLDER, RUN = "file", "tree", "folder", "run"
KINDS = (FILE, TREE, FOLDER, RUN)
BOOKKEEPING = (MANIFEST_FILE, LOCK_FILE)
"""The files of a folder that are about the folder, not results: never foreign, never counted."""
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.\w+\.tmp")


class DamagedManifest(ValueError):
    """A manifest that cannot be read, or that names a path vaco_jax never writes."""

    def __init__(self, path: Path, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"cannot use {str(path)!r}: {problem}; it records what vaco_jax wrote "
                         f"in the folder, and nothing was removed: move the folder's results "
                         f"away by hand")


def recorded(folder: str | os.PathLike) -> dict[str, str] | None:
    """The folder's entries (relative path -> kind), or None if it keeps no manifest; a
    manifest that cannot be read, or names a path outside its folder, raises DamagedManifest."""
    path = Path(folder) / MANIFEST_FILE
    info = lstat(path)
    if info is None:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise DamagedManifest(path, f"it is {_file_type(info)}, not a file")
    try:
        entries = dict(records.load_json(path, records.MANIFEST)["entries"].table())
    except ValueError as error:
        raise DamagedManifest(path, str(error)) from None
    for key, kind in entries.items():
        problem = _entry_problem(key, kind)
        if problem is not None:
            raise DamagedManifest(path, f"its entry {_short(key)} {problem}, which vaco_jax "
                                        f"never writes")
    return entries


def _entry_problem(key: object, kind: object) -> str | None:
    """Why `key: kind` cannot be an entry vaco_jax wrote, or None."""
    if not isinstance(key, str) or not key:
        return "is not a path"
    if kind not in KINDS:
        return f"has the kind {_short(kind)} (not one of {', '.join(KINDS)})"
    if "\0" in key:
        return "holds a NUL character"
    try:
        os.fsencode(key)
    except UnicodeError:
        return "is not a file name this system can encode"
    if key.startswith("/"):
        return "is an absolute path, outside the folder"
    parts = key.split("/")
    if ".." in parts:
        return "climbs out of its folder through '..'"
    if "" in parts or "." in parts:
        return "is not a normalised path"
    return None


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _shown(name: str) -> str:
    """A file name as one line: as it is, or quoted and escaped where it holds a newline, a
    terminal escape or another unprintable character (a folder's names are untrusted)."""
    return name if name.isprintable() else repr(name)


def lstat(path: Path) -> os.stat_result | None:
    """`path`'s own status (a link's, not its target's), or None where there is no such path
    (a name too long for the file system is none either)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            return None
        raise


def _is_folder(path: Path) -> bool:
    """Whether `path` is a folder itself, not a link to one."""
    info = lstat(path)
    return info is not None and stat.S_ISDIR(info.st_mode)


def _file_type(info: os.stat_result) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(info.st_mode):
            return name
    return "not a regular file"


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
    """`record`, in a folder that keeps a readable manifest. A folder written before manifests
    is left without one (its files all count as foreign, rather than some of them), and a
    damaged manifest is left as it is: the run goes on, and an overwrite refuses the folder."""
    if _readable(folder) is not None:
        record(folder, entries)


def forget(folder: str | os.PathLike, keys: Sequence[str]) -> None:
    """Drops `keys` from the folder's manifest (paths vaco_jax has removed)."""
    current = _readable(folder)
    if current is not None and any(k in current for k in keys):
        _write(Path(folder), {k: v for k, v in current.items() if k not in keys})


def _readable(folder: str | os.PathLike) -> dict[str, str] | None:
    """The folder's entries, or None if it keeps no manifest or a damaged one."""
    try:
        return recorded(folder)
    except DamagedManifest:
        return None


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
    return list(_unkept(Path(folder), keep))


def _unkept(folder: Path, keep: Sequence[str]) -> Iterator[str]:
    kept = [PurePosixPath(k.strip("/")) for k in keep]
    return (p for p in _foreign(folder, PurePosixPath())
            if not any(PurePosixPath(p) == k or k in PurePosixPath(p).parents for k in kept))


def check_keep(keep: Sequence[str]) -> None:
    """Refuses (ValueError) a `--keep` path that is not a relative path inside the folder."""
    for kept in keep:
        parts = PurePosixPath(kept).parts
        if not kept or kept.startswith("/") or ".." in parts or "\0" in kept:
            raise ValueError(f"--keep {_shown(kept)}: a kept path is relative to the output folder and "
                             f"lies inside it (for example notes.txt or notes/)")


def remove_recorded(folder: str | os.PathLike, keep: Sequence[str] = (),
                    writes: Sequence[str] = ()) -> None:
    """Removes what the manifest records, after refusing (FileExistsError, naming the first
    one) a folder holding a foreign path that is not kept, (ValueError) a `keep` path that
    vaco_jax wrote or writes (`writes`: glob patterns of what the writer about to start writes)
    or that lies outside the folder, and (ValueError) a damaged manifest or a recorded path that
    lies behind a symbolic link. Nothing is removed unless every batch folder inside can be
    locked and every recorded path checked."""
    folder = Path(folder)
    check_keep(keep)
    for kept in keep:
        key = PurePosixPath(kept.strip("/")).as_posix()
        if _is_recorded(folder, PurePosixPath(key)) or any(
                _matches(k, pattern) for k in [key, *_parents(key)] for pattern in writes):
            raise ValueError(f"--keep {_shown(kept)}: vaco_jax writes {key!r} there, so it cannot be "
                             f"kept; move it out of the folder to keep it")
    removals = _removals(folder)  # every manifest read and every path checked
    with contextlib.ExitStack() as locks:
        for nested in nested_runs(folder):
            locks.enter_context(folder_lock(nested))
        stranger = next(_unkept(folder, keep), None)
        if stranger is not None:
            none = ("" if recorded(folder) is not None else
                    "; the folder keeps no record of what vaco_jax wrote there (it was written "
                    "by an earlier version, or not by vaco_jax)")
            raise FileExistsError(
                f"cannot overwrite {str(folder)!r}: it holds {stranger!r}, which vaco_jax did "
                f"not write{none}; move it away, or keep it with --keep {_shown(stranger)}")
        for removal in removals:
            removal()


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
    """The nested run folders of `root`, at every depth (a link is none)."""
    for key, kind in (recorded(root) or {}).items():
        if kind == RUN and _is_folder(root / key) and not _through_link(root, key):
            yield root / key
            yield from nested_runs(root / key)


def refuse_links(root: str | os.PathLike, places: Sequence[str]) -> None:
    """Refuses (ValueError) a folder where one of the `places` vaco_jax writes into (relative
    folders), or a folder on the way there, is a symbolic link: it would write outside."""
    root = Path(root)
    for place in places:
        link = _through_link(root, place, last=True)
        if link is not None:
            raise ValueError(_link_refusal(root, link))


def _link_refusal(root: Path, link: str) -> str:
    return (f"cannot use {str(root)!r}: {link!r} is a symbolic link, and vaco_jax writes and "
            f"removes only inside its folder; nothing was removed: replace the link by a "
            f"folder, or move the results away by hand")


def _through_link(root: Path, key: str, last: bool = False) -> str | None:
    """The first folder of `key` (relative to `root`; its last part too if `last`) that is a
    link, or None."""
    parts = key.split("/")
    for depth in range(1, len(parts) + last):
        head = "/".join(parts[:depth])
        info = lstat(root / head)
        if info is None:
            return None
        if stat.S_ISLNK(info.st_mode):
            return head
    return None


def _removals(root: Path, top: Path | None = None, shown: str = "") -> list:
    """The removals that empty `root` of what its manifest records, nested run folders through
    their own manifests, in order, each a call; refuses (ValueError) a damaged manifest and any
    recorded path behind a link before anything is removed."""
    entries = recorded(root) or {}
    removals = []
    for key, kind in sorted(entries.items(), key=lambda item: -len(item[0])):
        link = _through_link(root, key, last=kind in (FOLDER, RUN))
        if link is not None:
            raise ValueError(_link_refusal(top or root, shown + link))
        target = root / key
        if kind in (FILE, TREE):
            removals.append(lambda target=target: _remove_path(target))
        elif kind == RUN and _is_folder(target):
            removals.extend(_removals(target, top or root, f"{shown}{key}/"))
            removals.append(lambda target=target: (target / LOCK_FILE).unlink(missing_ok=True))
        removals.append(lambda target=target: _remove_empty_parents(root, target))
    removals.append(lambda: (root / MANIFEST_FILE).unlink(missing_ok=True))
    return removals


def _remove_path(target: Path) -> None:
    """Removes a recorded file or tree, and the temporaries of its interrupted writes; a link
    is removed as a link."""
    if _is_folder(target):
        shutil.rmtree(target)  # removes the links inside as links
    elif lstat(target) is not None:
        target.unlink()
    for temporary in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        if not temporary.is_dir() or temporary.is_symlink():
            temporary.unlink()


def _foreign(root: Path, relative: PurePosixPath) -> Iterator[str]:
    entries = recorded(root) or {}
    directory = root / relative
    for child in sorted(directory.iterdir()):
        name = relative / child.name
        key = name.as_posix()
        kind = entries.get(key)
        if kind in (FILE, TREE) or (not relative.parts and _is_bookkeeping(child.name)):
            continue
        is_folder = child.is_dir() and not child.is_symlink()
        if kind is None and not is_folder and _is_temporary(entries, name):
            continue
        if kind == RUN and is_folder:
            yield from (f"{key}/{p}" for p in _foreign(child, PurePosixPath()))
        elif is_folder and (kind == FOLDER or (
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


def _remove_empty_parents(root: Path, target: Path) -> None:
    """Removes `target` if it is an empty folder, then each emptied parent below `root`."""
    for folder in [target, *target.parents]:
        if folder == root or root not in folder.parents:
            return
        if not _is_folder(folder) or any(folder.iterdir()):
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
