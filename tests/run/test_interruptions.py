"""Interruptions: a `vaco-jax` process killed or stopped at exact points (the driver's
`VACO_JAX_TEST_FAULT` hook), then resumed with nothing but its folder, ends bit-identical to an
uninterrupted run; overwritten, damaged and unwritable folders give one-line messages."""

import json
import logging
import shutil
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT as TOY
from processes import vaco_command, vaco_env
from vaco_jax import cli

pytestmark = pytest.mark.slow  # fault injection and resume on whole runs, subprocesses included

ARGS = ["--env", "toy_reach", "--algo", "vaco", "--lag", "uniform:3", "--seeds", "2",
        "--total-steps", "1024", "--num-envs", "8", "--rollout-length", "16", "--epochs", "2",
        "--minibatches", "2", "--buffer-capacity", "4", "--episode-length", "40",
        "--eval-every", "2", "--num-eval-envs", "4", "--actor-hidden", "16",
        "--critic-hidden", "16", "--chunk-periods", "1", "--no-progress"]  # 4 periods of 2 updates


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory) -> Path:
    """A persistent compilation cache the child processes share, so only the first compiles."""
    return tmp_path_factory.mktemp("compilation_cache")


def vaco(cache: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(vaco_command(*args), env=vaco_env(cache, fault), capture_output=True,
                          text=True, timeout=600)


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "metrics.parquet")


def checkpoint_steps(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoint").iterdir())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    assert cli.main(["train", *ARGS, "--out", str(out)]) == 0
    return out


def test_train_interrupted_at_every_point_then_resumed_is_bit_identical(
        reference, compilation_cache, tmp_path):
    """Killed during compilation, then (each time resumed) after a chunk, inside a checkpoint
    write, and stopped by SIGTERM; `--resume DIR` alone finishes it."""
    out = tmp_path / "run"
    killed = vaco(compilation_cache, "train", *ARGS, "--out", str(out), fault="SIGKILL@compile:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (out / "checkpoint").exists()
    for fault, code, checkpoints in [("SIGKILL@chunk:1", -signal.SIGKILL, []),
                                     ("SIGKILL@checkpoint:2", -signal.SIGKILL, ["1", "2.partial"]),
                                     ("SIGTERM@chunk:3", 128 + signal.SIGTERM, ["2", "3"])]:
        stopped = vaco(compilation_cache, "train", "--resume", str(out), fault=fault)
        assert stopped.returncode == code, stopped.stderr
        assert "Traceback" not in stopped.stderr
        assert sorted(p.name for p in (out / "checkpoint").glob("*")) == checkpoints, fault
    # SIGTERM checkpointed the chunk under way and named the command that continues.
    assert f"continue with: vaco-jax train --resume {out}" in stopped.stderr
    resumed = vaco(compilation_cache, "train", "--resume", str(out))
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))
    assert checkpoint_steps(out) == ["3", "4"]  # two kept, the half-written one cleaned
    assert json.loads((out / "status.json").read_text())["complete"]


def test_a_resume_checks_memory_on_this_machine(reference, capsys):
    assert cli.main(["train", "--resume", str(reference), "--memory-budget", "1e-6"]) == 2
    assert "more than the budget of" in capsys.readouterr().err


def test_resume_with_a_chunk_length_that_does_not_divide_the_rest(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    shutil.rmtree(out / "checkpoint" / "4")
    # Three periods are checkpointed and one remains: the chunk of 2 is cut to 1.
    assert cli.main(["train", "--resume", str(out), "--chunk-periods", "2",
                     "--keep-checkpoints", "1", "--no-progress"]) == 0
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))
    assert checkpoint_steps(out) == ["4"]


