"""Hostile folders: a folder vaco_jax did not just write is untrusted input, and
nothing it contains may make vaco_jax delete or write outside it.

The property tests build run and sweep folders in a sandbox beside `outside/` (victim files and
folders, one of them laid out as a batch folder with a manifest of its own, one holding a real
checkpoint) and `far.txt` one level further up. The folders hold damaged manifests (paths that
climb out through `..`, absolute paths, names that are not normalised, hold NUL, cannot be
encoded or are very long, kinds that are not strings or unknown, entries that are a list, text
that is not JSON), symbolic links at every level (`checkpoint/`, a step folder, a recorded file,
a folder a recorded path lies in, a sweep's `runs/` and batch folder, a temporary), recorded
files that are hard links, damaged checkpoints, lock files that are links, pipes, folders or hard
links, JSON nested too deep for Python's parser, and foreign files named to forge a line of a
message. Every folder-level operation (an overwrite with and without `--keep`, taking and testing
the lock, resuming from and saving checkpoints, a sweep's overwrite, the part checks of `report
--parts`) must leave the sandbox's surroundings exactly as they were (names, contents, modes,
modification times, link targets), raise nothing but a ValueError, FileExistsError or OSError of
one line of printable characters, never block, and change nothing in the folder when it refuses.
The scenarios of the issue then run through the command line on a run trained once (and, marked
slow, `report --parts` on a sweep of one run).

`HOSTILE_EXAMPLES=1000` runs more examples of the property tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine_configs import TINY_SWEEP
from folder_snapshots import (bounded, contents, digest, finished_sweep, refused, snapshot,
                              surroundings_of)
from vaco_jax import cli
from vaco_jax.report.runs_table import REPORT_WRITES
from vaco_jax.infra import io, manifest, run_folder
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.infra.lock import LOCK_FILE, folder_lock, refuse_if_in_use

MANIFEST = manifest.MANIFEST_FILE
KINDS = ("file", "tree", "folder", "run")
SBX = "{sbx}"  # the sandbox folder (holding `outside/` and the folder under test `run/`)
PROPERTY = settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 60)), deadline=None,
                    database=None)

# ---------------------------------------------------------------- observing a sandbox


def plain_locks(shot: dict[str, tuple]) -> set[str]:
    return {rel for rel, value in shot.items()
            if rel.split("/")[-1] == LOCK_FILE and value[0] == stat.S_IFREG}


LOCK_TARGET = "precious: the file a hostile lock file links to"
VICTIMS = {
    "far.txt": "far away, two levels above the folder",
    "sbx/outside/file0.txt": "victim 0",
    "sbx/outside/file1.txt": "victim 1",
    "sbx/outside/lock_target.txt": LOCK_TARGET,
    "sbx/outside/dir0/a.txt": "victim a",
    "sbx/outside/dir0/sub/b.txt": "victim b",
    "sbx/outside/ckpt/model.pt": "someone's model",
    "sbx/outside/ckpt/3.partial/junk": "not vaco_jax's",
    "sbx/outside/fakeruns/g-0/status.json": "{}",
    "sbx/outside/fakeruns/g-0/checkpoint/1/x.bin": "someone's step",
    "sbx/outside/fakeruns/g-0/" + MANIFEST: json.dumps({"written_by": "vaco_jax", "entries": {
        "status.json": "file", "checkpoint": "folder", "checkpoint/1": "tree"}}),
}


class Sandbox:
    """`base/far.txt`, `base/sbx/outside/...` (the victims) and `base/sbx/run` (the folder under
    test, made by its builder)."""

    def __init__(self, base: Path, template: Path):
        self.base, self.sbx = base, base / "sbx"
        self.outside, self.run = self.sbx / "outside", self.sbx / "run"
        for rel, text in VICTIMS.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
        shutil.copytree(template, self.outside / "ckpt" / "1")  # a real checkpoint, outside
        self.outside.joinpath("dir0", "sub").chmod(0o750)

    def fill(self, text: str) -> str:
        return expand(text).replace(SBX, str(self.sbx))

    def surroundings(self) -> dict[str, tuple]:
        """Everything in the sandbox but the folder under test (and the modification times of
        the two folders above it, which hold its name)."""
        shot = snapshot(self.base, skip=lambda rel: rel == "sbx/run" or rel.startswith("sbx/run/"))
        shot[""], shot["sbx"] = shot[""][:2], shot["sbx"][:2]
        return shot


FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
"""A memory file system where there is one: hundreds of sandboxes are made and removed."""


@contextlib.contextmanager
def sandbox(template: Path) -> Iterator[Sandbox]:
    """A fresh sandbox per example (function-scoped fixtures are shared by a test's examples),
    removed afterwards without following links."""
    base = Path(tempfile.mkdtemp(prefix="hostile-", dir=FAST_TMP))
    try:
        yield Sandbox(base, template)
    finally:
        shutil.rmtree(base)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A real checkpoint step folder of the run `run-1` ({"x": zeros(2)} at step 1)."""
    folder = tmp_path_factory.mktemp("template") / "checkpoint"
    checkpoints = Checkpoints(folder, "run-1", keep=2)
    checkpoints.save(1, {"x": jnp.zeros(2, jnp.float32)})
    checkpoints.close()
    return folder / "1"


def attempt(operation: Callable[[], Any]) -> BaseException | None:
    """Runs `operation`: its refusal (ValueError, OSError) in one line of printable characters
    (a name from the folder may not forge a line, nor hold a terminal escape code), or None. Any
    other exception, and blocking, fails the test."""
    try:
        with bounded():
            operation()
    except (ValueError, OSError) as error:
        message = str(error)
        assert len(message.strip().splitlines()) == 1 and message.isprintable(), \
            f"{type(error).__name__} not one line of plain characters: {message!r}"
        return error
    return None


# ---------------------------------------------------------------- what a hostile folder holds


@dataclass(frozen=True)
class Entry:
    """A manifest entry (`{sbx}` stands for the sandbox's path); `create`: a file is written
    there before the operation."""
    key: Any
    kind: Any
    create: bool = False


def expand(key: Any) -> Any:
    """`key` with the short names of long names (`LONG`) replaced by them."""
    if isinstance(key, str):
        for short, name in LONG.items():
            key = key.replace(short, name)
    return key


def entry_damaged(key: Any, kind: Any) -> bool:
    """Whether `key: kind` is no entry vaco_jax writes (the issue's definition)."""
    key = expand(key)
    if isinstance(key, str):
        key = key.replace(SBX, "/sandbox")  # an absolute path
    if not isinstance(key, str) or not key or "\0" in key:
        return True
    if not isinstance(kind, str) or kind not in KINDS:
        return True
    try:
        os.fsencode(key)
    except UnicodeError:
        return True
    return key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/"))


def too_long(key: Any) -> bool:
    key = expand(key)
    return isinstance(key, str) and (len(key.encode("utf-8", "surrogatepass")) > 4096 or any(
        len(p.encode("utf-8", "surrogatepass")) > 255 for p in key.split("/")))


# Every path stays inside the sandbox's base folder (run/.. is sbx, run/../.. is base).
CLIMBING = ["../outside/file0.txt", "../outside/dir0", "../outside", "../outside/ckpt",
            "a/../../outside/file1.txt", "checkpoint/../../outside/dir0", "../../far.txt", "..",
            "../..", "./../outside/file0.txt", "runs/../../outside/fakeruns",
            "status.json/../../outside/file1.txt", "../outside/fakeruns/g-0"]
ABSOLUTE = [f"{SBX}/outside/file0.txt", f"{SBX}/outside/dir0", f"{SBX}/outside",
            f"/{SBX}/outside/file1.txt", f"{SBX}/outside/fakeruns/g-0", f"{SBX}/run/status.json",
            f"{SBX}/run", f"{SBX}/../far.txt"]
UNNORMALISED = ["./status.json", "status.json/", "checkpoint//1", "", ".", "checkpoint/.",
                "checkpoint/1/", "./", "metrics.csv/."]
ODD = ["a\0b", "../outside/file0.txt\0", "\ud800", "u/\udfff", "status.json\0../outside"]
LONG = {"<300 bytes>": "l" * 300, "<400 bytes>": "é" * 200,
        "<5000 bytes>": "/".join(["d" * 250] * 20), "<4200 bytes up>": "../" * 1400 + "nowhere"}
"""Names too long for the file system, by the short names hypothesis prints."""
BAD_KINDS = [1, None, True, [], {}, 1.5, float("nan"), "File", "dir", "", "tree ", "run\n",
             "fil\0e"]
NAME_LETTERS = list("abcXYZ09_-. éßΩжü漢\n\t")
WEIRD_PAIRS = [[1, "file"], [None, "file"], ["a", "file", "x"], "ab", [["x"], "file"],
               ["config.json"], [True, "tree"]]
DEEP = "[" * 100_000  # JSON nested too deep for Python's parser
INVALID_TEXTS = ["", "{", "null", "[]", '"entries"', '{"entries": null}',
                 '{"entries": "config.json"}', '{"entries": 5}', '{"written_by": "vaco_jax"}',
                 '{"entries": {"config.json": "file"}', '{"entries": {"config.json": NaN}}',
                 "<deep>", b"\xff\xfe{}"]

names = st.builds(lambda head, tail: "u" + head + ("/v" + tail if tail is not None else ""),
                  st.text(st.sampled_from(NAME_LETTERS), max_size=10),
                  st.none() | st.text(st.sampled_from(NAME_LETTERS), max_size=6)) \
    | st.just("\udcff")  # a name that is no UTF-8, as a Linux file name may be
hostile_keys = (st.sampled_from(CLIMBING) | st.sampled_from(ABSOLUTE)
                | st.sampled_from(UNNORMALISED) | st.sampled_from(ODD)
                | st.sampled_from(sorted(LONG)))
entries = (st.builds(Entry, hostile_keys, st.sampled_from(KINDS))
           | st.builds(Entry, names, st.sampled_from(BAD_KINDS))
           | st.builds(Entry, names, st.sampled_from(["file", "tree"]), st.booleans()))


@dataclass(frozen=True)
class Manifest:
    """How a folder's manifest is written: `dict` (as vaco_jax does, with `entries` added),
    `pairs` (entries as a list of pairs, and `weird` items: a form vaco_jax never writes, so
    damaged), `text` (not a manifest), `link` (a link to an outside manifest), `folder`, or
    `none`."""
    form: str = "dict"
    entries: tuple[Entry, ...] = ()
    weird: tuple = ()
    text: Any = ""

    def damaged(self) -> bool:
        return self.form in ("text", "link", "folder", "pairs") or (
            self.form == "dict" and (
                bool(self.weird) or any(entry_damaged(e.key, e.kind) for e in self.entries)))

    def readable(self) -> bool:
        return self.form == "dict" and not self.damaged()

    def long(self) -> bool:
        return any(too_long(e.key) for e in self.entries)


def _unique_heads(items: list[Entry]) -> tuple[Entry, ...]:
    """The entries, one per first path component (a file and a folder cannot share a name)."""
    seen, kept = set(), []
    for item in items:
        head = item.key.split("/")[0] if isinstance(item.key, str) else repr(item.key)
        if head not in seen:
            seen.add(head)
            kept.append(item)
    return tuple(kept)


manifests = st.one_of(
    st.builds(Manifest, st.just("dict"), st.lists(entries, max_size=3).map(_unique_heads)),
    st.builds(Manifest, st.just("pairs"), st.lists(entries, max_size=3).map(_unique_heads),
              st.lists(st.sampled_from(WEIRD_PAIRS), max_size=1).map(tuple)),
    st.builds(Manifest, st.just("text"), text=st.sampled_from(INVALID_TEXTS)),
    st.sampled_from([Manifest("link"), Manifest("folder"), Manifest("none")]),
)

LOCKS = ["none", "file", "deep_record", "symlink_file", "symlink_abs", "symlink_dir", "dangling",
         "fifo", "dir", "hardlink"]
HOSTILE_LOCKS = set(LOCKS) - {"none", "file", "deep_record"}
"""Lock files vaco_jax must refuse (the others are plain files: taken over, whatever they say)."""


def write_lock(box: Sandbox, folder: Path, lock: str) -> None:
    """The folder's lock file as `lock` says: absent, a plain file left by a process that ended,
    or something vaco_jax must not open or write."""
    path = folder / LOCK_FILE
    up = os.path.relpath(box.outside, folder)
    if lock == "file":
        path.write_text(json.dumps({"pid": 2**22 + 17, "host": "elsewhere", "command": "x\ny",
                                    "since": "then"}))
    elif lock == "deep_record":
        path.write_text(DEEP)
    elif lock == "symlink_file":
        path.symlink_to(f"{up}/lock_target.txt")
    elif lock == "symlink_abs":
        path.symlink_to(box.outside / "lock_target.txt")
    elif lock == "symlink_dir":
        path.symlink_to(f"{up}/dir0")
    elif lock == "dangling":  # opening it with O_CREAT would create the target
        path.symlink_to(f"{up}/new_lock")
    elif lock == "fifo":
        os.mkfifo(path)
    elif lock == "dir":
        path.mkdir()
        (path / "inside.txt").write_text("a folder where the lock file should be")
    elif lock == "hardlink":
        os.link(box.outside / "lock_target.txt", path)


def write_manifest(box: Sandbox, folder: Path, spec: Manifest, fixed: dict[str, str]) -> None:
    """The folder's manifest: `fixed` (what vaco_jax wrote) and `spec`'s entries, in its form."""
    path = folder / MANIFEST
    pairs = [[box.fill(e.key) if isinstance(e.key, str) else e.key, e.kind]
             for e in spec.entries]
    if spec.form == "dict":
        entries: Any = {**fixed, **dict((k, v) for k, v in pairs)}
    else:
        entries = [*map(list, fixed.items()), *pairs, *spec.weird]
    if spec.form in ("dict", "pairs"):
        path.write_text(json.dumps({"written_by": "vaco_jax", "entries": entries}))
    elif spec.form == "text":
        text = DEEP if spec.text == "<deep>" else spec.text
        (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    elif spec.form == "link":
        path.symlink_to(Path(os.path.relpath(box.outside, folder), "fakeruns", "g-0", MANIFEST))
    elif spec.form == "folder":
        path.mkdir()
    for e in spec.entries:
        if e.create and isinstance(e.key, str) and not entry_damaged(e.key, e.kind) \
                and not too_long(e.key):
            (folder / e.key).parent.mkdir(parents=True, exist_ok=True)
            (folder / e.key).write_text("written by vaco_jax")


# ---------------------------------------------------------------- run folders

CHECKPOINTS = ["none", "real", "damaged_identity", "deep_identity", "truncated", "escaping",
               "other_run", "dir_link", "step_link", "tree_link", "identity_link", "partial_link",
               "rotation", "same_step_link", "file"]
ALL_DAMAGED = {"damaged_identity", "deep_identity", "truncated", "escaping"}
LINKS = ["status", "status_hardlink", "temporary_link", "config_abs", "metrics_dir",
         "tree_link", "through", "deep_through", "folder_link", "run_link", "foreign_link"]
REFUSED_LINKS = {"through", "deep_through", "folder_link", "run_link"}
"""Recorded paths reached through a link, and recorded folders that are links: refused."""


@dataclass(frozen=True)
class RunSpec:
    manifest: Manifest = Manifest()
    checkpoint: str = "real"
    links: tuple[str, ...] = ()
    lock: str = "none"
    foreign: str | None = None  # the name of a file vaco_jax did not write

    def value_error(self) -> bool:
        """Whether an overwrite must refuse with a ValueError (whatever else it holds)."""
        recorded = self.manifest.form in ("dict", "pairs")
        return (self.lock in HOSTILE_LOCKS or self.manifest.damaged() or recorded and (
            bool(REFUSED_LINKS.intersection(self.links)) or self.checkpoint == "dir_link"))

    def clean(self) -> bool:
        """Whether an overwrite must succeed and leave no file in the folder."""
        return (self.manifest.readable() and not self.manifest.long() and not self.value_error()
                and not self.foreign and self.checkpoint != "file"
                and "foreign_link" not in self.links)


def _copy_step(template: Path, to: Path) -> None:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template, to)


def _rewrite_identity(step: Path, change: Callable[[dict], None]) -> None:
    identity = json.loads((step / "identity.json").read_text())
    change(identity)
    (step / "identity.json").write_text(json.dumps(identity))


def build_checkpoint(box: Sandbox, folder: Path, variant: str, template: Path) -> dict[str, str]:
    """`folder/checkpoint` as `variant` says; the manifest entries vaco_jax would have made."""
    ckpt = folder / "checkpoint"
    step = ckpt / "1"
    recorded = {"checkpoint/1": "tree"}
    if variant == "none":
        return {}
    if variant == "file":
        ckpt.write_text("not a folder")
        return {}
    if variant == "dir_link":
        ckpt.symlink_to(os.path.relpath(box.outside / "ckpt", folder))
        return recorded
    if variant == "step_link":
        ckpt.mkdir()
        step.symlink_to(os.path.relpath(box.outside / "ckpt" / "1", ckpt))
        return recorded
    _copy_step(template, step)
    if variant == "damaged_identity":
        (step / "identity.json").write_text("{")
    elif variant == "deep_identity":
        (step / "identity.json").write_text(DEEP)
    elif variant == "truncated":
        largest = max((p for p in (step / "tree").rglob("*") if p.is_file()),
                      key=lambda p: p.stat().st_size)
        largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])
    elif variant == "escaping":  # its files table names a file outside, with that file's digest
        victim = box.outside / "file0.txt"
        _rewrite_identity(step, lambda i: i.update(files={
            "../../../outside/file0.txt": [victim.stat().st_size, digest(victim)]}))
    elif variant == "other_run":
        _rewrite_identity(step, lambda i: i.update(run_identity="run-2"))
    elif variant == "tree_link":
        shutil.rmtree(step / "tree")
        (step / "tree").symlink_to(box.outside / "ckpt" / "1" / "tree")
    elif variant == "identity_link":
        (step / "identity.json").unlink()
        (step / "identity.json").symlink_to(box.outside / "ckpt" / "1" / "identity.json")
    elif variant == "partial_link":
        (ckpt / "2.partial").symlink_to(os.path.relpath(box.outside / "dir0", ckpt))
        recorded["checkpoint/2.partial"] = "tree"
    elif variant == "same_step_link":  # the step a resumed run saves again is a link
        (ckpt / "9").symlink_to(os.path.relpath(box.outside / "ckpt" / "1", ckpt))
        recorded["checkpoint/9"] = "tree"
    elif variant == "rotation":  # two real steps, and a linked one that is no checkpoint
        _copy_step(template, ckpt / "2")
        (ckpt / "0").symlink_to(os.path.relpath(box.outside / "ckpt" / "1", ckpt))
        recorded.update({"checkpoint/2": "tree", "checkpoint/0": "tree"})
    return recorded


