"""A folder is owned by one process at a time (`run.lock`), and an overwrite removes exactly what
vaco_jax wrote there (`run.manifest`): foreign files at every place a run or sweep writes are
refused, or kept when named, never deleted."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

from vaco_jax.report.write import REPORT_WRITES
from vaco_jax.run import io, manifest, run_folder
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.run.lock import LOCK_FILE, FolderInUse, folder_lock, refuse_if_in_use

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys, time\n"
        "from vaco_jax.run.lock import folder_lock\n"
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
