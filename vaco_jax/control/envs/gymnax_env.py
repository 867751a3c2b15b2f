"""Adapter over gymnax environments: classic control and MinAtar, pure JAX.

gymnax's own `step` resets finished episodes and cuts them at `max_steps_in_episode`; the engine
does both itself (`vaco_jax.control.envs.episodes`), so the adapter calls `step_env` and
`reset_env`, the transition alone. In gymnax 1.0 `step_env`'s `done` is the task's termination
only (its time limit is `is_truncated`, which only `step` consults), so it is the adapter's
`terminated`, and each task's time limit is registered as its `episode_length`, where the
engine truncates (and bootstraps) instead.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from vaco_jax.control.envs.base import EnvState


class GymnaxTask(NamedTuple):
    """What the registry lists of a gymnax task without importing gymnax."""

    episode_length: int  # gymnax's default `max_steps_in_episode`
    discrete: bool
    action_size: int  # discrete: number of actions; continuous: action dimensions


GYMNAX_TASKS = {
    "CartPole-v1": GymnaxTask(500, True, 2),
    "Acrobot-v1": GymnaxTask(500, True, 3),
    "MountainCar-v0": GymnaxTask(200, True, 3),
    "Pendulum-v1": GymnaxTask(200, False, 1),
    "MountainCarContinuous-v0": GymnaxTask(999, False, 1),
    "Asterix-MinAtar": GymnaxTask(1000, True, 5),
    "Breakout-MinAtar": GymnaxTask(1000, True, 3),
    "Freeway-MinAtar": GymnaxTask(2500, True, 3),
    "Seaquest-MinAtar": GymnaxTask(1000, True, 6),
    "SpaceInvaders-MinAtar": GymnaxTask(1000, True, 4),
}
"""The registered gymnax tasks under gymnax's names (tests check the table against gymnax)."""


def _flat(obs: jax.Array) -> jax.Array:
    # MinAtar observes a (10, 10, channels) grid; the engine's networks take vectors.
    return jnp.ravel(obs).astype(jnp.float32)


class GymnaxEnvironment:
    """A gymnax environment, with its default parameters, behind the
    `vaco_jax.control.envs.base.Environment` interface."""

    def __init__(self, name: str):
        import gymnax  # imports every gymnax environment (seconds): paid only when one is used
        from gymnax.environments import spaces

        self.name = name
        self._env, self._params = gymnax.make(name)
        space = self._env.action_space(self._params)
        self.discrete = isinstance(space, spaces.Discrete)
        if self.discrete:
            self.action_size = int(space.n)
        else:
            self.action_size = math.prod(space.shape)
            self._action_shape = space.shape
            self._low = jnp.asarray(space.low, jnp.float32)
            self._high = jnp.asarray(space.high, jnp.float32)
        obs_shape = jax.eval_shape(self._env.reset_env, jax.random.PRNGKey(0), self._params)[0]
        self.observation_size = math.prod(obs_shape.shape)

    def reset(self, key: jax.Array) -> EnvState:
        obs, state = self._env.reset_env(key, self._params)
        return EnvState(physics=state, obs=_flat(obs), reward=jnp.zeros(()),
                        terminated=jnp.zeros(()))

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState:
        obs, physics, reward, done, _ = self._env.step_env(
            key, state.physics, self._gymnax_action(action), self._params)
        return EnvState(physics=physics, obs=_flat(obs),
                        reward=jnp.asarray(reward, jnp.float32),
                        terminated=jnp.asarray(done, jnp.float32))

    def _gymnax_action(self, action: jax.Array) -> jax.Array:
        """The engine's action in gymnax's terms: continuous ones from `[-1, 1]` onto the
        action space's bounds (Pendulum's torque is `[-2, 2]`), in the space's shape."""
        if self.discrete:
            return action
        scaled = self._low + (action + 1.0) * 0.5 * (self._high - self._low)
        return jnp.reshape(scaled, self._action_shape)
