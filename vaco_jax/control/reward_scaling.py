"""Reward scaling by the running standard deviation of discounted returns.

Rewards are divided (never shifted) by the standard deviation of the per-environment discounted
return `G_t = r_t + gamma G_{t-1}`, restarted after every episode end, with the statistics
merged over all returns seen so far. Targets and advantages then have a task-independent scale,
so the value loss no longer dominates the gradient (whose one global norm is clipped) on tasks
with large rewards. Only the learner uses the scaled rewards: acting and evaluation never see
them, so the statistics live in the learner's state, not in the policies of the buffer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.control.networks import RunningStats, init_stats, update_stats


@struct.dataclass
class RewardScaling:
    returns: jax.Array  # [E] discounted return of each environment's current episode so far
    stats: RunningStats  # of the discounted returns, one dimension


def init_reward_scaling(num_envs: int) -> RewardScaling:
    return RewardScaling(returns=jnp.zeros(num_envs), stats=init_stats(1))


def scale_rewards(state: RewardScaling, reward: jax.Array, done: jax.Array,
                  gamma: jax.Array) -> tuple[RewardScaling, jax.Array]:
    """`reward`, `done`: `[T, E]`. Returns the new state and `reward / std(returns)`, the standard
    deviation taken after merging this rollout's `T x E` returns."""

    def step(running, inputs):
        r, d = inputs
        discounted = r + gamma * running
        return discounted * (1.0 - d), discounted

    returns, discounted = jax.lax.scan(step, state.returns, (reward, done))
    stats = update_stats(state.stats, discounted[..., None])
    scaled = reward / jnp.sqrt(stats.var[0] + 1e-8)
    return RewardScaling(returns=returns, stats=stats), scaled