def build_run(box: Sandbox, spec: RunSpec, template: Path) -> Path:
    """A run folder as `vaco-jax train` writes it, made hostile as `spec` says."""
    run = box.run
    run.mkdir()
    fixed = dict(run_folder.RUN_FILES)
    for name in ("config.json", "metrics.csv", "metrics.parquet", "status.json"):
        (run / name).write_text(f"{name} of the run")
    fixed.update(build_checkpoint(box, run, spec.checkpoint, template))
    up = os.path.relpath(box.outside, run)
    for link in spec.links:
        if link == "status":  # a recorded file that is a link to an outside file
            (run / "status.json").unlink()
            (run / "status.json").symlink_to(f"{up}/file0.txt")
        elif link == "status_hardlink":  # a recorded file that is another name of an outside one
            (run / "status.json").unlink()
            os.link(box.outside / "file1.txt", run / "status.json")
        elif link == "temporary_link":  # the temporary of an interrupted write, a link
            (run / ".metrics.csv.x1y2.tmp").symlink_to(f"{up}/file0.txt")
        elif link == "config_abs":
            (run / "config.json").unlink()
            (run / "config.json").symlink_to(box.outside / "file1.txt")
        elif link == "metrics_dir":  # a recorded file that is a link to an outside folder
            (run / "metrics.csv").unlink()
            (run / "metrics.csv").symlink_to(f"{up}/dir0")
        elif link == "tree_link":  # a recorded tree that is a link
            (run / "plots").symlink_to(f"{up}/dir0")
            fixed["plots"] = "tree"
        elif link == "through":  # a recorded file reached through a link
            (run / "link").symlink_to(f"{up}/dir0")
            fixed["link/a.txt"] = "file"
        elif link == "deep_through":
            (run / "deep").mkdir()
            (run / "deep" / "er").symlink_to(box.outside / "dir0" / "sub")
            fixed["deep/er/b.txt"] = "file"
        elif link == "folder_link":  # a recorded folder that is a link
            (run / "extra").symlink_to(f"{up}/dir0")
            fixed.update({"extra": "folder", "extra/a.txt": "file"})
        elif link == "run_link":  # a recorded batch folder that is a link
            (run / "nested").symlink_to(f"{up}/fakeruns/g-0")
            fixed["nested"] = "run"
        elif link == "foreign_link":  # a link vaco_jax did not write
            (run / "notes").symlink_to(f"{up}/dir0")
    write_manifest(box, run, spec.manifest, fixed)
    write_lock(box, run, spec.lock)
    if spec.foreign:
        (run / spec.foreign).write_text("mine")
    return run


