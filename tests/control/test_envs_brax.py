"""The Brax adapter traces its physics once for all call sites, and the program it then
compiles computes what the adapter's methods traced at each site compute, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.control.envs.brax_env import BraxEnvironment


class _CountingSteps:
    """A Brax environment that counts how often its `step` is traced."""

    def __init__(self, env):
        self._env, self.traced = env, 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, state, action):
        self.traced += 1
        return self._env.step(state, action)


def _two_sites(reset, step):
    """Two resets and two steps at separate places of one program, as in training."""
    def program(key):
        first, second = jax.random.split(key)
        return (step(reset(first), jnp.full((1,), 0.3), first),
                step(reset(second), jnp.full((1,), -0.5), second))
    return program


def test_the_physics_is_traced_once_and_compiles_to_the_same_results():
    env = BraxEnvironment("inverted_pendulum")
    counting = env._env = _CountingSteps(env._env)
    once = _two_sites(env.reset, env.step)
    each_site = _two_sites(lambda k: BraxEnvironment.reset(env, k),
                           lambda s, a, k: BraxEnvironment.step(env, s, a, k))
    jax.make_jaxpr(once)(jax.random.PRNGKey(0))
    assert counting.traced == 1
    jax.make_jaxpr(each_site)(jax.random.PRNGKey(0))
    assert counting.traced == 1 + 2
    key = jax.random.PRNGKey(3)
    jax.tree.map(np.testing.assert_array_equal, jax.jit(once)(key), jax.jit(each_site)(key))
