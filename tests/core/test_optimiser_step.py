"""The shared optimiser step: no step, and no change to the optimiser's state, where the
surrogate kept no sample."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vaco_jax.core import phase

PARAMS = {"w": jnp.asarray([1.0, -2.0, 3.0]), "b": jnp.asarray(0.5)}
GRADS = {"w": jnp.asarray([0.3, -0.1, 0.2]), "b": jnp.asarray(-0.4)}
ZERO = jax.tree.map(jnp.zeros_like, GRADS)


def _after_one_step():
    """Parameters and Adam's state after one real step: momentum that a zero gradient would
    still follow."""
    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-2))
    state = tx.init(PARAMS)
    updates, state = tx.update(GRADS, state, PARAMS)
    return tx, optax.apply_updates(PARAMS, updates), state


def _assert_bit_equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize("jit", [False, True])
def test_a_step_that_kept_no_sample_changes_neither_parameters_nor_optimiser_state(jit):
    tx, params, state = _after_one_step()
    step = (jax.jit(phase.optimiser_step, static_argnums=0) if jit else phase.optimiser_step)
    new_params, new_state, _, skipped = step(tx, ZERO, state, params, jnp.asarray(0.0))
    _assert_bit_equal(new_params, params)
    _assert_bit_equal(new_state, state)  # Adam's moments and count included
    assert skipped == 1.0
    # Without the rule, Adam moves the parameters by its momentum alone.
    updates, _ = tx.update(ZERO, state, params)
    assert float(optax.global_norm(updates)) > 0


@pytest.mark.parametrize("kept", [1.0, None])
def test_a_step_that_kept_a_sample_is_the_plain_optax_step_bit_for_bit(kept):
    tx, params, state = _after_one_step()

    @jax.jit
    def plain(state, params):  # the step as taken before the rule, compiled alike
        updates, state = tx.update(GRADS, state, params)
        return optax.apply_updates(params, updates), state, updates

    expected_params, expected_state, updates = plain(state, params)
    new_params, new_state, new_updates, skipped = jax.jit(
        phase.optimiser_step, static_argnums=0)(tx, GRADS, state, params, kept)
    _assert_bit_equal(new_params, expected_params)
    _assert_bit_equal(new_state, expected_state)
    _assert_bit_equal(new_updates, updates)
    assert skipped == 0.0 if kept is not None else np.isnan(skipped)


def test_under_vmap_only_the_runs_that_kept_nothing_skip():
    tx, params, state = _after_one_step()
    stack = lambda tree: jax.tree.map(lambda x: jnp.stack([x, x]), tree)  # noqa: E731
    new_params, new_state, _, skipped = jax.vmap(
        lambda g, s, p, k: phase.optimiser_step(tx, g, s, p, k))(
        stack(GRADS), stack(state), stack(params), jnp.asarray([0.0, 2.0]))
    np.testing.assert_array_equal(skipped, [1.0, 0.0])
    _assert_bit_equal(jax.tree.map(lambda x: x[0], new_params), params)
    assert int(new_state[1][0].count[1]) == 2 and int(new_state[1][0].count[0]) == 1


def test_a_loss_reporting_kept_samples_records_the_skip_as_a_mechanism():
    def masking(x):
        return x.sum(), {"filter_fraction": x.mean(), phase.KEPT: x.sum()}

    def plain(x):
        return x.sum(), {"clip_fraction": x.mean()}

    terms = jax.ShapeDtypeStruct((2,), jnp.float32)
    assert phase.recorded_mechanisms(masking, terms) == {"filter_fraction", phase.SKIPPED_STEP}
    assert phase.recorded_mechanisms(plain, terms) == {"clip_fraction"}