FOREIGN = ["notes.txt", "ü漢 notes.txt", "notes\nvaco-jax train: done", "\x1b[2Jnotes"]
"""Files vaco_jax did not write, named to forge a line of a message (a newline, a terminal
escape code) where the name is printed."""
foreign_names = st.none() | st.sampled_from(FOREIGN)
run_specs = st.builds(
    RunSpec, manifests, st.sampled_from(CHECKPOINTS),
    st.lists(st.sampled_from(LINKS), max_size=3, unique=True).map(tuple),
    st.sampled_from(LOCKS), foreign_names)
KEEPS = ["../outside/file0.txt", f"{SBX}/outside/file0.txt", "/abs", "a/../../outside", "..",
         "../outside", "notes.txt", "notes", "checkpoint/model.pt", "config.json", "u漢", "notes/",
         ""]


def keep_refused(keep: tuple[str, ...]) -> bool:
    """Whether a `--keep` path lies outside the folder (absolute, `..`) or is no path."""
    keep = tuple(k.replace(SBX, "/sandbox") for k in keep)
    return any(not k or k.startswith("/") or "\0" in k or ".." in k.split("/") for k in keep)


def _overwrite(run: Path, keep: tuple[str, ...] = (),
               writes: tuple[str, ...] = run_folder.RUN_WRITES) -> Callable[[], None]:
    """The overwrite as `vaco-jax train --overwrite` (or `sweep`) does it."""
    def operation() -> None:
        with folder_lock(run):
            io.prepare_output_dir(run, overwrite=True, keep=keep, writes=writes)
    return operation


