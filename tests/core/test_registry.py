"""The algorithm registries and their plugins: registration and its errors, entry points called
once on first use, a failing plugin reported, the entry point that registered each algorithm,
and an installed plugin's algorithms training in
`vaco-jax train`, `tokens` and `sweep`."""

import dataclasses
import importlib.metadata
import json
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT
from fake_plugins import fake_entry_points, install_example_plugin, private_registries
from processes import vaco_command, vaco_env
from vaco_jax import testbeds
from vaco_jax.control import algorithms as control
from vaco_jax.control.hparams import ControlHParams
from vaco_jax.experiment import parse_experiment
from vaco_jax.core.knobs import Metric
from vaco_jax.core.registry import ENTRY_POINT_GROUP
from vaco_jax.tokens import algorithms as tokens
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer


ENTRY_POINTS = importlib.metadata.entry_points
"""The real look-up of installed entry points, kept before a test replaces it."""


@pytest.fixture
def registries(monkeypatch):
    """Both testbeds' registries as private copies, their entry points not yet called."""
    private_registries(monkeypatch)


def _ppo_entry(name: str) -> control.Algorithm:
    return control.Algorithm(name, control.GAE, control.ALGORITHMS["ppo"].policy_loss)


def test_register_refuses_a_duplicate_a_bad_name_and_another_testbeds_entry(registries):
    with pytest.raises(ValueError, match="algo='ppo' is already registered on the control"):
        control.ALGORITHMS.register(_ppo_entry("ppo"))
    with pytest.raises(ValueError, match="must be an identifier, got 'my ppo'"):
        control.ALGORITHMS.register(_ppo_entry("my ppo"))
    with pytest.raises(TypeError, match="the tokens testbed's algorithms are TokenAlgorithm"):
        tokens.ALGORITHMS.register(_ppo_entry("my_ppo"))
    replaced = control.ALGORITHMS.register(_ppo_entry("ppo"), replace=True)
    assert control.ALGORITHMS["ppo"] is replaced


def test_register_refuses_a_metric_the_trainer_has_no_column_for(registries):
    unknown = Metric("wobble_fraction", "a metric no trainer writes")
    with pytest.raises(ValueError, match=r"algo='ppo_wobble' declares metric\(s\) \['wobble_"
                                         r"fraction'\] the control testbed's trainer has no "
                                         r"column"):
        control.ALGORITHMS.register(dataclasses.replace(_ppo_entry("ppo_wobble"),
                                                        metrics=(unknown,)))
    with pytest.raises(ValueError, match="the tokens testbed's trainer has no column"):
        tokens.ALGORITHMS.register(dataclasses.replace(tokens.ALGORITHMS["grpo"],
                                                       name="grpo_wobble", metrics=(unknown,)))


def test_entry_points_register_algorithms_once_on_first_use(registries, monkeypatch):
    calls = []

    def register_plugin():
        calls.append(1)
        control.ALGORITHMS.register(_ppo_entry("plugin_ppo"))
    asked = fake_entry_points(monkeypatch, ENTRY_POINT_GROUP,
                              {"register_plugin": register_plugin})
    assert not calls  # not at import: on the registry's first read
    assert "plugin_ppo" in testbeds.CONTROL.algorithms()
    assert "plugin_ppo" not in tuple(tokens.ALGORITHMS)  # reading it calls nothing again
    assert calls == [1] and asked == [ENTRY_POINT_GROUP]
    assert testbeds.CONTROL.registered_by("plugin_ppo") == (
        "entry point 'register_plugin' (fake_vaco_plugin:register_plugin) of group "
        "'vaco_jax.algorithms'")
    assert testbeds.CONTROL.registered_by("ppo") is None


def test_a_failing_plugin_warns_and_the_others_still_register(registries, monkeypatch):
    def broken():
        raise RuntimeError("no such loss")

    def good():
        control.ALGORITHMS.register(_ppo_entry("plugin_ppo"))
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP, {"broken": broken, "good": good})
    with pytest.warns(RuntimeWarning, match="'broken' .* failed to register its algorithms: "
                                            "RuntimeError: no such loss"):
        names = tuple(control.ALGORITHMS)
    assert "plugin_ppo" in names


@pytest.fixture
def example_plugin_path(tmp_path, monkeypatch):
    site = install_example_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_installed_plugins_algorithms_name_its_entry_point_and_package(
        registries, monkeypatch, example_plugin_path):
    # The real look-up finds the example installed on sys.path.
    monkeypatch.setattr(importlib.metadata, "entry_points", ENTRY_POINTS)
    source = ("entry point 'dual_clip' (dual_clip_plugin:register_all) of group "
              "'vaco_jax.algorithms', package dual-clip-plugin 0.1.0")
    assert testbeds.TOKENS.registered_by("grpo_dual_clip") == source
    assert testbeds.CONTROL.registered_by("ppo_dual_clip") == source


