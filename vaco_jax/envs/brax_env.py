"""Adapter over Brax environments (MJX physics by default)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.envs.base import EnvState

BRAX_ENV_NAMES = ("ant", "halfcheetah", "hopper", "humanoid", "walker2d", "reacher", "pusher",
                  "swimmer", "inverted_pendulum", "inverted_double_pendulum")
BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")


class BraxEnvironment:
    """A Brax `Env` behind the `vaco_jax.envs.base.Environment` interface."""

    def __init__(self, name: str, backend: str = "mjx"):
        from brax import envs as brax_envs  # heavy import, paid only when a Brax task is used

        self.name = name
        self._env = brax_envs.get_environment(name, backend=backend)
        self.observation_size = int(self._env.observation_size)
        self.action_size = int(self._env.action_size)

    def reset(self, key: jax.Array) -> EnvState:
        return self._wrap(self._env.reset(key))

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        return self._wrap(self._env.step(state.physics, action))

    @staticmethod
    def _wrap(brax_state) -> EnvState:
        # Brax's `done` is raised only by termination: time limits come from its wrappers,
        # which are not used here.
        return EnvState(physics=brax_state,
                        obs=brax_state.obs.astype(jnp.float32),
                        reward=brax_state.reward.astype(jnp.float32),
                        terminated=brax_state.done.astype(jnp.float32))
