"""Advantage estimators and value targets.

Time-major conventions shared by `gae` and `vtrace`: every array is `[T, ...]`
with any trailing batch dims, and all arrays of one call have the same shape.

- `values[t]` is V(s_t).
- `next_values[t]` is the value of the true next observation of step t; when
  step t was truncated by a time limit it is the value of the final
  observation, not of the auto-reset observation that follows it.
- `discounts[t] = gamma * (1 - terminated[t])`: a termination does not
  bootstrap, a truncation does (with discount gamma).
- `continuations[t]` is 0 where step t ended its episode for any reason
  (termination or truncation) and 1 otherwise, so no recursion runs across an
  auto-reset boundary.

Hyper-parameters (`lambda_`, `rho_bar`, ...) are scalars, Python numbers or
traced, so they can be vmapped over. All outputs are stop-gradient: they are
regression targets and policy-gradient weights, never differentiated through.
"""

import functools
from typing import Any, Callable, Optional

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
Numeric = chex.Numeric


def _named(
    name: str, check: Callable[..., None], *args: Any, **kwargs: Any
) -> None:
    """Runs a chex assertion; a failure is re-raised naming the argument."""
    try:
        check(*args, **kwargs)
    except AssertionError as e:
        raise ValueError(f"`{name}`: {e}") from None


def _check_min_rank(name: str, x: Array, min_rank: int) -> None:
    if jnp.ndim(x) < min_rank:
        raise ValueError(
            f"`{name}` must have rank >= {min_rank}, got shape {jnp.shape(x)}."
        )


def _check_same_shape_floats(**arrays: Array) -> jnp.dtype:
    """Checks that all arrays are floating with the first one's shape.

    Returns:
        The dtype every array is promoted to, so that scan carries stay uniform.
    """
    ref_name, ref = next(iter(arrays.items()))
    for name, x in arrays.items():
        _named(name, chex.assert_type, x, float)
        if name != ref_name:
            _named(name, chex.assert_shape, x, jnp.shape(ref))
    return jnp.result_type(*arrays.values())


def _check_time_major(**arrays: Array) -> jnp.dtype:
    for name, x in arrays.items():
        _check_min_rank(name, x, 1)
    return _check_same_shape_floats(**arrays)


def _scalar(name: str, x: Numeric, dtype: jnp.dtype) -> Array:
    _named(name, chex.assert_rank, x, 0)
    return jnp.asarray(x, dtype)


def _reverse_linear_recursion(xs: Array, decays: Array) -> Array:
    """Solves `y_t = xs_t + decays_t * y_{t+1}` backwards, with `y_T = 0`."""

    def step(y_next, inputs):
        x, decay = inputs
        y = x + decay * y_next
        return y, y

    _, ys = jax.lax.scan(
        step, jnp.zeros(xs.shape[1:], xs.dtype), (xs, decays), reverse=True
    )
    return ys


def gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    discounts: Array,
    continuations: Array,
    lambda_: Numeric,
) -> tuple[Array, Array]:
    """Generalised advantage estimation (Schulman et al., 2016).

    `delta_t = rewards_t + discounts_t * next_values_t - values_t` and
    `A_t = delta_t + discounts_t * lambda_ * continuations_t * A_{t+1}`, with
    `A = 0` beyond the last step (which bootstraps from `next_values`).

    Args:
        rewards: `[T, ...]` rewards r_t.
        values: `[T, ...]` V(s_t).
        next_values: `[T, ...]` value of the true next observation of step t.
        discounts: `[T, ...]` gamma * (1 - terminated_t).
        continuations: `[T, ...]` 0 where step t ended its episode, else 1.
        lambda_: scalar GAE lambda.

    Returns:
        `(advantages, value_targets)`, both `[T, ...]` and stop-gradient, with
        `value_targets = advantages + values`.
    """
    dtype = _check_time_major(
        rewards=rewards,
        values=values,
        next_values=next_values,
        discounts=discounts,
        continuations=continuations,
    )
    lambda_ = _scalar("lambda_", lambda_, dtype)
    rewards, values, next_values, discounts, continuations = (
        jnp.asarray(x, dtype)
        for x in (rewards, values, next_values, discounts, continuations)
    )

    deltas = rewards + discounts * next_values - values
    advantages = _reverse_linear_recursion(
        deltas, discounts * lambda_ * continuations
    )
    return (
        jax.lax.stop_gradient(advantages),
        jax.lax.stop_gradient(advantages + values),
    )


