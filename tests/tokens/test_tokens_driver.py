"""The token testbed through the shared driver, sweep and command line.

Every run here has the same config and two runs, so the driver's programs compile once (the
sweep's batches hold two runs too) and the warm start is trained once, into a cache.
"""

import json
import textwrap

import jax
import numpy as np
import pandas as pd
import pytest
from test_tokens_train import STALE

from vaco_jax import cli
from vaco_jax import experiment as sweep
from vaco_jax.run.driver import Driver
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.warm_start import WarmStart

HPARAMS = TokenHParams.create(lag=1.0, learning_rate=3e-3)
SEEDS = [0, 1]


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> TokenConfig:
    return STALE.replace(warm_start=WarmStart(steps=2, batch=8),
                         warm_start_dir=str(tmp_path_factory.mktemp("warm_start")))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, config):
    out = tmp_path_factory.mktemp("tokens") / "run"
    return out, Driver(config, HPARAMS, SEEDS).run(out, chunk_periods=1, progress=False)


@pytest.mark.slow
def test_token_run_writes_metrics_status_and_config(straight, config):
    out, result = straight
    assert result.complete and result.updates_done == config.num_updates
    table = pd.read_parquet(out / "metrics.parquet")
    assert len(table) == len(SEEDS) * (config.num_updates + 1)
    evaluated = table[table["update"] % config.eval_every == 0]
    assert evaluated["eval_accuracy"].between(0, 1).all()
    assert table.loc[table["update"] % config.eval_every != 0, "eval_accuracy"].isna().all()
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] and [r["final_eval_accuracy"] for r in status["runs"]] == [
        pytest.approx(a) for a in evaluated[evaluated["update"] == 4]["eval_accuracy"]]
    saved = json.loads((out / "config.json").read_text())
    assert saved["testbed"] == "tokens" and saved["seeds"] == SEEDS
    rebuilt = Driver.from_run_dir(out)
    assert rebuilt.config == config and rebuilt.record.identity == saved["run_identity"]
    jax.tree.map(np.testing.assert_array_equal, rebuilt.hparams, result.hparams)


@pytest.mark.slow
def test_token_run_resumes_bit_identically(straight, config, tmp_path):
    reference, uninterrupted = straight
    out = tmp_path / "run"
    first = Driver(config, HPARAMS, SEEDS).run(out, chunk_periods=1, max_chunks=1,
                                               progress=False)
    assert not first.complete and first.updates_done == config.eval_every
    resumed = Driver.from_run_dir(out).run(out, resume=True, progress=False)
    assert resumed.complete
    for name, values in uninterrupted.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    jax.tree.map(np.testing.assert_array_equal, resumed.state, uninterrupted.state)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "metrics.parquet"),
                                  pd.read_parquet(reference / "metrics.parquet"))


@pytest.mark.slow
def test_cli_resumes_a_token_run(straight, capsys):
    out, _ = straight
    assert cli.main(["tokens", "--resume", str(out), "--no-progress"]) == 0  # complete: no-op
    printed = capsys.readouterr().out
    assert "grpo on add: 4 updates, 64 sampled responses per seed" in printed
    assert "seed 1: held-out accuracy" in printed


@pytest.mark.slow
def test_token_sweep_writes_runs_table_and_report(config, tmp_path):
    ws = config.warm_start
    text = textwrap.dedent(f"""\
        name = "tokens_tiny"
        testbed = "tokens"
        tasks = ["add"]
        algos = ["grpo"]
        seeds = {len(SEEDS)}

        [lag]
        model = "fixed"
        levels = [0, 1]

        [forward]
        epochs = {config.epochs}
        minibatches = {config.minibatches}

        [config]
        task_size = {config.task_size}
        layers = {config.layers}
        width = {config.width}
        heads = {config.heads}
        context = {config.context}
        prompts = {config.prompts}
        group_size = {config.group_size}
        buffer_capacity = {config.buffer_capacity}
        num_updates = {config.num_updates}
        eval_every = {config.eval_every}
        eval_prompts = {config.eval_prompts}
        partial_credit = true
        warm_start = {{ steps = {ws.steps}, batch = {ws.batch} }}
        warm_start_dir = {json.dumps(config.warm_start_dir)}

        [hparams]
        learning_rate = 3e-3

        [reference_returns]
        add = 1.0
    """)
    experiment = sweep.parse_experiment(text)
    assert [g.config for g in experiment.groups] == [config]
    out = tmp_path / "sweep"
    summary = sweep.sweep(out, experiment, max_runs_per_batch=len(SEEDS), progress=False)
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs["run_id"].nunique() == 4 and sorted(runs["update"].unique()) == [0, 2, 4]
    assert sorted(runs["env_steps"].unique()) == [0, 32, 64]  # sampled responses
    assert runs["eval_accuracy"].between(0, 1).all() and "eval_return" not in runs
    assert {"reward_mean", "tv_backward", "clip_fraction"} <= set(runs.columns)
    assert summary.score.name == "held-out accuracy" and len(summary.cells) == 2
    report = (out / "report.md").read_text()
    assert "initial held-out accuracy" in report and "Sampled responses per run" in report
    assert (out / "fig_learning_curves.png").is_file()


@pytest.mark.parametrize("testbed_toml", ["tokens", "control"])
def test_plan_trains_nothing_and_writes_nothing(testbed_toml, tmp_path, monkeypatch, capsys):
    """`--plan` sizes every group from abstract shapes: no warm start is trained or written,
    on either testbed, and no folder appears where the command runs."""
    from vaco_jax.tokens import warm_start

    def no_training(*args, **kwargs):
        raise AssertionError("--plan trained a warm start")

    monkeypatch.setattr(warm_start, "supervised_train", no_training)
    monkeypatch.chdir(tmp_path)
    text = {
        "tokens": 'testbed = "tokens"\ntasks = ["add"]\nalgos = ["grpo", "vaco"]\nseeds = 2\n'
                  '[lag]\nmodel = "fixed"\nlevels = [0, 2]\n'
                  '[config]\nwarm_start_dir = "warm"\nnum_updates = 20\n',
        "control": 'tasks = ["toy_reach"]\nalgos = ["ppo"]\nseeds = 2\n'
                   '[lag]\nmodel = "uniform"\nlevels = [0, 2]\n'
                   '[config]\ntotal_steps = 4096\nbuffer_capacity = 4\n',
    }[testbed_toml]
    (tmp_path / "experiment.toml").write_text(text)
    assert cli.main(["sweep", "experiment.toml", "--plan"]) == 0
    assert "batches" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.toml"]