def test_the_example_plugins_token_algorithm_trains(registries, monkeypatch,
                                                    example_plugin_path):
    import dual_clip_plugin  # the documented example, installed for this test
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP,
                      {"register_all": dual_clip_plugin.register_all})
    config = TokenConfig(algo="grpo_dual_clip", task="add", task_size=1, layers=1, width=32,
                         heads=2, context=10, prompts=4, group_size=4, num_updates=2,
                         eval_every=2, eval_prompts=16, buffer_capacity=4)
    hparams = TokenHParams.create(learning_rate=3e-3)
    validate(config, hparams)
    params = TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0))
    trainer = TokenTrainer(config, initial_params=params)
    state = trainer.init(jax.random.PRNGKey(1), hparams)
    _, metrics = jax.jit(trainer.update)(state, hparams)
    assert np.isfinite(np.asarray(metrics["policy_loss"]))
    assert 0 <= float(metrics["clip_fraction"]) <= 1  # the plugin's own mechanism is recorded


PLUGIN_SWEEP = """\
tasks = ["add"]
algos = ["{algo}"]
seeds = 2
testbed = "tokens"

[lag]
model = "fixed"
levels = [0]

[hparams]
dual_clip = [2.0, 3.0]
"""


def test_the_example_plugin_sweeps_its_own_knob(registries, monkeypatch, example_plugin_path):
    import dual_clip_plugin
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP,
                      {"register_all": dual_clip_plugin.register_all})
    (group,) = parse_experiment(PLUGIN_SWEEP.format(algo="grpo_dual_clip")).groups
    hparams = group.hparams(range(len(group.runs)))
    np.testing.assert_allclose(hparams.dual_clip, [2.0, 2.0, 3.0, 3.0])
    assert "tv_delta" not in hparams.names  # a run holds its own knobs only
    with pytest.raises(ValueError, match=r"hyper-parameter dual_clip must lie in "
                                         r"\(1, inf\)"):
        parse_experiment(PLUGIN_SWEEP.format(algo="grpo_dual_clip").replace("2.0, 3.0", "0.5"))
    with pytest.raises(ValueError, match="algo='grpo' does not read hyper-parameter\\(s\\) "
                                         "dual_clip"):
        parse_experiment(PLUGIN_SWEEP.format(algo="grpo"))


def test_the_example_plugins_knob_changes_its_loss(registries, monkeypatch, example_plugin_path):
    """A negative advantage on a ratio far above the clip: the dual clip floors its objective at
    c A, so the loss is c |A| and moves with the knob."""
    import dual_clip_plugin
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP,
                      {"register_all": dual_clip_plugin.register_all})
    terms = control.PolicyTerms(
        log_prob=jnp.log(jnp.array([10.0])), behaviour_log_prob=jnp.zeros(1),
        phase_log_prob=jnp.zeros(1), advantages=jnp.array([-1.0]), tv_log_rho=jnp.zeros(1),
        tv=None, kl_coef=jnp.zeros(()))
    for dual_clip in (2.0, 3.0):
        hp = ControlHParams.create(knobs=("clip_eps", "dual_clip"), dual_clip=dual_clip)
        loss, _ = dual_clip_plugin.ppo_dual_clip(terms, hp)
        np.testing.assert_allclose(loss, dual_clip, rtol=1e-6)


def _with_plugin(env: dict[str, str], site) -> dict[str, str]:
    return {**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{site}"}


@pytest.mark.slow
def test_an_installed_plugin_trains_in_train_and_sweep(example_plugin_path, tmp_path):
    env = _with_plugin(vaco_env(tmp_path / "cache"), example_plugin_path)
    run = tmp_path / "run"
    trained = subprocess.run(vaco_command(
        "train", "--env", "toy_reach", "--algo", "ppo_dual_clip", "--no-progress",
        "--total-steps", "2048", "--seeds", "1", "--out", str(run)),
        env=env, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr
    assert json.loads((run / "config.json").read_text())["config"]["algo"] == "ppo_dual_clip"
    experiment = tmp_path / "plugin.toml"
    experiment.write_text(TOY_EXPERIMENT.replace('algos = ["vaco"]', 'algos = ["ppo_dual_clip"]')
                          .replace("tv_delta = [0.1, 0.3]", "dual_clip = [2.0, 3.0]"))
    swept = subprocess.run(vaco_command("sweep", str(experiment), "--out", str(tmp_path / "sweep"),
                                        "--no-progress"),
                           env=env, capture_output=True, text=True, timeout=900)
    assert swept.returncode == 0, swept.stderr
    assert "ppo_dual_clip" in (tmp_path / "sweep" / "report.md").read_text()
    runs = pd.read_parquet(tmp_path / "sweep" / "runs.parquet")
    assert set(runs["hp_dual_clip"]) == {2.0, 3.0}  # the plugin's own knob, swept
