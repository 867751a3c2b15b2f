"""A folder is owned by one process at a time (`infra.lock`), and an overwrite removes exactly what
vaco_jax wrote there (`infra.manifest`): foreign files at every place a run or sweep writes are
refused, or kept when named, never deleted."""

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

from vaco_jax.report.runs_table import REPORT_WRITES
from vaco_jax.infra import io, manifest, run_folder
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.infra.lock import LOCK_FILE, FolderInUse, folder_lock, refuse_if_in_use

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys, time\n"
        "from vaco_jax.infra.lock import folder_lock\n"
        "with folder_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n")


def hold(folder: Path) -> subprocess.Popen:
    """A process that holds `folder`'s lock until killed."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_live_holder_is_named_and_a_dead_ones_lock_taken_over(tmp_path, capsys):
    folder = tmp_path / "run"
    child = hold(folder)
    try:
        with pytest.raises(FolderInUse, match=f"in use by process {child.pid} on host .*only one "
                                              f"vaco-jax process may write a folder"):
            with folder_lock(folder):
                pass
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert (folder / LOCK_FILE).is_file()  # a process killed outright leaves its lock file
    with folder_lock(folder):
        assert f"left by process {child.pid}" in capsys.readouterr().err
    assert not (folder / LOCK_FILE).exists()


def test_locks_are_reentrant_and_leave_no_trace(tmp_path):
    folder = tmp_path / "new"
    with folder_lock(folder):
        with folder_lock(folder):  # a sweep rewriting its report in the folder it holds
            assert (folder / LOCK_FILE).is_file()
        assert (folder / LOCK_FILE).is_file()
    assert not folder.exists()  # made by the lock and left empty: removed again
    (tmp_path / "kept").mkdir()
    with folder_lock(tmp_path / "kept"):
        pass
    assert (tmp_path / "kept").is_dir() and not any((tmp_path / "kept").iterdir())


def sweep_folder(root: Path) -> None:
    """What a sweep writes: its files, a batch folder with its own manifest, files, checkpoints
    (one committed, one half-written) and the temporary of an interrupted write."""
    manifest.record(root, {"experiment.toml": manifest.FILE, "runs": manifest.FOLDER,
                           "runs/g-0": manifest.RUN})
    io.write_text(root / "experiment.toml", "name = 'x'\n")
    io.write_text(root / "report.md", "# report\n")  # recorded because the folder keeps a manifest
    batch = root / "runs" / "g-0"
    manifest.record(batch, {"status.json": manifest.FILE, "checkpoint": manifest.FOLDER})
    io.write_text(batch / "status.json", "{}")
    (batch / ".status.json.abc123.tmp").write_text("{")
    checkpoints = Checkpoints(batch / "checkpoint", "run-1", keep=2)
    for step in (1, 2, 3):
        checkpoints.save(step, {"x": jnp.full((2,), step)})
    checkpoints.close()
    (batch / "checkpoint" / "4.partial").mkdir()  # a write under way when its process was killed
    manifest.record(batch, {"checkpoint/4.partial": manifest.TREE})


FOREIGN = ["notes.txt", "runs/important_results/results.csv", "runs/g-0/mine.txt",
           "runs/g-0/checkpoint/model.pt", "runs/g-0/checkpoint/2024/notes.txt"]


@pytest.mark.parametrize("stranger", FOREIGN)
def test_an_overwrite_refuses_a_foreign_file_anywhere_and_deletes_nothing(tmp_path, stranger):
    sweep_folder(tmp_path)
    (tmp_path / stranger).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / stranger).write_text("mine")
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(FileExistsError, match=f"holds {stranger!r}, which vaco_jax did not write; "
                                              f"move it away, or keep it with --keep {stranger}"):
        io.prepare_output_dir(tmp_path, overwrite=True)
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_an_overwrite_removes_what_vaco_jax_wrote_and_keeps_what_is_named(tmp_path):
    sweep_folder(tmp_path)
    for stranger in FOREIGN:
        (tmp_path / stranger).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / stranger).write_text(f"mine: {stranger}")
    keep = ["notes.txt", "runs/important_results", "runs/g-0/mine.txt",
            "runs/g-0/checkpoint/model.pt", "runs/g-0/checkpoint/2024"]
    io.prepare_output_dir(tmp_path, overwrite=True, keep=keep)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(FOREIGN)
    assert all((tmp_path / s).read_text() == f"mine: {s}" for s in FOREIGN)
    assert manifest.foreign(tmp_path) == sorted(FOREIGN)  # all of it is the user's now


def test_checkpoints_are_recorded_while_they_exist(tmp_path):
    sweep_folder(tmp_path)
    batch = tmp_path / "runs" / "g-0"
    assert sorted(p.name for p in (batch / "checkpoint").iterdir()) == ["2", "3", "4.partial"]
    assert {k: v for k, v in manifest.recorded(batch).items() if k.startswith("checkpoint/")} == {
        "checkpoint/2": manifest.TREE, "checkpoint/3": manifest.TREE,
        "checkpoint/4.partial": manifest.TREE}  # step 1 rotated away and forgotten


@pytest.mark.parametrize("kept, writes", [
    ("report.md", ()), ("runs/g-0/status.json", ()), ("runs/g-0/checkpoint/2", ()),
    ("runs/g-0/checkpoint/2/tree/data", ()), ("runs/g-0", ()),
    ("summary.json", ("summary.json",)), ("checkpoint/7", ("checkpoint/[0-9]*",)),
])
def test_a_path_vaco_jax_writes_cannot_be_kept(tmp_path, kept, writes):
    sweep_folder(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=f"--keep {kept}: vaco_jax writes {kept!r} there, so it "
                                         f"cannot be kept"):
        io.prepare_output_dir(tmp_path, overwrite=True, keep=[kept], writes=writes)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_users_file_beside_a_runs_checkpoints_can_be_kept(tmp_path):
    manifest.record(tmp_path, run_folder.RUN_FILES)
    io.write_text(tmp_path / "config.json", "{}")
    checkpoints = Checkpoints(tmp_path / "checkpoint", "run-1")
    checkpoints.save(1, {"x": jnp.zeros(2)})
    checkpoints.close()
    (tmp_path / "checkpoint" / "model.pt").write_text("mine")
    (tmp_path / "fig_dir").mkdir()
    (tmp_path / "fig_dir" / "x.png").write_text("mine too")  # no `fig_*.png` of a report
    io.prepare_output_dir(tmp_path, overwrite=True, keep=["checkpoint/model.pt", "fig_dir"],
                          writes=(*run_folder.RUN_WRITES, *REPORT_WRITES))
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file()) == ["checkpoint/model.pt", "fig_dir/x.png"]


def test_an_overwrite_deletes_nothing_while_a_batch_folder_is_in_use(tmp_path):
    sweep_folder(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    child = hold(tmp_path / "runs" / "g-0")
    try:
        with pytest.raises(FolderInUse, match=f"in use by process {child.pid}"):
            io.prepare_output_dir(tmp_path, overwrite=True)
        with pytest.raises(FolderInUse, match=f"in use by process {child.pid}"):
            refuse_if_in_use(tmp_path / "runs" / "g-0")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert sorted(p for p in tmp_path.rglob("*") if p.name != LOCK_FILE) == before
    refuse_if_in_use(tmp_path / "runs" / "g-0")  # its holder has ended


def test_an_overwrite_removes_every_emptied_folder(tmp_path):
    sweep_folder(tmp_path)
    io.prepare_output_dir(tmp_path, overwrite=True)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_without_a_manifest_is_never_emptied(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="keeps no record of what vaco_jax wrote there"):
        io.prepare_output_dir(tmp_path, overwrite=True)
    assert (tmp_path / "config.json").read_text() == "{}"
    with pytest.raises(FileExistsError, match="already exists and is not empty"):
        io.prepare_output_dir(tmp_path, overwrite=False)


def test_a_merge_refuses_a_part_a_process_writes(tmp_path):
    from vaco_jax.experiment import merge_parts

    part, out = tmp_path / "part", tmp_path / "merged"
    sweep_folder(part)
    child = hold(part / "runs" / "g-0")
    try:
        with pytest.raises(FolderInUse, match=f"in use by process {child.pid}"):
            merge_parts([part], out)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert not out.exists()


def test_bookkeeping_alone_is_an_empty_folder(tmp_path):
    manifest.record(tmp_path, {})
    (tmp_path / LOCK_FILE).write_text("")
    assert not manifest.has_results(tmp_path)
    io.prepare_output_dir(tmp_path, overwrite=False)


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    def full(*_):
        raise OSError(28, "Error writing bytes to file")
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match=f"cannot write '{tmp_path / 'status.json'}'"):
        io.write_text(tmp_path / "status.json", "{}")
    assert list(tmp_path.iterdir()) == []  # no temporary left behind


def test_a_stale_record_naming_a_live_process_is_not_said_to_have_ended(tmp_path, capsys):
    """The kernel's lock is free, so the record is stale; the process it names (here this one,
    alive) is not said to have ended."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                "command": "vaco-jax train\x1b[2J\nforged",
                                                "since": "then"}))
    with folder_lock(folder):
        [line] = capsys.readouterr().err.strip().splitlines()  # a forged newline stays one line
    assert f"process {os.getpid()}" in line and "does not hold it (a stale record)" in line
    assert "has ended" not in line and "\x1b" not in line


