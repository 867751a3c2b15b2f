"""Sweeps: experiment files, expansion into groups and batches, running, resume, sharding, CLI.

Every compiled test runs the same toy group with batches of 4 runs, so they share one
compilation (the sweep reuses the drivers of a config and batch size it has seen).
"""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT as TOY
from vaco_jax import cli
from vaco_jax import report
from vaco_jax import experiment as sweep
from vaco_jax.experiment import execute
from vaco_jax.report import summary as report_summary
from vaco_jax import testbeds
from vaco_jax.run import memory
from vaco_jax.run.driver import Driver
from vaco_jax.control.config import ControlHParams
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKEN_ALGORITHMS

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
BATCH = 4  # 8 runs (2 lags x 2 thresholds x 2 seeds) in two batches


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("experiment") / "toy.toml"
    path.write_text(TOY)
    return path


@pytest.fixture(scope="module")
def swept(tmp_path_factory, toy_file):
    out = tmp_path_factory.mktemp("sweep") / "toy"
    summary = sweep.sweep(out, sweep.load_experiment(toy_file), max_runs_per_batch=BATCH,
                          progress=False)
    return out, summary


# ---------------------------------------------------------------- experiments


@pytest.fixture(scope="module")
def named():
    """Every experiment file, parsed and validated."""
    return {p.stem: sweep.load_experiment(p) for p in sorted(EXPERIMENTS.glob("*.toml"))}


def test_every_experiment_file_parses_and_validates(named):
    assert {"quick", "paper_lag_sweep", "threshold_ablation", "component_ablation",
            "forward_lag"} <= set(named)
    documented = (EXPERIMENTS / "README.md").read_text()
    for name, experiment in named.items():
        assert experiment.name == name and experiment.groups
        assert f"`{name}.toml`" in documented


def test_named_experiments_cover_what_they_promise(named):
    def values(name, attribute):
        return {getattr(g.config, attribute) for g in named[name].groups}

    def lags(name):
        return {r.lag for g in named[name].groups for r in g.runs}

    sensitivity = named["lag_sensitivity"]
    assert len(values("lag_sensitivity", "env")) >= 2 and max(lags("lag_sensitivity")) >= 32
    assert {r.seed for g in sensitivity.groups for r in g.runs} == set(range(10))
    assert len(values("lag_sensitivity", "algo")) == 10

    quick = named["quick"]
    assert len(quick.groups) == 3 and len(values("quick", "algo")) == 3 and len(lags("quick")) >= 2
    paper = named["paper_lag_sweep"]
    assert values("paper_lag_sweep", "env") == {"ant", "halfcheetah", "hopper", "humanoid",
                                                "walker2d"}
    assert values("paper_lag_sweep", "algo") == {"ppo", "ppo_kl", "spo", "impala", "vaco",
                                                 "decoupled_ppo", "decoupled_ppo_ess",
                                                 "ppo_recompute"}
    assert 0 in lags("paper_lag_sweep") and len(lags("paper_lag_sweep")) >= 4
    assert all(len({r.seed for r in g.runs}) == 10 for g in paper.groups)
    assert values("paper_lag_sweep", "total_steps") == {100_000_000}
    assert all(2048 <= g.config.num_envs <= 4096 for g in paper.groups)
    vaco = [g for g in named["threshold_ablation"].groups if g.config.algo == "vaco"]
    assert all(len({r.hparams["tv_delta"] for r in g.runs}) >= 5 for g in vaco)
    assert values("component_ablation", "algo") == {"vaco", "vaco_filter_only",
                                                    "vaco_realign_only", "ppo",
                                                    "ppo_recompute"}
    assert len(lags("component_ablation")) >= 2
    control = named["control_vaco_lag"]
    assert values("control_vaco_lag", "algo") == {"vaco", "vaco_filter_only", "vaco_realign_only",
                                                  "ppo", "ppo_recompute"}
    assert lags("control_vaco_lag") == {0, 32}
    assert all({r.seed for r in g.runs} == set(range(10)) for g in control.groups)
    filtering = [g for g in control.groups if g.config.algo in ("vaco", "vaco_filter_only")]
    assert all({r.hparams["tv_delta"] for r in g.runs} == {0.015, 0.1, 0.2, 0.4}
               for g in filtering)
    staleness = named["tokens_staleness"]
    assert values("tokens_staleness", "task") == {"add", "chain"}
    assert values("tokens_staleness", "algo") == set(TOKEN_ALGORITHMS)
    assert 0 in lags("tokens_staleness") and len(lags("tokens_staleness")) >= 3
    assert values("tokens_staleness_algorithms", "algo") == set(TOKEN_ALGORITHMS)
    for name in ("tokens_staleness", "tokens_staleness_cpu", "tokens_staleness_algorithms"):
        assert all({r.seed for r in g.runs} == set(range(10)) for g in named[name].groups)
        assert {0, 32} <= lags(name)
    sizes = {g.config.task: (g.config.task_size, g.config.warm_start.steps)
             for g in staleness.groups}
    assert sizes == {"add": (2, 250), "chain": (3, 175)}
    assert all(g.config.tv_reference == "behaviour" for g in staleness.groups
               if g.config.algo == "vaco")
    swept = {g.config.algo: g.swept for g in named["tokens_thresholds"].groups}
    assert swept == {"grpo": (), "vaco": ("tv_delta",), "m2po": ("m2po_tau",),
                     "tis": ("is_cap",)}
    assert {(g.config.algo, g.config.epochs * g.config.minibatches)
            for g in named["tokens_forward_lag"].groups} == {
        (algo, steps) for algo in ("grpo", "vaco") for steps in (1, 4, 16)}
    forward = {(g.config.epochs, g.config.minibatches) for g in named["forward_lag"].groups}
    assert len(forward) >= 4 and len(lags("forward_lag")) == 1


