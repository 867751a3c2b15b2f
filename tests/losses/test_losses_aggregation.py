"""Tests of `vaco_jax.losses.aggregation`."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.losses import AGGREGATIONS, aggregate


VALUES = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
# Row 0 has two valid tokens, row 1 one, row 2 none (an empty sequence).
MASK = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], np.float32)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 4) / 3),
        # Sequence means 1.5 and 4; the empty row is ignored.
        ("seq-mean-token-mean", (1.5 + 4.0) / 2),
        # Sums 3 and 4 divided by L = 3, averaged over the two non-empty rows.
        ("seq-mean-token-sum-norm", (3 / 3 + 4 / 3) / 2),
    ],
)
def test_hand_computed(call, mode, expected):
    np.testing.assert_allclose(call(aggregate, VALUES, MASK, mode=mode), expected, rtol=1e-6)


def test_norm_length_is_a_constant_and_may_be_traced(call):
    # Sums 3 and 4 divided by 2: (1.5 + 2) / 2.
    result = call(
        lambda v, n: aggregate(v, MASK, "seq-mean-token-sum-norm", norm_length=n), VALUES, 2.0
    )
    np.testing.assert_allclose(result, 1.75, rtol=1e-6)


def test_no_mask_is_the_plain_mean(call):
    np.testing.assert_allclose(call(aggregate, VALUES), VALUES.mean(), rtol=1e-6)


def _numpy_reference(values, mask, mode, norm_length=None):
    if mode == "token-mean":
        return (values * mask).sum() / mask.sum()
    counts = mask.sum(-1)
    sums = (values * mask).sum(-1)
    nonempty = counts > 0
    if mode == "seq-mean-token-mean":
        per_seq = sums[nonempty] / counts[nonempty]
    else:
        per_seq = sums[nonempty] / (values.shape[-1] if norm_length is None else norm_length)
    return per_seq.mean()


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_ragged_token_batches_against_numpy(call, mode):
    rng = np.random.default_rng(0)
    batch, length = 8, 11
    values = rng.normal(size=(batch, length)).astype(np.float32)
    lengths = rng.integers(0, length + 1, size=batch)
    lengths[[1, 5]] = 0  # two empty sequences
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)
    # Garbage where masked must not matter.
    values = np.where(mask > 0, values, 1e30).astype(np.float32)
    expected = _numpy_reference(values.astype(np.float64), mask, mode)
    np.testing.assert_allclose(call(aggregate, values, mask, mode=mode), expected, rtol=1e-5)
    # A bool mask is the same mask.
    np.testing.assert_allclose(
        call(aggregate, values, mask > 0, mode=mode), expected, rtol=1e-5
    )


@pytest.mark.parametrize("mode", AGGREGATIONS[1:])
def test_leading_axes_are_all_sequences(mode):
    rng = np.random.default_rng(1)
    values = rng.normal(size=(2, 3, 5)).astype(np.float32)
    mask = rng.random((2, 3, 5)) < 0.6
    reduce = jax.jit(functools.partial(aggregate, mode=mode))
    np.testing.assert_allclose(
        reduce(values, mask), reduce(values.reshape(6, 5), mask.reshape(6, 5)), rtol=1e-6
    )


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_empty_mask_gives_zero_not_nan(call, mode):
    result = call(aggregate, VALUES, np.zeros_like(MASK), mode=mode)
    assert float(result) == 0.0


def test_masked_elements_get_no_gradient():
    values = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    grad = jax.jit(jax.grad(lambda v: aggregate(v, mask)))(values)
    np.testing.assert_allclose(grad, mask / 3.0)
    grad = jax.jit(jax.grad(lambda v: aggregate(v, mask, "seq-mean-token-mean")))(values)
    # Each sequence's mean weighs 1/2; its tokens share that weight.
    np.testing.assert_allclose(grad, [[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]])


def test_unknown_mode_names_the_argument_and_the_choices():
    with pytest.raises(ValueError, match="mode") as info:
        aggregate(VALUES, MASK, "sequence-mean")
    for mode in AGGREGATIONS:
        assert mode in str(info.value)


def test_mask_shape_mismatch_names_mask():
    with pytest.raises(AssertionError, match="mask"):
        aggregate(VALUES, MASK[:2])


def test_sequence_modes_need_a_token_axis():
    with pytest.raises(ValueError, match="token axis"):
        aggregate(jnp.float32(1.0), mode="seq-mean-token-mean")