def _truncated_ratio(log_rhos: Array, bar: Array) -> Array:
    # Truncating in log space keeps any finite log-ratio (even 1e4) finite.
    return jnp.exp(jnp.minimum(log_rhos, jnp.log(bar)))


def vtrace(
    rewards: Array,
    values: Array,
    next_values: Array,
    discounts: Array,
    continuations: Array,
    log_rhos: Array,
    lambda_: Numeric = 1.0,
    rho_bar: Numeric = 1.0,
    c_bar: Numeric = 1.0,
    rho_bar_pg: Numeric = 1.0,
) -> tuple[Array, Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018).

    With `w_t = exp(log_rhos_t)`, `rho_t = min(rho_bar, w_t)`,
    `c_t = lambda_ * min(c_bar, w_t)` and
    `delta_t = rewards_t + discounts_t * next_values_t - values_t`:

        vs_t - V_t = rho_t * delta_t
            + discounts_t * c_t * continuations_t * (vs_{t+1} - V_{t+1}),

    with the correction `vs - V` equal to 0 beyond the last step. The
    policy-gradient advantage is
    `min(rho_bar_pg, w_t) * (rewards_t + discounts_t * q_t - values_t)` with
    `q_t = next_values_t + continuations_t * (vs_{t+1} - V_{t+1})`: inside an
    episode (where `values[t+1] == next_values[t]`) that is `vs_{t+1}`, and at
    an episode boundary or the last step it is the bootstrap `next_values_t`.
    Writing `q_t` through the correction keeps on-policy V-trace with
    `lambda_ = 1` equal to GAE even where `values[t+1]` and `next_values[t]`
    disagree.

    With all `log_rhos = 0`, `value_targets` equal those of `gae` with the same
    `lambda_`, and with `lambda_ = 1` so do the advantages.

    Args:
        rewards: `[T, ...]` rewards r_t.
        values: `[T, ...]` V(s_t).
        next_values: `[T, ...]` value of the true next observation of step t.
        discounts: `[T, ...]` gamma * (1 - terminated_t).
        continuations: `[T, ...]` 0 where step t ended its episode, else 1.
        log_rhos: `[T, ...]` log(pi(a_t|s_t) / beta(a_t|s_t)), target over
            behaviour policy.
        lambda_: scalar trace-cutting lambda.
        rho_bar: scalar truncation of the importance weight in `delta_t`.
        c_bar: scalar truncation of the trace coefficients.
        rho_bar_pg: scalar truncation of the policy-gradient importance weight.

    Returns:
        `(pg_advantages, value_targets)`, both `[T, ...]` and stop-gradient;
        `value_targets` are the V-trace targets `vs`.
    """
    dtype = _check_time_major(
        rewards=rewards,
        values=values,
        next_values=next_values,
        discounts=discounts,
        continuations=continuations,
        log_rhos=log_rhos,
    )
    lambda_ = _scalar("lambda_", lambda_, dtype)
    rho_bar = _scalar("rho_bar", rho_bar, dtype)
    c_bar = _scalar("c_bar", c_bar, dtype)
    rho_bar_pg = _scalar("rho_bar_pg", rho_bar_pg, dtype)
    rewards, values, next_values, discounts, continuations, log_rhos = (
        jnp.asarray(x, dtype)
        for x in (
            rewards, values, next_values, discounts, continuations, log_rhos
        )
    )

    rhos = _truncated_ratio(log_rhos, rho_bar)
    cs = lambda_ * _truncated_ratio(log_rhos, c_bar)
    deltas = rewards + discounts * next_values - values
    corrections = _reverse_linear_recursion(
        rhos * deltas, discounts * cs * continuations
    )
    vs = values + corrections

    next_corrections = jnp.concatenate(
        [corrections[1:], jnp.zeros_like(corrections[:1])], axis=0
    )
    q_next = next_values + continuations * next_corrections
    pg_advantages = _truncated_ratio(log_rhos, rho_bar_pg) * (
        rewards + discounts * q_next - values
    )
    return jax.lax.stop_gradient(pg_advantages), jax.lax.stop_gradient(vs)


def _check_groups(
    group_ids: Optional[Array], num_groups: Optional[int], **arrays: Array
) -> jnp.dtype:
    """Validates the grouped arrays and grouping; returns the float dtype."""
    for name, x in arrays.items():
        _check_min_rank(name, x, 1)
    dtype = _check_same_shape_floats(**arrays)
    if group_ids is None:
        if num_groups is not None:
            raise ValueError(
                "`num_groups` is only used together with `group_ids`."
            )
        return dtype
    if num_groups is None:
        raise ValueError(
            "`num_groups` must be given (statically) with `group_ids`."
        )
    name, ref = next(iter(arrays.items()))
    _named(name, chex.assert_rank, ref, 1)
    _named("group_ids", chex.assert_type, group_ids, int)
    _named("group_ids", chex.assert_shape, group_ids, jnp.shape(ref))
    return dtype


# Groups are the last axis when `group_ids` is None, else the segments named by
# `group_ids` (values in `[0, num_groups)`). Both reductions broadcast each
# group's result back to its members, so callers never branch on the layout.


def _group_reduce(
    reduce: Callable[..., Array],
    segment_reduce: Callable[..., Array],
    x: Array,
    group_ids: Optional[Array],
    num_groups: Optional[int],
) -> Array:
    if group_ids is None:
        return jnp.broadcast_to(reduce(x, axis=-1, keepdims=True), x.shape)
    return segment_reduce(x, group_ids, num_segments=num_groups)[group_ids]


_group_sum = functools.partial(_group_reduce, jnp.sum, jax.ops.segment_sum)
_group_max = functools.partial(_group_reduce, jnp.max, jax.ops.segment_max)


def _shift_to_group_max(
    returns: Array, group_ids: Optional[Array], num_groups: Optional[int]
) -> Array:
    # Advantages are shift-invariant. Measured from a member of its group, a
    # constant group is exactly 0; from its mean, the mean's rounding error
    # divided by std + eps ~ eps would give O(1) advantages.
    return returns - _group_max(returns, group_ids, num_groups)


def _group_mean_and_std(
    returns: Array, group_ids: Optional[Array], num_groups: Optional[int]
) -> tuple[Array, Array]:
    """Per-element group mean and population (ddof = 0) standard deviation."""
    counts = _group_sum(jnp.ones_like(returns), group_ids, num_groups)
    mean = _group_sum(returns, group_ids, num_groups) / counts
    var = _group_sum(jnp.square(returns - mean), group_ids, num_groups) / counts
    return mean, jnp.sqrt(var)


def group_relative_advantages(
    returns: Array,
    *,
    group_ids: Optional[Array] = None,
    num_groups: Optional[int] = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Array:
    """Group-relative advantages (GRPO; Dr. GRPO with `scale_by_std=False`).

    `A_i = (R_i - mean_g R) / (std_g R + eps)` where g is the group of sample i
    and std is the population standard deviation (ddof = 0), so a group whose
    returns are all equal gets zero advantages.

    Args:
        returns: `[..., N]` returns, one group of N samples along the last
            axis; or `[B]` when `group_ids` is given.
        group_ids: optional `[B]` integer group of each sample, in
            `[0, num_groups)`; groups may have different sizes.
        num_groups: static number of groups; required with `group_ids`.
        scale_by_std: divide by the group standard deviation (GRPO); False
            keeps the centred returns (Dr. GRPO).
        eps: added to the standard deviation.

    Returns:
        Stop-gradient advantages with the shape of `returns`.
    """
    dtype = _check_groups(group_ids, num_groups, returns=returns)
    returns = _shift_to_group_max(
        jnp.asarray(returns, dtype), group_ids, num_groups
    )
    mean, std = _group_mean_and_std(returns, group_ids, num_groups)
    advantages = returns - mean
    if scale_by_std:
        advantages = advantages / (std + eps)
    return jax.lax.stop_gradient(advantages)


def _grouped_floats(
    group_ids: Optional[Array], num_groups: Optional[int], **arrays: Array
) -> tuple[Array, ...]:
    """The grouped arrays, validated by `_check_groups`, in one float dtype."""
    dtype = _check_groups(group_ids, num_groups, **arrays)
    return tuple(jnp.asarray(x, dtype) for x in arrays.values())


def _opob_baseline(
    returns: Array,
    log_w: Array,
    grad_sq_norms: Array,
    weight_cap: Optional[Numeric],
    group_ids: Optional[Array],
    num_groups: Optional[int],
) -> Array:
    """Each element's group baseline `sum W R / sum W` (the mean if all W = 0)."""
    if weight_cap is not None:
        cap = _scalar("weight_cap", weight_cap, log_w.dtype)
        log_w = jnp.minimum(log_w, jnp.log(cap))
    # The baseline only needs W up to a per-group factor, so shift log W by the
    # group max before exponentiating: w^2 overflows already at log_w = 45.
    log_big_w = 2.0 * log_w + jnp.log(grad_sq_norms)
    group_max = _group_max(log_big_w, group_ids, num_groups)
    # An all-zero group has max -inf; any finite shift keeps its weights at 0.
    group_max = jnp.where(jnp.isfinite(group_max), group_max, 0.0)
    weights = jnp.exp(log_big_w - group_max)

    weight_sums = _group_sum(weights, group_ids, num_groups)
    has_weight = weight_sums > 0
    weighted_baseline = _group_sum(
        weights * returns, group_ids, num_groups
    ) / jnp.where(has_weight, weight_sums, 1.0)
    mean, _ = _group_mean_and_std(returns, group_ids, num_groups)
    return jnp.where(has_weight, weighted_baseline, mean)