def _lock_alone(run: Path) -> Callable[[], None]:
    def operation() -> None:
        with folder_lock(run):
            pass
    return operation


def check(box: Sandbox, folder: Path, operation: Callable[[], None], *, expect: str | None,
          what: str) -> BaseException | None:
    """Runs `operation` on `folder`: nothing outside it changes, nothing inside it changes if it
    refuses, and it refuses with a ValueError where `expect` is "ValueError", succeeds where it
    is "success"."""
    around = box.surroundings()
    inside = snapshot(folder)
    target = (box.outside / "lock_target.txt").read_text()
    error = attempt(operation)
    assert box.surroundings() == around, f"{what} changed the folder's surroundings: " \
        f"{_difference(around, box.surroundings())} (raised {error!r})"
    assert (box.outside / "lock_target.txt").read_text() == target
    if error is not None:
        own = plain_locks(inside)
        assert contents(snapshot(folder), own) == contents(inside, own), \
            f"{what} refused ({error}) but changed the folder: " \
            f"{_difference(contents(inside, own), contents(snapshot(folder), own))}"
    if expect == "ValueError":
        assert isinstance(error, ValueError), f"{what} should refuse (ValueError), got {error!r}"
    elif expect == "success":
        assert error is None, f"{what} should succeed, got {error!r}"
    return error


