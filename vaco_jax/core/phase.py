"""The optimisation phase both testbeds share: `epochs` passes over the phase batch, each a
fresh shuffle into minibatches, with one step per minibatch; every loop is a `lax.scan`. The
optimiser step itself, skipped where the surrogate kept no sample. And whether a stabiliser
acted in it: the share of the phase's steps at which it touched a sample."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import optax

# Per-step shares of samples a stabiliser clipped, truncated, masked, dropped or filtered, and
# whether the step was skipped for want of a kept sample (`optimiser_step`): the metrics whose
# steps `acted_shares` counts. NaN where an algorithm has no such mechanism.
SKIPPED_STEP = "skipped_step_fraction"
MECHANISM_FRACTIONS = ("clip_fraction", "is_truncated_fraction", "is_masked_fraction",
                       "is_tapered_fraction", "stale_dropped_fraction", "filter_fraction",
                       SKIPPED_STEP)
# The loss metric by which a surrogate that can drop samples says how many it kept in a step.
KEPT = "kept_samples"


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
    recorded = frozenset(MECHANISM_FRACTIONS).intersection(metrics)
    return recorded | {SKIPPED_STEP} if KEPT in metrics else recorded


def optimiser_step(tx: optax.GradientTransformationExtraArgs, grads: Any, opt_state: Any,
                   params: Any, kept: jax.Array | None,
                   **extra: Any) -> tuple[Any, Any, Any, jax.Array]:
    """One step of `tx`, or none where the surrogate kept no sample (`kept == 0`, its `KEPT`
    metric; None for a surrogate that never drops one).

    A surrogate that drops every sample has a zero policy gradient, yet Adam would still move the
    parameters by its momentum and advance its moments and count: a step no sample asked for.
    Such a step leaves parameters and optimiser state bit for bit as they were, the whole step
    (for control, the critic's too: one Adam state serves both networks).

    Returns `(params, opt_state, updates, skipped)`: `updates` as `tx` computed them, `skipped`
    the step's `SKIPPED_STEP` (1.0 skipped, 0.0 taken, NaN where `kept` is None).
    """
    updates, new_opt_state = tx.update(grads, opt_state, params, **extra)
    new_params = optax.apply_updates(params, updates)
    if kept is None:
        return new_params, new_opt_state, updates, jnp.full((), jnp.nan)
    empty = jnp.asarray(kept) == 0

    def unless_empty(new, old):
        return jnp.where(empty, old, new)

    return (jax.tree.map(unless_empty, new_params, params),
            jax.tree.map(unless_empty, new_opt_state, opt_state), updates,
            empty.astype(jnp.float32))


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
