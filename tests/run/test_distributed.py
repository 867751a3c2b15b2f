"""One sweep over several processes (`vaco_jax.run.distributed`): the flags and variables that
start it, refused before any work when wrong; `--part auto` of a SLURM job array; and two local
CPU processes, of one and of two devices each, giving a `runs.parquet` identical to the bit to
the same sweep in one process with as many devices, also when one process is killed or
signalled mid-sweep and the folder resumed."""

import argparse
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from processes import vaco_command, vaco_env, vaco_processes, with_devices
from vaco_jax import cli
from vaco_jax.experiment import Part
from vaco_jax.run import distributed

TINY = """\
name = "tiny"
description = "two batches of two toy runs"
tasks = ["toy_reach"]
algos = ["ppo"]
seeds = 2

[lag]
model = "uniform"
levels = [0, 2]

[forward]
epochs = 1
minibatches = 1

[config]
num_envs = 4
rollout_length = 8
total_steps = 64
buffer_capacity = 4
episode_length = 20
eval_every = 1
num_eval_envs = 2
actor_hidden = [8]
critic_hidden = [8]
"""
"""4 runs of 2 updates, one chunk each: two batches of 2 runs on 2 devices, one of 4 on 4."""


# ---------------------------------------------------------------- flags and variables


def settings(environ=None, **flags) -> distributed.Launch | None:
    args = argparse.Namespace(**{name: flags.get(name) for name in distributed.FLAGS})
    return distributed.launch_settings(args, environ or {})


def test_no_flags_and_no_variables_mean_one_process():
    assert settings() is None


def test_flags_and_variables_give_the_launch_a_flag_winning():
    assert settings(coordinator="node1:5000", num_processes="4", process_id="3") == \
        distributed.Launch(coordinator="node1:5000", num_processes=4, process_id=3)
    environ = {distributed.ENV_COORDINATOR: "node1:5000", distributed.ENV_NUM_PROCESSES: "2",
               distributed.ENV_PROCESS_ID: "1"}
    assert settings(environ) == distributed.Launch(coordinator="node1:5000", num_processes=2,
                                                   process_id=1)
    assert settings(environ, process_id="0").process_id == 0
    assert settings(distributed=distributed.AUTO) == distributed.Launch(auto=True)
    assert settings({distributed.ENV_DISTRIBUTED: "auto"}) == distributed.Launch(auto=True)


@pytest.mark.parametrize("flags, message", [
    ({"coordinator": "node1:5000"}, r"--coordinator needs --num-processes and --process-id"),
    ({"num_processes": "2", "process_id": "0"}, r"needs --coordinator too"),
    ({"coordinator": "node1", "num_processes": "2", "process_id": "0"},
     r"--coordinator must be HOST:PORT with PORT in 1\.\.65535"),
    ({"coordinator": "node1:0", "num_processes": "2", "process_id": "0"}, r"PORT in 1\.\.65535"),
    ({"coordinator": "node1:5000", "num_processes": "0", "process_id": "0"},
     r"--num-processes must be an integer at least 1, got '0'"),
    ({"coordinator": "node1:5000", "num_processes": "2", "process_id": "2"},
     r"--process-id must be an integer 0\.\.1, got '2'"),
    ({"coordinator": "node1:5000", "num_processes": "two", "process_id": "0"},
     r"--num-processes must be an integer"),
    ({"distributed": "auto", "process_id": "0"}, r"--distributed auto detects .* leave --process-id out"),
])
def test_bad_combinations_are_refused_naming_the_flag(flags, message):
    with pytest.raises(ValueError, match=message):
        settings(**flags)


def test_a_refused_launch_fails_the_command_before_any_work(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "experiment.toml", "--out", str(out), "--coordinator",
                     "localhost:5000", "--num-processes", "2"]) == 2
    assert "--coordinator, --num-processes needs --process-id too" in capsys.readouterr().err
    assert not out.exists()


def test_importing_and_parsing_start_no_jax_backend(tmp_path):
    """`jax.distributed.initialize` must come before any JAX computation: the package computes
    none as it is imported or parses its flags."""
    code = ("import vaco_jax.cli as c; from jax._src import xla_bridge as xb; "
            "c._parser().parse_args(['train', '--hparam', 'learning_rate=0.1']); "
            "c._parser().parse_args(['sweep', 'x.toml', '--part', '1/2']); "
            "print(bool(xb._backends))")
    done = subprocess.run([sys.executable, "-c", code], env=vaco_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


# ---------------------------------------------------------------- --part auto


def test_part_auto_reads_the_job_array():
    assert Part.parse("auto", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "3",
                               "SLURM_ARRAY_TASK_MIN": "0"}) == Part(1, 3)
    assert Part.parse("auto", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3",
                               "SLURM_ARRAY_TASK_MIN": "1"}) == Part(3, 3)
    assert Part.parse("auto", {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3",
                               "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "2"}) == \
        Part(3, 3)


@pytest.mark.parametrize("environ, message", [
    ({}, r"SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT are not set; give --part K/N"),
    ({"SLURM_ARRAY_TASK_ID": "1"}, r"SLURM_ARRAY_TASK_COUNT is not set"),
    ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, r"must be integers"),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1"},
     r"task 5 is not one of the 2 tasks"),
])
def test_part_auto_outside_a_job_array_is_refused(environ, message):
    with pytest.raises(ValueError, match=message):
        Part.parse("auto", environ)


