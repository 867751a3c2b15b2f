"""The ring buffer of past policies: generic over testbeds and policies.

The buffer holds the last `K` policies (actor parameters with their normaliser statistics) as
one pytree whose leaves carry a leading `[K]` axis. Every finished optimisation phase pushes the
learner's policy, so the policy of version `v` lives in slot `v % K`. At the start of every
rollout each environment draws the lag of its behaviour policy, in versions behind the newest
(`vaco_jax.core.lag_models`); until `K` versions exist a lag can point before the first version,
and the helpers here keep every lag on a version that exists.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class PolicyBuffer:
    policies: Any  # any policy pytree, leaves [K, ...]
    latest_version: jax.Array  # [] int32, version of the newest policy (pushes so far)

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.policies)[0].shape[0]


def init_buffer(policy: Any, capacity: int) -> PolicyBuffer:
    policies = jax.tree.map(lambda x: jnp.broadcast_to(x, (capacity,) + x.shape), policy)
    return PolicyBuffer(policies=policies, latest_version=jnp.zeros((), jnp.int32))


def push(buffer: PolicyBuffer, policy: Any) -> PolicyBuffer:
    version = buffer.latest_version + 1
    slot = version % buffer.capacity
    policies = jax.tree.map(lambda stack, x: stack.at[slot].set(x), buffer.policies, policy)
    return PolicyBuffer(policies=policies, latest_version=version)


def newest(buffer: PolicyBuffer) -> Any:
    slot = buffer.latest_version % buffer.capacity
    return jax.tree.map(lambda stack: stack[slot], buffer.policies)


def max_available_lag(buffer: PolicyBuffer) -> jax.Array:
    """The largest lag whose version exists: versions pushed so far, at most `capacity - 1`."""
    return jnp.minimum(buffer.latest_version, buffer.capacity - 1)


def effective_lags(buffer: PolicyBuffer, lags: jax.Array) -> jax.Array:
    """Lags capped by the versions pushed so far and by the capacity."""
    return jnp.minimum(lags, max_available_lag(buffer))


def from_initial_policy(versions: jax.Array) -> jax.Array:
    """1.0 where a step acted with version 0, the initial policy, else 0.0: averaged over an
    update's steps, the share of its data the initial policy produced, which `clip` inflates
    while the buffer fills (`LagModel.draw`)."""
    return (versions == 0).astype(jnp.float32)


def redraw_unavailable_lags(key: jax.Array, lags: jax.Array, log_probs: jax.Array,
                            max_lag: jax.Array) -> jax.Array:
    """Replaces every lag above `max_lag` by a draw from `log_probs` restricted to `0..max_lag`.

    A lag drawn from `P` is kept with probability `P(j)` for `j <= max_lag` and redrawn with
    probability `P(> max_lag)`, so the result follows `P(j) / P(<= max_lag)`, the model
    renormalised over the existing versions, and lags already available are never touched.
    When `P` has no mass on `0..max_lag` the lags are left as drawn (for `effective_lags`).
    """
    chex.assert_rank([lags, log_probs], 1)
    restricted = jnp.where(jnp.arange(log_probs.shape[0]) <= max_lag, log_probs, -jnp.inf)
    redrawn = jax.random.categorical(key, restricted, shape=lags.shape).astype(lags.dtype)
    return jnp.where((lags > max_lag) & jnp.isfinite(restricted).any(), redrawn, lags)


@struct.dataclass
class Behaviour:
    """The behaviour policies of one rollout: the buffer and each environment's slot."""

    buffer: PolicyBuffer
    slots: jax.Array  # [E] int32, or [T, E] when the policy changes within the rollout
    versions: jax.Array  # [E] int32, or [T, E]
    gathered: Any | None  # policy leaves [E, ...] for the `gather` strategy (one per rollout)


def make_behaviour(buffer: PolicyBuffer, lags: jax.Array, acting: str) -> Behaviour:
    """Behaviour policies for lags `[E]` (one per rollout) or `[T, E]` (one per step).

    Per-step behaviour is gathered step by step during the rollout, never `[T, E]` at once.
    """
    versions = buffer.latest_version - lags
    slots = versions % buffer.capacity
    gathered = None
    if acting == "gather" and lags.ndim == 1:
        gathered = jax.tree.map(lambda stack: stack[slots], buffer.policies)
    return Behaviour(buffer=buffer, slots=slots, versions=versions, gathered=gathered)


@jax.custom_batching.custom_vmap
def in_every_run(flag: jax.Array) -> jax.Array:
    """`flag` for one run; under `vmap` over runs, whether `flag` holds in every run.

    A `lax.cond` whose predicate is batched runs both branches, so without this reduction
    synchronous runs trained together under `vmap` (seeds, hyper-parameter sweeps) would pay
    for per-sample behaviour policies on every step.
    """
    return flag


@in_every_run.def_vmap
def _in_every_run_vmap(axis_size: int, in_batched: list[bool], flag: jax.Array):
    del axis_size
    return (jnp.all(flag) if in_batched[0] else flag), False


def cond_in_every_run(flag: jax.Array, if_true, if_false, operand):
    """`if_true(operand)` where `flag` holds, else `if_false(operand)`, bit for bit the same
    result whatever runs share the `vmap`.

    A branch runs only when `flag` takes it in some vmapped run, so runs that all agree pay for
    one branch; each run then keeps its own branch's result. Each branch is always a `lax.cond`
    branch of its own, never inlined beside the other (as a `cond` with a batched predicate
    would be), so XLA compiles and rounds it alike whichever runs share the `vmap`.
    """
    def unless(skip, branch):
        shapes = jax.eval_shape(branch, operand)
        nothing = lambda _: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return jax.lax.cond(skip, nothing, branch, operand)

    taken = unless(in_every_run(~flag), if_true)
    not_taken = unless(in_every_run(flag), if_false)
    return jax.tree.map(lambda t, f: jnp.where(flag, t, f), taken, not_taken)
