"""`CarriedLeaves` keeps exactly the leaves that what a step observes depends on, through any
chain of carried leaves, and a step from those leaves observes what the whole state's step does,
bit for bit, with and without `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.envs.carried import CarriedLeaves


def _step(state, action):
    """A state whose leaves play each part: `pos` and `vel` are observed; `gain` is read only by
    `vel`'s next value, `mode` (an integer) only by `pos`'s; `derived` is overwritten before it
    is read; `clock` feeds only its own next value; `unread` passes through untouched."""
    nxt = {"pos": state["pos"] + state["vel"] * state["mode"],
           "vel": state["vel"] + action * state["gain"],
           "gain": state["gain"],
           "mode": state["mode"],
           "derived": jnp.sin(state["pos"]),
           "clock": state["clock"] + 1.0,
           "unread": state["unread"]}
    return nxt, (nxt["pos"] * nxt["derived"], nxt["vel"].sum())


def _state(key):
    keys = jax.random.split(key, 5)
    return {"pos": jax.random.normal(keys[0], (3,)), "vel": jax.random.normal(keys[1], (3,)),
            "gain": jax.random.uniform(keys[2], (3,)), "mode": jnp.array(2, jnp.int32),
            "derived": jax.random.normal(keys[3], (3,)), "clock": jnp.float32(7.0),
            "unread": jax.random.normal(keys[4], (2, 2))}


def _names(carried, state):
    return {sorted(state)[i] for i in carried.indices}


def test_it_keeps_what_the_observed_values_read_through_every_chain():
    state = _state(jax.random.PRNGKey(0))
    carried = CarriedLeaves(_step, state, jnp.zeros(3))
    # `gain` reaches what is observed only through `vel`'s next value: a search that looks at
    # the observed values alone would drop it.
    assert _names(carried, state) == {"pos", "vel", "gain", "mode"}
    assert carried.total == 7


def test_it_works_from_shapes_alone():
    state = _state(jax.random.PRNGKey(0))
    shapes = jax.eval_shape(lambda: state)
    carried = CarriedLeaves(_step, shapes, jax.ShapeDtypeStruct((3,), jnp.float32))
    assert _names(carried, state) == {"pos", "vel", "gain", "mode"}
    whole = carried.whole(carried.carried(state))
    assert jax.tree.map(lambda x: (x.shape, x.dtype), whole) == \
        jax.tree.map(lambda x: (x.shape, x.dtype), state)


@pytest.mark.parametrize("jit", [False, True])
def test_steps_from_the_carried_leaves_observe_what_whole_steps_do(jit):
    carried = CarriedLeaves(_step, _state(jax.random.PRNGKey(0)), jnp.zeros(3))
    step = jax.jit(_step) if jit else _step
    whole = _state(jax.random.PRNGKey(1))
    leaves = carried.carried(whole)
    for t in range(6):
        action = jax.random.normal(jax.random.PRNGKey(10 + t), (3,))
        whole, seen = step(whole, action)
        nxt, seen_carried = step(carried.whole(leaves), action)
        leaves = carried.carried(nxt)
        jax.tree.map(np.testing.assert_array_equal, seen_carried, seen)
        jax.tree.map(np.testing.assert_array_equal, leaves, carried.carried(whole))
    # What is not carried is lost, as it should be: `clock` counted in the whole state only.
    assert float(whole["clock"]) == 13.0 and float(nxt["clock"]) == 1.0
