"""Divergence handling shared by the testbeds: a run that produces a non-finite value freezes.

Runs of a sweep share one vmapped program, so a run cannot stop on its own. Instead, from the
first update whose result is not finite, the run keeps its last finite state and reports NaN
metrics, while the runs beside it go on untouched.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from vaco_jax.core.trainer import Metrics, StateT

# Leaves up to this many elements enter the one final reduction whole.
_WHOLE = 1024


def all_finite(tree: Any) -> jax.Array:
    """Whether every floating-point leaf of `tree` is finite (integer leaves always are)."""
    # `|x * 0|` is 0 where `x` is finite, NaN elsewhere. Large leaves are reduced to one such
    # value each and small ones kept whole, so that one reduction over all of it gives the
    # verdict: per-leaf verdicts joined by `&` (or `+`) get copied by XLA into the select of
    # every state leaf that reads them, hundreds of times in a whole run, while concatenating
    # every leaf whole would copy the parameters and optimiser state at each update.
    parts = [jnp.sum(jnp.abs(x * 0), dtype=jnp.float32).reshape(1) if x.size > _WHOLE
             else jnp.ravel(jnp.abs(x * 0)).astype(jnp.float32)
             for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return ~jnp.isnan(jnp.concatenate(parts)).any() if parts else jnp.array(True)


def freeze_if_diverged(state: StateT, new_state: StateT, checked: Any,
                       metrics: Metrics) -> tuple[StateT, Metrics]:
    """`(new_state, metrics)` after one update, or the frozen `state` with NaN metrics.

    `state` and `new_state` are states before and after the update with the fields `diverged`
    (bool), `diverged_at` (int32, -1 if none) and `update` (int32, updates done). `checked` is
    everything the next update reads, so a NaN is caught by the update that produced it, not
    one update late. A run that fails, now or before, keeps `state`, marked diverged with the
    1-based number of its first failing update (as the run tables count updates). Adds the
    per-update metric `diverged` (0/1).
    """
    failed = state.diverged | ~all_finite(checked)
    frozen = state.replace(diverged=failed, diverged_at=jnp.where(state.diverged,
                                                                  state.diverged_at,
                                                                  state.update + 1))
    out = jax.tree.map(lambda old, new: jnp.where(failed, old, new), frozen, new_state)
    metrics = jax.tree.map(lambda m: jnp.where(failed, jnp.nan, m), metrics)
    metrics["diverged"] = failed.astype(jnp.float32)
    return out, metrics