def off_policy_optimal_baseline(
    rewards: Array,
    log_weights: Array,
    grad_sq_norms: Array,
    *,
    weight_cap: Optional[Numeric] = None,
) -> Array:
    """VCPO's off-policy optimal baseline (OPOB), one per group.

    `b = sum_i W_i R_i / sum_i W_i` over the `G` samples of a group, with
    `W_i = w_i^2 * grad_sq_norms_i` and `w_i = exp(log_weights_i)` the
    sequence importance weight: the constant baseline that minimises the
    variance of the policy gradient `sum_i w_i g_i (R_i - b)` when
    `grad_sq_norms_i = ||g_i||^2 = ||grad log pi(seq_i)||^2`. Weights are
    formed in log space relative to the group's largest, so any finite
    log-weight (even 1e4) gives a finite baseline. A group whose `W` are all 0
    falls back to its plain mean; equal `W` give the group mean.

    VCPO's paper and released configuration use the untruncated `w` here,
    though its loss truncates at `C = 8`; `weight_cap = C` gives the released
    code's `use_clipped_is_ratios` option, `min(w, C)`. (That code measures
    `||g_i||` on the per-sequence loss, which carries `min(w_i, C)`: pass
    `grad_sq_norms * min(w, C)^2` to reproduce it exactly.)

    Args:
        rewards: `[..., G]` rewards, one group of `G` samples along the last
            axis (`[P, G]`: `P` prompts, `G` responses each).
        log_weights: `[..., G]` log sequence importance weights, e.g.
            `sum_t (log pi_T - log beta)` over each response's tokens.
        grad_sq_norms: `[..., G]` non-negative `||grad log pi(seq_i)||^2`.
        weight_cap: optional truncation `C` of `w` (a traced scalar allowed).

    Returns:
        `[...]` stop-gradient baselines, one per group.
    """
    rewards, log_weights, grad_sq_norms = _grouped_floats(
        None, None, rewards=rewards, log_weights=log_weights,
        grad_sq_norms=grad_sq_norms,
    )
    # Measured from the group's best reward, as in `_shift_to_group_max`, a
    # constant group's baseline is exactly its reward.
    best = jnp.max(rewards, axis=-1)
    baseline = best + _opob_baseline(
        rewards - best[..., None],
        log_weights,
        grad_sq_norms,
        weight_cap,
        None,
        None,
    )[..., 0]
    chex.assert_shape(baseline, rewards.shape[:-1])
    return jax.lax.stop_gradient(baseline)


