"""The divergence check and freeze, with and without `jit`, and the size of their program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from vaco_jax.core.divergence import all_finite, freeze_if_diverged


@struct.dataclass
class _State:
    leaves: tuple
    diverged: jax.Array
    diverged_at: jax.Array
    update: jax.Array


def _tree(**overrides):
    tree = {"big": jnp.ones((64, 32)), "small": jnp.ones(1), "half": jnp.ones(3, jnp.bfloat16),
            "count": jnp.array([7], jnp.int32), "scalar": jnp.float32(2.0)}
    return {**tree, **overrides}


@pytest.mark.parametrize("jitted", [False, True])
@pytest.mark.parametrize("bad, expected", [
    ({}, True),
    ({"big": jnp.ones((64, 32)).at[63, 31].set(jnp.inf)}, False),
    ({"small": jnp.array([jnp.nan])}, False),
    ({"half": jnp.array([1.0, -jnp.inf, 0.0], jnp.bfloat16)}, False),
    ({"scalar": jnp.float32(jnp.nan)}, False),
    ({"big": jnp.ones((64, 32)).at[0, 0].set(jnp.nan)}, False),
    ({"count": jnp.array([-1], jnp.int32)}, True),  # integer leaves are always finite
    # Large finite values are finite: no sum of them may overflow into a false verdict.
    ({"big": jnp.full((64, 32), 3e38)}, True),
    ({"big": jnp.full((64, 32), 6e4, jnp.float16)}, True),
    ({"small": jnp.full(3, -3e38)}, True),
    ({"empty": jnp.zeros(0)}, True),
])
def test_all_finite(bad, expected, jitted):
    check = jax.jit(all_finite) if jitted else all_finite
    assert bool(check(_tree(**bad))) is expected


def test_all_finite_under_vmap_judges_each_run_alone():
    big = jnp.ones((2, 64, 32)).at[1, 5, 5].set(jnp.inf)
    small = jnp.ones((2, 3)).at[0, 2].set(jnp.nan)
    np.testing.assert_array_equal(jax.vmap(all_finite)({"big": big}), [True, False])
    np.testing.assert_array_equal(jax.vmap(all_finite)({"small": small}), [False, True])


def test_all_finite_of_a_tree_without_floating_point_leaves_holds():
    assert bool(all_finite({"n": jnp.arange(3)}))
    assert bool(all_finite(()))


def test_freeze_keeps_the_last_finite_state_from_the_first_failing_update():
    def state(value, diverged=False, at=-1, update=4):
        return _State(leaves=(jnp.full(3, value),), diverged=jnp.array(diverged),
                      diverged_at=jnp.array(at, jnp.int32), update=jnp.array(update, jnp.int32))

    freeze = jax.jit(freeze_if_diverged)
    out, metrics = freeze(state(1.0), state(2.0, update=5), jnp.ones(2), {"loss": jnp.float32(3)})
    np.testing.assert_array_equal(out.leaves[0], [2.0] * 3)
    assert not bool(out.diverged) and float(metrics["diverged"]) == 0.0
    assert float(metrics["loss"]) == 3.0
    out, metrics = freeze(state(1.0), state(2.0, update=5), jnp.array([1.0, jnp.nan]),
                          {"loss": jnp.float32(3)})
    np.testing.assert_array_equal(out.leaves[0], [1.0] * 3)
    assert bool(out.diverged) and int(out.diverged_at) == 5 and int(out.update) == 4
    assert np.isnan(float(metrics["loss"])) and float(metrics["diverged"]) == 1.0
    # Once diverged, a run stays frozen at its first failure, even when the check passes.
    out, _ = freeze(state(1.0, diverged=True, at=2), state(2.0, update=5), jnp.ones(2), {})
    np.testing.assert_array_equal(out.leaves[0], [1.0] * 3)
    assert bool(out.diverged) and int(out.diverged_at) == 2


def _guard_size(leaves: int) -> int:
    """Operations in the compiled guard of a state of `leaves` leaves, after an update whose
    checked values are `leaves` small arrays and one large one."""
    checked = [jnp.ones(1) for _ in range(leaves)] + [jnp.ones((64, 64))]
    state = _State(leaves=tuple(jnp.ones(i + 1) for i in range(leaves)),
                   diverged=jnp.array(False), diverged_at=jnp.array(-1, jnp.int32),
                   update=jnp.array(0, jnp.int32))
    new = state.replace(leaves=tuple(x + 1 for x in state.leaves))
    hlo = jax.jit(freeze_if_diverged).lower(state, new, checked, {}).compile().as_text()
    return sum(" = " in line for line in hlo.splitlines())


def test_the_verdict_is_computed_once_not_inside_every_leaf_it_freezes():
    # Per-leaf verdicts joined by `&` were copied by XLA into the select of each frozen leaf,
    # a program growing with the square of the leaves: a whole run's program held 2,388 is-finite
    # operations and compiled 1.5 s slower for it.
    assert _guard_size(64) < 2.5 * _guard_size(32)
