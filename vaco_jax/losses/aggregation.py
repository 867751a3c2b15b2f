"""Masking and aggregation of per-element loss terms.

Conventions shared by every module of `vaco_jax.losses`:

- Losses are element-wise over arrays of any shape: `[T, B]` control batches (time-major) or
  `[B, L]` token batches (one sequence per row, tokens on the last axis).
- `mask` has the shape of the per-element inputs, is float or bool, and marks valid elements
  with 1. A float mask is binarised (any non-zero entry is valid): per-element weighting is the
  job of `weights`, not of the mask.
- Invalid elements are replaced by zeros *before* any arithmetic, so whatever they hold changes
  neither the loss nor its gradient.
- Aggregation is a separate, named choice (`AGGREGATIONS`).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
Metrics = dict[str, jax.Array]

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def check_floating(x: ArrayLike, name: str) -> None:
    """Raises if `x` is not a floating-point array; the message names `name`."""
    chex.assert_type(x, float, custom_message=f"`{name}` must be a floating-point array")


def valid_mask(mask: ArrayLike | None, shape: tuple[int, ...]) -> Array:
    """The boolean validity mask of `shape`: all valid when `mask` is None."""
    if mask is None:
        return jnp.ones(shape, dtype=bool)
    chex.assert_shape(mask, shape, custom_message=f"`mask` must have the inputs' shape {shape}")
    return jnp.asarray(mask) != 0


def validate_and_mask(mask: ArrayLike | None, **arrays: ArrayLike) -> tuple[Array, ...]:
    """Checks per-element inputs and zeroes them where `mask` is invalid.

    Args:
      mask: optional validity mask (1 = valid) of the inputs' shape.
      **arrays: floating-point inputs, in order; each must have the shape of the first one.
        Error messages name the offending keyword.

    Returns:
      `(valid, *arrays)`: the boolean mask, then every input with its invalid entries replaced
      by 0 through `jnp.where`, so that neither their values nor their gradients reach a loss.
    """
    (first_name, first), *rest = arrays.items()
    shape = jnp.shape(first)
    check_floating(first, first_name)
    for name, x in rest:
        check_floating(x, name)
        chex.assert_shape(
            x, shape, custom_message=f"`{name}` must have the shape of `{first_name}` {shape}"
        )
    valid = valid_mask(mask, shape)
    return (valid, *(jnp.where(valid, x, 0) for x in arrays.values()))


def _safe_divide(total: Array, count: Array) -> Array:
    # An empty selection has a zero total, so this gives 0 where a plain division gives NaN.
    return total / jnp.maximum(count, 1)


def aggregate(
    values: ArrayLike,
    mask: ArrayLike | None = None,
    mode: str = "token-mean",
    *,
    norm_length: ArrayLike | None = None,
) -> Array:
    """Reduces per-element `values` to a scalar over the valid elements.

    Args:
      values: per-element terms of any shape. The sequence modes read the last axis as the token
        axis and every index of the leading axes as one sequence.
      mask: optional validity mask (1 = valid) of `values`' shape.
      mode: one of `AGGREGATIONS`:
        - `token-mean`: the sum over valid elements divided by their number.
        - `seq-mean-token-mean`: per sequence the mean over its valid tokens, then the mean over
          the sequences that have at least one valid token.
        - `seq-mean-token-sum-norm`: per sequence the sum over its valid tokens divided by the
          constant `norm_length`, then the mean over the sequences that have at least one valid
          token (Dr. GRPO's length-unbiased form).
      norm_length: the constant of `seq-mean-token-sum-norm`, a float or a traced scalar; by
        default the padded length `values.shape[-1]`. Other modes ignore it.

    Returns:
      A scalar; 0 (not NaN) when no element is valid.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation `mode` {mode!r}; expected one of {AGGREGATIONS}")
    values = jnp.asarray(values)
    valid = valid_mask(mask, values.shape)
    masked = jnp.where(valid, values, 0)
    if mode == "token-mean":
        return _safe_divide(masked.sum(), valid.sum())
    if values.ndim == 0:
        raise ValueError(f"aggregation `mode` {mode!r} needs `values` with a token axis")
    tokens_per_seq = valid.sum(axis=-1)
    token_sum = masked.sum(axis=-1)
    if mode == "seq-mean-token-mean":
        per_seq = _safe_divide(token_sum, tokens_per_seq)
    else:
        per_seq = token_sum / (values.shape[-1] if norm_length is None else norm_length)
    has_tokens = tokens_per_seq > 0
    return _safe_divide(jnp.where(has_tokens, per_seq, 0).sum(), has_tokens.sum())