def _difference(before: dict, after: dict) -> str:
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    return f"removed {gone[:5]}, added {new[:5]}, changed {changed[:5]}"


@PROPERTY
@given(spec=run_specs, keep=st.lists(st.sampled_from(KEEPS), min_size=1, max_size=3).map(tuple))
@example(spec=RunSpec(Manifest(entries=(Entry("../outside/file0.txt", "file"),
                                        Entry(f"{SBX}/outside/file1.txt", "file"),
                                        Entry("../outside", "tree")))), keep=("notes.txt",))
@example(spec=RunSpec(Manifest("pairs", (Entry("../../far.txt", "tree"),))), keep=("..",))
@example(spec=RunSpec(links=("through",)), keep=(f"{SBX}/outside/file0.txt",))
@example(spec=RunSpec(links=("status", "config_abs", "metrics_dir", "tree_link")),
         keep=("../outside",))
@example(spec=RunSpec(checkpoint="dir_link"), keep=("notes.txt",))
@example(spec=RunSpec(foreign="notes\nvaco-jax train: done"), keep=("notes.txt",))
@example(spec=RunSpec(Manifest(entries=(Entry("<300 bytes>", "file"),))), keep=("notes.txt",))
@example(spec=RunSpec(Manifest(entries=(Entry("u\udcff", "file", True),
                                        Entry("uжü/v漢", "tree", True)))), keep=("notes.txt",))
def test_no_operation_on_a_hostile_run_folder_reaches_outside(template, spec, keep):
    """(a) the overwrite of `train --overwrite`, (b) the same with `--keep` paths, (c) the lock
    alone, (d) `refuse_if_in_use`, each on a fresh copy of the generated folder."""
    operations = [
        ("overwrite", lambda run, box: _overwrite(run),
         "ValueError" if spec.value_error() else "success" if spec.clean() else None),
        ("overwrite --keep", lambda run, box: _overwrite(run, tuple(map(box.fill, keep))),
         "ValueError" if spec.value_error() or keep_refused(keep) else None),
        ("lock", lambda run, box: _lock_alone(run),
         "ValueError" if spec.lock in HOSTILE_LOCKS else "success"),
        ("refuse_if_in_use", lambda run, box: lambda: refuse_if_in_use(run), "success"),
    ]
    apply_each(template, operations, lambda box: build_run(box, spec, template), "overwrite")


def apply_each(template, operations, build: Callable, emptying: str) -> None:
    """Each `(what, operation, expect)` on a fresh copy of the folder `build(box)` makes; the
    operation named `emptying` must, where it succeeds, leave no file of vaco_jax's behind."""
    for what, operation, expect in operations:
        with sandbox(template) as box:
            folder = build(box)
            check(box, folder, operation(folder, box), expect=expect, what=what)
            if what == emptying and expect == "success":
                left = [p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()]
                assert left == [], "an overwrite left vaco_jax's files"


@pytest.mark.parametrize("lock", sorted(HOSTILE_LOCKS))
def test_a_hostile_lock_file_is_refused_and_its_target_untouched(template, lock):
    for operation in (_lock_alone, _overwrite):
        with sandbox(template) as box:
            run = build_run(box, RunSpec(lock=lock), template)
            error = check(box, run, operation(run), expect="ValueError", what=lock)
            assert LOCK_FILE in str(error)
            assert (box.outside / "lock_target.txt").read_text() == LOCK_TARGET
            assert not (box.outside / "new_lock").exists()


@pytest.mark.parametrize("where", ["manifest", "batch manifest", "lock record", "identity"])
def test_json_nested_too_deep_is_refused_in_one_line(template, where):
    """JSON nested deeper than Python's parser goes raises RecursionError, not ValueError: a
    manifest, a batch folder's manifest and a checkpoint's identity so nested are damaged, and a
    lock record so nested is a stale one (its file is taken over)."""
    with sandbox(template) as box:
        if where == "manifest":
            run = build_run(box, RunSpec(Manifest("text", text="<deep>")), template)
            check(box, run, _overwrite(run), expect="ValueError", what=where)
        elif where == "batch manifest":
            root = build_sweep(box, SweepSpec(batch_manifest=Manifest("text", text="<deep>")),
                               template)
            check(box, root, _overwrite(root, (), SWEEP_WRITES), expect="ValueError", what=where)
            check(box, root, _refuse_parts_in_use(root), expect="ValueError", what=where)
        elif where == "lock record":
            run = build_run(box, RunSpec(lock="deep_record"), template)
            check(box, run, _lock_alone(run), expect="success", what=where)
        else:
            run = build_run(box, RunSpec(checkpoint="deep_identity"), template)
            checkpoints = Checkpoints(run / "checkpoint", "run-1", keep=2)
            try:
                for operation in (checkpoints.check_usable, lambda: checkpoints.restore_latest(
                        {"x": np.zeros(2, np.float32)}, warn=lambda message: None)):
                    error = check(box, run, operation, expect="ValueError", what=where)
                    assert "no usable checkpoint" in str(error)
            finally:
                checkpoints.close()


# ---------------------------------------------------------------- resuming from checkpoints


@settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 30)), deadline=None,
          database=None)
