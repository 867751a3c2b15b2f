"""The optimisation phase both testbeds share: `epochs` passes over the phase batch, each a
fresh shuffle into minibatches, with one step per minibatch; every loop is a `lax.scan`. And
whether a stabiliser acted in it: the share of the phase's steps at which it touched a sample."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

# Per-step shares of samples a stabiliser clipped, truncated, masked, dropped or filtered: the
# metrics whose steps `acted_shares` counts. NaN where an algorithm has no such mechanism.
MECHANISM_FRACTIONS = ("clip_fraction", "is_truncated_fraction", "is_masked_fraction",
                       "is_tapered_fraction", "stale_dropped_fraction", "filter_fraction")


def acted_name(fraction: str) -> str:
    """The metric of the share of steps at which the mechanism of `fraction` acted."""
    return fraction.removesuffix("_fraction") + "_acted"


ACTED_METRICS = tuple(acted_name(f) for f in MECHANISM_FRACTIONS)


def scan_epochs(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any,
                minibatches: Callable[[jax.Array], Any], key: jax.Array,
                epochs: int) -> tuple[Any, Any]:
    """Runs `step(carry, minibatch) -> (carry, metrics)` over `minibatches(epoch_key)` (a pytree
    with a leading minibatch axis) for each of `epochs` keys split from `key`.

    Returns the final carry and the metrics stacked as `[epochs, minibatches, ...]`.
    """
    def epoch(carry, epoch_key):
        return jax.lax.scan(step, carry, minibatches(epoch_key))

    return jax.lax.scan(epoch, carry, jax.random.split(key, epochs))


def recorded_mechanisms(policy_loss: Callable[[Any], tuple[Any, Mapping[str, Any]]],
                        terms: Any) -> frozenset[str]:
    """The `MECHANISM_FRACTIONS` that `policy_loss(terms) -> (loss, metrics)` returns: the
    stabilisers an algorithm has, read from its own loss traced on the shapes `terms` gives
    (`jax.ShapeDtypeStruct` leaves: nothing computed, no device used)."""
    _, metrics = jax.eval_shape(policy_loss, terms)
    return frozenset(MECHANISM_FRACTIONS).intersection(metrics)


def acted_shares(step_metrics: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """For each of `MECHANISM_FRACTIONS` in `step_metrics` (one value per gradient step, any
    leading shape), the share of the phase's steps at which the mechanism acted, i.e. touched
    at least one sample; NaN where it has no finite value (the algorithm has no such
    mechanism). A mechanism that acts on few samples at every step and one that acts on many at
    few steps differ here, not in their mean fractions."""
    shares = {}
    for fraction in MECHANISM_FRACTIONS:
        if fraction in step_metrics:
            values = step_metrics[fraction]
            acted = jnp.mean((values > 0).astype(jnp.float32))
            shares[acted_name(fraction)] = jnp.where(jnp.isnan(values).all(), jnp.nan, acted)
    return shares
