"""The Brax adapter traces its physics once for all call sites, carries only the leaves of
Brax's state that a step reads, and observes what Brax's own reset and step give, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax.envs.inverted_pendulum import InvertedPendulum

from vaco_jax.control.envs.brax_env import BraxEnvironment


def _two_sites(env):
    """Two resets and two steps at separate places of one program, as in training (with float32
    actions, as a policy gives them: a weakly typed one would trace the step again)."""
    def program(key):
        first, second = jax.random.split(key)
        return (env.step(env.reset(first), jnp.full((1,), 0.3, jnp.float32), first),
                env.step(env.reset(second), jnp.full((1,), -0.5, jnp.float32), second))
    return program


def test_the_physics_is_traced_once(monkeypatch):
    traced = []
    brax_step = InvertedPendulum.step

    def counting_step(self, state, action):
        traced.append(1)
        return brax_step(self, state, action)

    monkeypatch.setattr(InvertedPendulum, "step", counting_step)
    env = BraxEnvironment("inverted_pendulum")  # its search for the carried leaves traces once
    assert len(traced) == 1
    jax.make_jaxpr(_two_sites(env))(jax.random.PRNGKey(0))
    assert len(traced) == 1


def test_the_adapter_observes_what_brax_does_from_fewer_leaves():
    env = BraxEnvironment("inverted_pendulum")
    brax_env, count, steps = env._env, 4, 25
    assert len(env._carried.indices) < env._carried.total / 4
    reset_keys = jax.random.split(jax.random.PRNGKey(0), count)
    actions = jax.random.uniform(jax.random.PRNGKey(1), (steps, count, 1), minval=-1, maxval=1)

    @jax.jit
    def adapter_run():
        def step(state, action):
            state = jax.vmap(env.step)(state, action, reset_keys)
            return state, (state.obs, state.reward, state.terminated)
        return jax.lax.scan(step, jax.vmap(env.reset)(reset_keys), actions)[1]

    @jax.jit
    def brax_run():
        def step(state, action):
            state = jax.vmap(brax_env.step)(state, action)
            return state, (state.obs, state.reward, state.done)
        return jax.lax.scan(step, jax.vmap(brax_env.reset)(reset_keys), actions)[1]

    ours, theirs = adapter_run(), brax_run()
    jax.tree.map(np.testing.assert_array_equal, ours, theirs)
    obs = np.asarray(ours[0])
    assert np.all(np.isfinite(obs)) and not np.allclose(obs[-1], obs[0])  # it moved
    # The carried state is the physics of the last step, not the whole of Brax's state.
    state = jax.vmap(env.reset)(reset_keys)
    assert len(state.physics) == len(env._carried.indices)
    with pytest.raises(AttributeError):
        state.physics.obs  # noqa: B018
