"""Stabilisers that compose with any surrogate: per-element weights, masks and clip bounds.

Every ratio is formed in log space, `w = exp(log_w)`, through `clamped_ratio`. Weights and masks
are stop-gradient: they select or scale samples, they are not optimised through. Masks are float
0/1 arrays of the input's shape, ready to be passed as a loss's `mask` (or multiplied into it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import (
    Array,
    ArrayLike,
    Metrics,
    aggregate,
    validate_and_mask,
)

# Log-ratios are clamped to [-MAX_LOG_RATIO, MAX_LOG_RATIO] before exponentiating: exp(20) ~ 4.9e8
# keeps terms such as SPO's (r - 1)^2 ~ 2.4e17 finite in float32 for any input, while a policy
# that far from its reference carries no usable signal anyway. Outside the range the ratio is
# constant, so such a sample passes no gradient through its ratio.
MAX_LOG_RATIO = 20.0


def clamp_log_ratio(log_ratio: ArrayLike) -> Array:
    """`log_ratio` clamped to `[-MAX_LOG_RATIO, MAX_LOG_RATIO]`."""
    return jnp.clip(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def clamped_ratio(log_ratio: ArrayLike) -> Array:
    """The ratio `exp(clamp_log_ratio(log_ratio))`."""
    return jnp.exp(clamp_log_ratio(log_ratio))


# A cap "truncates" a weight only when it moves it by more than float32 noise: at lag 0 a ratio
# pi_T / beta is 1 in exact arithmetic, and recomputing the two log-probabilities in different
# XLA programs (or device layouts) scatters it around 1, which a cap of 1 would otherwise count.
CAP_LOG_TOLERANCE = 1e-5


def exceeds_cap(log_ratio: ArrayLike, cap: ArrayLike) -> Array:
    """Where `clamped_ratio(log_ratio)` exceeds `cap` by more than `CAP_LOG_TOLERANCE` in log
    space: the elements a truncation at `cap` actually changes (the count a mechanism reports)."""
    return clamp_log_ratio(log_ratio) > jnp.log(cap) + CAP_LOG_TOLERANCE


def tv_estimate(log_rho: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """Total-variation estimate `0.5 * mean |rho - 1|` over the valid elements.

    With samples from the reference policy, `E|rho - 1| = 2 TV(pi, reference)`. Differentiable
    in `log_rho`; 0 when nothing is valid.
    """
    valid, log_rho = validate_and_mask(mask, log_rho=log_rho)
    return 0.5 * aggregate(jnp.abs(clamped_ratio(log_rho) - 1.0), valid)


def tv_filter_mask(
    log_rho: ArrayLike,
    advantages: ArrayLike,
    delta: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    tv: ArrayLike | None = None,
) -> tuple[Array, Metrics]:
    """VACO's total-variation filter.

    With `TV = tv_estimate(log_rho, mask)` (or the given `tv`, e.g. measured over the whole phase
    batch, or one per element such as its prompt group's): if `TV <= delta` every valid element
    is kept. Otherwise exactly the elements with
    `A * sign(rho - 1) > 0` are dropped: for them a step on the surrogate `rho * A` moves `rho`
    away from 1 and so increases TV; the ones that pull `rho` back towards 1 are kept.
    `sign(rho - 1)` is read as `sign(log_rho)`, which is equal and free of rounding in `exp`.

    Args:
      log_rho: log-ratio to the reference policy (`pi_T` or `beta`), any shape.
      advantages: advantages, same shape.
      delta: TV threshold, a float or a traced scalar.
      mask: optional validity mask (1 = valid), same shape.
      tv: optional precomputed TV estimate overriding the one measured on `log_rho`: a scalar,
        or one per element (the input's shape).

    Returns:
      `(keep, metrics)`: `keep` is a stop-gradient float 0/1 array of the input's shape, already
      multiplied by `mask`; metrics `tv`, `filter_fraction` (dropped / valid) and
      `filter_active` (1.0 when `TV > delta`; with a TV per element, the share of valid elements
      whose TV exceeds `delta`, `tv` then being their mean TV).
    """
    valid, log_rho, advantages = validate_and_mask(
        mask, log_rho=log_rho, advantages=advantages
    )
    tv = tv_estimate(log_rho, valid) if tv is None else jnp.asarray(tv)
    active = tv > delta
    increases_tv = advantages * jnp.sign(log_rho) > 0
    keep = valid & ~(active & increases_tv)
    dropped = valid & ~keep
    per_element = tv.ndim > 0
    metrics = {
        "tv": aggregate(tv, valid) if per_element else tv,
        "filter_fraction": aggregate(dropped.astype(jnp.float32), valid),
        "filter_active": (aggregate(active.astype(jnp.float32), valid) if per_element
                          else active.astype(jnp.float32)),
    }
    return jax.lax.stop_gradient(keep.astype(log_rho.dtype)), jax.lax.stop_gradient(metrics)


def truncated_is_weights(log_w: ArrayLike, cap: ArrayLike) -> Array:
    """Truncated importance weights `sg(min(w, cap))` with `w = exp(log_w)`."""
    return jax.lax.stop_gradient(jnp.minimum(clamped_ratio(log_w), cap))


def masked_is_mask(log_w: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> Array:
    """Masked importance sampling: float `1[lower <= w <= upper]` with `w = exp(log_w)`.

    Bounds beyond `exp(+-MAX_LOG_RATIO)` act as no bound.
    """
    w = clamped_ratio(log_w)
    keep = (lower <= w) & (w <= upper)
    return jax.lax.stop_gradient(keep.astype(w.dtype))


def masked_is_weights(log_w: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> Array:
    """Masked importance weights `sg(w 1[lower <= w <= upper])`, `w = exp(log_w)`: the weight
    inside its band, 0 outside (IcePop's `M`, and the weight of masked importance sampling)."""
    return jax.lax.stop_gradient(clamped_ratio(log_w) * masked_is_mask(log_w, lower, upper))


def m2po_mask(
    log_w: ArrayLike, tau: ArrayLike = 0.04, mask: ArrayLike | None = None
) -> tuple[Array, Metrics]:
    """M2PO's second-moment mask: drop the fewest largest-`(log w)^2` elements.

    Among the valid elements, the ones with the largest `(log w)^2` are dropped, as few as
    possible, until the mean of `(log w)^2` over the kept valid elements is strictly below `tau`.
    Sorted ascending, the prefix means of `(log w)^2` are non-decreasing, so the kept set is the
    longest prefix whose mean is below `tau` (all valid elements when their mean already is; none
    when even the smallest is `>= tau`). Ties at the boundary are broken by sort order. One sort
    and one cumulative sum, no loops.

    Returns:
      `(keep, metrics)`: stop-gradient float 0/1 `keep` of `log_w`'s shape, already multiplied by
      `mask`; metrics `m2` (mean `(log w)^2` over valid elements), `m2_kept` (over kept ones)
      and `mask_fraction` (dropped / valid).
    """
    valid, log_w = validate_and_mask(mask, log_w=log_w)
    second = jnp.square(log_w)
    # Invalid elements sort last, beyond every valid one.
    sort_key = jnp.where(valid, second, jnp.inf).ravel()
    order = jnp.argsort(sort_key)
    sorted_second = jnp.where(valid.ravel()[order], sort_key[order], 0.0)
    position = jnp.arange(sort_key.size)
    prefix_mean = jnp.cumsum(sorted_second) / (position + 1)
    num_valid = valid.sum()
    violates = (prefix_mean >= tau) & (position < num_valid)
    num_kept = jnp.where(violates.any(), jnp.argmax(violates), num_valid)
    rank = jnp.empty_like(order).at[order].set(position).reshape(valid.shape)
    keep = valid & (rank < num_kept)
    metrics = {
        "m2": aggregate(second, valid),
        "m2_kept": aggregate(second, keep),
        "mask_fraction": (num_valid - num_kept) / jnp.maximum(num_valid, 1),
    }
    return jax.lax.stop_gradient(keep.astype(log_w.dtype)), jax.lax.stop_gradient(metrics)


def m2po_clip_bounds(
    log_ratio: ArrayLike, advantages: ArrayLike, budget: ArrayLike = 0.04,
    mask: ArrayLike | None = None
) -> tuple[tuple[Array, Array], Metrics]:
    """M2PO's clip bounds: PPO bounds `[exp(-tau), exp(tau)]` that cap the second moment of the
    harmful tokens' log-ratios at `budget`.

    A valid token is harmful when its step would move its ratio further from 1: `A > 0` and
    `r > 1`, or `A < 0` and `r < 1`. While their mean `(log r)^2` is within `budget` (or none
    is harmful) nothing is clipped (`tau` = `MAX_LOG_RATIO`). Otherwise, with their `v = (log
    r)^2` sorted ascending, the capped mean `mean(min(v, v_k))` grows with `k`; `k*` is the first
    breakpoint at which it reaches `budget` and `tau^2 = v_{k*-1}` (0 when `k* = 0`), the
    breakpoint below, whose capped mean is within the budget. This is the breakpoint the
    authors' solver returns rather than the exact root between the two. One sort and one
    cumulative sum, no loops.

    Returns:
      `((low_eps, high_eps), metrics)`, `low_eps = 1 - exp(-tau)` and `high_eps = exp(tau) - 1`
      as `ppo_clip_loss` takes them, stop-gradient; metrics `m2` (mean `(log r)^2` over the
      harmful tokens), `m2_capped` (the same with `|log r|` capped at `tau`), `tau` and
      `harmful_fraction` (harmful / valid).
    """
    valid, log_ratio, advantages = validate_and_mask(mask, log_ratio=log_ratio,
                                                     advantages=advantages)
    log_ratio = clamp_log_ratio(log_ratio)
    harmful = valid & (((advantages > 0) & (log_ratio > 0)) | ((advantages < 0) & (log_ratio < 0)))
    second = jnp.where(harmful, jnp.square(log_ratio), 0.0).ravel()
    count = harmful.sum()
    m2 = second.sum() / jnp.maximum(count, 1)
    # Harmless tokens sort last, beyond every harmful one.
    ordered = jnp.sort(jnp.where(harmful.ravel(), second, jnp.inf))
    position = jnp.arange(ordered.size)
    is_harmful = position < count
    ordered = jnp.where(is_harmful, ordered, 0.0)
    capped_sum = jnp.cumsum(ordered) + ordered * (count - position - 1)
    reaches = (capped_sum >= budget * count) & is_harmful
    first = jnp.argmax(reaches)
    cap_sq = jnp.where(first > 0, ordered[jnp.maximum(first - 1, 0)], 0.0)
    acts = m2 > budget
    tau = jnp.where(acts, jnp.sqrt(cap_sq), MAX_LOG_RATIO)
    metrics = {
        "m2": m2,
        "m2_capped": jnp.minimum(second, jnp.square(tau)).sum() / jnp.maximum(count, 1),
        "tau": tau,
        "harmful_fraction": count / jnp.maximum(valid.sum(), 1),
    }
    bounds = (-jnp.expm1(-tau), jnp.expm1(tau))
    return jax.lax.stop_gradient(bounds), jax.lax.stop_gradient(metrics)


def topr_weights(log_w: ArrayLike, advantages: ArrayLike) -> Array:
    """TOPR's taper: weight 1 where `advantages >= 0`, `clip(w, 0, 1)` elsewhere; stop-gradient."""
    _, log_w, advantages = validate_and_mask(None, log_w=log_w, advantages=advantages)
    tapered = jnp.minimum(clamped_ratio(log_w), 1.0)
    return jax.lax.stop_gradient(jnp.where(advantages >= 0, 1.0, tapered))


def freshness_mask(version_gap: ArrayLike, max_gap: ArrayLike) -> Array:
    """Float `1[version_gap <= max_gap]`: drops samples from policies too many versions old."""
    return (jnp.asarray(version_gap) <= max_gap).astype(jnp.float32)


def gspo_sequence_log_ratio(log_ratio: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """GSPO's sequence log-ratio: the mean of `log_ratio` over the valid tokens of the last axis.

    `[..., L] -> [...]`; `exp` of it is the length-normalised sequence ratio
    `(pi(y|x) / pi_old(y|x))^(1/|y|)`. A sequence without valid tokens gets 0.
    """
    valid, log_ratio = validate_and_mask(mask, log_ratio=log_ratio)
    if log_ratio.ndim == 0:
        raise ValueError("`log_ratio` needs a token axis, got a scalar")
    return log_ratio.sum(axis=-1) / jnp.maximum(valid.sum(axis=-1), 1)


def bapo_clip_bounds(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    positive_share: ArrayLike = 0.4,
    low_range: tuple[ArrayLike, ArrayLike] = (0.6, 0.9),
    high_range: tuple[ArrayLike, ArrayLike] = (1.2, 3.0),
    num_candidates: int = 37,
) -> tuple[Array, Array]:
    """BAPO's adaptive clip bounds (Xi et al. 2025, "Balanced Policy Optimization with Adaptive
    Clipping"), returned as the `(low_eps, high_eps)` pair `ppo_clip_loss` takes as `clip_eps`.

    Rule implemented. For ratio bounds `(c_low, c_high)` a valid token's contribution to the
    clipped objective's gradient is `r |A|` where its gradient is active and 0 where it is
    clipped: positive tokens (`A > 0`) are active while `r <= c_high`, negative ones (`A < 0`)
    while `r >= c_low`. The positive share is `P / (P + N)` with `P`, `N` the summed positive
    and negative contributions (1 when both are 0). BAPO widens the bounds from
    `(low_range[0], high_range[0])` towards `(low_range[1], high_range[1])`: raising `c_high`
    admits low-probability positive tokens, raising `c_low` clips more negative ones, so the
    share only grows along the way. The paper raises both bounds step by step until the share
    reaches its target `rho_0` or the ranges are exhausted. Here the steps are the
    `num_candidates` points of the joint linear path
    `c = range[0] + k / (num_candidates - 1) * (range[1] - range[0])`, all evaluated at once;
    the first point whose share is `>= positive_share` is chosen, or the last (widest) point when
    none is. Cost `O(num_candidates * N)`. The default 37 points step `c_high` by 0.05 as in the
    paper.

    Args:
      log_ratio: token log-ratios `log pi_theta - log pi_old`, any shape.
      advantages: advantages, same shape.
      mask: optional validity mask (1 = valid), same shape.
      positive_share: the target share `rho_0`, a float or a traced scalar.
      low_range: `(start, end)` of the ratio bound `c_low`.
      high_range: `(start, end)` of the ratio bound `c_high`.
      num_candidates: static number (>= 2) of points on the path.

    Returns:
      Stop-gradient traced scalars `(1 - c_low, c_high - 1)`.
    """
    if not isinstance(num_candidates, int) or num_candidates < 2:
        raise ValueError(f"`num_candidates` must be a Python int >= 2, got {num_candidates!r}")
    # Invalid tokens come back with A = 0, so they contribute nothing.
    _, log_ratio, advantages = validate_and_mask(mask, log_ratio=log_ratio, advantages=advantages)
    ratio = clamped_ratio(log_ratio)
    contribution = ratio * jnp.abs(advantages)
    fraction = jnp.linspace(0.0, 1.0, num_candidates)
    c_low = low_range[0] + fraction * (low_range[1] - low_range[0])
    c_high = high_range[0] + fraction * (high_range[1] - high_range[0])

    def share(low: Array, high: Array) -> Array:
        positive = jnp.where((advantages > 0) & (ratio <= high), contribution, 0.0).sum()
        negative = jnp.where((advantages < 0) & (ratio >= low), contribution, 0.0).sum()
        total = positive + negative
        return jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0), 1.0)

    reached = jax.vmap(share)(c_low, c_high) >= positive_share
    chosen = jnp.where(reached.any(), jnp.argmax(reached), num_candidates - 1)
    return jax.lax.stop_gradient((1.0 - c_low[chosen], c_high[chosen] - 1.0))