@pytest.mark.parametrize("old, new, message", [
    ("seeds = 2", "seeds = 2\ncolour = 1", r"unknown key\(s\) \['colour'\]; allowed: \['name'"),
    ('tasks = ["toy_reach"]', 'tasks = ["cartpole"]',
     r"tasks: unknown value\(s\) \['cartpole'\]; allowed: ant, "),
    ('algos = ["vaco"]', 'algos = ["trpo"]', r"algos: unknown value\(s\) \['trpo'\]; allowed: ppo"),
    ("[hparams]", "[hparams]\nlearning_rat = 1e-3",
     r"\[hparams\]: unknown hyper-parameter\(s\) \['learning_rat'\]; allowed: \['learning_rate'"),
    ("[hparams]", "[hparams]\nclip_eps = [0.1, 'x']",
     r"\[hparams\]: hyper-parameter clip_eps needs a number, got 'x'"),
    ("[hparams]", "[hparams]\nlag = 1", r"lag is set by \[lag\] levels"),
    ("[config]", "[config]\nnum_env = 8",
     r"\[config\]: unknown ControlConfig field\(s\) \['num_env'\]; allowed: \["),
    ("[config]", "[config]\nepochs = 8", r"epochs is set by \[forward\] epochs"),
    ('model = "uniform"', 'model = "poisson"',
     r"\[lag\]: model: unknown value\(s\) \['poisson'\]; allowed: fixed, uniform"),
    ("levels = [0, 2]", "levels = [0, 4]",
     r"lag for lag_model='uniform' must be an integer in \[0, 3\]"),
    ("minibatches = 2", "minibatches = 3", "must be divisible by minibatches=3"),
    ("seeds = 2", "seeds = [1, 1]", "seeds lists a value twice"),
    ("seeds = 2\n", "", r"missing required key\(s\) \['seeds'\]"),
    ("[forward]", "[overrides.ppo.hparams]\nclip_eps = 0.1\n\n[forward]",
     r"\[overrides\]: task or algorithm: unknown value\(s\) \['ppo'\]; allowed: toy_reach, vaco"),
    ("[forward]", "[overrides.toy_reach.config]\nnum_env = 8\n\n[forward]",
     r"\[overrides.toy_reach\]: unknown ControlConfig field\(s\) \['num_env'\]"),
    ("[forward]", "[reference_returns]\nhopper = 1.0\n\n[forward]",
     r"\[reference_returns\]: task: unknown value\(s\) \['hopper'\]; allowed: toy_reach"),
    ("[forward]", "[reference_scores]\nhopper = 1.0\n\n[forward]",
     r"\[reference_scores\]: task: unknown value\(s\) \['hopper'\]; allowed: toy_reach"),
    ("seeds = 2", "seeds = ", "not valid TOML"),
    ("seeds = 2", 'seeds = 2\ntestbed = "atari"',
     "testbed='atari' is not supported; allowed values: control, tokens"),
    ("seeds = 2", 'seeds = 2\ntestbed = "tokens"',
     r"tasks: unknown value\(s\) \['toy_reach'\]; allowed: add, sort, chain"),
    ("[config]", '[config]\ntestbed = "tokens"', "testbed is set by the top-level testbed key"),
    ("seeds = 2", "seeds = 100_000_000", r"seeds = 100,000,000 is more than an experiment's "
                                         r"limit of 100,000 runs \(MAX_RUNS\); give fewer seeds"),
    ("seeds = 2", "seeds = 30_000",  # x 2 lag levels x 2 grid points
     r"expands into 120,000 runs \(tasks x algos x lag levels x grid points x seeds x forward "
     r"variants x config axis values\), more than the limit of 100,000 \(MAX_RUNS\)"),
])
def test_bad_experiments_are_rejected_naming_the_key(monkeypatch, old, new, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    assert old in TOY
    with pytest.raises(ValueError, match=message):
        sweep.parse_experiment(TOY.replace(old, new, 1))



@pytest.mark.parametrize("old, new, message", [
    ("levels = [0, 2]", "levels = [" + "0, " * 10**6 + "]",
     r"^experiment 'toy': \[lag\]: levels lists a value twice: \[0, 0, 0, [0, ]*\.\.\. "
     r"\(1,000,000 items\)$"),
    ('name = "toy"', f'name = "{"n" * 10**6}"',
     r"^experiment 'n{199}\.\.\. \(1,000,000 characters\): name must be one line of at most "
     r"255 printable characters \(no newline or terminal escape\)$"),
    ("[hparams]", "[hparams]\nclip_eps = [" + "0.2, " * 10**5 + "]",
     r"^experiment 'toy': \[hparams\]: clip_eps lists a value twice: \[0\.2, 0\.2, [0-9., ]*"
     r"\.\.\. \(100,000 items\)$"),
    ("seeds = 2", "seeds = '" + "s" * 10**6 + "'",
     r"^experiment 'toy': seeds must be a positive count or a list of integers, got "
     r"'s{199}\.\.\. \(1,000,000 characters\)$"),
])
def test_a_huge_value_is_quoted_cut_to_a_line_that_states_its_size(old, new, message):
    assert old in TOY
    with pytest.raises(ValueError) as refused:
        sweep.parse_experiment(TOY.replace(old, new, 1))
    assert re.search(message, str(refused.value)), str(refused.value)[:500]


@pytest.mark.parametrize("name", ['name = "red\\u001b[31m\\nname"', ""])
def test_an_experiment_name_that_would_act_on_a_terminal_is_refused_shown_escaped(
        tmp_path, capsys, name):
    """A name is printed by the plan, the progress bar and the report (or taken from the file's
    name where the experiment gives none)."""
    path = tmp_path / ("toy.toml" if name else "red\x1b[31m\nname.toml")
    path.write_text(TOY.replace('name = "toy"', name))
    assert cli.main(["sweep", str(path), "--plan"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"vaco-jax sweep: error: experiment file {str(path)!r}: experiment "
        f"'red\\x1b[31m\\nname': name must be one line of at most 255 printable characters "
        f"(no newline or terminal escape)\n")


def test_reference_scores_are_read_under_their_key_and_their_older_name():
    scores = sweep.parse_experiment(TOY + "\n[reference_scores]\ntoy_reach = 50.0\n")
    returns = sweep.parse_experiment(TOY + "\n[reference_returns]\ntoy_reach = 50.0\n")
    assert scores.reference_scores == returns.reference_scores == {"toy_reach": 50.0}
    assert scores.groups == returns.groups and sweep.same_experiment(scores, returns)
    assert not sweep.same_experiment(scores, sweep.parse_experiment(TOY))


def test_reference_scores_under_both_names_are_refused_naming_both():
    text = TOY + "\n[reference_scores]\ntoy_reach = 50.0\n\n[reference_returns]\ntoy_reach = 50.0\n"
    with pytest.raises(ValueError, match=r"^experiment 'toy': \[reference_scores\] and "
                                         r"\[reference_returns\] are one table"):
        sweep.parse_experiment(text)

def test_expansion_into_groups_and_runs():
    text = TOY.replace('tasks = ["toy_reach"]', 'tasks = ["toy_reach", "inverted_pendulum"]') \
        .replace('algos = ["vaco"]', 'algos = ["ppo", "vaco"]') \
        .replace("epochs = 2", "epochs = [1, 2]") \
        .replace("tv_delta = [0.1, 0.3]", "") \
        + "\n[overrides.vaco.hparams]\ntv_delta = [0.1, 0.2, 0.4]\n" \
        + "\n[overrides.ppo.forward]\nepochs = 4\n"
    experiment = sweep.parse_experiment(text)
    assert [g.name for g in experiment.groups] == [
        "toy_reach-ppo-e4m2", "toy_reach-vaco-e1m2", "toy_reach-vaco-e2m2",
        "inverted_pendulum-ppo-e4m2", "inverted_pendulum-vaco-e1m2",
        "inverted_pendulum-vaco-e2m2"]
    ppo, vaco = experiment.groups[0], experiment.groups[2]
    assert len(ppo.runs) == 2 * 2 and ppo.swept == ()  # lags x seeds
    assert len(vaco.runs) == 2 * 3 * 2 and vaco.swept == ("tv_delta",)
    assert experiment.num_runs == 2 * (4 + 12 + 12)
    assert experiment.swept_hparams == ("tv_delta",)
    # Order: lag level, then grid point, then seed (fastest).
    assert [(r.lag, r.hparams["tv_delta"], r.seed) for r in vaco.runs[:4]] == [
        (0.0, 0.1, 0), (0.0, 0.1, 1), (0.0, 0.2, 0), (0.0, 0.2, 1)]
    assert vaco.runs[6].lag == 2.0 and vaco.runs[-1].run_id == "toy_reach-vaco-e2m2-r11"
    assert (vaco.config.env, vaco.config.algo, vaco.config.lag_model.name, vaco.config.epochs,
            vaco.config.minibatches, vaco.config.num_envs) == ("toy_reach", "vaco", "uniform", 2,
                                                               2, 8)
    stacked = vaco.hparams([1, 7])
    np.testing.assert_allclose(stacked.tv_delta, [0.1, 0.1])
    np.testing.assert_allclose(stacked.lag, [0.0, 2.0])
    np.testing.assert_allclose(stacked.learning_rate, [1e-3, 1e-3])
    np.testing.assert_allclose(stacked.gamma, [ControlHParams().gamma] * 2)
    assert "clip_eps" not in stacked.names  # vaco does not read it, so its runs do not hold it



def test_task_overrides_apply_before_algorithm_overrides():
    text = TOY.replace('tasks = ["toy_reach"]', 'tasks = ["toy_reach", "inverted_pendulum"]') \
        .replace('algos = ["vaco"]', 'algos = ["ppo", "vaco"]') \
        .replace("tv_delta = [0.1, 0.3]\n", "") \
        + "\n[overrides.inverted_pendulum.config]\nnum_envs = 4\nrollout_length = 16\n" \
        + "\n[overrides.inverted_pendulum.hparams]\nlearning_rate = 5e-4\n" \
        + "\n[overrides.vaco.config]\nnum_envs = 16\n"
    groups = {g.name: g for g in sweep.parse_experiment(text).groups}
    shape = {name: (g.config.num_envs, g.config.rollout_length) for name, g in groups.items()}
    default = sweep.parse_experiment(TOY).groups[0].config
    assert shape == {
        "toy_reach-ppo-e2m2": (8, default.rollout_length),
        "toy_reach-vaco-e2m2": (16, default.rollout_length),
        "inverted_pendulum-ppo-e2m2": (4, 16),
        # The algorithm's override wins over the task's, key by key.
        "inverted_pendulum-vaco-e2m2": (16, 16),
    }
    rates = {name: float(g.hparams([0]).learning_rate[0]) for name, g in groups.items()}
    assert rates["toy_reach-ppo-e2m2"] == pytest.approx(1e-3)
    assert rates["inverted_pendulum-ppo-e2m2"] == pytest.approx(5e-4)


# ---------------------------------------------------------------- batches


def test_batch_capacity_from_a_memory_budget():
    assert sweep.batch_capacity(run_bytes=100, budget_bytes=350, num_devices=1) == 3
    assert sweep.batch_capacity(100, 350, 1, max_runs_per_batch=2) == 2
    assert sweep.batch_capacity(100, 350, 2) == 6  # the budget is per device
    assert sweep.batch_capacity(100, 350, 2, max_runs_per_batch=5) == 4  # a multiple of 2
    # All of a batch's runs share the host budget: a batch shrinks to fit it.
    assert sweep.batch_capacity(100, 1000, 2, host_run_bytes=10, host_budget_bytes=45) == 4


@pytest.mark.parametrize("host, message", [
    ({}, r"^one run needs about 100 B of device memory, more than the budget of 50 B per "
         r"device; lower the run's size, or raise --memory-budget$"),
    ({"host_run_bytes": 10, "host_budget_bytes": 15},
     r"^2 runs need about 20 B of host memory \(10 B each\) for their metrics and checkpoints, "
     r"more than the host budget of 15 B \(50% of the available host memory\); lower the "
     r"run's size$"),
])
def test_batch_capacity_refuses_runs_of_which_one_per_device_does_not_fit(host, message):
    with pytest.raises(ValueError, match=message):
        sweep.batch_capacity(100, 50 if not host else 1000, 2, **host)


@pytest.mark.parametrize("num_runs, capacity, devices, size, batches", [
    (8, 8, 1, 8, [8]),
    (10, 4, 1, 4, [4, 4, 2]),
    (10, 6, 2, 6, [6, 4]),
    (9, 4, 2, 4, [4, 4, 1]),
    (1, 2, 2, 2, [1]),
])
def test_split_runs_into_equal_batches(num_runs, capacity, devices, size, batches):
    got_size, split = sweep.split_runs(num_runs, capacity, devices)
    assert got_size == size and got_size % devices == 0 and got_size <= capacity
    assert [len(b) for b in split] == batches
    assert sum(split, []) == list(range(num_runs))


def test_plan_splits_groups_by_the_memory_budget():
    experiment = sweep.parse_experiment(TOY)
    run_bytes = memory.run_memory(experiment.groups[0].config,
                                  experiment.groups[0].run_hparams(0)).device
    assert run_bytes > 0
    plan = sweep.make_plan(experiment, memory_budget=int(3.5 * run_bytes),
                           devices=jax.devices()[:1])
    assert [b.runs for b in plan.batches] == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert {b.size for b in plan.batches} == {3}
    assert plan.batches[-1].padded == (6, 7, 6)
    assert plan.run_bytes == {experiment.groups[0].name: run_bytes}


def test_plan_shrinks_batches_to_the_host_budget(monkeypatch):
    experiment = sweep.parse_experiment(TOY)
    host = memory.run_memory(experiment.groups[0].config,
                             experiment.groups[0].run_hparams(0)).host
    monkeypatch.setattr(memory, "_available_host_bytes", lambda: int(5 * host))  # 2 runs fit
    plan = sweep.make_plan(experiment, memory_budget=2**40, devices=jax.devices()[:1])
    assert [b.runs for b in plan.batches] == [(0, 1), (2, 3), (4, 5), (6, 7)]


HUGE = TOY.replace("num_envs = 8", "num_envs = 100_000_000").replace(
    "total_steps = 512", "total_steps = 6_400_000_000")


def test_plan_refuses_a_group_of_which_one_run_does_not_fit_a_device():
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^group toy_reach-vaco-e2m2: one run needs about "
                                         r"[\d,.]+ GiB of device memory, more than the budget of "
                                         r"1.0 GiB per device; lower the run's size \(num_envs, "
                                         r"rollout_length, .*\), or raise --memory-budget$"):
        sweep.make_plan(sweep.parse_experiment(HUGE), memory_budget=2**30)
    assert time.perf_counter() - start < 10  # shapes are traced, nothing is allocated


@pytest.mark.parametrize("plan", [True, False], ids=["plan", "run"])
def test_cli_sweep_refuses_runs_too_large_writing_nothing(tmp_path, capsys, plan):
    (tmp_path / "huge.toml").write_text(HUGE)
    out = tmp_path / "sweep"
    args = ["sweep", str(tmp_path / "huge.toml"), "--memory-budget", "1", "--no-progress",
            *(["--plan"] if plan else ["--out", str(out)])]
    assert cli.main(args) == 2
    assert "more than the budget of 1.0 GiB per device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.toml"]


