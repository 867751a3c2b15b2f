"""Adapter over Brax environments (MJX physics by default)."""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from vaco_jax.control.envs.base import EnvState
from vaco_jax.control.envs.carried import CarriedLeaves

BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")
BRAX_ACTION_SIZES = {"ant": 8, "halfcheetah": 6, "hopper": 3, "humanoid": 17, "walker2d": 6,
                     "reacher": 2, "pusher": 7, "inverted_pendulum": 1,
                     "inverted_double_pendulum": 1}
"""The registered Brax tasks and their action dimensions, listed without building them
(building one costs seconds)."""
BRAX_UNSUPPORTED = {
    "swimmer": "Brax runs it on its generalized pipeline only, whose fluid forces call "
               "jnp.clip(a_min=...), which JAX 0.10 removed, so its step cannot be traced",
}
"""Brax's other tasks, and why they are not registered."""


class BraxStateAdapter:
    """Reset and step of `self._env`, whose states have Brax's fields (a Brax `Env`, a MuJoCo
    Playground task), behind the `vaco_jax.control.envs.base.Environment` interface. Brax's
    `done` is raised only by termination: time limits come from its wrappers, which are not
    used here. The `physics` of the states it returns holds only the leaves of Brax's state
    that the next step reads (`vaco_jax.control.envs.carried`)."""

    discrete = False
    _env: Any

    def prepare(self, reset_shapes: Any) -> None:
        """Finds the leaves a step reads, from the shapes of Brax's initial state, and makes
        `reset` and `step` traced once for all their call sites, then inlined into each: a
        training program resets and steps its environments at several places (the first reset,
        each rollout's resets and steps, the evaluation's), and tracing MJX's physics takes
        seconds each time. Only the tracing is shared, that of the search for the carried
        leaves included: each site compiles what it would have traced itself."""
        self._brax_step = jax.jit(self._env.step, inline=True)
        action = jax.ShapeDtypeStruct((self.action_size,), jnp.float32)

        def step_and_observed(state, action):
            nxt = self._brax_step(state, action)
            return nxt, self._observed(nxt)

        self._carried = CarriedLeaves(step_and_observed, reset_shapes, action)
        self.reset = jax.jit(self.reset, inline=True)
        self.step = jax.jit(self.step, inline=True)

    @staticmethod
    def _observed(state: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        # Some Brax tasks return Python floats for a constant `done` or `reward`.
        return (jnp.asarray(state.obs, jnp.float32), jnp.asarray(state.reward, jnp.float32),
                jnp.asarray(state.done, jnp.float32))

    def _env_state(self, state: Any) -> EnvState:
        obs, reward, terminated = self._observed(state)
        return EnvState(physics=self._carried.carried(state), obs=obs, reward=reward,
                        terminated=terminated)

    def reset(self, key: jax.Array) -> EnvState:
        return self._env_state(self._env.reset(key))

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState:
        return self._env_state(self._brax_step(self._carried.whole(state.physics), action))


class BraxEnvironment(BraxStateAdapter):
    """A Brax `Env`."""

    def __init__(self, name: str, backend: str = "mjx"):
        if name in BRAX_UNSUPPORTED:
            raise ValueError(f"env={name!r} is not supported: {BRAX_UNSUPPORTED[name]}")
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
        self.prepare(reset_shapes)
