"""Value and entropy terms, element-wise over any shape with the same `mask` / `aggregation`
conventions as the policy losses (see `vaco_jax.losses.aggregation`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import Array, ArrayLike, Metrics, aggregate, validate_and_mask


def _explained_variance(predictions: Array, targets: Array, valid: Array) -> Array:
    """`1 - Var[t - v] / Var[t]` over valid elements; 0 for constant targets."""

    def variance(x: Array) -> Array:
        return aggregate(jnp.square(x - aggregate(x, valid)), valid)

    target_variance = variance(targets)
    constant = target_variance == 0
    residual_share = variance(targets - predictions) / jnp.where(constant, 1.0, target_variance)
    return jnp.where(constant, 0.0, 1.0 - residual_share)


def value_loss(
    values: ArrayLike,
    targets: ArrayLike,
    *,
    old_values: ArrayLike | None = None,
    clip_eps: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    aggregation: str = "token-mean",
) -> tuple[Array, Metrics]:
    """Squared-error value loss `0.5 (v - t)^2`, with PPO2's clipped variant.

    Given both `old_values` and `clip_eps` the per-element loss is
    `0.5 * max((v - t)^2, (old + clip(v - old, -eps, eps) - t)^2)`, which stops the value moving
    more than `eps` away from `old_values` in the direction that lowers the error.
    `targets` and `old_values` are stop-gradient.

    Returns:
      `(loss, metrics)`; metrics `value_loss` (the loss) and `explained_variance`
      (`1 - Var[t - v] / Var[t]` over valid elements, 0 when the targets are constant).
    """
    if (old_values is None) != (clip_eps is None):
        raise ValueError("value clipping needs both `old_values` and `clip_eps` (or neither)")
    arrays = {"values": values, "targets": targets}
    if old_values is not None:
        arrays["old_values"] = old_values
    valid, values, targets, *old = validate_and_mask(mask, **arrays)
    targets = jax.lax.stop_gradient(targets)
    error = jnp.square(values - targets)
    if old:
        old_values = jax.lax.stop_gradient(old[0])
        clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
        error = jnp.maximum(error, jnp.square(clipped - targets))
    loss = aggregate(0.5 * error, valid, aggregation)
    explained = _explained_variance(values, targets, valid)
    return loss, jax.lax.stop_gradient({"value_loss": loss, "explained_variance": explained})


def entropy_loss(
    entropy: ArrayLike, *, mask: ArrayLike | None = None, aggregation: str = "token-mean"
) -> tuple[Array, Metrics]:
    """The negated mean entropy: add `coef * loss` to a loss to be minimised to reward entropy.

    Returns:
      `(loss, metrics)`; metric `entropy`, the aggregated entropy.
    """
    valid, entropy = validate_and_mask(mask, entropy=entropy)
    mean_entropy = aggregate(entropy, valid, aggregation)
    return -mean_entropy, {"entropy": jax.lax.stop_gradient(mean_entropy)}
