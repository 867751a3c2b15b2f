"""Reward scaling by the return std, value clipping and the initial log-std in the engine."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from engine_configs import TOY
from vaco_jax.control.config import ControlHParams, validate, validate_hparams
from vaco_jax.control.reward_scaling import init_reward_scaling, scale_rewards
from vaco_jax.control.train import ControlTrainer, make_train


def _numpy_reward_scaling(rollouts, gamma, num_envs):
    """Discounted returns restarted after each episode end; std over every return so far."""
    running = np.zeros(num_envs)
    seen, scaled = [], []
    for reward, done in rollouts:
        returns = []
        for r, d in zip(reward, done):
            running = r + gamma * running
            returns.append(running.copy())
            running = running * (1.0 - d)
        seen.extend(returns)
        scaled.append(reward / np.sqrt(np.var(np.stack(seen)) + 1e-8))
    return running, np.stack(seen), scaled


def test_scale_rewards_matches_numpy_reference_over_consecutive_rollouts():
    rng = np.random.default_rng(0)
    rollouts = [(rng.normal(3.0, 2.0, (6, 5)), (rng.random((6, 5)) < 0.2).astype(np.float64))
                for _ in range(3)]
    gamma = 0.9
    running, seen, expected = _numpy_reward_scaling(rollouts, gamma, num_envs=5)
    state = init_reward_scaling(5)
    for (reward, done), want in zip(rollouts, expected):
        state, got = jax.jit(scale_rewards)(state, jnp.asarray(reward, jnp.float32),
                                            jnp.asarray(done, jnp.float32), jnp.float32(gamma))
        np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(state.returns, running, rtol=1e-5)
    np.testing.assert_allclose(state.stats.count, seen.size)
    np.testing.assert_allclose(state.stats.mean[0], seen.mean(), rtol=1e-5)
    np.testing.assert_allclose(state.stats.var[0], seen.var(), rtol=1e-4)


def _phase_batch(config, hp):
    trainer = ControlTrainer(config)
    state = trainer.init(jax.random.PRNGKey(3), hp)
    _, data = trainer.collect(state, jax.random.PRNGKey(4), hp)
    return trainer, state, trainer.phase_batch(state, data, hp)


@pytest.mark.slow
def test_training_scales_the_learners_rewards_only():
    hp = ControlHParams.create()
    scaled_cfg = TOY.replace(reward_scaling="return_std")
    trainer, state, raw = _phase_batch(TOY.replace(reward_scaling="none"), hp)
    _, data = trainer.collect(state, jax.random.PRNGKey(4), hp)
    scaling, scaled = ControlTrainer(scaled_cfg).scale_rewards(state.reward_scaling, data, hp)
    std = np.sqrt(scaling.stats.var[0] + 1e-8)
    np.testing.assert_allclose(scaled.reward, np.asarray(raw.reward) / std, rtol=1e-5)
    assert std != pytest.approx(1.0, abs=1e-3)  # a no-op scaling could not pass the line above
    np.testing.assert_array_equal(scaled.completed_return, data.completed_return)

    final, metrics = jax.jit(make_train(scaled_cfg))(jax.random.PRNGKey(0), hp)
    assert final.reward_scaling.stats.count == TOY.num_updates * TOY.steps_per_update
    assert np.isfinite(np.asarray(metrics["value_loss"])).all()


def test_value_clipping_in_the_loss_matches_a_hand_computed_case():
    config = TOY.replace(reward_scaling="none")
    hp_off, hp_on = ControlHParams.create(value_clip_eps=0.0), ControlHParams.create(value_clip_eps=0.2)
    trainer, state, batch = _phase_batch(config, hp_off)
    values = np.asarray(trainer._value(state.params, state.obs_stats, batch.obs))
    targets = np.asarray(batch.value_targets)
    # Old values 1 above the current ones: clipping pulls the prediction to old - 0.2 = v + 0.8.
    batch = batch.replace(values=jnp.asarray(values + 1.0))

    def value_loss(hp):
        _, metrics = trainer._loss(state.params, batch, state.obs_stats, state.kl_coef, None, hp)
        return float(metrics["value_loss"])

    unclipped = 0.5 * np.mean((values - targets) ** 2)
    clipped = 0.5 * np.mean(np.maximum((values - targets) ** 2, (values + 0.8 - targets) ** 2))
    assert clipped > unclipped * 1.01
    np.testing.assert_allclose(value_loss(hp_off), unclipped, rtol=1e-5)
    np.testing.assert_allclose(value_loss(hp_on), clipped, rtol=1e-5)


def test_initial_log_std_is_a_vmappable_hyper_parameter():
    trainer = ControlTrainer(TOY)
    hparams = ControlHParams.stack([ControlHParams.create(init_log_std=0.0), ControlHParams.create(init_log_std=-1.5)])
    keys = jnp.stack([jax.random.PRNGKey(0)] * 2)
    states = jax.vmap(trainer.init)(keys, hparams)
    log_std = np.asarray(states.params["actor"]["params"]["log_std"])
    np.testing.assert_array_equal(log_std, [[0.0] * log_std.shape[1], [-1.5] * log_std.shape[1]])
    np.testing.assert_array_equal(states.buffer.policies.params["params"]["log_std"][:, 0],
                                  log_std)


def test_bad_reward_scaling_and_value_clip_are_rejected_by_name():
    with pytest.raises(ValueError, match="reward_scaling='std'.*return_std, none"):
        validate(TOY.replace(reward_scaling="std"))
    with pytest.raises(ValueError, match=r"value_clip_eps must lie in \[0, inf\)"):
        validate_hparams(TOY, ControlHParams.create(value_clip_eps=-0.1))


@pytest.mark.slow
def test_cli_passes_reward_scaling_and_advantage_normalization(tmp_path, capsys):
    from vaco_jax import cli

    out = tmp_path / "cli"
    args = ["train", "--env", "toy_reach", "--seeds", "1", "--total-steps", "128",
            "--num-envs", "8", "--rollout-length", "16", "--epochs", "1", "--minibatches", "1",
            "--episode-length", "40", "--eval-every", "1", "--num-eval-envs", "2",
            "--actor-hidden", "8", "--critic-hidden", "8", "--no-progress", "--out", str(out)]
    assert cli.main(args + ["--reward-scaling", "none",
                            "--advantage-normalization", "standardize"]) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert (saved["reward_scaling"], saved["advantage_normalization"]) == ("none", "standardize")
    assert cli.main(args + ["--overwrite", "--reward-scaling", "std"]) == 2
    assert "reward_scaling='std' is not supported" in capsys.readouterr().err



# Norms: actor 1, critic 100, joint sqrt(10001).
@pytest.mark.parametrize("grad_clip, actor_scale, critic_scale",
                         [("global", 10001 ** -0.5, 10001 ** -0.5), ("per_network", 1.0, 0.01)])
def test_grad_clip_selects_the_norm_max_grad_norm_bounds(grad_clip, actor_scale, critic_scale):
    trainer = ControlTrainer(TOY.replace(grad_clip=grad_clip))
    grads = {"actor": {"w": jnp.array([0.6, 0.8])}, "critic": {"w": jnp.array([60.0, 80.0])}}
    clipped, _ = trainer.gradient_clip(ControlHParams.create(max_grad_norm=1.0)).update(
        grads, optax.EmptyState())
    np.testing.assert_allclose(clipped["actor"]["w"], actor_scale * np.array([0.6, 0.8]),
                               rtol=1e-5)
    np.testing.assert_allclose(clipped["critic"]["w"], critic_scale * np.array([60.0, 80.0]),
                               rtol=1e-5)


def test_bad_grad_clip_is_rejected_by_name():
    with pytest.raises(ValueError, match="grad_clip='actor'.*global, per_network"):
        validate(TOY.replace(grad_clip="actor"))