def test_sweep_killed_mid_batch_and_in_a_checkpoint_write_resumes_bit_identical(
        compilation_cache, tmp_path):
    experiment = tmp_path / "toy.toml"
    experiment.write_text(TOY)
    reference, out = tmp_path / "reference", tmp_path / "sweep"
    options = ["--max-runs-per-batch", "4", "--no-progress"]
    assert cli.main(["sweep", str(experiment), "--out", str(reference), *options]) == 0
    for fault in ("SIGKILL@checkpoint:1", "SIGTERM@chunk:1"):
        stopped = vaco(compilation_cache, "sweep", str(experiment), "--out", str(out),
                       *options, fault=fault)
        assert stopped.returncode in (-signal.SIGKILL, 128 + signal.SIGTERM), stopped.stderr
        # The next fault strikes the sweep resumed where this one stopped.
        options = ["--resume", "--no-progress"]
    assert "continue with: vaco-jax sweep --resume --out" in stopped.stderr
    resumed = vaco(compilation_cache, "sweep", "--out", str(out), "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"),
                                  pd.read_parquet(reference / "runs.parquet"))


def test_overwrite_then_resume_never_restores_the_old_run(reference, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "notes.txt").write_text("mine")
    shorter = [*ARGS, "--total-steps", "512", "--seed-offset", "5"]  # two periods
    assert cli.main(["train", *shorter, "--out", str(out), "--overwrite"]) == 2
    assert "holds 'notes.txt', which vaco_jax did not write" in capsys.readouterr().err
    assert cli.main(["train", *shorter, "--out", str(out), "--overwrite", "--keep",
                     "notes.txt"]) == 0
    fresh = metrics(out)
    assert checkpoint_steps(out) == ["1", "2"] and (out / "notes.txt").read_text() == "mine"
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 0
    pd.testing.assert_frame_equal(metrics(out), fresh)
    assert set(fresh["seed"]) == {5, 6}
    # A checkpoint copied in from another run is refused.
    shutil.rmtree(out / "checkpoint" / "2")
    shutil.copytree(reference / "checkpoint" / "4", out / "checkpoint" / "4")
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 2
    assert "belongs to another run" in capsys.readouterr().err


# A damaged checkpoint must be recognised before Orbax reads it: a failed Orbax read leaves
# background reads that print stray tracebacks later.
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", ["truncate", "flip", "metadata", "identity"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(reference, tmp_path, capsys,
                                                               damage):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    newest = out / "checkpoint" / "4"
    if damage == "truncate":
        for data in (newest / "tree").rglob("d/*"):
            data.write_bytes(data.read_bytes()[:10])
    elif damage == "flip":  # same size, one byte changed
        data = max((newest / "tree").rglob("d/*"), key=lambda f: f.stat().st_size)
        content = bytearray(data.read_bytes())
        content[len(content) // 2] ^= 0xFF
        data.write_bytes(bytes(content))
    elif damage == "metadata":
        (newest / "tree" / "_METADATA").write_text("{garbled")
    else:
        (newest / "identity.json").write_text("")
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"skipping damaged checkpoint {str(newest)!r}" in err and "Traceback" not in err
    assert "trying the previous one (step 3)" in err
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))


def test_a_resume_whose_checkpoints_are_all_damaged_is_refused_and_deletes_nothing(
        reference, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    for step in checkpoint_steps(out):
        (out / "checkpoint" / step / "identity.json").write_text("{garbled")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert "no usable checkpoint" in line and "every one is damaged" in line, line
    assert all(repr(str(out / "checkpoint" / step)) in line for step in checkpoint_steps(out))
    assert "--overwrite" in line and "trying the previous one" not in line
    assert captured.out == ""  # refused before the run's header and before compiling
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))


def test_a_damaged_manifest_warns_and_the_run_still_resumes(reference, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / ".vaco_jax.manifest.json").write_text('{"entries": {"../elsewhere": "tree"}}')
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "'../elsewhere' climbs out of its folder" in err and "the run resumes" in err, err
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))
    assert cli.main(["train", *ARGS, "--out", str(out), "--overwrite"]) == 2  # nothing removed
    assert "climbs out of its folder" in capsys.readouterr().err
    assert (out / "metrics.parquet").is_file()


