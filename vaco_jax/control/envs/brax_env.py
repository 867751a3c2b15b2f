"""Adapter over Brax environments (MJX physics by default)."""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from vaco_jax.control.envs.base import EnvState

BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")
BRAX_ACTION_SIZES = {"ant": 8, "halfcheetah": 6, "hopper": 3, "humanoid": 17, "walker2d": 6,
                     "reacher": 2, "pusher": 7, "swimmer": 2, "inverted_pendulum": 1,
                     "inverted_double_pendulum": 1}
"""The registered Brax tasks and their action dimensions, listed without building them
(building one costs seconds)."""


def brax_backends(name: str) -> tuple[str, ...]:
    """The backends task `name` runs on, the default first: Brax's swimmer refuses every
    pipeline but its generalized one."""
    return ("generalized",) if name == "swimmer" else BRAX_BACKENDS


def wrap_brax_state(state: Any) -> EnvState:
    """The `EnvState` of a state with Brax's fields `obs`, `reward` and `done` (MuJoCo
    Playground's `State` has them too), where `done` is raised by termination only."""
    # Some Brax tasks return Python floats for a constant `done` or `reward`.
    return EnvState(physics=state,
                    obs=jnp.asarray(state.obs, jnp.float32),
                    reward=jnp.asarray(state.reward, jnp.float32),
                    terminated=jnp.asarray(state.done, jnp.float32))


class BraxStateAdapter:
    """Reset and step of `self._env`, whose states have Brax's fields (a Brax `Env`, a MuJoCo
    Playground task), behind the `vaco_jax.control.envs.base.Environment` interface. Brax's
    `done` is raised only by termination: time limits come from its wrappers, which are not
    used here."""

    discrete = False
    _env: Any

    def trace_once(self) -> None:
        """Makes `reset` and `step` traced once for all their call sites, then inlined into
        each: a training program resets and steps its environments at several places (the first
        reset, each rollout's resets and steps, the evaluation's), and tracing MJX's physics
        takes seconds each time. The compiled program stays what it was, result for result;
        only the tracing is shared."""
        self.reset = jax.jit(self.reset, inline=True)
        self.step = jax.jit(self.step, inline=True)

    def reset(self, key: jax.Array) -> EnvState:
        return wrap_brax_state(self._env.reset(key))

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState:
        return wrap_brax_state(self._env.step(state.physics, action))


class BraxEnvironment(BraxStateAdapter):
    """A Brax `Env`."""

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
        self.trace_once()
