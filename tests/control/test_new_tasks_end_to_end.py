"""gymnax (discrete actions) and MuJoCo Playground tasks through the command line: one `train`
run and one sweep over both, lagged, with the report."""

import json

import numpy as np
import pandas as pd
import pytest

from vaco_jax import cli

SWEEP = """\
name = "new_tasks"
description = "a discrete gymnax task and a Playground DM Control task, lagged"
tasks = ["CartPole-v1", "CartpoleBalance"]
algos = ["vaco"]
seeds = 2

[lag]
model = "uniform"
levels = [0, 2]

[forward]
epochs = 2
minibatches = 2

[config]
num_envs = 4
rollout_length = 16
total_steps = 256
buffer_capacity = 3
eval_every = 2
num_eval_envs = 2
actor_hidden = [16]
critic_hidden = [16]

[overrides.CartpoleBalance.config]
episode_length = 50
"""


@pytest.mark.slow
def test_a_discrete_gymnax_task_trains_from_the_command_line(tmp_path):
    out = tmp_path / "cartpole"
    assert cli.main(["train", "--env", "CartPole-v1", "--algo", "vaco", "--lag", "uniform:2",
                     "--seeds", "2", "--num-envs", "4", "--rollout-length", "32",
                     "--total-steps", "1024", "--eval-every", "4", "--num-eval-envs", "2",
                     "--out", str(out), "--no-progress"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["episode_length"] == 500  # the task's own time limit
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert set(metrics["seed"]) == {0, 1}
    returns = metrics["eval_return"].dropna()
    # CartPole pays 1 per step until the pole falls or the time limit: between 1 and 500.
    assert len(returns) and np.all((returns >= 1) & (returns <= 500))
    trained = metrics[metrics["update"] > 0]  # update 0: the initial policy's evaluation only
    assert np.isfinite(trained["policy_loss"]).all() and (trained["version_gap_mean"] > 0).any()


@pytest.mark.slow
def test_a_sweep_runs_gymnax_and_playground_tasks_lagged(tmp_path):
    spec = tmp_path / "new_tasks.toml"
    spec.write_text(SWEEP)
    out = tmp_path / "sweep"
    assert cli.main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 0
    runs = pd.read_parquet(out / "runs.parquet")
    assert set(runs["task"]) == {"CartPole-v1", "CartpoleBalance"}
    assert runs["run_id"].nunique() == 2 * 2 * 2  # tasks x lag levels x seeds
    assert set(runs["lag"]) == {0.0, 2.0}
    assert runs["eval_return"].notna().all() and not runs["diverged"].any()
    assert (out / "report.md").exists()
