"""Group estimators: group-relative advantages, the off-policy optimal baseline (OPOB) and the
per-sample gradient norms it weighs by."""

import functools
from typing import Callable, Optional

import chex
import jax
import jax.numpy as jnp

from vaco_jax.estimators.checks import (check_min_rank, check_same_shape_floats, named,
                                       scalar)

Array = chex.Array
Numeric = chex.Numeric


def _check_groups(
    group_ids: Optional[Array], num_groups: Optional[int], **arrays: Array
) -> jnp.dtype:
    """Validates the grouped arrays and grouping; returns the float dtype."""
    for name, x in arrays.items():
        check_min_rank(name, x, 1)
    dtype = check_same_shape_floats(**arrays)
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
    named(name, chex.assert_rank, ref, 1)
    named("group_ids", chex.assert_type, group_ids, int)
    named("group_ids", chex.assert_shape, group_ids, jnp.shape(ref))
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
        cap = scalar("weight_cap", weight_cap, log_w.dtype)
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
        check_min_rank("batch", leaf, 1)
    named("batch", chex.assert_equal_shape_prefix, leaves, 1)

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
