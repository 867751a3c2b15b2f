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


def test_binary_kl_by_hand():
    # KL(Bern(0.5) || Bern(0.7)) = 0.5 ln(0.5/0.7) + 0.5 ln(0.5/0.3).
    expected = 0.5 * np.log(0.5 / 0.7) + 0.5 * np.log(0.5 / 0.3)
    assert float(losses.binary_kl(0.5, 0.7)) == pytest.approx(expected, rel=1e-6)
    assert float(losses.binary_kl(0.3, 0.3)) == pytest.approx(0.0, abs=1e-7)
    assert np.isfinite(float(losses.binary_kl(1.0, 0.0)))


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
