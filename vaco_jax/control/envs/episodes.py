"""Batched episodes: time limit with a truncation flag, auto-reset, running returns.

The engine keeps `num_envs` environments in one `EpisodeState` (leaves with a leading `[E]`
axis). Finished environments restart from the states `restart_states` gives a rollout: by
default a batch of fresh initial states drawn once per rollout, one reset per environment per
rollout instead of one per step (an environment that finishes twice within one rollout restarts
from the same initial state); or, where the state keeps them (`first_states`), each
environment's own first initial state, as Brax's `AutoResetWrapper` does, with no reset inside
the training loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.control.envs.base import Environment, EnvState


@struct.dataclass
class EpisodeState:
    env: EnvState  # leaves [E, ...]
    step_count: jax.Array  # [E] int32, steps taken in the current episode
    episode_return: jax.Array  # [E] float32, reward accumulated in the current episode
    first_states: EnvState | None = None  # [E, ...]: each environment's first, if kept


@struct.dataclass
class StepOutcome:
    reward: jax.Array  # [E]
    terminated: jax.Array  # [E] float32
    truncated: jax.Array  # [E] float32, time limit reached without termination
    next_obs: jax.Array  # [E, obs]: the true next observation (final one when the episode ended)
    completed_return: jax.Array  # [E], the finished episode's return where done, else 0


def reset_episodes(env: Environment, keys: jax.Array) -> EpisodeState:
    states = jax.vmap(env.reset)(keys)
    zeros = jnp.zeros(keys.shape[0])
    return EpisodeState(env=states, step_count=zeros.astype(jnp.int32), episode_return=zeros)


def restart_states(env: Environment, episodes: EpisodeState, key: jax.Array) -> EnvState:
    """The states the finished environments of one rollout restart from: their own first ones
    where `episodes` keeps them, else one fresh reset per environment drawn with `key`."""
    if episodes.first_states is not None:
        return episodes.first_states
    return reset_episodes(env, jax.random.split(key, episodes.step_count.shape[0])).env


def where_done(done: jax.Array, if_done, otherwise):
    """Per environment (the leading axis of every leaf), `if_done` where `done`, else
    `otherwise`."""
    def select(a, b):
        return jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b)
    return jax.tree.map(select, if_done, otherwise)


def step_episodes(env: Environment, state: EpisodeState, actions: jax.Array, keys: jax.Array,
                  restarts: EnvState, episode_length: int) -> tuple[EpisodeState, StepOutcome]:
    nxt = jax.vmap(env.step)(state.env, actions, keys)
    step_count = state.step_count + 1
    terminated = nxt.terminated > 0
    truncated = (step_count >= episode_length) & ~terminated
    done = terminated | truncated
    running_return = state.episode_return + nxt.reward
    outcome = StepOutcome(reward=nxt.reward,
                          terminated=terminated.astype(jnp.float32),
                          truncated=truncated.astype(jnp.float32),
                          next_obs=nxt.obs,
                          completed_return=jnp.where(done, running_return, 0.0))
    new_state = state.replace(env=where_done(done, restarts, nxt),
                              step_count=jnp.where(done, 0, step_count),
                              episode_return=jnp.where(done, 0.0, running_return))
    return new_state, outcome
