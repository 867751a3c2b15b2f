"""Divergence estimates between two policies from samples of a third (the behaviour policy).

The samples of an asynchronous update come from the behaviour policy `beta`, not from the
reference policy a diagnostic compares against. `E_beta[f(rho)]` then estimates a divergence to
`beta`'s mixture, not to the reference, and a few huge ratios dominate the mean. The weighted
estimators here importance-weight each sample by `w = ref / beta`, self-normalised
(`sum w f / sum w`), so they estimate the divergence under the reference's own distribution.
With `log_w = 0` (samples from the reference) they reduce to the plain means.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.losses.aggregation import Array, ArrayLike
from vaco_jax.losses.filters import clamp_log_ratio, clamped_ratio


def self_normalised_weights(log_w: ArrayLike) -> Array:
    """`w / sum w` from log-weights (stop-gradient; shifted by the max, so never overflowing)."""
    log_w = jax.lax.stop_gradient(jnp.asarray(log_w))
    w = jnp.exp(log_w - jnp.max(log_w))
    return w / jnp.sum(w)


def ratio_deviation(log_rho: ArrayLike) -> Array:
    """Per-sample `0.5 |rho - 1|`, whose mean under the reference is TV(pi, reference)."""
    return 0.5 * jnp.abs(clamped_ratio(log_rho) - 1.0)


def weighted_tv_estimate(log_rho: ArrayLike, log_w: ArrayLike) -> Array:
    """`TV(pi, ref) = 0.5 E_ref|rho - 1|` with `rho = pi / ref`, from samples of `beta`.

    `log_w = log ref - log beta` per sample; self-normalised importance weighting.
    """
    return jnp.sum(self_normalised_weights(log_w) * ratio_deviation(log_rho))


def weighted_kl_estimate(log_rho: ArrayLike, log_w: ArrayLike) -> Array:
    """`KL(ref || pi)` with `log_rho = log pi - log ref`, from samples of `beta`.

    The k3 estimator `rho - 1 - log rho` (non-negative per sample) weighted as in
    `weighted_tv_estimate`.
    """
    k3 = clamped_ratio(log_rho) - 1.0 - clamp_log_ratio(log_rho)
    return jnp.sum(self_normalised_weights(log_w) * k3)


def median_and_p90(values: ArrayLike) -> tuple[Array, Array]:
    """Robust summaries of per-sample values: the median and the 90th percentile (one sort)."""
    median, p90 = jnp.quantile(jnp.ravel(jnp.asarray(values)), jnp.array([0.5, 0.9]))
    return median, p90
