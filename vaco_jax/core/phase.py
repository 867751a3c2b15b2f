"""The optimisation phase both testbeds share: `epochs` passes over the phase batch, each a
fresh shuffle into minibatches, with one step per minibatch; every loop is a `lax.scan`."""

from __future__ import annotations

from typing import Any, Callable

import jax


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