@given(variant=st.sampled_from(CHECKPOINTS), damaged=st.booleans(), foreign=foreign_names)
@example(variant="dir_link", damaged=False, foreign=None)
@example(variant="damaged_identity", damaged=False, foreign=None)
@example(variant="escaping", damaged=False, foreign=None)
@example(variant="rotation", damaged=True, foreign="notes.txt")
def test_resuming_from_hostile_checkpoints_reaches_nothing_outside(template, variant, damaged,
                                                                   foreign):
    """(e) a resume's opening of checkpoints: restore the newest, then save one (where the
    folder allows it); a run folder whose manifest may be damaged too."""
    spec = RunSpec(Manifest(entries=(Entry("../outside/dir0", "tree"),)) if damaged else
                   Manifest(), checkpoint=variant, foreign=foreign)
    like = {"x": np.zeros(2, np.float32)}
    with sandbox(template) as box:
        run = build_run(box, spec, template)
        opened: list[Checkpoints] = []
        error = check(box, run, lambda: opened.append(Checkpoints(run / "checkpoint", "run-1",
                                                                  keep=2)),
                      expect="ValueError" if variant in ("dir_link", "file") else "success",
                      what=f"opening {variant} checkpoints")
        if error is not None:
            assert "checkpoint" in str(error)
            return
        checkpoints = opened[0]
        try:
            restored: list = []
            error = check(box, run, lambda: restored.append(
                checkpoints.restore_latest(like, warn=lambda message: None)),
                expect="ValueError" if variant in ALL_DAMAGED | {"other_run"} else None,
                what=f"restoring {variant} checkpoints")
            if variant in ALL_DAMAGED:
                assert "no usable checkpoint" in str(error) and "--overwrite" in str(error)
                assert (run / "checkpoint" / "1").is_dir()
            if variant in ("real", "rotation", "partial_link", "same_step_link"):
                assert error is None and restored[0][0] == (2 if variant == "rotation" else 1)
                np.testing.assert_array_equal(restored[0][1]["x"], like["x"])
            if variant in ("none", "step_link"):
                assert error is None and restored == [None]
            if error is None:
                check(box, run, lambda: checkpoints.save(9, {"x": jnp.ones(2, jnp.float32)}),
                      expect="success", what=f"saving beside {variant} checkpoints")
                assert (run / "checkpoint" / "9").is_dir()
                assert not (run / "checkpoint" / "9").is_symlink()
        finally:
            checkpoints.close()


@pytest.mark.parametrize("variant", ["tree_link", "identity_link"])
def test_a_checkpoint_whose_tree_or_identity_is_a_link_is_damaged(template, variant):
    """docs/security.md: "a link in a checkpoint is damage"; a step folder's `tree/` or its
    `identity.json` that links to a checkpoint elsewhere is one too (else it is read there)."""
    with sandbox(template) as box:
        run = build_run(box, RunSpec(checkpoint=variant), template)
        checkpoints = Checkpoints(run / "checkpoint", "run-1", keep=2)
        try:
            error = check(box, run, lambda: checkpoints.restore_latest(
                {"x": np.zeros(2, np.float32)}, warn=lambda message: None),
                expect="ValueError", what=variant)
            assert "no usable checkpoint" in str(error)
        finally:
            checkpoints.close()


# ---------------------------------------------------------------- sweep folders


@dataclass(frozen=True)
class SweepSpec:
    top: Manifest = Manifest()
    runs: str = "real"  # or "link" (runs/ -> outside/fakeruns)
    batch: str = "real"  # or "link" (runs/g-0 -> outside/fakeruns/g-0), "absent"
    batch_manifest: Manifest = Manifest()
    batch_checkpoint: str = "real"  # or "dir_link", "step_link"
    top_lock: str = "none"
    batch_lock: str = "none"
    foreign: str | None = None

    def _batch_real(self) -> bool:
        return self.top.form in ("dict", "pairs") and self.runs == "real" and self.batch == "real"

    def value_error(self) -> bool:
        recorded = self.top.form in ("dict", "pairs")
        batch = self._batch_real() and (
            self.batch_manifest.damaged() or self.batch_lock in HOSTILE_LOCKS
            or (self.batch_manifest.form in ("dict", "pairs")
                and self.batch_checkpoint == "dir_link"))
        return (self.top_lock in HOSTILE_LOCKS or self.top.damaged() or recorded and (
            self.runs == "link" or self.batch == "link") or batch)

    def clean(self) -> bool:
        return (self.top.readable() and not self.top.long() and not self.value_error()
                and not self.foreign and (self.batch == "absent" or (
                    self.batch_manifest.readable() and not self.batch_manifest.long())))


def _deeper(spec: Manifest) -> Manifest:
    """`spec` for a batch folder two levels down: its climbing paths climb two levels more."""
    return Manifest(spec.form, tuple(
        Entry("../../" + e.key, e.kind, e.create) if isinstance(e.key, str) and ".." in e.key
        and not too_long(e.key) else e for e in spec.entries), spec.weird, spec.text)


def build_sweep(box: Sandbox, spec: SweepSpec, template: Path) -> Path:
    """A sweep folder (its files, `runs/`, one batch folder with its own manifest and a
    checkpoint), made hostile as `spec` says."""
    root = box.run
    root.mkdir()
    for name in ("experiment.toml", "sweep.json", "report.md"):
        (root / name).write_text(f"{name} of the sweep")
    fixed = {"experiment.toml": "file", "sweep.json": "file", "report.md": "file",
             "runs": "folder", "runs/g-0": "run"}
    if spec.runs == "link":
        (root / "runs").symlink_to(os.path.relpath(box.outside / "fakeruns", root))
    else:
        (root / "runs").mkdir()
        batch = root / "runs" / "g-0"
        if spec.batch == "link":
            batch.symlink_to(os.path.relpath(box.outside / "fakeruns" / "g-0", batch.parent))
        elif spec.batch == "real":
            batch.mkdir()
            (batch / "status.json").write_text("{}")
            recorded = {"status.json": "file", "checkpoint": "folder",
                        **build_checkpoint(box, batch, spec.batch_checkpoint, template)}
            write_manifest(box, batch, _deeper(spec.batch_manifest), recorded)
            write_lock(box, batch, spec.batch_lock)
            if spec.foreign:
                (batch / spec.foreign).write_text("mine")
    write_manifest(box, root, spec.top, fixed)
    write_lock(box, root, spec.top_lock)
    if spec.foreign and not (spec.runs == "real" and spec.batch == "real"):
        (root / spec.foreign).write_text("mine")
    return root


