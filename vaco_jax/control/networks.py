"""Actor and critic networks, the Gaussian policy distribution, observation normalisation.

The actor is kept apart from the critic because behaviour policies need the actor alone: the
policy buffer and all per-environment work hold actor parameters and normaliser statistics
(`Policy`), never the critic.

The policy is a diagonal Gaussian with state-independent log standard deviations; the
environment receives the sampled action clipped to `[-1, 1]`, while log-probabilities are
those of the unclipped sample, so importance ratios are exact.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

_NORMALIZED_OBS_CLIP = 10.0
_LOG_2PI = jnp.log(2.0 * jnp.pi)


def orthogonal(scale: float) -> Callable[[jax.Array, Sequence[int], Any], jax.Array]:
    """Orthogonal kernel initialiser, equal to `flax.linen.initializers.orthogonal(scale)` (the Q
    of a Gaussian matrix's QR, signs fixed by R's diagonal) but computed by Gram-Schmidt with
    re-orthogonalisation in plain JAX ops.

    On CPU, jaxlib 0.10's batched LAPACK QR (what `vmap` over seeds makes of flax's initialiser)
    splits its batch over XLA's intra-op thread pool and waits for the parts; two such QRs
    running side by side on a 2-core machine can each hold a pool thread while waiting, and the
    whole program hangs. Gram-Schmidt needs no LAPACK call.
    """
    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) != 2:
            raise ValueError(f"orthogonal: kernel shape must be 2-D (fan_in, fan_out), got {shape}")
        rows, cols = shape
        tall = (max(rows, cols), min(rows, cols))
        gaussian = jax.random.normal(key, tall, jnp.float32)

        def column(j, q):
            v = gaussian[:, j]
            # Columns not yet filled are zero, so projecting on all of `q` is projecting on the
            # first j; the second pass restores orthogonality lost to rounding ("twice is enough").
            v = v - q @ (q.T @ v)
            v = v - q @ (q.T @ v)
            return q.at[:, j].set(v / jnp.linalg.norm(v))

        q = jax.lax.fori_loop(0, tall[1], column, jnp.zeros(tall, jnp.float32))
        q = q if rows >= cols else q.T
        return (scale * q).astype(dtype)
    return init


class MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    out_scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = nn.tanh(nn.Dense(width, kernel_init=orthogonal(math.sqrt(2.0)))(x))
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_scale))(x)


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


def with_log_std(actor_params: dict, log_std: jax.Array) -> dict:
    """`actor_params` with every action dimension's log standard deviation set to `log_std`
    (a traced scalar, so the initial exploration noise is a vmappable hyper-parameter)."""
    inner = actor_params["params"]
    return {**actor_params,
            "params": {**inner, "log_std": jnp.full_like(inner["log_std"], log_std)}}


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
