"""Losses of vaco_jax: policy surrogates, stabilisers, value and entropy terms, aggregation and
the ESS step-size transformation. Pure functions, element-wise over any shape, so the same code
serves `[T, B]` control batches and `[B, L]` token batches."""

from vaco_jax.losses.aggregation import AGGREGATIONS, aggregate
from vaco_jax.losses.diagnostics import (
    median_and_p90,
    ratio_deviation,
    self_normalised_weights,
    weighted_kl_estimate,
    weighted_tv_estimate,
)
from vaco_jax.losses.filters import (
    MAX_LOG_RATIO,
    bapo_clip_bounds,
    clamp_log_ratio,
    clamped_ratio,
    freshness_mask,
    gspo_sequence_log_ratio,
    m2po_mask,
    masked_is_mask,
    topr_weights,
    truncated_is_weights,
    tv_estimate,
    tv_filter_mask,
)
from vaco_jax.losses.optim import (
    clip_by_global_norm_per_subtree,
    ess_ratio,
    ess_step_scale,
    scale_by_ess,
)
from vaco_jax.losses.surrogates import (
    adaptive_kl_coef,
    cispo_loss,
    decoupled_ppo_loss,
    gspo_loss,
    importance_sampled_loss,
    policy_gradient_loss,
    ppo_clip_loss,
    ppo_kl_loss,
    spo_loss,
    vcpo_loss,
)
from vaco_jax.losses.trust_region import (
    TV_BUDGETS,
    TV_DELTA_CONVENTIONS,
    binary_kl,
    dppo_binary_kl_mask,
    dppo_binary_tv_mask,
    group_tv_estimate,
    tv_threshold,
)
from vaco_jax.losses.value import entropy_loss, value_loss

__all__ = [
    "AGGREGATIONS",
    "MAX_LOG_RATIO",
    "TV_BUDGETS",
    "TV_DELTA_CONVENTIONS",
    "adaptive_kl_coef",
    "aggregate",
    "bapo_clip_bounds",
    "binary_kl",
    "cispo_loss",
    "clamp_log_ratio",
    "clamped_ratio",
    "clip_by_global_norm_per_subtree",
    "decoupled_ppo_loss",
    "dppo_binary_kl_mask",
    "dppo_binary_tv_mask",
    "entropy_loss",
    "ess_ratio",
    "ess_step_scale",
    "freshness_mask",
    "group_tv_estimate",
    "gspo_loss",
    "gspo_sequence_log_ratio",
    "importance_sampled_loss",
    "m2po_mask",
    "masked_is_mask",
    "median_and_p90",
    "policy_gradient_loss",
    "ppo_clip_loss",
    "ppo_kl_loss",
    "ratio_deviation",
    "scale_by_ess",
    "self_normalised_weights",
    "spo_loss",
    "topr_weights",
    "truncated_is_weights",
    "tv_estimate",
    "tv_filter_mask",
    "tv_threshold",
    "value_loss",
    "vcpo_loss",
    "weighted_kl_estimate",
    "weighted_tv_estimate",
]