sweep_specs = st.builds(
    SweepSpec, manifests, st.sampled_from(["real", "link"]),
    st.sampled_from(["real", "link", "absent"]), manifests,
    st.sampled_from(["real", "dir_link", "step_link"]), st.sampled_from(LOCKS),
    st.sampled_from(LOCKS), foreign_names)
SWEEP_WRITES = ("experiment.toml", "sweep.json", *REPORT_WRITES, "runs/g-0")


def _refuse_parts_in_use(root: Path) -> Callable[[], None]:
    """What `report --parts` checks of each part folder: nobody writes it or its batches."""
    def operation() -> None:
        for held in (root, *manifest.nested_runs(root)):
            refuse_if_in_use(held)
    return operation


@PROPERTY
@given(spec=sweep_specs, keep=st.lists(st.sampled_from(KEEPS), min_size=1, max_size=2).map(tuple))
@example(spec=SweepSpec(runs="link"), keep=("notes.txt",))
@example(spec=SweepSpec(batch="link"), keep=("notes.txt",))
@example(spec=SweepSpec(batch_checkpoint="dir_link"), keep=("notes.txt",))
@example(spec=SweepSpec(batch_lock="symlink_file"), keep=("notes.txt",))
@example(spec=SweepSpec(batch_lock="fifo"), keep=("notes.txt",))
@example(spec=SweepSpec(batch_manifest=Manifest(entries=(
    Entry("../outside/file0.txt", "file"), Entry("../outside/dir0", "tree")))),
    keep=("notes.txt",))
def test_no_operation_on_a_hostile_sweep_folder_reaches_outside(template, spec, keep):
    """(f) the overwrite of `sweep --overwrite`, with and without `--keep` paths, and the part
    folder checks of `report --parts`, each on a fresh copy of the generated folder."""
    operations = [
        ("sweep overwrite", lambda root, box: _overwrite(root, (), SWEEP_WRITES),
         "ValueError" if spec.value_error() else "success" if spec.clean() else None),
        ("sweep overwrite --keep",
         lambda root, box: _overwrite(root, tuple(map(box.fill, keep)), SWEEP_WRITES),
         "ValueError" if spec.value_error() or keep_refused(keep) else None),
        ("parts in use", lambda root, box: _refuse_parts_in_use(root), None),
    ]
    apply_each(template, operations, lambda box: build_sweep(box, spec, template),
               "sweep overwrite")


# ---------------------------------------------------------------- through the command line

