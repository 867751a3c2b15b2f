"""The TV line's trust regions: the budget convention, TVPO's group TV estimate and DPPO's
masks, against hand-computed values, with and without `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import losses


@pytest.mark.parametrize("compile_", [False, True])
def test_a_budget_is_twice_its_tv_threshold(compile_):
    threshold = jax.jit(losses.tv_threshold, static_argnums=1) if compile_ else losses.tv_threshold
    assert float(threshold(0.2, "budget")) == pytest.approx(0.1)
    assert float(threshold(0.2, "tv")) == pytest.approx(0.2)
    assert float(threshold(losses.TV_BUDGETS["tvpo_lm"], "budget")) == pytest.approx(0.0075)
    with pytest.raises(ValueError, match="tv_delta_convention='l1' .* allowed values: budget, tv"):
        losses.tv_threshold(0.2, "l1")


@pytest.mark.parametrize("compile_", [False, True])
def test_group_tv_averages_sequence_means_over_the_groups_sequences(compile_):
    # Ratios: sequence 0 (1.2, 1.0), sequence 1 (0.6, masked), sequence 2 fully masked.
    log_rho = jnp.log(jnp.asarray([[1.2, 1.0], [0.6, 3.0], [1.1, 1.1]]))
    mask = jnp.asarray([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    group = jnp.asarray([0, 0, 1])
    fn = jax.jit(losses.group_tv_estimate, static_argnums=2) if compile_ else \
        losses.group_tv_estimate
    per_token, over_groups = fn(log_rho, group, 3, mask)
    # Sequence TVs 0.5 mean|rho - 1|: 0.05 and 0.2; group 0 is their mean, 0.125. Group 1 has
    # no valid token and group 2 no sequence: neither enters the mean over groups.
    np.testing.assert_allclose(per_token[:2], 0.125, rtol=1e-6)
    assert float(over_groups) == pytest.approx(0.125, rel=1e-6)
    with pytest.raises(ValueError, match=r"must be \[N, L\]"):
        losses.group_tv_estimate(jnp.zeros(3), group, 3)


P_OLD = jnp.full(5, 0.5)
P_NEW = jnp.asarray([0.7, 0.6, 0.3, 0.45, 0.25])
ADVANTAGES = jnp.asarray([1.0, 1.0, -1.0, 0.0, 0.0])


@pytest.mark.parametrize("compile_", [False, True])
def test_binary_tv_masks_probability_moves_past_the_budget_with_the_advantage(compile_):
    fn = jax.jit(losses.dppo_binary_tv_mask) if compile_ else losses.dppo_binary_tv_mask
    keep, metrics = fn(jnp.log(P_NEW), jnp.log(P_OLD), ADVANTAGES, 0.15, 0.15)
    # +0.2 with A > 0 and -0.2 with A < 0 are past 0.15; +0.1 is within; A = 0 takes the
    # negative branch: -0.05 stays, -0.25 is masked.
    np.testing.assert_array_equal(keep, [0.0, 1.0, 0.0, 1.0, 0.0])
    assert float(metrics["mask_fraction"]) == pytest.approx(0.6)
    # Asymmetric budgets: a rise may reach 0.25, a fall only 0.1.
    keep, _ = fn(jnp.log(P_NEW), jnp.log(P_OLD), ADVANTAGES, 0.1, 0.25)
    np.testing.assert_array_equal(keep, [1.0, 1.0, 0.0, 1.0, 0.0])


def test_binary_kl_by_hand(call):
    # KL(Bern(0.5) || Bern(0.7)) = 0.5 ln(0.5/0.7) + 0.5 ln(0.5/0.3).
    expected = 0.5 * np.log(0.5 / 0.7) + 0.5 * np.log(0.5 / 0.3)
    assert float(call(losses.binary_kl, np.log(0.5), np.log(0.7))) == pytest.approx(expected,
                                                                                   rel=1e-6)
    assert float(call(losses.binary_kl, np.log(0.3), np.log(0.3))) == pytest.approx(0.0, abs=1e-7)
    # p_old = 1 leaves the first term alone; p = 0 is an infinite KL, not NaN.
    assert float(call(losses.binary_kl, 0.0, np.log(0.5))) == pytest.approx(np.log(2.0), rel=1e-6)
    assert not np.isnan(float(call(losses.binary_kl, np.log(0.5), -np.inf)))


def _binary_kl_float64(old_log_prob, log_prob):
    p_old = np.exp(old_log_prob)
    q_old, q = -np.expm1(old_log_prob), -np.expm1(log_prob)
    return p_old * (old_log_prob - log_prob) + q_old * (np.log(q_old) - np.log(q))


def test_binary_kl_is_accurate_in_float32_where_p_rounds_to_one(call):
    # In float32 exp(-1e-8) is 1 and exp(-1e-7) is 1 - 1.19e-7: a KL computed from the rounded
    # probabilities is off by a factor of several at the first and by 10% at the second.
    old = np.log(np.asarray([0.9, 0.9, 0.5, 1 - 1e-4], np.float64))
    new = np.asarray([-1e-8, -1e-7, -1e-6, -3e-5], np.float64)
    expected = _binary_kl_float64(old, new)
    got = call(losses.binary_kl, jnp.asarray(old, jnp.float32), jnp.asarray(new, jnp.float32))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    # A log-prob of exactly 0 (1 - p lost before it arrived) reads 1 - p as float32's
    # resolution below 1, 2**-24, rather than as an infinite or tiny-floored KL.
    at_one = call(losses.binary_kl, jnp.float32(np.log(0.9)), jnp.float32(0.0))
    assert float(at_one) == pytest.approx(float(_binary_kl_float64(np.log(0.9), -2.0**-24)),
                                          rel=1e-4)


@pytest.mark.parametrize("compile_", [False, True])
def test_binary_kl_masks_only_moves_with_the_advantage(compile_):
    fn = jax.jit(losses.dppo_binary_kl_mask) if compile_ else losses.dppo_binary_kl_mask
    p_new = jnp.asarray([0.7, 0.6, 0.3, 0.3])
    advantages = jnp.asarray([1.0, 1.0, -1.0, 1.0])
    keep, metrics = fn(jnp.log(p_new), jnp.log(jnp.full(4, 0.5)), advantages, 0.05)
    # KLs 0.087, 0.020, 0.087, 0.087: the first and third moved with their advantage past 0.05;
    # the fourth moved against its advantage (A > 0, p fell), so it stays.
    np.testing.assert_array_equal(keep, [0.0, 1.0, 0.0, 1.0])
    assert float(metrics["mask_fraction"]) == pytest.approx(0.5)


def test_masks_respect_the_validity_mask_and_stop_gradients():
    mask = jnp.asarray([1.0, 1.0, 0.0, 1.0, 1.0])
    keep, metrics = losses.dppo_binary_tv_mask(jnp.log(P_NEW), jnp.log(P_OLD), ADVANTAGES,
                                               0.15, 0.15, mask)
    np.testing.assert_array_equal(keep, [0.0, 1.0, 0.0, 1.0, 0.0])
    assert float(metrics["mask_fraction"]) == pytest.approx(0.5)  # 2 of the 4 valid
    grad = jax.grad(lambda lp: losses.dppo_binary_tv_mask(lp, jnp.log(P_OLD), ADVANTAGES, 0.15,
                                                          0.15)[0].sum())(jnp.log(P_NEW))
    np.testing.assert_array_equal(grad, 0.0)