@pytest.mark.parametrize("name, message", [
    ("config.json", "the run cannot be resumed; start it again with --overwrite"),
    ("status.json", None),
])
def test_unreadable_run_files_are_named_in_one_line(reference, tmp_path, capsys, name, message):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / name).write_text("{garbled")
    capsys.readouterr()
    code = cli.main(["train", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert f"cannot read {str(out / name)!r}" in err and "Traceback" not in err
    if message is None:  # status.json is rebuilt from the checkpoint, as by `sweep --resume`
        assert code == 0 and json.loads((out / name).read_text())["complete"]
    else:
        assert code == 2 and message in err


def test_unreadable_sweep_files_are_named_in_one_line(tmp_path, capsys):
    experiment = tmp_path / "toy.toml"
    experiment.write_text(TOY)
    out = tmp_path / "sweep"
    options = ["--max-runs-per-batch", "4", "--no-progress"]
    assert cli.main(["sweep", str(experiment), "--out", str(out), *options]) == 0
    expected = pd.read_parquet(out / "runs.parquet")
    status = out / "runs" / "toy_reach-vaco-e2m2-0" / "status.json"
    assert status.is_file()
    status.write_text("")
    capsys.readouterr()
    assert cli.main(["sweep", "--out", str(out), "--resume", "--no-progress"]) == 0
    assert f"cannot read {str(status)!r}" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"), expected)
    (out / "sweep.json").write_text("{")
    assert cli.main(["sweep", "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"cannot read {str(out / 'sweep.json')!r}" in err
    assert f"its finished batches are kept if the sweep is planned again: vaco-jax sweep --resume " \
           f"--replan --out {out}" in err
    written = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/metrics.parquet")}
    assert cli.main(["sweep", "--out", str(out), "--resume", "--replan", "--no-progress"]) == 0
    # The same batches, finished, kept: not one trained again.
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/metrics.parquet")} == written
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"), expected)


def test_hparam_lag_is_refused_naming_lag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--hparam", "lag=1"])
    assert "set it with --lag MODEL:PARAM" in capsys.readouterr().err


@pytest.mark.parametrize("where, message", [
    ("file", "is an existing file"),
    ("under_file", "is a file"),
    ("unwritable", "cannot create output folder"),
])
def test_bad_out_is_one_line_before_compilation(monkeypatch, tmp_path, capsys, where, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before checking --out")
    (tmp_path / "file").write_text("")
    out = {"file": tmp_path / "file", "under_file": tmp_path / "file" / "run",
           "unwritable": Path("/proc/vaco_jax_run")}[where]
    monkeypatch.setattr("vaco_jax.run.program.Program.initial", no_compilation)
    assert cli.main(["train", *ARGS, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_full_disk_keeps_the_last_good_checkpoint(reference, tmp_path, monkeypatch, capfd):
    """Orbax's writer threads log the error with its traceback, and the save raises it as
    TensorStore words it: one line says what happened and where."""
    from vaco_jax.run import checkpoint

    out = tmp_path / "run"
    real_save = checkpoint.ocp.Checkpointer.save
    saves = []

    def fill_up(self, path, *args, **kwargs):
        saves.append(path)
        if len(saves) == 3:
            logging.getLogger("absl").error(
                "[thread=array_type_handler] _SignalingThread.run() raised an exception: "
                "RESOURCE_EXHAUSTED", exc_info=ValueError("RESOURCE_EXHAUSTED"))
            raise ValueError('RESOURCE_EXHAUSTED: Error writing local file "x/ocdbt": Failed to '
                             "write 538 bytes to file 12: No space left on device "
                             "[os_error_code='28']")
        return real_save(self, path, *args, **kwargs)
    monkeypatch.setattr(checkpoint.ocp.Checkpointer, "save", fill_up)
    capfd.readouterr()
    assert cli.main(["train", *ARGS, "--out", str(out)]) == 1
    err = capfd.readouterr().err
    assert err == (f"vaco-jax train: error: could not write checkpoint "
                   f"{str(out / 'checkpoint' / '3')!r}: No space left on device; the previous "
                   f"checkpoint (step 2) is intact, free some space and resume\n")
    assert checkpoint_steps(out) == ["1", "2"]
    monkeypatch.undo()
    assert cli.main(["train", "--resume", str(out), "--no-progress"]) == 0
    pd.testing.assert_frame_equal(metrics(out), metrics(reference))
