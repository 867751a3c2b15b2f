"""The deterministic evaluation: one episode per environment, a finished environment held at
the state it ended in (never stepped on, where physics can blow up), its return that of the
episode alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.config import ControlConfig
from vaco_jax.control.envs.toy import ToyReach
from vaco_jax.control.hparams import ControlHParams
from vaco_jax.control.rollout import evaluate, evaluation_episodes
from vaco_jax.control.train import ControlTrainer

NUM_ENVS, EPISODE_LENGTH = 16, 400


class DriftingReach(ToyReach):
    """`toy_reach` pushed outwards every step, at a speed set by its target, so that every
    episode ends, some 10 steps in and some 100: stepped on past its end, an environment that
    ended early would drift far beyond the bound before the last one ends."""

    def step(self, state, action, key):
        stepped = super().step(state, action, key)
        x, v, target = stepped.physics
        x = x + 0.2 * (0.02 + jnp.abs(target)) * jnp.sign(x)
        physics = jnp.stack([x, v, target])
        return stepped.replace(physics=physics, obs=physics,
                               terminated=(jnp.abs(x) > 2.0).astype(jnp.float32))


def returns_stepping_on(env, model, policy, key):
    """Each environment's return, its rewards summed up to its first termination, from a
    fixed-length loop that steps every environment on to `EPISODE_LENGTH`."""
    states = jax.vmap(env.reset)(jax.random.split(key, NUM_ENVS))
    step_key = jax.random.fold_in(key, NUM_ENVS)
    distribution = model.policy_distribution

    def step(carry, t):
        states, ended = carry
        action = distribution.mode(model.distribution(policy, states.obs))
        keys = jax.random.split(jax.random.fold_in(step_key, t), NUM_ENVS)
        states = jax.vmap(env.step)(states, distribution.env_action(action), keys)
        reward = jnp.where(ended, 0.0, states.reward)
        return (states, ended | (states.terminated > 0)), reward

    (last, _), rewards = jax.lax.scan(step, (states, jnp.zeros(NUM_ENVS, bool)),
                                      jnp.arange(EPISODE_LENGTH))
    return rewards.sum(0), last


@pytest.fixture(scope="module")
def policy():
    trainer = ControlTrainer(ControlConfig(env="toy_reach", num_envs=8, rollout_length=16,
                                           total_steps=256, eval_every=1, num_eval_envs=4))
    return trainer.model, trainer.init(jax.random.PRNGKey(0), ControlHParams.create()).policy


@pytest.mark.parametrize("jit", [False, True])
def test_a_finished_environment_stays_at_its_terminal_state(policy, jit):
    model, params = policy
    env, key = DriftingReach(), jax.random.PRNGKey(3)

    def run(params, key):
        return evaluation_episodes(env, model, params, key, num_envs=NUM_ENVS,
                                   episode_length=EPISODE_LENGTH)

    states, returns = (jax.jit(run) if jit else run)(params, key)
    expected, stepped_on = returns_stepping_on(env, model, params, key)
    np.testing.assert_allclose(returns, expected, rtol=1e-6, atol=1e-5)
    x = np.abs(np.asarray(states.physics[:, 0]))
    assert np.all(np.asarray(states.terminated) == 1.0)
    # Each ended just past the bound: one step moves x by at most the drift (0.204) and 0.1 |v|
    # (|v| <= 8, the terminal speed of 0.95 v + 0.4 a) ...
    assert np.all((x > 2.0) & (x < 3.1))
    # ... where stepping on would have carried the early ones tens of units beyond.
    assert np.abs(np.asarray(stepped_on.physics[:, 0])).max() > 10.0
    episodes_end_apart = len(np.unique(np.asarray(returns).round(3))) > 1
    assert episodes_end_apart


def test_evaluate_is_the_mean_return_of_the_episodes(policy):
    model, params = policy
    env, key = DriftingReach(), jax.random.PRNGKey(5)
    _, returns = evaluation_episodes(env, model, params, key, num_envs=NUM_ENVS,
                                     episode_length=EPISODE_LENGTH)
    mean = evaluate(env, model, params, key, num_envs=NUM_ENVS, episode_length=EPISODE_LENGTH)
    np.testing.assert_allclose(mean, returns.mean(), rtol=1e-6)
