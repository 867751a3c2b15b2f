"""Actor and critic networks, the policy distributions, observation normalisation.

The actor is kept apart from the critic because behaviour policies need the actor alone: the
policy buffer and all per-environment work hold actor parameters and normaliser statistics
(`Policy`), never the critic.

Continuous tasks act with a diagonal Gaussian with state-independent log standard deviations;
the environment receives the sampled action clipped to `[-1, 1]`, while log-probabilities are
those of the unclipped sample, so importance ratios are exact. Discrete tasks act with a
categorical distribution over the actor's logits. A distribution is a tuple of arrays (the
Gaussian's `(mean, log_std)`, the categorical's `(logits,)`), so the policy buffer, the
per-environment behaviour policies and the losses handle both alike.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_NORMALIZED_OBS_CLIP = 10.0
# The float32 value as a Python float, not computed with jnp: importing the package must start
# no JAX backend, which `jax.distributed.initialize` has to precede.
_LOG_2PI = float(np.float32(math.log(2.0 * math.pi)))


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


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


class MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    out_scale: float
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        activation = ACTIVATIONS[self.activation]
        for width in self.hidden:
            x = activation(nn.Dense(width, kernel_init=orthogonal(math.sqrt(2.0)))(x))
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_scale))(x)


class Actor(nn.Module):
    hidden: Sequence[int]
    action_size: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = MLP(self.hidden, self.action_size, out_scale=0.01, activation=self.activation)(obs)
        log_std = self.param("log_std", nn.initializers.constant(-0.5), (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class CategoricalActor(nn.Module):
    hidden: Sequence[int]
    action_size: int  # the number of actions
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array]:
        return (MLP(self.hidden, self.action_size, out_scale=0.01, activation=self.activation)(obs),)


class Critic(nn.Module):
    hidden: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.hidden, 1, out_scale=1.0, activation=self.activation)(obs)[..., 0]


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


class Gaussian:
    """The diagonal Gaussian `(mean, log_std)`; the environment receives the sample clipped."""

    @staticmethod
    def sample(dist: tuple[jax.Array, jax.Array], key: jax.Array) -> jax.Array:
        mean, log_std = dist
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)

    @staticmethod
    def log_prob(dist: tuple[jax.Array, jax.Array], action: jax.Array) -> jax.Array:
        return gaussian_log_prob(*dist, action)

    @staticmethod
    def entropy(dist: tuple[jax.Array, jax.Array]) -> jax.Array:
        return gaussian_entropy(dist[1])

    @staticmethod
    def mode(dist: tuple[jax.Array, jax.Array]) -> jax.Array:
        return dist[0]

    @staticmethod
    def env_action(action: jax.Array) -> jax.Array:
        return jnp.clip(action, -1.0, 1.0)


class Categorical:
    """The categorical `(logits,)`; actions are int32 indices."""

    @staticmethod
    def sample(dist: tuple[jax.Array], key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, dist[0]).astype(jnp.int32)

    @staticmethod
    def log_prob(dist: tuple[jax.Array], action: jax.Array) -> jax.Array:
        log_probs = jax.nn.log_softmax(dist[0])
        return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    @staticmethod
    def entropy(dist: tuple[jax.Array]) -> jax.Array:
        log_probs = jax.nn.log_softmax(dist[0])
        return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)

    @staticmethod
    def mode(dist: tuple[jax.Array]) -> jax.Array:
        return jnp.argmax(dist[0], axis=-1).astype(jnp.int32)

    @staticmethod
    def env_action(action: jax.Array) -> jax.Array:
        return action


class ActorCritic:
    """Builds and applies the actor and critic of one run."""

    def __init__(self, observation_size: int, action_size: int,
                 actor_hidden: Sequence[int], critic_hidden: Sequence[int],
                 normalize_observations: bool = True, discrete: bool = False,
                 activation: str = "tanh"):
        self.observation_size = observation_size
        self.action_size = action_size
        self.normalize_observations = normalize_observations
        self.policy_distribution = Categorical if discrete else Gaussian
        actor = CategoricalActor if discrete else Actor
        self.actor = actor(tuple(actor_hidden), action_size, activation)
        self.critic = Critic(tuple(critic_hidden), activation)

    def init(self, key: jax.Array) -> tuple[dict, dict]:
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.observation_size))
        return self.actor.init(actor_key, dummy), self.critic.init(critic_key, dummy)

    def _inputs(self, obs: jax.Array, stats: RunningStats) -> jax.Array:
        return normalize(obs, stats) if self.normalize_observations else obs

    def distribution(self, policy: Policy, obs: jax.Array) -> tuple[jax.Array, ...]:
        """The action distribution's arrays (`policy_distribution` reads them)."""
        return self.actor.apply(policy.params, self._inputs(obs, policy.obs_stats))

    def value(self, critic_params: dict, stats: RunningStats, obs: jax.Array) -> jax.Array:
        return self.critic.apply(critic_params, self._inputs(obs, stats))

    def log_prob(self, policy: Policy, obs: jax.Array, action: jax.Array) -> jax.Array:
        return self.policy_distribution.log_prob(self.distribution(policy, obs), action)
