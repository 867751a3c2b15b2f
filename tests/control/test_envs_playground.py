"""MuJoCo Playground's DM Control suite: which tasks are registered and why, importing the suite
without the package's `__init__`, the missing extra, and one task's reset and step."""

import importlib.util
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control import envs
from vaco_jax.control.envs import playground_env
from vaco_jax.control.envs.playground_env import (EPISODE_LENGTH, PLAYGROUND_ACTION_SIZES,
                                                  UNSUPPORTED, PlaygroundEnvironment)

needs_playground = pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                                      reason="the playground extra is not installed")


@pytest.fixture
def suite():
    return playground_env._suite()


@needs_playground
def test_registered_tasks_are_the_suite_s_but_the_unsupported(suite):
    assert set(suite.ALL_ENVS) == set(PLAYGROUND_ACTION_SIZES) | set(UNSUPPORTED)
    assert not set(PLAYGROUND_ACTION_SIZES) & set(UNSUPPORTED)
    for name in PLAYGROUND_ACTION_SIZES:
        spec = envs.task(name)
        assert (spec.backends, spec.episode_length, spec.discrete) == (("mjx",), 1000, False)
        assert spec.reference_score == 1000.0 and spec.reference.startswith("maximum")
    for name in UNSUPPORTED:
        assert name not in envs.names()


@needs_playground
def test_episode_lengths_are_the_default_configs_with_no_action_repeat(suite):
    for name in PLAYGROUND_ACTION_SIZES:
        config = suite.get_default_config(name)
        assert config.episode_length == EPISODE_LENGTH, name
        assert config.action_repeat == 1, name
        assert not config.vision, name


@needs_playground
def test_the_suite_imports_without_the_package_init():
    """Playground's `__init__` imports its locomotion tasks, which clone MuJoCo Menagerie: the
    suite must load without it, and leave no partial package behind in `sys.modules`."""
    code = """
import sys
imported = []
sys.addaudithook(lambda event, args: imported.append(args[0]) if event == "import" else None)
from vaco_jax.control.envs import playground_env
suite = playground_env._suite()
print(suite.__name__, len(suite.ALL_ENVS))
print(sorted(m for m in sys.modules if m.startswith("mujoco_playground")))
print(sorted({m for m in imported if m.startswith("mujoco_playground")}))
"""
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert lines[0] == "mujoco_playground._src.dm_control_suite 25"
    assert lines[1] == "[]"
    assert "mujoco_playground._src.dm_control_suite" in lines[2]
    assert "locomotion" not in lines[2] and "manipulation" not in lines[2]


@pytest.fixture
def uncached_suite():
    playground_env._suite.cache_clear()
    yield
    playground_env._suite.cache_clear()


def test_building_a_task_without_the_extra_names_it(monkeypatch, uncached_suite):
    monkeypatch.setitem(sys.modules, "mujoco_playground", None)  # as if not installed
    with pytest.raises(ValueError, match=r"env='CartpoleBalance': MuJoCo Playground tasks "
                                         r"need the optional extra: "
                                         r"pip install 'vaco-jax\[playground\]'"):
        envs.make_env("CartpoleBalance")


@needs_playground
def test_unsupported_tasks_fail_in_the_suite_and_are_refused(suite):
    # Should MJX stop failing on them, this test fails: register them then.
    env = suite.load("FishSwim")
    with pytest.raises(TypeError, match="a_min"):
        jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"env='FishSwim' is not supported: .*jnp.clip"):
        PlaygroundEnvironment("FishSwim")


@needs_playground
def test_one_task_resets_and_steps():
    name, count = "PendulumSwingup", 2
    env = envs.make_env(name)
    assert (env.observation_size, env.action_size) == (3, PLAYGROUND_ACTION_SIZES[name])
    keys = jnp.stack([jax.random.PRNGKey(0)] * count)  # one start, two actions
    actions = jnp.array([[-1.0], [1.0]])

    @jax.jit
    def step(step_keys):
        return jax.vmap(env.step)(jax.vmap(env.reset)(keys), actions, step_keys)

    state = step(jax.random.split(jax.random.PRNGKey(1), count))
    assert state.obs.shape == (count, 3) and state.obs.dtype == jnp.float32
    assert state.reward.shape == state.terminated.shape == (count,)
    # The adapter passes on Playground's own step (its observation, reward and `done`) from
    # the leaves of Playground's state that the step reads.
    own = jax.jit(lambda: jax.vmap(env._env.step)(jax.vmap(env._env.reset)(keys), actions))()
    np.testing.assert_array_equal(state.obs, own.obs)
    np.testing.assert_array_equal(state.reward, own.reward)
    np.testing.assert_array_equal(state.terminated, own.done)
    assert len(state.physics) < len(jax.tree.leaves(own))
    assert np.all((state.reward >= 0) & (state.reward <= 1))
    assert not np.any(state.terminated)  # `done` is raised only by NaN physics
    assert not np.array_equal(state.obs[0], state.obs[1])  # the actions reach the motor
    # A deterministic task: the step key changes nothing.
    other = step(jax.random.split(jax.random.PRNGKey(9), count))
    np.testing.assert_array_equal(other.obs, state.obs)


@pytest.mark.slow
@needs_playground
def test_every_registered_task_loads_offline_as_listed():
    for name, size in PLAYGROUND_ACTION_SIZES.items():
        env = envs.make_env(name)
        assert (env.discrete, env.action_size) == (False, size), name
        assert env.observation_size > 0