# ---------------------------------------------------------------- running


def test_sweep_writes_batches_table_and_report(swept):
    out, summary = swept
    for name in ("experiment.toml", "sweep.json", "runs.parquet", "summary.json", "report.md",
                 "fig_aggregates.png", "fig_learning_curves.png", "fig_auc.png"):
        assert (out / name).is_file(), name
    plan = json.loads((out / "sweep.json").read_text())
    assert [b["name"] for b in plan["groups"][0]["batches"]] == ["toy_reach-vaco-e2m2-0",
                                                                  "toy_reach-vaco-e2m2-1"]
    for record in (plan, report_summary.to_json(summary),
                   json.loads((out / "summary.json").read_text()),
                   json.loads((out / "runs" / "toy_reach-vaco-e2m2-0" / "config.json").read_text())):
        assert record["provenance"]["packages"]["jax"] == jax.__version__
        assert record["provenance"]["backend"] == jax.default_backend()
    runs = pd.read_parquet(out / "runs.parquet")
    assert list(runs.columns) == [
        *report.RUN_COORDINATES, "run_id", "hp_tv_delta", "update", "env_steps", "eval_return",
        *testbeds.CONTROL.training_metrics, "diverged", "diverged_at"]
    assert runs["run_id"].nunique() == 8 and len(runs) == 8 * 3  # evaluations at updates 0, 2, 4
    assert sorted(runs["env_steps"].unique()) == [0, 256, 512]
    assert set(runs["hp_tv_delta"]) == {0.1, 0.3} and set(runs["lag"]) == {0.0, 2.0}
    assert runs["eval_return"].notna().all() and not runs["diverged"].any()
    assert summary.run.num_runs == 8 and len(summary.cells) == 4

    # Row (run 1 of batch 1, update 4): its evaluation, and training metrics averaged over
    # updates 3 and 4 (those since the previous evaluation).
    metrics = pd.read_parquet(out / "runs" / "toy_reach-vaco-e2m2-1" / "metrics.parquet")
    metrics = metrics[metrics["run"] == 1].set_index("update")
    row = runs[(runs["run_id"] == "toy_reach-vaco-e2m2-r5") & (runs["update"] == 4)].iloc[0]
    assert row["eval_return"] == pytest.approx(metrics.loc[4, "eval_return"])
    for name in ("policy_loss", "tv_forward", "entropy"):
        assert row[name] == pytest.approx(metrics.loc[[3, 4], name].mean()), name
    initial = runs[runs["update"] == 0]
    assert initial[list(testbeds.CONTROL.training_metrics)].isna().all().all()