@pytest.mark.parametrize("failing", ["open", "ftruncate"])
def test_an_unwritable_lock_file_is_refused_in_one_line(tmp_path, monkeypatch, failing):
    """A read-only folder (`open`) or an immutable lock file (`ftruncate`): this process runs
    as root in CI, which no mode stops, so the system's refusal is put in its place."""
    folder = tmp_path / "run"
    folder.mkdir()
    real = getattr(os, failing)

    def refused(first, *args, **kwargs):
        if failing == "ftruncate" or str(first).endswith(LOCK_FILE):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(first, *args, **kwargs)
    monkeypatch.setattr(os, failing, refused)
    with pytest.raises(ValueError, match=r"^cannot lock .*: cannot write .*\.vaco_jax\.lock' "
                                         r"\(Operation not permitted\); make .*writable, or choose "
                                         r"another folder$"):
        with folder_lock(folder):
            pass


def test_an_overwrite_of_a_foreign_folder_stops_at_its_first_stranger(tmp_path, monkeypatch):
    """`--out / --overwrite` must be refused at once, not after walking every file system."""
    (tmp_path / "a.txt").write_text("mine")
    (tmp_path / "proc").mkdir()
    walk = Path.iterdir

    def unreadable(path):
        if path.name == "proc":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return walk(path)
    monkeypatch.setattr(Path, "iterdir", unreadable)
    with pytest.raises(FileExistsError, match="it holds 'a.txt', which vaco_jax did not write"):
        io.prepare_output_dir(tmp_path, overwrite=True)


