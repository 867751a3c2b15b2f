"""Trust regions of the total-variation line of work: how a TV budget becomes a threshold,
TVPO's per-prompt-group TV estimate, and DPPO's per-token masks.

Conventions of `vaco_jax.losses` hold: element-wise inputs of any shape (TV groups need `[N, L]`
token batches), log-space ratios, stop-gradient masks already multiplied by `mask`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import Array, ArrayLike, Metrics, aggregate, validate_and_mask
from vaco_jax.losses.filters import clamped_ratio

# How `tv_delta` reads. `budget`: as the first author's TVPO code reads its configured budget,
# an L1 budget on E|r - 1|, so the filter acts once the TV estimate 0.5 E|r - 1| exceeds
# `tv_delta / 2`. `tv`: `tv_delta` is the TV threshold itself (vaco_jax's reading until the
# fidelity review; results committed before it used this one).
TV_DELTA_CONVENTIONS = ("budget", "tv")

# Budgets the authors used, reachable by name wherever `tv_delta` is set.
TV_BUDGETS = {
    "vaco_mujoco": 0.2,  # the VACO paper's delta on MuJoCo (units unstated there)
    "tvpo_lm": 0.015,  # TVPO's language-model scripts
    "tvpo_lm_tight": 0.01,
}


def tv_threshold(tv_delta: ArrayLike, convention: str) -> Array:
    """The TV threshold `tv_delta` stands for under `convention` (one of
    `TV_DELTA_CONVENTIONS`): `tv_delta / 2` for `budget`, `tv_delta` itself for `tv`."""
    if convention not in TV_DELTA_CONVENTIONS:
        raise ValueError(f"tv_delta_convention={convention!r} is not supported; allowed values: "
                         f"{', '.join(TV_DELTA_CONVENTIONS)}")
    return jnp.asarray(tv_delta) / 2 if convention == "budget" else jnp.asarray(tv_delta)


def group_tv_estimate(log_rho: ArrayLike, group: ArrayLike, num_groups: int,
                      mask: ArrayLike | None = None) -> tuple[Array, Array]:
    """TVPO's per-prompt TV estimate: each sequence's `0.5 mean |rho - 1|` over its valid
    tokens, averaged over the sequences of its group that have any (the samples of one prompt
    present in the batch).

    Args:
      log_rho: `[N, L]` token log-ratios.
      group: `[N]` integer group of each sequence, in `[0, num_groups)`.
      num_groups: static number of groups.
      mask: optional `[N, L]` validity mask.

    Returns:
      `(per_token, over_groups)`: each token's group TV, `[N, L]`, and the unweighted mean of
      the group TVs over the groups present, TVPO's batch estimate in this scope.
    """
    valid, log_rho = validate_and_mask(mask, log_rho=log_rho)
    if log_rho.ndim != 2:
        raise ValueError(f"`log_rho` must be [N, L] token log-ratios, got shape {log_rho.shape}")
    tokens = valid.sum(axis=-1)
    deviation = jnp.where(valid, jnp.abs(clamped_ratio(log_rho) - 1.0), 0.0).sum(axis=-1)
    per_sequence = 0.5 * deviation / jnp.maximum(tokens, 1)
    has_tokens = tokens > 0
    totals = jax.ops.segment_sum(jnp.where(has_tokens, per_sequence, 0.0), group, num_groups)
    counts = jax.ops.segment_sum(has_tokens.astype(per_sequence.dtype), group, num_groups)
    per_group = totals / jnp.maximum(counts, 1)
    present = counts > 0
    over_groups = jnp.where(present, per_group, 0.0).sum() / jnp.maximum(present.sum(), 1)
    return jnp.broadcast_to(per_group[group][:, None], log_rho.shape), over_groups


def _probability_moves(log_prob, old_log_prob, advantages, mask):
    valid, log_prob, old_log_prob, advantages = validate_and_mask(
        mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    p = jnp.exp(jnp.minimum(log_prob, 0.0))
    p_old = jnp.exp(jnp.minimum(old_log_prob, 0.0))
    return valid, p, p_old, advantages


def _masked(valid: Array, outside: Array) -> tuple[Array, Metrics]:
    keep = valid & ~outside
    metrics = {"mask_fraction": aggregate((valid & outside).astype(jnp.float32), valid)}
    return jax.lax.stop_gradient(keep.astype(jnp.float32)), jax.lax.stop_gradient(metrics)


def dppo_binary_tv_mask(log_prob: ArrayLike, old_log_prob: ArrayLike, advantages: ArrayLike,
                        delta_low: ArrayLike, delta_high: ArrayLike,
                        mask: ArrayLike | None = None) -> tuple[Array, Metrics]:
    """DPPO's Binary-TV trust region: a token is masked when its probability `p` already moved
    past the budget in its advantage's direction, `A > 0` and `p - p_old > delta_high`, or
    `A <= 0` and `p - p_old < -delta_low` (the change of the sampled token's probability is the
    TV between the two Bernoulli distributions "this token or another"). `A = 0` takes the
    negative branch, as in the authors' code; it carries no gradient either way.

    Returns:
      `(keep, metrics)`: stop-gradient float `keep`, already multiplied by `mask`; metric
      `mask_fraction` (masked / valid).
    """
    valid, p, p_old, advantages = _probability_moves(log_prob, old_log_prob, advantages, mask)
    moved = p - p_old
    outside = jnp.where(advantages > 0, moved > delta_high, moved < -delta_low)
    return _masked(valid, outside)


def _log_one_minus_exp(log_p: Array) -> Array:
    """`log(1 - p)` from `log p`, accurate where `p` is within float rounding of 1. A log-prob
    of exactly 0 (`1 - p` lost to rounding before it reached us) is read as `1 - p` = the
    dtype's resolution below 1 (`epsneg`, 6e-8 in float32), not as an infinite KL."""
    one_minus_p = -jnp.expm1(log_p)
    resolution = jnp.finfo(log_p.dtype).epsneg
    return jnp.log(jnp.where(one_minus_p > 0, one_minus_p, resolution))