def test_a_batch_written_before_a_metric_existed_reports_it_as_nan(swept, tmp_path):
    reference, _ = swept
    out = tmp_path / "toy"
    shutil.copytree(reference, out)
    older = out / "runs" / "toy_reach-vaco-e2m2-1" / "metrics.parquet"
    pd.read_parquet(older).drop(columns=["tv_forward"]).to_parquet(older)
    runs = sweep.runs_table(sweep.load_sweep(out), out)
    expected = pd.read_parquet(reference / "runs.parquet")
    from_older = runs["run_id"].str.startswith("toy_reach-vaco-e2m2-r4")
    assert runs.loc[from_older, "tv_forward"].isna().all() and from_older.any()
    assert runs.loc[~from_older, "tv_forward"].notna().any()
    pd.testing.assert_frame_equal(runs.drop(columns="tv_forward"),
                                  expected.drop(columns="tv_forward"))


def test_resume_skips_finished_batches(swept, tmp_path, toy_file):
    reference, _ = swept
    out = tmp_path / "toy"

    class Interrupted(Exception):
        pass

    def stop_in_second_batch(batch, result):
        if batch.name.endswith("-1"):
            raise Interrupted

    with pytest.raises(Interrupted):
        sweep.sweep(out, sweep.load_experiment(toy_file), max_runs_per_batch=BATCH,
                    progress=False, on_chunk=stop_in_second_batch)
    first, second = out / "runs" / "toy_reach-vaco-e2m2-0", out / "runs" / "toy_reach-vaco-e2m2-1"
    assert sweep.batch_finished(first) and not sweep.batch_finished(second)
    mtimes = {p: p.stat().st_mtime_ns for p in first.rglob("*")}

    chunks = []
    sweep.sweep(out, resume=True, progress=False,
                on_chunk=lambda batch, result: chunks.append((batch.name, result.updates_done)))
    assert chunks == [("toy_reach-vaco-e2m2-1", 4)]  # the partial batch's last chunk only
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*")} == mtimes
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"),
                                  pd.read_parquet(reference / "runs.parquet"))


