"""Policy surrogate losses, element-wise over any shape (`[T, B]` control, `[B, L]` tokens).

Conventions:

- `log_ratio = logp_new - logp_old` element-wise; ratios are `exp` of log-ratios clamped to
  `MAX_LOG_RATIO` (see `vaco_jax.losses.filters`), so values and gradients stay finite for any
  log-ratio.
- Advantages and `weights` are stop-gradient; `mask` (1 = valid) removes elements from the loss
  and its gradient entirely; `aggregation` is one of `AGGREGATIONS`.
- Every loss is to be minimised and returns `(loss, metrics)`, metrics being stop-gradient scalars
  averaged over valid elements: `ratio_mean` and `approx_kl` (the k3 estimator
  `(r - 1) - log r` of KL(pi_old || pi_new), unbiased under samples of pi_old and >= 0) for every
  ratio-based loss, plus loss-specific ones.
- Hyper-parameters (`clip_eps`, `kl_coef`, ...) may be Python floats or traced scalars.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import (
    Array,
    ArrayLike,
    Metrics,
    aggregate,
    validate_and_mask,
)
from vaco_jax.losses.filters import (
    clamp_log_ratio,
    exceeds_cap,
    gspo_sequence_log_ratio,
    truncated_is_weights,
)
from vaco_jax.losses.optim import ess_ratio

ClipEps = ArrayLike | tuple[ArrayLike, ArrayLike]


def _prepare(
    mask: ArrayLike | None,
    weights: ArrayLike | None,
    advantages: ArrayLike,
    **differentiable: ArrayLike,
) -> tuple[Array, ...]:
    """Validates and masks a policy loss's inputs.

    Returns `(valid, *differentiable, advantages, weights)`; the shape reference is the first
    differentiable input, `advantages` and `weights` (ones when None) come back stop-gradient.
    """
    named = {**differentiable, "advantages": advantages}
    if weights is not None:
        named["weights"] = weights
    valid, *values = validate_and_mask(mask, **named)
    if weights is None:
        values.append(jnp.ones_like(values[0]))
    *inputs, advantages, weights = values
    return valid, *inputs, jax.lax.stop_gradient(advantages), jax.lax.stop_gradient(weights)


def _ratio_terms(log_ratio: Array, valid: Array) -> tuple[Array, Array, Metrics]:
    """The clamped ratio, its per-element k3 KL estimate and their means over valid elements."""
    log_ratio = clamp_log_ratio(log_ratio)
    ratio = jnp.exp(log_ratio)
    # expm1 keeps k3 = (r - 1) - log r accurate for r close to 1.
    kl = jnp.expm1(log_ratio) - log_ratio
    metrics = {"ratio_mean": aggregate(ratio, valid), "approx_kl": aggregate(kl, valid)}
    return ratio, kl, jax.lax.stop_gradient(metrics)


def _clip_range(clip_eps: ClipEps) -> tuple[ArrayLike, ArrayLike]:
    """`(low_eps, high_eps)` from a scalar or a pair (tuple, list or shape-`(2,)` array)."""
    if isinstance(clip_eps, (tuple, list)) or jnp.shape(clip_eps) == (2,):
        if len(clip_eps) != 2:
            raise ValueError(f"`clip_eps` pair must be (low_eps, high_eps), got {clip_eps!r}")
        low, high = clip_eps
        return low, high
    if jnp.ndim(clip_eps) != 0:
        raise ValueError(f"`clip_eps` must be a scalar or a pair, got shape {jnp.shape(clip_eps)}")
    return clip_eps, clip_eps


def _fraction(condition: Array, valid: Array) -> Array:
    return jax.lax.stop_gradient(aggregate(condition.astype(jnp.float32), valid))


def ppo_clip_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    clip_eps: ClipEps,
    *,
    dual_clip: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """PPO-clip (Schulman et al. 2017): `-min(r A, clip(r, 1 - eps_lo, 1 + eps_hi) A)`.

    Args:
      log_ratio: `logp_new - logp_old` (the behaviour ratio for naive asynchronous PPO).
      advantages: advantages, same shape.
      clip_eps: `eps`, or an asymmetric pair `(low_eps, high_eps)` (DAPO's clip-higher, BAPO's
        `bapo_clip_bounds`).
      dual_clip: optional `c > 1` (Ye et al. 2020): for `A < 0` the objective is additionally
        floored at `c A`, i.e. the per-element loss is `-max(min(r A, clip(r) A), c A)`.
      mask: optional validity mask (1 = valid), see the module docstring.
      weights: optional per-element weights, see the module docstring.
      aggregation: how elements are reduced, see the module docstring.

    Returns:
      `(loss, metrics)`; metrics `clip_fraction` (valid elements whose gradient is zeroed by a
      clip: `r > 1 + eps_hi` with `A > 0`, `r < 1 - eps_lo` with `A < 0`, or the dual clip),
      `approx_kl`, `ratio_mean`.
    """
    valid, log_ratio, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio
    )
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    low, high = _clip_range(clip_eps)
    objective = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1 - low, 1 + high) * advantages)
    clipped = ((advantages > 0) & (ratio > 1 + high)) | ((advantages < 0) & (ratio < 1 - low))
    if dual_clip is not None:
        floored = (advantages < 0) & (objective < dual_clip * advantages)
        objective = jnp.where(floored, dual_clip * advantages, objective)
        clipped = clipped | floored
    loss = aggregate(-objective * weights, valid, aggregation)
    return loss, {**metrics, "clip_fraction": _fraction(clipped, valid)}


def decoupled_ppo_loss(
    log_ratio_phase: ArrayLike,
    log_staleness: ArrayLike,
    advantages: ArrayLike,
    clip_eps: ClipEps,
    *,
    staleness_cap: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """Decoupled PPO (Hilton et al. 2021): PPO-clip on the phase ratio, weighted by staleness.

    The per-element loss is `sg(w) * ppo_clip(r_T, A)` with `r_T = exp(log_ratio_phase)`
    (`pi_theta / pi_T`) and `w = exp(log_staleness)` (`pi_T / beta`), truncated to
    `min(w, staleness_cap)` when a cap is given.

    Returns:
      `(loss, metrics)`: `ppo_clip_loss`'s metrics (of the phase ratio) and `staleness_mean`, the
      mean (truncated) staleness weight.
    """
    valid, _, log_staleness, _ = validate_and_mask(
        mask,
        log_ratio_phase=log_ratio_phase,
        log_staleness=log_staleness,
        advantages=advantages,
    )
    cap = jnp.inf if staleness_cap is None else staleness_cap
    staleness = truncated_is_weights(log_staleness, cap)
    loss, metrics = ppo_clip_loss(
        log_ratio_phase,
        advantages,
        clip_eps,
        mask=valid,
        weights=staleness,
        aggregation=aggregation,
    )
    return loss, {**metrics, "staleness_mean": aggregate(staleness, valid)}


def ppo_kl_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    kl_coef: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """PPO with a KL penalty: `-r A + kl_coef * KL(pi_old || pi_new)`.

    The KL is estimated per element by k3 `(r - 1) - log r`, unbiased and non-negative under the
    samples of pi_old. For the adaptive variant pair it with `adaptive_kl_coef`, fed the KL
    between the policies before and after each optimisation phase.

    Returns:
      `(loss, metrics)`; metrics `approx_kl`, `ratio_mean`.
    """
    valid, log_ratio, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio
    )
    ratio, kl, metrics = _ratio_terms(log_ratio, valid)
    loss = aggregate((-ratio * advantages + kl_coef * kl) * weights, valid, aggregation)
    return loss, metrics


def adaptive_kl_coef(
    kl_coef: ArrayLike,
    observed_kl: ArrayLike,
    target_kl: ArrayLike,
    min_coef: ArrayLike = 0.0,
    max_coef: ArrayLike = jnp.inf,
) -> Array:
    """Schulman et al. (2017)'s adaptive penalty: the next `kl_coef`.

    Doubled when `observed_kl > 1.5 * target_kl`, halved when `observed_kl < target_kl / 1.5`,
    unchanged otherwise, then clipped to `[min_coef, max_coef]`. The rule is defined on the KL
    between the policies before and after an optimisation phase; fed a KL the penalty cannot
    lower, the coefficient would run off to the bound. The coefficient is explicit state that
    the caller carries.
    """
    adapted = jnp.where(
        observed_kl > 1.5 * target_kl,
        kl_coef * 2.0,
        jnp.where(observed_kl < target_kl / 1.5, kl_coef / 2.0, kl_coef),
    )
    return jnp.clip(adapted, min_coef, max_coef)


def spo_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    clip_eps: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """Simple policy optimisation: `-(r A - |A| (r - 1)^2 / (2 eps))`.

    The quadratic penalty keeps the optimum of each element's objective at `r = 1 + sign(A) eps`
    instead of zeroing the gradient beyond it as PPO-clip does.

    Returns:
      `(loss, metrics)`; metrics `approx_kl`, `ratio_mean`.
    """
    valid, log_ratio, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio
    )
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    penalty = jnp.abs(advantages) * jnp.square(ratio - 1) / (2 * clip_eps)
    loss = aggregate(-(ratio * advantages - penalty) * weights, valid, aggregation)
    return loss, metrics


def importance_sampled_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """The unclipped importance-sampled surrogate `-r A` (VACO's loss on the kept samples).

    Returns:
      `(loss, metrics)`; metrics `ratio_mean`, `approx_kl`.
    """
    valid, log_ratio, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio
    )
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    return aggregate(-ratio * advantages * weights, valid, aggregation), metrics


def policy_gradient_loss(
    log_prob: ArrayLike,
    advantages: ArrayLike,
    *,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """REINFORCE / IMPALA policy gradient: `-sg(weights) * sg(A) * log_prob`.

    For IMPALA pass `weights = truncated_is_weights(log_rho, rho_bar_pg)` and V-trace advantages.

    Returns:
      `(loss, metrics)`; metric `log_prob_mean`, the mean log-probability of the taken actions.
    """
    valid, log_prob, advantages, weights = _prepare(
        mask, weights, advantages, log_prob=log_prob
    )
    loss = aggregate(-weights * advantages * log_prob, valid, aggregation)
    return loss, {"log_prob_mean": jax.lax.stop_gradient(aggregate(log_prob, valid))}


def cispo_loss(
    log_ratio: ArrayLike,
    log_prob: ArrayLike,
    advantages: ArrayLike,
    eps_low: ArrayLike,
    eps_high: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """CISPO (MiniMax-M1): `-sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log_prob`, times the
    optional stop-gradient `weights` (verl's rollout-correction weights).

    Clipping the stop-gradient importance weight, rather than the objective, keeps every token's
    gradient (no token is dropped), only bounding its weight.

    Returns:
      `(loss, metrics)`; metrics `clip_fraction` (valid elements whose weight is clipped),
      `approx_kl`, `ratio_mean`.
    """
    valid, log_ratio, log_prob, advantages, weights = _prepare(
        mask, weights, advantages, log_ratio=log_ratio, log_prob=log_prob
    )
    ratio, _, metrics = _ratio_terms(log_ratio, valid)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1 - eps_low, 1 + eps_high))
    loss = aggregate(-weight * weights * advantages * log_prob, valid, aggregation)
    clipped = (ratio < 1 - eps_low) | (ratio > 1 + eps_high)
    return loss, {**metrics, "clip_fraction": _fraction(clipped, valid)}


def gspo_loss(
    log_ratio: ArrayLike,
    advantages: ArrayLike,
    clip_eps: ClipEps,
    *,
    mask: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> tuple[Array, Metrics]:
    """GSPO (Zheng et al. 2025): PPO-clip on the length-normalised sequence ratio.

    `s_i = exp(mean_t log r_it)` over the valid tokens of sequence `i`
    (`gspo_sequence_log_ratio`). In the GSPO-token form verl runs, each token carries the value
    `s_i` with its gradient through its own log-prob, `sg(s_i) r_it / sg(r_it)`; the per-token
    loss `-min(s A, clip(s) A)` times `weights` is aggregated seq-mean-token-mean. Without
    weights this is the sequence-level loss averaged over the sequences with a valid token, and
    its token gradients are those of the mean: `d s_i / d log r_it = s_i / |y_i|`.

    Args:
      log_ratio: token log-ratios `[..., L]`.
      advantages: one advantage per sequence, shape `log_ratio.shape[:-1]`.
      clip_eps: `eps` or `(low_eps, high_eps)` (GSPO's are of order 3e-4 / 4e-4).
      mask: optional token validity mask `[..., L]`.
      weights: optional stop-gradient token weights `[..., L]` (verl's rollout-correction
        weights multiply the per-token loss so).

    Returns:
      `(loss, metrics)`: `ppo_clip_loss`'s metrics at sequence level (`clip_fraction` is the
      fraction of clipped sequences).
    """
    valid, log_ratio = validate_and_mask(mask, log_ratio=log_ratio)
    sequence_shape = jnp.shape(log_ratio)[:-1]
    chex.assert_shape(
        advantages,
        sequence_shape,
        custom_message=f"`advantages` must have one entry per sequence, shape {sequence_shape}",
    )
    sequence_log_ratio = gspo_sequence_log_ratio(log_ratio, valid)
    has_tokens = valid.any(axis=-1)
    token_log_ratio = (jax.lax.stop_gradient(sequence_log_ratio)[..., None] + log_ratio
                       - jax.lax.stop_gradient(log_ratio))
    token_advantages = jnp.broadcast_to(jnp.expand_dims(advantages, -1), valid.shape)
    loss, _ = ppo_clip_loss(token_log_ratio, token_advantages, clip_eps, mask=valid,
                            weights=weights, aggregation="seq-mean-token-mean")
    # The metrics count sequences, the unit GSPO clips.
    _, metrics = ppo_clip_loss(sequence_log_ratio, advantages, clip_eps, mask=has_tokens)
    return loss, jax.lax.stop_gradient(metrics)


def vcpo_loss(
    log_ratio_phase: ArrayLike,
    log_staleness: ArrayLike,
    advantages: ArrayLike,
    *,
    is_cap: ArrayLike = 8.0,
    mask: ArrayLike | None = None,
    aggregation: str = "seq-mean-token-mean",
) -> tuple[Array, Metrics]:
    """VCPO's policy loss: the token ratio to the phase policy, weighted per sequence by the
    truncated sequence importance weight.

    Sequence `i`'s weight is `sg(min(w_i, is_cap))` with
    `w_i = exp(sum_t log_staleness_it)` over its valid tokens (`pi_T(y_i) / beta(y_i)`); the
    per-token loss is `-min(w_i, C) * A_i * r_it` with `r_it = exp(log_ratio_phase_it)`
    (`pi_theta / pi_T`, no clipping: VCPO's PPO bounds are set wide open), aggregated
    `seq-mean-token-mean` as VCPO does. At `pi_theta = pi_T` its gradient is
    `-mean_i min(w_i, C) A_i grad log pi(y_i) / |y_i|`. `A_i` is meant to be
    `(R_i - b) / std_g R` with `b` the group's `off_policy_optimal_baseline`.

    Args:
      log_ratio_phase: token log-ratios `log pi_theta - log pi_T`, `[..., L]`.
      log_staleness: token log-ratios `log pi_T - log beta`, `[..., L]`.
      advantages: one advantage per sequence, shape `log_ratio_phase.shape[:-1]`.
      is_cap: the truncation `C` of the sequence weight (VCPO: 8), a float or traced scalar.
      mask: optional token validity mask `[..., L]`.
      aggregation: one of `AGGREGATIONS`.

    Returns:
      `(loss, metrics)`: `ratio_mean` and `approx_kl` of the phase ratio over valid tokens, and
      over the sequences with at least one valid token `truncated_fraction` (share with
      `w > C`), `is_weight_mean` (mean truncated weight) and `ess_ratio` (the normalised
      effective sample size of the untruncated `w`, the quantity VCPO's step size follows).
    """
    valid, log_ratio_phase, log_staleness = validate_and_mask(
        mask, log_ratio_phase=log_ratio_phase, log_staleness=log_staleness
    )
    if jnp.ndim(log_ratio_phase) == 0:
        raise ValueError("`log_ratio_phase` needs a token axis, got a scalar")
    sequence_shape = jnp.shape(log_ratio_phase)[:-1]
    chex.assert_shape(
        advantages,
        sequence_shape,
        custom_message=f"`advantages` must have one entry per sequence, shape {sequence_shape}",
    )
    has_tokens = valid.any(axis=-1)
    sequence_log_w = log_staleness.sum(axis=-1)
    weights = truncated_is_weights(sequence_log_w, is_cap)
    loss, metrics = importance_sampled_loss(
        log_ratio_phase,
        jnp.broadcast_to(jnp.expand_dims(advantages, -1), valid.shape),
        mask=valid,
        weights=jnp.broadcast_to(weights[..., None], valid.shape),
        aggregation=aggregation,
    )
    return loss, {
        **metrics,
        "truncated_fraction": _fraction(exceeds_cap(sequence_log_w, is_cap),
                                        has_tokens),
        "is_weight_mean": jax.lax.stop_gradient(aggregate(weights, has_tokens)),
        "ess_ratio": jax.lax.stop_gradient(ess_ratio(sequence_log_w, has_tokens)),
    }
