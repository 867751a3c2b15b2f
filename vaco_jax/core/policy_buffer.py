"""The ring buffer of past policies and the lag models: generic over testbeds and policies.

The buffer holds the last `K` policies (actor parameters with their normaliser statistics) as
one pytree whose leaves carry a leading `[K]` axis. Every finished optimisation phase pushes the
learner's policy, so the policy of version `v` lives in slot `v % K`. At the start of every
rollout each environment draws the lag of its behaviour policy, in versions behind the newest.
Until `K` versions exist a lag can point before the first version; `draw_lags` either clips it
onto the oldest version or draws it again among the versions that exist (`lag_warmup`).
The settings of the lag models are validated here too, for every testbed.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

LAG_MODELS = ("fixed", "uniform", "geometric", "per_actor", "bounded", "in_flight",
              "empirical")
LAG_WARMUPS = ("clip", "redraw")  # see draw_lags

# Models whose lag is a constant (per run or per environment), a point mass: restricted to the
# existing versions there is nothing to renormalise, so `redraw` acts as `clip` for them.
CONSTANT_LAG_MODELS = ("fixed", "per_actor")


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


def sample_lags(key: jax.Array, lag_model: str, lag: jax.Array, num_envs: int, capacity: int,
                per_actor_lags: jax.Array, lag_probabilities: tuple[float, ...] = ()) -> jax.Array:
    """Draws each environment's lag (int32 `[E]`) for one rollout under `lag_model`.

    `fixed`: every environment lags `lag` versions. `uniform`: lags uniform over `{0..lag}`;
    `in_flight` draws its start lags so (the per-step lags follow `in_flight_lags`).
    `geometric`: `P(j) ∝ p (1-p)^j` for `j < K`, with `p = lag`. `per_actor`: the constant lags
    drawn once per environment at initialisation (`per_actor_lags`). `bounded`: an asynchronous
    pipeline whose unconstrained lag is uniform over the whole buffer `{0..K-1}`, admitted only
    up to the staleness bound `eta = lag` (AReaL's `max_head_offpolicyness`): a generator that
    would fall further behind waits at the bound, so the lag is `min(U, eta)`,
    `P(j) = 1/K` for `j < eta` and `P(eta) = (K - eta)/K`. `empirical`: `P(j) =
    lag_probabilities[j]`, a histogram measured elsewhere (`lag` is unused).
    """
    if lag_model == "fixed":
        return jnp.full((num_envs,), jnp.round(lag), jnp.int32)
    if lag_model in ("uniform", "in_flight"):
        return jax.random.randint(key, (num_envs,), 0, jnp.round(lag).astype(jnp.int32) + 1)
    if lag_model in ("geometric", "empirical"):
        logits = lag_log_probs(lag_model, lag, capacity, lag_probabilities)
        return jax.random.categorical(key, logits, shape=(num_envs,)).astype(jnp.int32)
    if lag_model == "per_actor":
        return per_actor_lags
    if lag_model == "bounded":
        unconstrained = jax.random.randint(key, (num_envs,), 0, capacity)
        return jnp.minimum(unconstrained, jnp.round(lag).astype(jnp.int32))
    raise ValueError(f"lag_model={lag_model!r} is not supported")


def lag_log_probs(lag_model: str, lag: jax.Array, capacity: int,
                  lag_probabilities: tuple[float, ...] = ()) -> jax.Array:
    """`log P(lag = j)` (up to a constant) for `j = 0, 1, ...` under a model that draws its lags
    afresh every rollout: every model but `CONSTANT_LAG_MODELS` (`in_flight`: its start lags).

    The distributions are those `sample_lags` states; `[capacity]`, or `[len(lag_probabilities)]`
    for `empirical`.
    """
    steps = jnp.arange(capacity)
    if lag_model in ("uniform", "in_flight"):
        return jnp.where(steps <= jnp.round(lag), 0.0, -jnp.inf)
    if lag_model == "geometric":
        # The j == 0 term is written out so that p = 1 (log(0) = -inf) gives lag 0 exactly.
        return jnp.where(steps == 0, 0.0, steps * jnp.log1p(-lag))
    if lag_model == "bounded":
        eta = jnp.round(lag)
        return jnp.where(steps < eta, 0.0,
                         jnp.where(steps == eta, jnp.log(capacity - eta), -jnp.inf))
    if lag_model == "empirical":
        return jnp.log(jnp.asarray(lag_probabilities, jnp.float32))
    raise ValueError(f"lag_model={lag_model!r} has no distribution to redraw from")


def in_flight_lags(start_lags: jax.Array, length: int) -> jax.Array:
    """Per-step lags `[length, E]` of rollouts whose behaviour policy is updated mid-rollout.

    An environment starts `start_lags` versions behind and catches up to the newest version by
    the end of the rollout, as if the learner published a new version every
    `length / (start_lag + 1)` steps (PipelineRL): the lag at step `t` is
    `start_lags - floor(t (start_lags + 1) / length)`, never below 0. Generic over testbeds.
    """
    steps = jnp.arange(length, dtype=jnp.int32)[:, None]
    caught_up = (steps * (start_lags[None, :] + 1)) // length
    return jnp.maximum(start_lags[None, :] - caught_up, 0).astype(jnp.int32)


MEAN_LAG_MODELS = ("fixed", "uniform", "per_actor", "in_flight")
"""Models whose expected lag `mean_lag` gives: those needing neither the buffer nor a histogram."""


def mean_lag(lag_model: str, level: int, length: int, counted_steps: int | None = None) -> float:
    """The expected lag of a step of a rollout of `length` steps under `lag_model` at lag
    `level`, with every lag available (a full buffer): the mean staleness at which lag models
    compare.

    `fixed`: `level`. `uniform` and `per_actor` (lags uniform over `{0..level}`): `level / 2`.
    `in_flight` (start lag `s` uniform over `{0..level}`, then `in_flight_lags`): the mean of
    `max(s - floor(t (s + 1) / length), 0)` over `s` and the steps `t`. The steps counted are
    all `length` of them, or the first `counted_steps`: the token trainer's `version_gap_mean`
    counts a response's valid tokens only (up to its EOS, not the padding after it), and under
    `in_flight` a response shorter than `length` misses the latest, freshest steps.
    """
    if lag_model not in MEAN_LAG_MODELS:
        raise ValueError(f"mean_lag is defined for lag_model in {', '.join(MEAN_LAG_MODELS)} "
                         f"(the others need the buffer or a histogram), got {lag_model!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or level != int(level) \
            or level < 0:
        raise ValueError(f"level must be an integer >= 0, got {level!r}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an integer >= 1, got {length!r}")
    counted = length if counted_steps is None else counted_steps
    if isinstance(counted, bool) or not isinstance(counted, int) or not 1 <= counted <= length:
        raise ValueError(f"counted_steps must be an integer in [1, length={length}], "
                         f"got {counted_steps!r}")
    if lag_model == "fixed":
        return float(level)
    if lag_model in ("uniform", "per_actor"):
        return level / 2
    lags = in_flight_lags(jnp.arange(int(level) + 1, dtype=jnp.int32), length)
    return float(np.mean(np.asarray(lags)[:counted]))


def validate_lag_probabilities(lag_model: str, lag_probabilities: Any, capacity: int) -> None:
    """Raises a `ValueError` unless `lag_probabilities` suits `lag_model` and the buffer."""
    probs = lag_probabilities
    if lag_model != "empirical":
        if probs:
            raise ValueError(f"lag_probabilities is only used with lag_model='empirical', got "
                             f"lag_model={lag_model!r} and lag_probabilities={probs!r}")
        return
    if not isinstance(probs, tuple) or not probs or any(
            isinstance(p, bool) or not isinstance(p, (int, float)) for p in probs):
        raise ValueError(f"lag_probabilities must be a non-empty tuple of numbers (P(lag = j) for "
                         f"j = 0..len-1) for lag_model='empirical', got {probs!r}")
    values = np.asarray(probs, np.float64)
    if len(values) > capacity:
        raise ValueError(f"lag_probabilities has {len(values)} entries; at most buffer_capacity="
                         f"{capacity} (lags 0..{capacity - 1})")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"lag_probabilities must be finite and >= 0, got {list(probs)}")
    if abs(values.sum() - 1.0) > 1e-6:
        raise ValueError(f"lag_probabilities must sum to 1 (within 1e-6), got sum "
                         f"{values.sum():.8g} for {list(probs)}")


def validate_lag(lag_model: str, lag: Any, capacity: int) -> None:
    """Raises a `ValueError` unless the lag hyper-parameter (any shape) suits `lag_model`."""
    lag = np.asarray(lag, np.float64)
    if lag_model == "geometric":
        if np.any((lag <= 0) | (lag > 1)):
            raise ValueError(f"lag for lag_model='geometric' is the probability p and must lie in "
                             f"(0, 1], got {lag.tolist()}")
    elif lag_model != "empirical":  # empirical lags come from lag_probabilities
        max_lag = capacity - 1
        if np.any((lag < 0) | (lag > max_lag) | (lag != np.round(lag))):
            raise ValueError(
                f"lag for lag_model={lag_model!r} must be an integer in [0, {max_lag}] "
                f"(buffer_capacity - 1, buffer_capacity={capacity}), got {lag.tolist()}")


def init_per_actor_lags(key: jax.Array, lag: jax.Array, num_envs: int) -> jax.Array:
    return jax.random.randint(key, (num_envs,), 0, jnp.round(lag).astype(jnp.int32) + 1)


def max_available_lag(buffer: PolicyBuffer) -> jax.Array:
    """The largest lag whose version exists: versions pushed so far, at most `capacity - 1`."""
    return jnp.minimum(buffer.latest_version, buffer.capacity - 1)


def effective_lags(buffer: PolicyBuffer, lags: jax.Array) -> jax.Array:
    """Lags capped by the versions pushed so far and by the capacity."""
    return jnp.minimum(lags, max_available_lag(buffer))


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


def draw_lags(key: jax.Array, lag_model: str, lag: jax.Array, num_envs: int,
              buffer: PolicyBuffer, per_actor_lags: jax.Array,
              lag_probabilities: tuple[float, ...] = (), warmup: str = "clip") -> jax.Array:
    """Each environment's lag (int32 `[E]`) for one rollout, always a version that exists.

    `sample_lags` draws from the model over the whole buffer; lags of versions not pushed yet
    (only while fewer than `capacity` exist) are then, by `warmup`:
    - `clip`: the oldest existing version, which receives all their probability;
    - `redraw`: drawn from the model restricted to the existing versions and renormalised
      (`redraw_unavailable_lags`). `uniform` is then uniform over `0..min(k, n-1)` with `n`
      versions, `geometric` truncated at `n`, `bounded` uniform over the `n` versions while
      `n <= eta`, `in_flight` redraws its start lag (its per-step lags only decrease from it),
      `empirical` renormalises the histogram over `0..n-1`, or clips if it has no mass there.
      `fixed` and `per_actor` are constant lags, point masses: as `clip`, an environment `d`
      versions behind acts with the oldest version until version `d` exists.
    Lags of existing versions are the same draws under both, so a full buffer or lag 0 gives
    identical lags.
    """
    if warmup not in LAG_WARMUPS:
        raise ValueError(f"warmup={warmup!r} is not supported; allowed values: "
                         f"{', '.join(LAG_WARMUPS)}")
    lags = sample_lags(key, lag_model, lag, num_envs, buffer.capacity, per_actor_lags,
                       lag_probabilities)
    if warmup == "redraw" and lag_model not in CONSTANT_LAG_MODELS:
        lags = redraw_unavailable_lags(jax.random.fold_in(key, 1), lags,
                                       lag_log_probs(lag_model, lag, buffer.capacity,
                                                     lag_probabilities),
                                       max_available_lag(buffer))
    return effective_lags(buffer, lags)


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
    """`if_true(operand)` where `flag` holds, else `if_false(operand)`, for a cheap `if_true`
    that must give bit for bit the same result whatever runs share the `vmap`.

    When `flag` holds in every vmapped run only `if_true` runs; otherwise both do and each run
    keeps its own branch's result, so a run's numbers never depend on its neighbours.
    """
    def each_run_its_own(x):
        return jax.lax.cond(flag, if_true, if_false, x)

    return jax.lax.cond(in_every_run(flag), if_true, each_run_its_own, operand)
