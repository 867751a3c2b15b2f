"""The part of an environment's state that a rollout must carry from one step to the next.

A MuJoCo (MJX) state holds, beside positions and velocities, every quantity its last step
derived from them (body poses, inertias, the mass matrix, constraint Jacobians, sensors), and
the next step computes each of them afresh before reading it. A training program that carries
the whole state through its loops keeps all of them alive: XLA computes, selects (at each
auto-reset and at the divergence guard), copies and stores every one of them at every step, and
compiles code for each. On Brax's `inverted_double_pendulum`, 11 of the state's 107 leaves are
read by the next step.

`CarriedLeaves` finds those leaves from the step's jaxpr: the leaves that what the engine reads
of the next state (its observation, reward and termination) depends on, directly or through the
next values of other carried leaves. Every other leaf is overwritten before it is read, or feeds
nothing but its own next value, so a step from the carried leaves (the others filled with zeros,
which XLA then removes) computes the same observations, rewards and terminations. XLA compiles
the smaller program into other kernels, which may round some values differently in the last bit.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
# JAX's dead-code elimination of a jaxpr, with its rules for every primitive (loops, calls and
# conditionals included): which inputs the wanted outputs depend on. It has no public name.
from jax._src.interpreters.partial_eval import dce_jaxpr


class CarriedLeaves:
    """The leaves of a state pytree that its step reads, and the conversions between the whole
    state and the tuple of those leaves."""

    def __init__(self, step: Callable[[Any, Any], tuple[Any, Any]], state: Any, action: Any):
        """`step(state, action) -> (next_state, observed)`, where `next_state` has `state`'s
        structure and `observed` is what the engine reads of it; `state` and `action` give the
        shapes and dtypes (arrays or `jax.ShapeDtypeStruct`s)."""
        self._leaves, self._treedef = jax.tree.flatten(state)
        closed = jax.make_jaxpr(step)(state, action)
        count = len(self._leaves)
        observed = len(closed.jaxpr.outvars) - count
        kept: set[int] = set()
        while True:
            wanted = [i in kept for i in range(count)] + [True] * observed
            _, used = dce_jaxpr(closed.jaxpr, wanted)
            grown = kept | {i for i in range(count) if used[i]}
            if grown == kept:
                break
            kept = grown
        self.indices = tuple(sorted(kept))

    @property
    def total(self) -> int:
        """How many leaves the whole state has."""
        return len(self._leaves)

    def carried(self, state: Any) -> tuple[jax.Array, ...]:
        """The carried leaves of whole state `state`."""
        leaves = jax.tree.leaves(state)
        return tuple(leaves[i] for i in self.indices)

    def whole(self, carried: tuple[jax.Array, ...]) -> Any:
        """A whole state with the leaves `carried` and zeros elsewhere (which its step never
        reads for anything observed)."""
        leaves = [jnp.zeros_like(leaf) for leaf in self._leaves]
        for i, leaf in zip(self.indices, carried):
            leaves[i] = leaf
        return jax.tree.unflatten(self._treedef, leaves)