# ---------------------------------------------------------------- two processes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("experiment") / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A compilation cache the children share: a resumed process reads what a killed one
    compiled."""
    return tmp_path_factory.mktemp("compilation_cache")


def sweep_args(experiment: Path | None, out: Path) -> list[str]:
    if experiment is None:
        return ["sweep", "--resume", "--out", str(out), "--no-progress"]
    return ["sweep", str(experiment), "--out", str(out), "--max-runs-per-batch", "2",
            "--no-progress"]


def one_process(args: list[str], cache: Path, devices: int) -> None:
    done = subprocess.run(vaco_command(*args), env=with_devices(vaco_env(cache), devices),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def succeeded(done: list[subprocess.CompletedProcess]) -> None:
    for index, process in enumerate(done):
        assert process.returncode == 0, f"process {index}: {process.stderr[-3000:]}"


def same_table(a: Path, b: Path) -> bool:
    return pq.read_table(a / "runs.parquet").equals(pq.read_table(b / "runs.parquet"))


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory, tiny, cache) -> Path:
    """The sweep in one process of two devices."""
    out = tmp_path_factory.mktemp("one_process") / "sweep"
    one_process(sweep_args(tiny, out), cache, devices=2)
    return out


@pytest.mark.slow  # whole sweeps in child processes, as the interruption tests
def test_two_processes_of_one_device_give_the_table_of_one_process(two_devices, tiny, cache,
                                                                   tmp_path):
    one, two = two_devices, tmp_path / "two"
    done = vaco_processes(sweep_args(tiny, two), 2, cache)
    succeeded(done)
    assert same_table(two, one)
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert "report:" in done[0].stdout and "report:" not in done[1].stdout  # process 0 reports
    # Process 0's refusal (the folder holds a sweep) ends every process alike, none hanging.
    again = vaco_processes(sweep_args(tiny, two), 2, cache)
    assert [p.returncode for p in again] == [2, 2]
    assert all("already exists and is not empty" in p.stderr for p in again)


@pytest.mark.slow  # whole sweeps in child processes, as the interruption tests
def test_two_processes_of_two_devices_one_killed_then_resumed_give_the_table_of_one_process(
        tiny, cache, tmp_path):
    """Process 1 killed after the chunk of the second update: process 0, the writer, fails at
    a later collective, having saved at least the first chunk's checkpoint (process 1 could not
    finish the second chunk's collectives before process 0 had written the first's; whether
    process 0 also saved the second depends on when the kill reaches its sockets); two
    processes resume the folder to the table of one process of four devices."""
    one, two = tmp_path / "one", tmp_path / "two"
    one_process(sweep_args(tiny, one), cache, devices=4)
    killed = vaco_processes(sweep_args(tiny, two), 2, cache, devices_each=2,
                            faults={1: "SIGKILL@chunk:2"})
    assert killed[1].returncode == -9
    assert killed[0].returncode == 1, killed[0].stderr[-3000:]
    assert "another process of this run stopped or failed" in killed[0].stderr
    assert not (two / "runs.parquet").exists()
    saved = {p.name for p in (two / "runs" / "toy_reach-ppo-e1m1-0" / "checkpoint").iterdir()}
    assert "1" in saved and saved <= {"1", "2"}
    succeeded(vaco_processes(sweep_args(None, two), 2, cache, devices_each=2))
    assert same_table(two, one)


@pytest.mark.slow  # whole sweeps in child processes, as the interruption tests
def test_a_signal_to_one_process_stops_every_process_and_resume_completes(two_devices, tiny,
                                                                          cache, tmp_path):
    """SIGTERM reaches process 0 only, after the first batch's first chunk: both processes stop
    before the second batch (after the chunk at which they agree on it) with exit 143, and
    two processes resume the folder to the table of one process."""
    out = tmp_path / "sweep"
    stopped = vaco_processes(sweep_args(tiny, out), 2, cache, faults={0: "SIGTERM@chunk:1"})
    assert [p.returncode for p in stopped] == [143, 143], stopped[1].stderr[-3000:]
    assert all("interrupted by SIGTERM" in p.stderr for p in stopped)
    assert not (out / "runs" / "toy_reach-ppo-e1m1-1").exists()
    succeeded(vaco_processes(sweep_args(None, out), 2, cache))
    assert same_table(out, two_devices)
