"""The gymnax adapter against gymnax itself: registration, termination vs truncation,
flattened observations, action mapping and the use of the step key."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control import envs
from vaco_jax.control.envs.gymnax_env import GYMNAX_TASKS, GymnaxEnvironment

FAST = ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar")  # discrete, continuous, MinAtar


@pytest.fixture(scope="module")
def built():
    """Each registered gymnax task's adapter, built once."""
    return {name: envs.make_env(name) for name in GYMNAX_TASKS}


def _actions(env, key, count):
    if env.discrete:
        return jax.random.randint(key, (count,), 0, env.action_size, dtype=jnp.int32)
    return jax.random.uniform(key, (count, env.action_size), minval=-1.0, maxval=1.0)


def test_registered_tasks_match_gymnax(built):
    gymnax_names = set(gymnax.registered_envs)
    for name, listed in GYMNAX_TASKS.items():
        assert name in gymnax_names
        gymnax_env, params = gymnax.make(name)
        env, spec = built[name], envs.task(name)
        # The engine's time limit is the task's own, where it truncates and bootstraps.
        assert spec.episode_length == listed.episode_length == params.max_steps_in_episode
        assert (spec.discrete, spec.action_size) == (env.discrete, env.action_size)
        obs, _ = jax.eval_shape(gymnax_env.reset_env, jax.random.PRNGKey(0), params)
        assert env.observation_size == obs.size
    assert {n for n in GYMNAX_TASKS if n.endswith("-MinAtar")} == {
        "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar",
        "SpaceInvaders-MinAtar"}


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in GYMNAX_TASKS])
def test_resets_and_steps_under_jit_and_vmap(built, name):
    env, count = built[name], 3
    keys = jax.random.split(jax.random.PRNGKey(0), count)

    @jax.jit
    def rollout(keys):
        def body(state, key):
            action_key, step_key = jax.random.split(key)
            state = jax.vmap(env.step)(state, _actions(env, action_key, count),
                                       jax.random.split(step_key, count))
            return state, (state.reward, state.terminated)
        states = jax.vmap(env.reset)(keys)
        final, (rewards, terminated) = jax.lax.scan(body, states, jax.random.split(keys[0], 20))
        return states, final, rewards, terminated

    first, final, rewards, terminated = rollout(keys)
    for state in (first, final):
        assert state.obs.shape == (count, env.observation_size)
        assert state.obs.dtype == state.reward.dtype == state.terminated.dtype == jnp.float32
        assert state.reward.shape == state.terminated.shape == (count,)
    assert np.isfinite(rewards).all() and set(np.unique(terminated)) <= {0.0, 1.0}


def _cartpole_trajectory(env, steps):
    """The adapter's and gymnax's own `step_env` from one state, pushing right every step."""
    gymnax_env, params = gymnax.make("CartPole-v1")
    state = env.reset(jax.random.PRNGKey(3))
    physics = state.physics
    for key in jax.random.split(jax.random.PRNGKey(4), steps):
        state = env.step(state, jnp.int32(1), key)
        obs, physics, reward, done, _ = gymnax_env.step_env(key, physics, 1, params)
        yield state, obs, reward, done


def test_steps_are_gymnax_s_transitions_and_its_termination():
    env = GymnaxEnvironment("CartPole-v1")
    flags = []
    for state, obs, reward, done in _cartpole_trajectory(env, 40):
        np.testing.assert_allclose(state.obs, obs, rtol=1e-6)
        assert float(state.reward) == float(reward)
        flags.append(float(state.terminated))
        assert flags[-1] == float(done)
    assert 1.0 in flags  # pushing one way topples the pole: a true termination


def test_the_time_limit_is_no_termination():
    """gymnax's own `step` truncates at `max_steps_in_episode`; the adapter leaves that to the
    engine (the task's `episode_length`), so it must not report it as a termination."""
    env = GymnaxEnvironment("CartPole-v1")
    gymnax_env, params = gymnax.make("CartPole-v1")
    state = env.reset(jax.random.PRNGKey(0))
    at_limit = state.replace(physics=state.physics.replace(time=params.max_steps_in_episode - 1))
    key = jax.random.PRNGKey(1)
    *_, terminated, truncated, _ = gymnax_env.step(key, at_limit.physics, 0, params)
    assert (bool(terminated), bool(truncated)) == (False, True)
    assert float(env.step(at_limit, jnp.int32(0), key).terminated) == 0.0
    # ... while a true termination on the last step still terminates.
    fallen = at_limit.replace(physics=at_limit.physics.replace(theta=jnp.float32(0.5)))
    assert float(env.step(fallen, jnp.int32(0), key).terminated) == 1.0


def test_minatar_observations_are_flattened_grids():
    env = GymnaxEnvironment("Breakout-MinAtar")
    gymnax_env, params = gymnax.make("Breakout-MinAtar")
    key = jax.random.PRNGKey(0)
    state = env.reset(key)
    grid, _ = gymnax_env.reset_env(key, params)
    assert grid.shape == (10, 10, 4) and env.observation_size == 400
    np.testing.assert_array_equal(state.obs, np.ravel(grid).astype(np.float32))
    nxt = jax.jit(env.step)(state, jnp.int32(1), key)
    grid, *_ = jax.jit(gymnax_env.step_env)(key, state.physics, 1, params)
    np.testing.assert_array_equal(nxt.obs, np.ravel(grid).astype(np.float32))


def test_continuous_actions_map_onto_the_action_bounds():
    env = GymnaxEnvironment("Pendulum-v1")  # torque in [-2, 2]
    gymnax_env, params = gymnax.make("Pendulum-v1")
    state, key = env.reset(jax.random.PRNGKey(0)), jax.random.PRNGKey(1)
    for action, torque in ((-1.0, -2.0), (0.0, 0.0), (0.5, 1.0), (1.0, 2.0)):
        ours = env.step(state, jnp.array([action]), key)
        obs, _, reward, _, _ = gymnax_env.step_env(key, state.physics, jnp.array([torque]),
                                                   params)
        np.testing.assert_allclose(ours.obs, obs, rtol=1e-6)
        np.testing.assert_allclose(ours.reward, reward, rtol=1e-6)


def test_the_step_key_drives_a_stochastic_task():
    """Asterix spawns enemies at random: the same actions from the same state give different
    trajectories under different step keys, and the same one under the same keys."""
    env = GymnaxEnvironment("Asterix-MinAtar")
    start = env.reset(jax.random.PRNGKey(0))

    @jax.jit
    def observations(key):
        def body(state, step_key):
            state = env.step(state, jnp.int32(0), step_key)
            return state, state.obs
        return jax.lax.scan(body, start, jax.random.split(key, 30))[1]

    first, again = observations(jax.random.PRNGKey(1)), observations(jax.random.PRNGKey(1))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, observations(jax.random.PRNGKey(2)))