@pytest.mark.parametrize("kept", ["../x", "/notes.txt", "a/../../x", ""])
def test_a_kept_path_outside_the_folder_is_refused(tmp_path, kept):
    sweep_folder(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match="a kept path is relative to the output folder and lies "
                                         "inside it"):
        io.prepare_output_dir(tmp_path, overwrite=True, keep=[kept])
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("entry, problem", [
    ("../victim/file", "climbs out of its folder through '..'"),
    ("/etc/hostname", "is an absolute path, outside the folder"),
    ("a//b", "is not a normalised path"),
    ("a/./b", "is not a normalised path"),
    ("a\0b", "holds a NUL character"),
    ("\ud800", "is not a file name this system can encode"),
])
def test_a_manifest_naming_a_path_outside_is_damaged_and_nothing_is_removed(tmp_path, entry,
                                                                            problem):
    sweep_folder(tmp_path)
    entries = manifest.recorded(tmp_path)
    (tmp_path / manifest.MANIFEST_FILE).write_text(
        json.dumps({"entries": {**entries, entry: "file"}}))
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=re.escape(f"its entry {entry!r} {problem}")) as refused:
        io.prepare_output_dir(tmp_path, overwrite=True)
    assert len(str(refused.value).splitlines()) == 1 and "nothing was removed" in str(refused.value)
    assert sorted(tmp_path.rglob("*")) == before


