"""Optimiser transformations: VCPO's effective-sample-size learning-rate scaling and gradient
clipping per network."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from vaco_jax.losses.aggregation import Array, ArrayLike, validate_and_mask


def ess_ratio(log_w: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """Normalised effective sample size `(sum w)^2 / (n * sum w^2)` over the `n` valid elements.

    `w = exp(log_w)` (for trajectories, `log_w` is the sum of per-step log-ratios). The ratio is
    invariant to a common factor of the weights, so `max(log_w)` is subtracted before `exp` and
    no log-weight can overflow. In `[1/n, 1]`: 1 for equal weights, `1/n` when one weight
    dominates; 1 when nothing is valid (no evidence of degeneracy, so no step-size cut).
    """
    valid, log_w = validate_and_mask(mask, log_w=log_w)
    shifted = log_w - jnp.max(jnp.where(valid, log_w, -jnp.inf))
    # The inner `where` keeps `exp` finite when nothing is valid and the max is -inf.
    w = jnp.where(valid, jnp.exp(jnp.where(valid, shifted, 0.0)), 0.0)
    count = valid.sum()
    # The largest valid weight is exp(0) = 1, so sum w^2 >= 1 whenever anything is valid and the
    # floor only guards the empty case.
    ess = jnp.square(w.sum()) / (jnp.maximum(count, 1) * jnp.maximum(jnp.square(w).sum(), 1.0))
    return jnp.where(count > 0, ess, 1.0)


def ess_step_scale(ess: ArrayLike, ess_target: ArrayLike = 1.0) -> Array:
    """VCPO's learning-rate factor `sqrt(min(1, ess / ess_target))`: 1 while the ESS ratio is at
    least the target, shrinking with its square root below."""
    return jnp.sqrt(jnp.minimum(1.0, ess / ess_target))


def scale_by_ess(ess_target: ArrayLike = 1.0) -> optax.GradientTransformationExtraArgs:
    """Scales updates by `sqrt(min(1, ess / ess_target))`, VCPO's ESS learning-rate rule.

    VCPO sets the optimiser's learning rate to `lr0 * sqrt(min(1, ess / ess0))` for each step,
    `ess` being `ess_ratio` of the minibatch's sequence weights `pi_T / beta` (normalised by the
    number of sequences, untruncated) and `ess0 = 1` (the default here). Adam's moments never
    see the learning rate, so scaling the step after Adam is that rule exactly and leaves Adam's
    state as an unscaled run's.

    Put it last in a chain, after the optimiser, so it scales the step itself:
    `optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr), scale_by_ess(0.5))`, then
    `tx.update(grads, state, params, ess=ess_ratio(log_w))`. `optax.chain` forwards the extra
    arguments to every member that accepts them.

    Args:
      ess_target: the ESS ratio `ess_0` below which the step shrinks. A traced value (e.g. a
        vmapped hyper-parameter) may instead be passed at update time as `ess_target=`, which
        overrides this one.

    Returns:
      A stateless `GradientTransformationExtraArgs` whose `update` requires the keyword `ess`.
    """
    default_target = ess_target

    def init_fn(params: Any) -> optax.EmptyState:
        del params
        return optax.EmptyState()

    def update_fn(
        updates: optax.Updates,
        state: optax.EmptyState,
        params: optax.Params | None = None,
        *,
        ess: ArrayLike | None = None,
        ess_target: ArrayLike | None = None,
        **extra_args: Any,
    ) -> tuple[optax.Updates, optax.EmptyState]:
        del params, extra_args
        if ess is None:
            raise ValueError(
                "scale_by_ess needs the ESS ratio at update time: "
                "tx.update(grads, state, params, ess=ess_ratio(log_w))"
            )
        target = default_target if ess_target is None else ess_target
        scale = ess_step_scale(ess, target)
        return jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def clip_by_global_norm_per_subtree(max_norm: ArrayLike) -> optax.GradientTransformation:
    """Clips each top-level entry of a dict of updates (e.g. `{"actor": ..., "critic": ...}`) to
    global norm `max_norm` on its own, so that one network's large gradient (the critic's, on
    tasks with large returns) cannot shrink the other's step as one joint norm would."""
    clip = optax.clip_by_global_norm(max_norm)

    def update_fn(updates: optax.Updates, state: optax.EmptyState,
                  params: optax.Params | None = None) -> tuple[optax.Updates, optax.EmptyState]:
        del params
        return {name: clip.update(tree, optax.EmptyState())[0]
                for name, tree in updates.items()}, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)