def opob_advantages(
    returns: Array,
    log_w: Array,
    grad_sq_norms: Array,
    *,
    group_ids: Optional[Array] = None,
    num_groups: Optional[int] = None,
    weight_cap: Optional[Numeric] = None,
    eps: float = 1e-6,
) -> Array:
    """Advantages with the optimal off-policy baseline (OPOB, from VCPO).

    `(R_i - b) / (std_g R + eps)` with `b` the group's
    `off_policy_optimal_baseline` (`W_i = w_i^2 * grad_sq_norms_i`,
    `w_i = exp(log_w_i)`, truncated at `weight_cap` when given) and the
    population standard deviation of the returns, as VCPO normalises.

    Args:
        returns: `[..., N]` returns, one group along the last axis; or `[B]`
            when `group_ids` is given.
        log_w: log importance weights of the samples, shape of `returns`.
        grad_sq_norms: non-negative `||grad log pi(tau_i)||^2`, shape of
            `returns` (see `per_sample_grad_sq_norms`).
        group_ids: optional `[B]` integer group of each sample, in
            `[0, num_groups)`.
        num_groups: static number of groups; required with `group_ids`.
        weight_cap: optional truncation `C` of `w` in the baseline.
        eps: added to the standard deviation.

    Returns:
        Stop-gradient advantages with the shape of `returns`.
    """
    returns, log_w, grad_sq_norms = _grouped_floats(
        group_ids, num_groups, returns=returns, log_w=log_w,
        grad_sq_norms=grad_sq_norms,
    )
    returns = _shift_to_group_max(returns, group_ids, num_groups)
    baseline = _opob_baseline(
        returns, log_w, grad_sq_norms, weight_cap, group_ids, num_groups
    )
    _, std = _group_mean_and_std(returns, group_ids, num_groups)
    return jax.lax.stop_gradient((returns - baseline) / (std + eps))