def binary_kl(old_log_prob: ArrayLike, log_prob: ArrayLike) -> Array:
    """`KL(Bernoulli(p_old) || Bernoulli(p))` from the two log-probabilities.

    Computed in log space so that it stays accurate for `p` near 1, where `1 - p` is lost once
    `p` itself is rounded (float32 rounds `p = 1 - 1e-8` to 1): `log(1 - p)` comes from
    `expm1(log p)`, and the `1 - p_old` term is 0 where `p_old = 1`. Log-probs above 0 are
    read as 0.
    """
    old_log_prob = jnp.minimum(jnp.asarray(old_log_prob, jnp.result_type(float)), 0.0)
    log_prob = jnp.minimum(jnp.asarray(log_prob, old_log_prob.dtype), 0.0)
    q_old = -jnp.expm1(old_log_prob)
    stay = jnp.exp(old_log_prob) * (old_log_prob - log_prob)
    leave = jnp.where(q_old > 0, q_old * (_log_one_minus_exp(old_log_prob)
                                          - _log_one_minus_exp(log_prob)), 0.0)
    return stay + leave


def dppo_binary_kl_mask(log_prob: ArrayLike, old_log_prob: ArrayLike, advantages: ArrayLike,
                        delta: ArrayLike, mask: ArrayLike | None = None) -> tuple[Array, Metrics]:
    """DPPO's Binary-KL trust region: a token is masked when `KL(Bernoulli(p_old) ||
    Bernoulli(p)) > delta` and `p` moved in its advantage's direction (up for `A > 0`, down for
    `A <= 0`); a token whose step pulls `p` back stays.

    Returns:
      `(keep, metrics)` as `dppo_binary_tv_mask`.
    """
    valid, log_prob, old_log_prob, advantages = validate_and_mask(
        mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    with_advantage = jnp.where(advantages > 0, log_prob > old_log_prob, log_prob < old_log_prob)
    return _masked(valid, with_advantage & (binary_kl(old_log_prob, log_prob) > delta))

