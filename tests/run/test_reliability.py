"""Reliability of whole `vaco-jax` processes: two processes never both write one folder, and
SIGINT/SIGTERM end every command with 130/143 in every phase, saying what is saved, without a
traceback, and without losing a stop request at a batch boundary."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from processes import vaco_command, vaco_env
from vaco_jax.infra.lock import LOCK_FILE

pytestmark = pytest.mark.slow  # whole processes, compiled, stopped and raced

TRAIN = ["train", "--env", "toy_reach", "--algo", "ppo", "--seeds", "2", "--total-steps", "512",
         "--num-envs", "8", "--rollout-length", "16", "--epochs", "1", "--minibatches", "1",
         "--episode-length", "40", "--eval-every", "2", "--num-eval-envs", "4",
         "--actor-hidden", "8", "--critic-hidden", "8", "--chunk-periods", "1",
         "--no-progress"]  # 2 periods of 2 updates, a chunk each
SWEEP = """\
name = "two"
tasks = ["toy_reach"]
algos = ["ppo", "vaco"]
seeds = 2

[lag]
model = "uniform"
levels = [0]

[config]
num_envs = 8
rollout_length = 16
total_steps = 512
episode_length = 40
eval_every = 2
num_eval_envs = 4
actor_hidden = [8]
critic_hidden = [8]
"""  # two groups (so the second compiles in the background), each one batch of 2 periods


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compilation_cache")


@pytest.fixture
def experiment(tmp_path) -> Path:
    path = tmp_path / "two.toml"
    path.write_text(SWEEP)
    return path


def vaco(cache: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(vaco_command(*args), env=vaco_env(cache, fault), capture_output=True,
                          text=True, timeout=600)


def stopped_holder(cache: Path, *args: str) -> subprocess.Popen:
    """A `vaco-jax` process that stops itself (SIGSTOP) after its first chunk, holding its
    folder's lock, until it is continued."""
    child = subprocess.Popen(vaco_command(*args), env=vaco_env(cache, "SIGSTOP@chunk:1"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "T":
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.2)
    return child


def continue_to_the_end(child: subprocess.Popen) -> str:
    """Continues a `stopped_holder` each time it stops (once per batch) until it exits; its
    stderr."""
    deadline = time.monotonic() + 300
    while child.poll() is None:
        assert time.monotonic() < deadline, "the holder did not finish"
        child.send_signal(signal.SIGCONT)
        time.sleep(0.5)
    return child.stderr.read()


def assert_refused(result: subprocess.CompletedProcess, pid: int) -> None:
    assert result.returncode == 2, result.stderr
    assert f"is in use by process {pid} on host" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_two_trains_never_write_one_folder(cache, tmp_path):
    out = tmp_path / "run"
    holder = stopped_holder(cache, *TRAIN, "--out", str(out))
    try:
        assert_refused(vaco(cache, "train", "--resume", str(out)), holder.pid)
        assert_refused(vaco(cache, *TRAIN, "--out", str(out), "--overwrite"), holder.pid)
        assert_refused(vaco(cache, *TRAIN, "--out", str(out), "--seed-offset", "5",
                            "--overwrite"), holder.pid)
    finally:
        err = continue_to_the_end(holder)
    assert holder.returncode == 0, err
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] and [r["seed"] for r in status["runs"]] == [0, 1]
    assert not (out / LOCK_FILE).exists()


def test_two_sweeps_never_write_one_folder(cache, tmp_path, experiment):
    out = tmp_path / "sweep"
    holder = stopped_holder(cache, "sweep", str(experiment), "--out", str(out), "--no-progress")
    try:
        assert_refused(vaco(cache, "sweep", str(experiment), "--out", str(out), "--overwrite",
                            "--no-progress"), holder.pid)
        assert_refused(vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress"),
                       holder.pid)
        assert_refused(vaco(cache, "report", str(out)), holder.pid)
    finally:
        err = continue_to_the_end(holder)
    assert holder.returncode == 0, err
    assert (out / "report.md").is_file()


def test_signals_while_training_say_what_is_saved(cache, tmp_path):
    out = tmp_path / "my runs" / "first"  # a path to quote in the resume command
    quoted = f"'{out}'"
    compiling = vaco(cache, *TRAIN, "--out", str(out), fault="SIGINT@compile:0")
    assert compiling.returncode == 130, compiling.stderr
    assert "Traceback" not in compiling.stderr
    assert "stopped by SIGINT; every file written so far is complete" in compiling.stderr
    assert f"continue with: vaco-jax train --resume {quoted}" in compiling.stderr
    assert not (out / "checkpoint").exists() or not any((out / "checkpoint").iterdir())
    last = vaco(cache, "train", "--resume", str(out), fault="SIGTERM@chunk:2")
    assert last.returncode == 143, last.stderr
    assert "SIGTERM arrived after the last chunk; the work is complete" in last.stderr
    assert json.loads((out / "status.json").read_text())["complete"]
    again = vaco(cache, *TRAIN, "--out", str(out), "--overwrite", fault="SIGINT@chunk:1")
    assert again.returncode == 130, again.stderr
    assert ("interrupted by SIGINT: stopped after update 2 of 4; its results and its checkpoint "
            f"at update 2 are saved; continue with: vaco-jax train --resume {quoted}"
            in again.stderr)