TRAIN = ["train", "--env", "toy_reach", "--no-progress", "--total-steps", "2048", "--seeds", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run folder `vaco-jax train` wrote (one update of one seed on toy_reach)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    assert cli.main([*TRAIN, "--out", str(run)]) == 0
    assert (run / "checkpoint" / "1" / "identity.json").is_file()
    return run


@pytest.fixture
def no_training(monkeypatch) -> None:
    """Every command below must refuse before it trains: training fails the test at once."""
    from vaco_jax.experiment import execute
    from vaco_jax.run import driver

    def refuse(*args, **kwargs):
        raise AssertionError("trained (or swept) instead of refusing the folder")
    monkeypatch.setattr(driver, "train_chunks", refuse)
    monkeypatch.setattr(execute, "run_sweep", refuse)


@pytest.fixture
def place(tmp_path, trained, no_training) -> dict[str, Path]:
    """A copy of the trained run (`run`) beside victims: `victim/file`, `victim/folder/inner.txt`,
    `abs.txt`, `linked/file` (a folder the run's `link` points to) and `lock_target.txt`."""
    run = tmp_path / "run"
    shutil.copytree(trained, run, symlinks=True)
    for rel in ("victim/file", "victim/folder/inner.txt", "abs.txt", "linked/file",
                "lock_target.txt", "elsewhere/notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"victim {rel}")
    return {"root": tmp_path, "run": run}


def add_entries(folder: Path, entries: dict[str, str]) -> None:
    path = folder / MANIFEST
    saved = json.loads(path.read_text())
    saved["entries"].update(entries)
    path.write_text(json.dumps(saved))


def _named(line: str, key: str) -> bool:
    """Whether the refusal names the entry `key` (a long one may be shortened, with `...`; one
    of a batch folder may be shown with the batch folder's path before it)."""
    return repr(key) in line or repr(key)[:60] in line or f"/{key}'" in line


HOSTILE_ENTRIES = {"climbing file": ("../victim/file", "file"),
                   "absolute file": ("{root}/abs.txt", "file"),
                   "climbing tree": ("../victim", "tree"),
                   "through a link": ("link/file", "file")}


def _hostile(place: dict[str, Path], folder: Path, names: list[str]) -> dict[str, str]:
    """The entries `names` of `HOSTILE_ENTRIES` for `folder` (climbing as far as its depth below
    the test's folder asks), with the link `folder/link` -> `linked/` where one is named."""
    up = "../" * (len(folder.relative_to(place["root"]).parts) - 1)
    if "through a link" in names:
        (folder / "link").symlink_to(place["root"] / "linked")
    return {HOSTILE_ENTRIES[n][0].replace("{root}", str(place["root"])).replace("../", "../" + up)
            : HOSTILE_ENTRIES[n][1] for n in names}


def _forget_hostile(folder: Path, entries: dict[str, str]) -> None:
    """Takes the entries out of the folder's manifest again, and the link."""
    saved = json.loads((folder / MANIFEST).read_text())
    saved["entries"] = {k: v for k, v in saved["entries"].items() if k not in entries}
    (folder / MANIFEST).write_text(json.dumps(saved))
    if (folder / "link").is_symlink():
        (folder / "link").unlink()


def _targets_exist(root: Path) -> None:
    for rel in ("victim/file", "victim/folder/inner.txt", "abs.txt", "linked/file"):
        assert (root / rel).read_text() == f"victim {rel}", rel


@pytest.mark.parametrize("names", [[n] for n in HOSTILE_ENTRIES] + [list(HOSTILE_ENTRIES)],
                         ids=[*HOSTILE_ENTRIES, "all four"])
def test_train_overwrite_refuses_a_manifest_that_points_outside(place, capsys, names):
    root, run = place["root"], place["run"]
    entries = _hostile(place, run, names)
    add_entries(run, entries)
    around, inside = surroundings_of(root, run), snapshot(run)
    line = refused(capsys, [*TRAIN, "--out", str(run), "--overwrite"])
    assert line.startswith("vaco-jax train: error: ")
    if len(names) == 1:
        key = next(iter(entries))
        assert _named(line, "link" if key == "link/file" else key), line
    else:
        assert any(_named(line, k) for k in [*entries, "link"]), line
    _targets_exist(root)
    assert surroundings_of(root, run) == around
    assert contents(snapshot(run), set()) == contents(inside, set())  # nothing deleted


@pytest.mark.parametrize("flags", [["--resume", "RUN"], ["--out", "RUN", "--overwrite"]],
                         ids=["resume", "overwrite"])
def test_train_refuses_a_lock_file_that_links_outside(place, capsys, flags):
    root, run = place["root"], place["run"]
    (run / LOCK_FILE).symlink_to(root / "lock_target.txt")
    around = surroundings_of(root, run)
    argv = ["train", *[str(run) if f == "RUN" else f for f in flags]]
    if "--overwrite" in flags:
        argv = [*TRAIN, *argv[1:]]
    else:
        argv.append("--no-progress")
    line = refused(capsys, argv)
    assert LOCK_FILE in line, line
    assert (root / "lock_target.txt").read_text() == "victim lock_target.txt"
    assert surroundings_of(root, run) == around
    assert (run / LOCK_FILE).is_symlink()


@pytest.mark.parametrize("flags", [["--out", "RUN", "--overwrite"], ["--resume", "RUN"]],
                         ids=["overwrite", "resume"])
def test_train_refuses_a_checkpoint_folder_that_links_outside(place, capsys, flags):
    root, run = place["root"], place["run"]
    shutil.copytree(run / "checkpoint", root / "elsewhere", dirs_exist_ok=True)
    shutil.rmtree(run / "checkpoint")
    (run / "checkpoint").symlink_to(root / "elsewhere")
    around, inside = surroundings_of(root, run), snapshot(run)
    argv = [str(run) if f == "RUN" else f for f in flags]
    line = refused(capsys, [*TRAIN, *argv] if "--overwrite" in flags
                   else ["train", *argv, "--no-progress"])
    assert "'checkpoint'" in line or repr(str(run / "checkpoint")) in line, line
    assert (root / "elsewhere" / "notes.txt").read_text() == "victim elsewhere/notes.txt"
    assert (root / "elsewhere" / "1" / "identity.json").is_file()
    assert surroundings_of(root, run) == around
    assert contents(snapshot(run), set()) == contents(inside, set())


def test_train_resume_refuses_when_every_checkpoint_is_damaged(place, capsys):
    run = place["run"]
    (run / "checkpoint" / "1" / "identity.json").write_text("{ damaged")
    inside = snapshot(run)
    code = cli.main(["train", "--resume", str(run), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "no usable checkpoint" in lines[0] and "--overwrite" in lines[0]
    assert str(run / "checkpoint" / "1") in lines[0]
    assert "trained in" not in captured.out  # nothing trained
    assert (run / "checkpoint" / "1").is_dir()
    assert contents(snapshot(run), set()) == contents(inside, set())  # nothing written either


# ---------------------------------------------------------------- sweeps and merged reports


@pytest.fixture
def experiment_file(tmp_path) -> Path:
    from engine_configs import TOY_EXPERIMENT

    path = tmp_path / "toy.toml"
    path.write_text(TOY_EXPERIMENT)
    return path


def _sweep_like(place: dict[str, Path]) -> Path:
    """A sweep folder written by manifest and io calls (no training): its files, a batch folder
    with a manifest of its own."""
    root = place["root"] / "sweep"
    manifest.record(root, {"experiment.toml": "file", "runs": "folder", "runs/g-0": "run"})
    io.write_text(root / "experiment.toml", "name = 'x'\n")
    io.write_text(root / "report.md", "# report\n")
    batch = root / "runs" / "g-0"
    manifest.record(batch, {"status.json": "file", "checkpoint": "folder"})
    io.write_text(batch / "status.json", "{}")
    return root


@pytest.mark.parametrize("where", ["sweep", "batch"])
@pytest.mark.parametrize("name", list(HOSTILE_ENTRIES))
def test_sweep_overwrite_refuses_a_manifest_that_points_outside(place, capsys, experiment_file,
                                                               where, name):
    root = _sweep_like(place)
    folder = root if where == "sweep" else root / "runs" / "g-0"
    entries = _hostile(place, folder, [name])
    add_entries(folder, entries)
    around, inside = surroundings_of(place["root"], root), snapshot(root)
    line = refused(capsys, ["sweep", str(experiment_file), "--out", str(root), "--overwrite",
                            "--no-progress"])
    key = next(iter(entries))
    assert _named(line, "link" if key == "link/file" else key), line
    _targets_exist(place["root"])
    assert surroundings_of(place["root"], root) == around
    assert contents(snapshot(root), set()) == contents(inside, set())


@pytest.fixture(scope="module")
def part(tmp_path_factory) -> Path:
    """A finished sweep of one run, a part `report --parts` merges."""
    return finished_sweep(tmp_path_factory.mktemp("part"), TINY_SWEEP)


@pytest.mark.slow  # a sweep is run for the part it merges
def test_report_parts_overwrite_refuses_a_manifest_that_points_outside(place, capsys, part):
    root = place["root"]
    out = root / "merged"
    assert cli.main(["report", str(out), "--parts", str(part)]) == 0
    capsys.readouterr()
    for name in HOSTILE_ENTRIES:
        entries = _hostile(place, out, [name])
        add_entries(out, entries)
        around, inside = surroundings_of(root, out), snapshot(out)
        line = refused(capsys, ["report", str(out), "--parts", str(part), "--overwrite"])
        key = next(iter(entries))
        assert _named(line, "link" if key == "link/file" else key), line
        _targets_exist(root)
        assert surroundings_of(root, out) == around
        assert contents(snapshot(out), set()) == contents(inside, set())
        _forget_hostile(out, entries)