def test_links_are_removed_as_links_and_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("theirs")
    run = tmp_path / "run"
    manifest.record(run, {"status.json": manifest.FILE, "checkpoint": manifest.FOLDER,
                          "checkpoint/1": manifest.TREE})
    (run / "status.json").symlink_to(victim / "file")
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "1").symlink_to(victim)
    io.prepare_output_dir(run, overwrite=True)
    assert list(run.iterdir()) == [] and (victim / "file").read_text() == "theirs"


@pytest.mark.parametrize("linked", ["checkpoint", "runs", "runs/g-0"])
def test_a_recorded_folder_that_is_a_link_stops_the_overwrite(tmp_path, linked):
    victim = tmp_path / "victim"
    sweep_folder(tmp_path / "sweep")
    if linked == "checkpoint":
        moved = tmp_path / "sweep" / "runs" / "g-0" / "checkpoint"
        linked = "runs/g-0/checkpoint"
    else:
        moved = tmp_path / "sweep" / linked
    moved.rename(victim)
    moved.symlink_to(victim)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=f"{linked!r} is a symbolic link, and vaco_jax writes and "
                                         f"removes only inside its folder; nothing was removed"):
        io.prepare_output_dir(tmp_path / "sweep", overwrite=True)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "hard link"])
def test_a_lock_file_that_is_no_plain_file_is_refused_and_its_target_untouched(tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs")
    folder = tmp_path / "run"
    folder.mkdir()
    lock = folder / LOCK_FILE
    {"symlink": lambda: lock.symlink_to(victim), "fifo": lambda: os.mkfifo(lock),
     "folder": lock.mkdir, "hard link": lambda: os.link(victim, lock)}[kind]()
    with pytest.raises(ValueError, match=r"^cannot lock .*\.vaco_jax\.lock' (is not a plain file"
                                         r"|is not a file|has other names).*choose another "
                                         r"folder$"):
        with folder_lock(folder):
            pass
    assert victim.read_text() == "theirs"
    refuse_if_in_use(folder)  # a reader is not stopped by what no process locks


RESULTS = ROOT / "experiments" / "results"


def _report_command(tmp_path: Path, command: str, out: Path) -> list[str]:
    """`command`'s flags writing into `out`, with inputs that get it as far as its output
    folder: no study for the board, a folder for a part (read only once the lock is held), a
    study for the predictors."""
    if command == "leaderboard":
        (tmp_path / "results").mkdir()
        return ["leaderboard", "--out", str(out), "--results", str(tmp_path / "results"),
                "--claims", str(RESULTS / "claims.toml"), "--card", str(ROOT / "docs" /
                                                                        "methods")]
    study = tmp_path / "study"
    study.mkdir()
    if command == "report --parts":
        return ["report", str(out), "--parts", str(study)]
    for name in ("experiment.toml", "runs.parquet"):
        shutil.copy(RESULTS / "tokens_long_lag_scan" / name, study / name)
    return ["report", str(out), "--predictors", str(study)]


@pytest.mark.parametrize("command", ["leaderboard", "report --parts", "report --predictors"])
def test_a_report_refuses_a_folder_another_process_writes(tmp_path, capsys, command):
    from vaco_jax.cli import main

    out = tmp_path / "out"
    argv = _report_command(tmp_path, command, out)
    child = hold(out)
    try:
        assert main(argv) == 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    err = capsys.readouterr().err
    assert re.fullmatch(f"vaco-jax {command.split()[0]}: error: {re.escape(repr(str(out)))} is "
                        f"in use by process {child.pid} on host .*; only one vaco-jax process "
                        f"may write a folder: wait for it to end or stop it\n", err), err
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]
