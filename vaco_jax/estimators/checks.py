"""Argument checks the estimators share: chex assertions re-raised as one line naming the
argument."""

from typing import Any, Callable

import chex
import jax.numpy as jnp

Array = chex.Array
Numeric = chex.Numeric


def named(
    name: str, check: Callable[..., None], *args: Any, **kwargs: Any
) -> None:
    """Runs a chex assertion; a failure is re-raised naming the argument."""
    try:
        check(*args, **kwargs)
    except AssertionError as e:
        raise ValueError(f"`{name}`: {e}") from None


def check_min_rank(name: str, x: Array, min_rank: int) -> None:
    if jnp.ndim(x) < min_rank:
        raise ValueError(
            f"`{name}` must have rank >= {min_rank}, got shape {jnp.shape(x)}."
        )


def check_same_shape_floats(**arrays: Array) -> jnp.dtype:
    """Checks that all arrays are floating with the first one's shape.

    Returns:
        The dtype every array is promoted to, so that scan carries stay uniform.
    """
    ref_name, ref = next(iter(arrays.items()))
    for name, x in arrays.items():
        named(name, chex.assert_type, x, float)
        if name != ref_name:
            named(name, chex.assert_shape, x, jnp.shape(ref))
    return jnp.result_type(*arrays.values())


def check_time_major(**arrays: Array) -> jnp.dtype:
    for name, x in arrays.items():
        check_min_rank(name, x, 1)
    return check_same_shape_floats(**arrays)


def scalar(name: str, x: Numeric, dtype: jnp.dtype) -> Array:
    named(name, chex.assert_rank, x, 0)
    return jnp.asarray(x, dtype)
