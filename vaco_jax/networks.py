"""Actor and critic networks, the Gaussian policy distribution, observation normalisation.

The actor is kept apart from the critic because behaviour policies need the actor alone: the
policy buffer and all per-environment work hold actor parameters and normaliser statistics
(`Policy`), never the critic.

The policy is a diagonal Gaussian with state-independent log standard deviations; the
environment receives the sampled action clipped to `[-1, 1]`, while log-probabilities are
those of the unclipped sample, so importance ratios are exact.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

_NORMALIZED_OBS_CLIP = 10.0
_LOG_2PI = jnp.log(2.0 * jnp.pi)


class MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    out_scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = nn.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(jnp.sqrt(2.0)))(x))
        return nn.Dense(self.out, kernel_init=nn.initializers.orthogonal(self.out_scale))(x)


class Actor(nn.Module):
    hidden: Sequence[int]
    action_size: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = MLP(self.hidden, self.action_size, out_scale=0.01)(obs)
        log_std = self.param("log_std", nn.initializers.constant(-0.5), (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class Critic(nn.Module):
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.hidden, 1, out_scale=1.0)(obs)[..., 0]


@struct.dataclass
class RunningStats:
    """Observation mean and variance, merged batch by batch (Chan et al. parallel update)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_stats(size: int) -> RunningStats:
    return RunningStats(mean=jnp.zeros(size), var=jnp.ones(size), count=jnp.zeros(()))


def update_stats(stats: RunningStats, obs: jax.Array) -> RunningStats:
    batch = obs.reshape(-1, obs.shape[-1])
    n = batch.shape[0]
    batch_mean = batch.mean(axis=0)
    batch_var = batch.var(axis=0)
    total = stats.count + n
    delta = batch_mean - stats.mean
    mean = stats.mean + delta * n / total
    m2 = stats.var * stats.count + batch_var * n + delta**2 * stats.count * n / total
    return RunningStats(mean=mean, var=m2 / total, count=total)


def normalize(obs: jax.Array, stats: RunningStats) -> jax.Array:
    scaled = (obs - stats.mean) / jnp.sqrt(stats.var + 1e-8)
    return jnp.clip(scaled, -_NORMALIZED_OBS_CLIP, _NORMALIZED_OBS_CLIP)


@struct.dataclass
class Policy:
    """What a behaviour policy needs to act: actor parameters and its normaliser statistics."""

    params: dict
    obs_stats: RunningStats


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)


def gaussian_entropy(log_std: jax.Array) -> jax.Array:
    return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)


class ActorCritic:
    """Builds and applies the actor and critic of one run."""

    def __init__(self, observation_size: int, action_size: int,
                 actor_hidden: Sequence[int], critic_hidden: Sequence[int],
                 normalize_observations: bool = True):
        self.observation_size = observation_size
        self.action_size = action_size
        self.normalize_observations = normalize_observations
        self.actor = Actor(tuple(actor_hidden), action_size)
        self.critic = Critic(tuple(critic_hidden))

    def init(self, key: jax.Array) -> tuple[dict, dict]:
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.observation_size))
        return self.actor.init(actor_key, dummy), self.critic.init(critic_key, dummy)

    def _inputs(self, obs: jax.Array, stats: RunningStats) -> jax.Array:
        return normalize(obs, stats) if self.normalize_observations else obs

    def distribution(self, policy: Policy, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Mean and log standard deviation of the action distribution."""
        return self.actor.apply(policy.params, self._inputs(obs, policy.obs_stats))

    def value(self, critic_params: dict, stats: RunningStats, obs: jax.Array) -> jax.Array:
        return self.critic.apply(critic_params, self._inputs(obs, stats))

    def log_prob(self, policy: Policy, obs: jax.Array, action: jax.Array) -> jax.Array:
        mean, log_std = self.distribution(policy, obs)
        return gaussian_log_prob(mean, log_std, action)