def per_sample_grad_sq_norms(
    log_prob_fn: Callable[[chex.ArrayTree, chex.ArrayTree], Array],
    params: chex.ArrayTree,
    batch: chex.ArrayTree,
    *,
    chunk_size: Optional[int] = None,
) -> Array:
    """Squared L2 norm of each sample's log-probability gradient.

    `jax.vmap(jax.grad(...))` holds one gradient per sample at once, `B` copies
    of the parameters; `chunk_size` bounds that to `chunk_size` copies by
    mapping over chunks in sequence (`lax.map`), same results.

    Args:
        log_prob_fn: `log_prob_fn(params, sample) -> scalar`, the summed
            log-probability of one sample (e.g. one trajectory).
        params: parameters pytree.
        batch: pytree whose leaves share a leading batch axis of size B.
        chunk_size: optional static number of samples differentiated together;
            None differentiates all `B` together.

    Returns:
        `[B]` stop-gradient array whose entry i is
        `||grad_params log_prob_fn(params, batch_i)||^2`, summed over all
        parameter leaves.
    """
    leaves = jax.tree.leaves(batch)
    if not leaves:
        raise ValueError("`batch` must contain at least one array.")
    for leaf in leaves:
        _check_min_rank("batch", leaf, 1)
    _named("batch", chex.assert_equal_shape_prefix, leaves, 1)

    def grad_sq_norm(sample):
        grads = jax.grad(log_prob_fn)(params, sample)
        return sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads))

    if chunk_size is None:
        return jax.lax.stop_gradient(jax.vmap(grad_sq_norm)(batch))
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(
            "`chunk_size` must be a positive integer or None, "
            f"got {chunk_size!r}."
        )
    return jax.lax.stop_gradient(
        jax.lax.map(grad_sq_norm, batch, batch_size=chunk_size)
    )
