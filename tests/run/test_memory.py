"""Runs that do not fit memory are refused from their shapes alone, before anything is allocated
or written: by `memory.check_memory` and the `train` and `tokens` commands."""

import subprocess
import sys
import time

import pytest
from engine_configs import TOY
from processes import vaco_env

from vaco_jax import cli, testbeds
from vaco_jax.control.config import ControlHParams
from vaco_jax.run import driver, memory, program
from vaco_jax.tokens.config import TokenConfig, TokenHParams

HUGE = TOY.replace(num_envs=100_000_000, total_steps=100_000_000 * 16 * 4)
"""A run of hundreds of GiB: allocating it would fail or swap the machine."""
GIB = 2**30


PEAK = """
import re, sys
from vaco_jax.cli import main
code = main(sys.argv[1:])
status = open("/proc/self/status").read()
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status)[1]) * 1024)  # this process's peak, after exec
sys.exit(code)
"""


def test_the_command_refuses_a_huge_run_without_allocating_it(tmp_path):
    """In a process of its own, whose peak resident memory stays at what importing JAX takes,
    far below the run's hundreds of GiB."""
    out = tmp_path / "run"
    child = subprocess.run([sys.executable, "-c", PEAK, "train", "--env", "toy_reach",
                            "--num-envs", "100000000", "--out", str(out)],
                           env=vaco_env(tmp_path / "cache"), capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 2, child.stderr
    assert "of device memory" in child.stderr and "more than the budget" in child.stderr
    assert int(child.stdout.split()[-1]) < 2 * GIB
    assert not out.exists()


def test_a_run_too_large_is_refused_in_seconds_without_allocating_it():
    start = time.perf_counter()
    estimate = memory.run_memory(HUGE, ControlHParams.create())
    with pytest.raises(ValueError) as refused:
        memory.check_memory(HUGE, ControlHParams.create(), 2, budget_bytes=GIB)
    assert time.perf_counter() - start < 10
    assert estimate.device > 100 * GIB and estimate.host > GIB
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"2 runs per device need about {2 * estimate.device / GIB:,.1f} "
                              f"GiB of device memory ({estimate.device / GIB:,.1f} GiB each), "
                              f"more than the budget of 1.0 GiB per device; lower the run's size "
                              f"(num_envs, rollout_length, ")
    assert message.endswith("or the number of runs (--seeds), or raise --memory-budget")


def test_a_small_run_fits_the_default_budgets():
    memory.check_memory(TOY, ControlHParams.create(), 2)


def test_the_runs_are_counted_per_device_as_the_driver_shards_them():
    for num_runs in range(1, 13):
        for num_devices in range(1, 9):
            used = program.run_devices(num_runs, [object()] * num_devices)
            assert memory.runs_per_device(num_runs, num_devices) == num_runs // len(used)
    budget = memory.run_memory(TOY, ControlHParams.create()).device * 2
    memory.check_memory(TOY, ControlHParams.create(), 4, budget_bytes=budget,
                        devices=[object()] * 2)
    with pytest.raises(ValueError, match="3 runs per device need about"):
        memory.check_memory(TOY, ControlHParams.create(), 3, budget_bytes=budget,
                            devices=[object()] * 2)  # 3 runs do not split over 2 devices


def test_the_host_check_refuses_runs_whose_metrics_and_checkpoints_do_not_fit(monkeypatch):
    host = memory.run_memory(TOY, ControlHParams.create()).host
    metrics = len(testbeds.CONTROL.metrics) * (TOY.num_updates + 1) * 4
    assert host > metrics  # a host copy of the train state, and the metrics
    monkeypatch.setattr(memory, "_available_host_bytes", lambda: int(4.5 * host))
    memory.check_memory(TOY, ControlHParams.create(), 2, budget_bytes=100 * GIB)
    with pytest.raises(ValueError, match=r"^3 runs need about .* of host memory \(.* each\) for "
                                         r"their metrics and checkpoints, more than the host "
                                         r"budget of .* \(50% of the available host memory\); "
                                         r"shorten the run \(total_steps: 4 updates keep a row "
                                         r"of metrics each\), lower the run's size "
                                         r"\(num_envs, .*\) or the number of runs \(--seeds\)$"):
        memory.check_memory(TOY, ControlHParams.create(), 3, budget_bytes=100 * GIB)


@pytest.mark.parametrize("config, hparams", [(TOY, ControlHParams.create()),
                                             (TokenConfig(), TokenHParams.create())],
                         ids=["control", "tokens"])
def test_the_fields_a_refusal_names_grow_the_estimate(config, hparams):
    base = memory.run_memory(config, hparams).device
    for field in memory.SIZE_FIELDS[config.testbed]:
        value = getattr(config, field)
        bigger = tuple(2 * v for v in value) if isinstance(value, tuple) else 2 * value
        assert memory.run_memory(config.replace(**{field: bigger}), hparams).device > base, field


def test_a_token_run_is_estimated_without_its_warm_start(monkeypatch):
    from vaco_jax.tokens import warm_start

    def no_training(*args, **kwargs):
        raise AssertionError("the estimate trained a warm start")

    monkeypatch.setattr(warm_start, "supervised_train", no_training)
    assert memory.run_memory(TokenConfig(warm_start_dir=None), TokenHParams.create()).device > 0


def _no_driver(*args, **kwargs):
    raise AssertionError("the driver was built for runs that do not fit")


def test_train_refuses_runs_too_large_writing_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(driver, "Driver", _no_driver)
    out = tmp_path / "run"
    assert cli.main(["train", "--env", "toy_reach", "--num-envs", "100000000", "--no-progress",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaco-jax train: error: 2 runs per device need about ")
    assert "more than the budget of" in err and "raise --memory-budget" in err
    assert not out.exists()


def test_train_checks_against_the_given_memory_budget(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(driver, "Driver", _no_driver)
    out = tmp_path / "run"
    assert cli.main(["train", "--env", "toy_reach", "--memory-budget", "0.001", "--no-progress",
                     "--out", str(out)]) == 2
    assert "more than the budget of 1.0 MiB per device" in capsys.readouterr().err
    assert not out.exists()


def test_tokens_refuses_runs_too_large_before_any_warm_start(monkeypatch, tmp_path, capsys):
    from vaco_jax.tokens import warm_start

    monkeypatch.setattr(warm_start, "supervised_train", _no_driver)
    monkeypatch.setattr(driver, "Driver", _no_driver)
    out = tmp_path / "run"
    assert cli.main(["tokens", "--prompts", "100000", "--group-size", "1000", "--no-progress",
                     "--warm-start-dir", str(tmp_path / "warm"), "--out", str(out)]) == 2
    assert "lower the run's size (prompts, group_size, " in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "lots"])
def test_the_memory_budget_must_be_a_positive_number(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--env", "toy_reach", "--memory-budget", value,
                  "--out", str(tmp_path / "run")])
    assert exit_.value.code == 2
    assert (f"argument --memory-budget: must be a positive number of GiB, got {value!r}"
            in capsys.readouterr().err)
    assert not (tmp_path / "run").exists()