def test_signals_in_a_sweep_stop_it_at_every_phase(cache, tmp_path, experiment):
    out = tmp_path / "sweep"
    first_batch = out / "runs" / "toy_reach-ppo-e4m4-0"
    second_batch = out / "runs" / "toy_reach-vaco-e4m4-0"
    # While the second group compiles in the background: no abort (134), but 143, whether the
    # signal finds the first batch compiling (a stop at once) or training (after its chunk).
    background = vaco(cache, "sweep", str(experiment), "--out", str(out), "--no-progress",
                      fault="SIGTERM@background_compile:0")
    assert background.returncode == 143, background.stderr
    assert "terminate called" not in background.stderr and "Traceback" not in background.stderr
    # During a batch's last chunk: the batch finishes and the next one never starts.
    boundary = vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress",
                    fault="SIGINT@chunk:2")
    assert boundary.returncode == 130, boundary.stderr
    assert json.loads((first_batch / "status.json").read_text())["complete"]
    assert not second_batch.exists() or not (second_batch / "status.json").exists()
    assert ("1 of 2 batches finished and saved; the sweep stopped before batch "
            "toy_reach-vaco-e4m4-0" in boundary.stderr), boundary.stderr
    # Between batches: at once, the finished batch saved.
    between = vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress",
                   fault="SIGINT@batch_end:0")
    assert between.returncode == 130, between.stderr
    assert ("vaco-jax sweep: stopped by SIGINT; every file written so far is complete (each is "
            f"written atomically); continue with: vaco-jax sweep --resume --out {out}"
            in between.stderr), between.stderr
    assert json.loads((second_batch / "status.json").read_text())["complete"]
    # While the report is written: every batch is saved, the report is written on resume.
    report = vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress",
                  fault="SIGINT@report:0")
    assert report.returncode == 130, report.stderr
    assert f"continue with: vaco-jax sweep --resume --out {out}" in report.stderr
    assert not (out / "report.md").exists()
    done = vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress")
    assert done.returncode == 0 and (out / "report.md").is_file(), done.stderr


def test_a_signal_during_a_warm_start_is_one_line(cache, tmp_path):
    stopped = vaco(cache, "tokens", "--out", str(tmp_path / "run"), "--warm-start-dir",
                   str(tmp_path / "warm"), "--no-progress", fault="SIGINT@warm_start:0")
    assert stopped.returncode == 130, stopped.stderr
    # The watcher thread exits the process while the main thread goes on, which on a busy
    # machine has time to say the warm start began: that message and the stop line, no other.
    said = [line for line in stopped.stderr.strip().splitlines()
            if line and not line.startswith("warm start: training 2000 supervised steps on add")]
    assert said == [
        f"vaco-jax tokens: stopped by SIGINT; every file written so far is complete (each is "
        f"written atomically); continue with: vaco-jax tokens --resume {tmp_path / 'run'}"]
    # Nothing cached: at most the lock the interrupted training held (`run.warm_start`).
    warm = tmp_path / "warm"
    assert not warm.exists() or all(p.name.endswith(".lock") for p in warm.iterdir())


def test_a_run_whose_every_seed_diverged_is_finished(cache, tmp_path):
    out = tmp_path / "run"
    diverging = [*TRAIN, "--total-steps", "1024", "--hparam", "learning_rate=1e30"]
    first = vaco(cache, *diverging, "--out", str(out))
    assert first.returncode == 0 and "DIVERGED" in first.stdout, first.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["finished"] and not status["complete"]
    resumed = vaco(cache, "train", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert "every run diverged before this resume: the run is finished" in resumed.stdout
    assert json.loads((out / "status.json").read_text())["updates_done"] == status["updates_done"]


def test_a_finished_batchs_damaged_metrics_are_rebuilt_from_its_checkpoint(cache, tmp_path,
                                                                            experiment):
    out = tmp_path / "sweep"
    assert vaco(cache, "sweep", str(experiment), "--out", str(out), "--no-progress").returncode == 0
    runs = pd.read_parquet(out / "runs.parquet")
    metrics = out / "runs" / "toy_reach-ppo-e4m4-0" / "metrics.parquet"
    expected = pd.read_parquet(metrics)
    metrics.write_bytes(metrics.read_bytes()[:100])
    report = vaco(cache, "report", str(out))
    assert report.returncode == 2
    assert (f"cannot read {str(metrics)!r}" in report.stderr
            and f"vaco-jax sweep --resume --out {out}` rewrites them" in report.stderr)
    repaired = vaco(cache, "sweep", "--resume", "--out", str(out), "--no-progress")
    assert repaired.returncode == 0, repaired.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(metrics), expected)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"), runs)


LIBRARY = """
import os
import signal
import sys
# A Python caller whose Ctrl-C is a KeyboardInterrupt, whatever the test's parent ignores (a shell
# starts background jobs with SIGINT ignored, and Python then keeps it ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
from vaco_jax.experiment import parse_experiment, sweep
try:
    sweep(sys.argv[1], parse_experiment(sys.argv[2]), progress=False)
except KeyboardInterrupt:
    print("KeyboardInterrupt raised", flush=True)
os.environ.pop("VACO_JAX_TEST_FAULT")
sweep(sys.argv[1], resume=True, progress=False)  # in the same interpreter
print("resumed to the end", flush=True)
"""


def test_ctrl_c_from_python_is_a_keyboard_interrupt(cache, tmp_path):
    """Used from Python (a script, a notebook), a sweep, which handles signals itself, turns
    Ctrl-C outside a run's chunks into the KeyboardInterrupt Python users expect, which
    releases the folders' locks."""
    out = tmp_path / "sweep"
    script = subprocess.run([sys.executable, "-c", LIBRARY, str(out), SWEEP], capture_output=True,
                            text=True, env=vaco_env(cache, "SIGINT@compile:0"), timeout=600)
    assert script.returncode == 0, script.stderr
    assert script.stdout.splitlines()[0] == "KeyboardInterrupt raised"
    assert script.stdout.splitlines()[-1] == "resumed to the end"
    assert (out / "report.md").is_file()
    assert not list(out.rglob(LOCK_FILE))
