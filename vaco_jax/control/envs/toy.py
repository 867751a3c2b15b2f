"""`toy_reach`: a tiny pure-JAX task that exercises the engine without physics compilation.

A point mass on a line must reach a target and stay there: `x' = x + dt * v'`,
`v' = 0.95 v + dt * a`. Reward `1 - |x - target|` per step; leaving `[-2, 2]` terminates.
Observations `[x, v, target]`. A random policy scores far below a controller that reaches
the target, so learning is visible within a few thousand steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.control.envs.base import EnvState

_DT = 0.1
_BOUND = 2.0


class ToyReach:
    observation_size = 3
    action_size = 1
    discrete = False

    def reset(self, key: jax.Array) -> EnvState:
        x_key, target_key = jax.random.split(key)
        x = jax.random.uniform(x_key, (), minval=-0.5, maxval=0.5)
        target = jax.random.uniform(target_key, (), minval=-1.0, maxval=1.0)
        physics = jnp.stack([x, jnp.zeros(()), target])
        return EnvState(physics=physics, obs=physics, reward=jnp.zeros(()), terminated=jnp.zeros(()))

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState:
        x, v, target = state.physics
        v = 0.95 * v + _DT * 4.0 * jnp.clip(action[0], -1.0, 1.0)
        x = x + _DT * v
        physics = jnp.stack([x, v, target])
        reward = 1.0 - jnp.abs(x - target)
        terminated = (jnp.abs(x) > _BOUND).astype(jnp.float32)
        return EnvState(physics=physics, obs=physics, reward=reward, terminated=terminated)


class ToyReachDiscrete(ToyReach):
    """`toy_reach` with three actions (push left, coast, push right): the discrete engine's
    tiny test task."""

    action_size = 3
    discrete = True

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState:
        return super().step(state, (action - 1).astype(jnp.float32)[None], key)
