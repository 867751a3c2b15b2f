"""The token study profile (`benchmarks/token_profile.py`): its phase timers count each second
once and where it ran, leave the timed functions as they were, and its slice shortens runs only."""

import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import token_profile  # noqa: E402
from vaco_jax.experiment.spec import parse_experiment  # noqa: E402
from vaco_jax.run import program, warm_start  # noqa: E402


@pytest.fixture
def slow_phases(monkeypatch):
    """`Program.initial` sleeps 0.05 s and calls `warm_start.resolve`, which sleeps 0.1 s."""
    def resolve(start):
        time.sleep(0.1)

    def initial(self, seeds, hparams):
        warm_start.resolve(None)
        time.sleep(0.05)
    monkeypatch.setattr(warm_start, "resolve", resolve)
    monkeypatch.setattr(program.Program, "initial", initial)
    return resolve, initial


def test_nested_phases_count_only_the_outermost_and_threads_apart(slow_phases):
    resolve, initial = slow_phases
    times = token_profile.PhaseTimes()
    with token_profile.timed_phases(times):
        program.Program.initial(None, (), None)  # resolve runs inside: not counted again
        worker = threading.Thread(target=warm_start.resolve, args=(None,))
        worker.start()
        worker.join()
    assert set(times.foreground) == {"first state and evaluation"}
    assert times.foreground["first state and evaluation"] == pytest.approx(0.15, abs=0.05)
    assert set(times.background) == {"warm start"}
    assert times.background["warm start"] == pytest.approx(0.1, abs=0.05)
    assert times.calls == {"first state and evaluation": 1, "warm start": 1}
    # Closed, every timed function is the one it wrapped.
    assert warm_start.resolve is resolve and program.Program.initial is initial


def test_a_failing_phase_is_timed_and_the_functions_restored(monkeypatch):
    def resolve(start):
        raise RuntimeError("no warm start")
    monkeypatch.setattr(warm_start, "resolve", resolve)
    times = token_profile.PhaseTimes()
    with pytest.raises(RuntimeError), token_profile.timed_phases(times):
        warm_start.resolve(None)
    assert times.calls == {"warm start": 1} and warm_start.resolve is resolve


TOML = """
name = "slice"
description = "a token part"
testbed = "tokens"
tasks = ["add"]
algos = ["grpo"]
seeds = 2
[lag]
model = "fixed"
levels = [0, 2]
[config]
num_updates = 40
eval_every = 10
buffer_capacity = 3
[hparams]
learning_rate = 1e-4
"""


def test_the_slice_shortens_every_run_and_keeps_the_rest():
    experiment = parse_experiment(TOML)
    sliced = token_profile.shortened(experiment, 20)
    assert [g.config.num_updates for g in sliced.groups] == [20] * len(experiment.groups)
    for before, after in zip(experiment.groups, sliced.groups):
        assert after.runs == before.runs and after.name == before.name
        assert after.config.eval_every == before.config.eval_every
