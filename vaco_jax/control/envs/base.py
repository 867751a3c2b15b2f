"""The adapter interface between the training engine and a JAX environment.

An adapter wraps ONE environment instance (the engine vectorises with `jax.vmap`) and exposes:

- `observation_size: int`, `action_size: int` and `discrete: bool`;
- `reset(key) -> EnvState` and `step(state, action, key) -> EnvState`, both pure and jittable.
  Continuous tasks (`discrete = False`) take actions in `[-1, 1]^action_size`; discrete tasks
  take an int32 scalar in `[0, action_size)`. `key` is fresh for every step of every
  environment; deterministic tasks ignore it (and XLA then removes its computation).

`EnvState.terminated` marks a true termination (the task ended; its value is not bootstrapped).
Time limits, auto-reset and episode statistics belong to the engine (`vaco_jax.control.envs.episodes`),
so an adapter never truncates. Any JAX environment (MuJoCo Playground, gymnax, ...) is added by
writing such an adapter and registering it in `vaco_jax.control.envs`.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
from flax import struct


@struct.dataclass
class EnvState:
    physics: Any  # the wrapped environment's state, or the part of it its next step reads
    obs: jax.Array  # [observation_size] float32
    reward: jax.Array  # [] float32
    terminated: jax.Array  # [] float32, 1.0 where the episode ended by termination


class Environment(Protocol):
    observation_size: int
    action_size: int  # continuous: action dimensions; discrete: number of actions
    discrete: bool

    def reset(self, key: jax.Array) -> EnvState: ...

    def step(self, state: EnvState, action: jax.Array, key: jax.Array) -> EnvState: ...
