"""Adapter over Brax environments (MJX physics by default)."""

from __future__ import annotations

import contextlib
import io
import warnings

import jax
import jax.numpy as jnp

from vaco_jax.control.envs.base import EnvState

BRAX_ENV_NAMES = ("ant", "halfcheetah", "hopper", "humanoid", "walker2d", "reacher", "pusher",
                  "swimmer", "inverted_pendulum", "inverted_double_pendulum")
BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")


class BraxEnvironment:
    """A Brax `Env` behind the `vaco_jax.control.envs.base.Environment` interface."""

    def __init__(self, name: str, backend: str = "mjx"):
        # Heavy import, paid only when a Brax task is used. MJX prints a notice to stdout when
        # the optional Warp backend is absent; it is irrelevant here and would clutter output.
        with contextlib.redirect_stdout(io.StringIO()):
            from brax import envs as brax_envs

        self.name = name
        with warnings.catch_warnings():
            # Brax warns on every task construction that its own environments are in
            # maintenance mode; the MJX physics underneath is what this adapter relies on.
            warnings.filterwarnings("ignore", message="Brax System, piplines and environments")
            self._env = brax_envs.get_environment(name, backend=backend)
        # Brax's `observation_size` runs a reset eagerly, op by op (about a minute for an MJX
        # task on a CPU); abstract evaluation gives the same shape without running anything.
        reset_shapes = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        self.observation_size = int(reset_shapes.obs.shape[-1])
        self.action_size = int(self._env.action_size)

    def reset(self, key: jax.Array) -> EnvState:
        return self._wrap(self._env.reset(key))

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        return self._wrap(self._env.step(state.physics, action))

    @staticmethod
    def _wrap(brax_state) -> EnvState:
        # Brax's `done` is raised only by termination: time limits come from its wrappers,
        # which are not used here.
        # Some Brax tasks return Python floats for a constant `done` or `reward`.
        return EnvState(physics=brax_state,
                        obs=jnp.asarray(brax_state.obs, jnp.float32),
                        reward=jnp.asarray(brax_state.reward, jnp.float32),
                        terminated=jnp.asarray(brax_state.done, jnp.float32))