def test_prefetched_driver_compiles_in_the_background_and_runs_at_once(caplog):
    group = sweep.parse_experiment(TOY).groups[0]
    runs = (group.config, group.hparams(range(BATCH)), [r.seed for r in group.runs[:BATCH]])
    programs = execute._Programs()
    programs.prefetch(*runs)
    driver = programs.driver(*runs)  # waits for the background compilation
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        result = driver.run(progress=False)
    assert result.complete
    assert not [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]


def test_no_compiled_driver_outlives_its_sweep():
    """Each `run_sweep` call owns its drivers: the module keeps none between sweeps."""
    assert [name for name, value in vars(execute).items()
            if isinstance(value, (execute._Programs, Driver))] == []


@pytest.mark.slow
def test_runs_shard_over_two_devices_with_equal_results(swept, tmp_path, toy_file):
    reference, _ = swept
    out = tmp_path / "sharded"
    script = textwrap.dedent(f"""
        import jax
        from vaco_jax import experiment as sweep
        assert len(jax.devices()) == 2, jax.devices()
        plan = sweep.start_sweep(sweep.load_experiment({str(toy_file)!r}), {str(out)!r},
                                 max_runs_per_batch={BATCH})
        devices = set()
        sweep.run_sweep(plan, {str(out)!r}, progress=False,
                        on_chunk=lambda batch, result: devices.add(
                            len(jax.tree.leaves(result.state)[0].sharding.device_set)))
        assert devices == {{2}}, devices
        sweep.runs_table(plan, {str(out)!r}).to_parquet({str(out / "table.parquet")!r})
    """)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    if jax.config.jax_compilation_cache_dir:
        env["JAX_COMPILATION_CACHE_DIR"] = jax.config.jax_compilation_cache_dir
    finished = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads((out / "sweep.json").read_text())["num_devices"] == 2
    pd.testing.assert_frame_equal(pd.read_parquet(out / "table.parquet"),
                                  pd.read_parquet(reference / "runs.parquet"),
                                  check_exact=False, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- command line


@pytest.mark.slow
def test_cli_sweep_report_and_refusals(tmp_path, toy_file, capsys):
    out = str(tmp_path / "cli")
    args = ["sweep", str(toy_file), "--out", out, "--max-runs-per-batch", str(BATCH),
            "--no-progress"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "toy: tiny toy sweep: 8 runs (0 diverged)" in printed
    assert "vaco[tv_delta=0.3]" in printed and f"{out}/report.md" in printed
    (tmp_path / "cli" / "report.md").unlink()
    assert cli.main(["report", out]) == 0
    assert (tmp_path / "cli" / "report.md").is_file()

    assert cli.main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["sweep", "--out", out, "--resume", "--no-progress"]) == 0  # nothing left
    assert cli.main(["sweep", "--out", str(tmp_path / "new"), "--no-progress"]) == 2
    assert "experiment file is required" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a sweep folder" in capsys.readouterr().err
