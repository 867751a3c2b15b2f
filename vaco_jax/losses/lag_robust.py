"""Surrogates and stabilisers of lag-robust policy-gradient methods of 2025-26: SAPO's soft gate,
GMPO's geometric mean, DeepSeek-V3.2's off-policy sequence mask, Trust Region Masking's
sequence rejection and KL-Cov's covariance-selected penalty (IcePop's masked importance weight is
`filters.masked_is_weights`).

The conventions are `vaco_jax.losses.surrogates`': log-space ratios clamped to `MAX_LOG_RATIO`,
stop-gradient advantages, weights and masks, invalid elements out of the loss and its gradient,
metrics stop-gradient means over the valid elements. The sequence-level pieces (GMPO, the
off-policy sequence mask) read the last axis as tokens and take one advantage per sequence.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import (Array, ArrayLike, Metrics, aggregate,
                                         validate_and_mask)
from vaco_jax.losses.filters import clamp_log_ratio
from vaco_jax.losses.surrogates import (ClipEps, _clip_range, _fraction, _prepare,
                                        _ratio_terms)


def sapo_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    tau_pos: ArrayLike,
    tau_neg: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "seq-mean-token-mean",
) -> tuple[Array, Metrics]:
    """SAPO (Gao et al. 2025): `-f(r) A` with the soft gate `f(r) = 4/tau sigmoid(tau (r - 1))`,
    `tau = tau_pos` where `A > 0` and `tau_neg` elsewhere.

    The gate replaces PPO's hard clip: its slope `df/dr = 4 s (1 - s)`, `s = sigmoid(tau (r - 1))`,
    is 1 on-policy (the gradient of `r A` there) and decays smoothly as `r` leaves 1, faster for
    a larger `tau`; no element's gradient is cut to exactly 0.

    Returns:
      `(loss, metrics)`: `ratio_mean`, `approx_kl` and `gate_weight_mean`, the mean slope
      `df/dr` over the valid elements (1 when every ratio is 1; the soft trust region's share
      of the unclipped gradient it lets through).
    """
    valid, log_ratio, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio
    )
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    tau = jnp.where(advantages > 0, tau_pos, tau_neg)
    gate = jax.nn.sigmoid(tau * (ratio - 1))
    loss = aggregate(-(4 / tau) * gate * advantages * weights, valid, aggregation)
    slope = jax.lax.stop_gradient(4 * gate * (1 - gate))
    return loss, {**metrics, "gate_weight_mean": aggregate(slope, valid)}


def gmpo_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    clip_eps: ClipEps,
    *,
    mask: ArrayLike | None = None,
) -> tuple[Array, Metrics]:
    """GMPO (Zhao et al. 2025): `-A_i exp(mean_t clip_A(log r_it))` per sequence, averaged over
    the sequences with at least one valid token.

    The geometric mean of the token ratios replaces GRPO's arithmetic mean, so one outlier ratio
    moves a sequence's objective by its `|y|`-th root. `clip_A` is PPO's clip taken in log space
    and token by token: for `A > 0` a log-ratio is capped at `high_eps`, for `A < 0` floored at
    `-low_eps`, so a token already moved past its bound in the advantage's direction passes no
    gradient.

    Args:
      log_ratio: token log-ratios `[..., L]`.
      advantages: one advantage per sequence, shape `log_ratio.shape[:-1]`.
      clip_eps: the log-space bound, `eps` or `(low_eps, high_eps)` (GMPO: 0.4, a ratio range
        `[e^-0.4, e^0.4]`).
      mask: optional token validity mask `[..., L]`.

    Returns:
      `(loss, metrics)`: `ratio_mean` and `approx_kl` of the token ratios, `clip_fraction` (valid
      tokens whose log-ratio the clip bounds).
    """
    valid, log_ratio = validate_and_mask(mask, log_ratio=log_ratio)
    sequence_shape = jnp.shape(log_ratio)[:-1]
    chex.assert_shape(advantages, sequence_shape,
                      custom_message=f"`advantages` must have one entry per sequence, shape "
                                     f"{sequence_shape}")
    advantages = jax.lax.stop_gradient(jnp.asarray(advantages))
    _, _, metrics = _ratio_terms(log_ratio, valid)
    low, high = _clip_range(clip_eps)
    log_ratio = clamp_log_ratio(log_ratio)
    token_advantages = advantages[..., None]
    # The pessimistic side of PPO's min, in log space: min(x, clip(x)) for A > 0, max for A < 0.
    sign = jnp.sign(token_advantages)
    bounded = sign * jnp.minimum(sign * log_ratio, sign * jnp.clip(log_ratio, -low, high))
    tokens = valid.sum(axis=-1)
    sequence_log_ratio = jnp.where(valid, bounded, 0.0).sum(axis=-1) / jnp.maximum(tokens, 1)
    loss = aggregate(-advantages * jnp.exp(sequence_log_ratio), tokens > 0)
    clipped = (((token_advantages > 0) & (log_ratio > high))
               | ((token_advantages < 0) & (log_ratio < -low)))
    return loss, {**metrics, "clip_fraction": _fraction(clipped, valid)}


def off_policy_sequence_mask(
    log_prob: ArrayLike,
    behaviour_log_prob: ArrayLike,
    advantages: ArrayLike,
    delta: ArrayLike,
    mask: ArrayLike | None = None,
) -> tuple[Array, Metrics]:
    """DeepSeek-V3.2's off-policy sequence masking: a sequence with `A < 0` whose mean token
    `log(beta / pi_theta)` exceeds `delta` is dropped whole.

    A negative sample the learner has already moved far from teaches little and, pushed further
    down, destabilises; positive samples are always kept.

    Args:
      log_prob: current token log-probs `[..., L]` (read stop-gradient).
      behaviour_log_prob: the sampling policy's token log-probs, same shape.
      advantages: one advantage per sequence, shape `log_prob.shape[:-1]`.
      delta: the mean per-token log-ratio bound (nats), a float or traced scalar.
      mask: optional token validity mask `[..., L]`.

    Returns:
      `(keep, metrics)`: `keep` a stop-gradient float 0/1 array `[..., L]`, already multiplied
      by `mask`; metric `mask_fraction`, the share of valid tokens in dropped sequences.
    """
    valid, log_prob, behaviour_log_prob = validate_and_mask(
        mask, log_prob=log_prob, behaviour_log_prob=behaviour_log_prob)
    sequence_shape = jnp.shape(log_prob)[:-1]
    chex.assert_shape(advantages, sequence_shape,
                      custom_message=f"`advantages` must have one entry per sequence, shape "
                                     f"{sequence_shape}")
    divergence = (behaviour_log_prob - log_prob).sum(axis=-1) / jnp.maximum(
        valid.sum(axis=-1), 1)
    dropped = (jnp.asarray(advantages) < 0) & (divergence > delta)
    keep = valid & ~dropped[..., None]
    return (jax.lax.stop_gradient(keep.astype(log_prob.dtype)),
            {"mask_fraction": _fraction(~keep, valid)})


TOKEN_DIVERGENCES = ("k2", "k3")
"""Per-token divergence estimates of `log rho`: `k2 = (log rho)^2 / 2`, `k3 = rho - 1 - log rho`."""


def trust_region_sequence_mask(
    log_ratio: ArrayLike,
    delta: ArrayLike,
    mask: ArrayLike | None = None,
    divergence: str = "k2",
) -> tuple[Array, Metrics]:
    """Trust Region Masking (Li et al. 2025): a sequence any of whose tokens' divergence
    estimate exceeds `delta` is rejected whole, whatever its advantage.

    Its bounds on the surrogate's error grow with the largest token divergence along a
    sequence, which no per-token clip controls; rejecting the sequence does.

    Args:
      log_ratio: per-token `log rho`, the policy the update starts from over the sampler
        (`log pi_T - log beta`), `[..., L]`; read stop-gradient, clamped to +-20 as verl
        clamps it (`MAX_LOG_RATIO`).
      delta: the bound on the sequence's largest per-token estimate, a float or traced scalar.
      mask: optional token validity mask `[..., L]`.
      divergence: `"k2"` (`(log rho)^2 / 2`) or `"k3"` (`rho - 1 - log rho`).

    Returns:
      `(keep, metrics)`: `keep` a stop-gradient float 0/1 array `[..., L]`, already multiplied
      by `mask`; metrics `mask_fraction` (valid tokens in rejected sequences) and
      `max_divergence_mean` (the mean over sequences with a valid token of their largest
      estimate).
    """
    if divergence not in TOKEN_DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}; expected one of "
                         f"{TOKEN_DIVERGENCES}")
    valid, log_ratio = validate_and_mask(mask, log_ratio=log_ratio)
    log_rho = clamp_log_ratio(jax.lax.stop_gradient(log_ratio))
    estimate = 0.5 * log_rho ** 2 if divergence == "k2" else jnp.expm1(log_rho) - log_rho
    largest = jnp.where(valid, estimate, 0.0).max(axis=-1)  # every estimate is >= 0
    keep = valid & (largest <= delta)[..., None]
    has_token = valid.any(axis=-1)
    return (jax.lax.stop_gradient(keep.astype(log_rho.dtype)),
            {"mask_fraction": _fraction(~keep, valid),
             "max_divergence_mean": jnp.sum(jnp.where(has_token, largest, 0.0))
             / jnp.maximum(has_token.sum(), 1)})


def covariance_top_mask(
    log_prob: ArrayLike,
    advantages: ArrayLike,
    fraction: ArrayLike,
    mask: ArrayLike | None = None,
) -> Array:
    """KL-Cov's selection: the `max(1, floor(n * fraction))` of the `n` valid elements with the
    largest centred covariance `(A - mean A)(log pi - mean log pi)`, means over valid elements.

    High-covariance tokens (confident and rewarded, or unlikely and penalised) are the ones whose
    updates drive entropy down. Ties are broken by position. Returns a stop-gradient float 0/1
    array of the input's shape (all 0 when nothing is valid).
    """
    valid, log_prob, advantages = validate_and_mask(mask, log_prob=log_prob,
                                                    advantages=advantages)
    log_prob = jax.lax.stop_gradient(log_prob)
    covariance = ((advantages - aggregate(advantages, valid))
                  * (log_prob - aggregate(log_prob, valid)))
    scores = jnp.where(valid, covariance, -jnp.inf).ravel()
    order = jnp.argsort(-scores, stable=True)
    rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.size)).reshape(valid.shape)
    count = valid.sum()
    selected = valid & (rank < jnp.maximum(1, jnp.floor(count * fraction)))
    return jax.lax.stop_gradient(selected.astype(log_prob.dtype))


def kl_cov_loss(
    log_ratio: ArrayLike,
    log_prob: ArrayLike,
    advantages: ArrayLike,
    kl_coef: ArrayLike,
    fraction: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """KL-Cov (Cui et al. 2025): the unclipped `-r A`, plus `kl_coef |log r|` on the tokens
    `covariance_top_mask` selects (`fraction` of them, at least one).

    Returns:
      `(loss, metrics)`: `ratio_mean`, `approx_kl` and `kl_penalty_mean`, the penalty
      `kl_coef |log r|` averaged over the valid elements (0 while every selected ratio is 1).
    """
    selected = covariance_top_mask(log_prob, advantages, fraction, mask)
    valid, log_ratio, advantages, _ = _prepare(mask, None, advantages, log_ratio=log_ratio)
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    log_ratio = clamp_log_ratio(log_ratio)
    # |x| written as sign(x) x: its gradient at x = 0 is 0 (the subgradient the authors' PyTorch
    # takes), where `jnp.abs`'s is 1 and would push every selected on-policy token down.
    penalty = kl_coef * jnp.sign(log_ratio) * log_ratio * selected
    loss = aggregate(-ratio * advantages + penalty, valid, aggregation)
    return loss, {**metrics,
                  "kl_penalty_mean": jax.lax.stop_gradient(aggregate(penalty, valid))}
