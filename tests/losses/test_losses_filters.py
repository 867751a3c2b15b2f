"""Tests of `vaco_jax.losses.filters`: the TV filter and the stabilisers' weights and masks."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loss_helpers import f32
from vaco_jax.losses import (
    bapo_clip_bounds,
    exceeds_cap,
    freshness_mask,
    gspo_sequence_log_ratio,
    importance_sampled_loss,
    m2po_mask,
    masked_is_mask,
    ppo_clip_loss,
    topr_weights,
    truncated_is_weights,
    tv_estimate,
    tv_filter_mask,
)

log = np.log


# ---------------------------------------------------------------------------------------------
# What a cap truncates.


def test_a_cap_truncates_only_ratios_beyond_float_noise(call):
    """At a cap of 1, ratios a few ulps above 1 (lag 0 recomputed in another program) are not
    truncated; 1.001 and 2 are, and 0.5 is not. At a cap of 2, only the ratio beyond 2 is."""
    log_ratio = f32(0.0, 3e-7, -3e-7, np.log(1.001), np.log(2.0), np.log(0.5), np.log(2.5))
    np.testing.assert_array_equal(call(exceeds_cap, log_ratio, 1.0),
                                  [False, False, False, True, True, False, True])
    np.testing.assert_array_equal(call(exceeds_cap, log_ratio, 2.0),
                                  [False, False, False, False, False, False, True])


# ---------------------------------------------------------------------------------------------
# TV estimate and filter.

RHO = f32(1.5, 0.5, 1.0, 2.0)
RHO_MASK = f32(1, 1, 1, 0)


def test_tv_estimate_hand_computed(call):
    # 0.5 * (|1.5 - 1| + |0.5 - 1| + |1 - 1|) / 3 valid elements; the masked 2.0 is ignored.
    np.testing.assert_allclose(call(tv_estimate, log(RHO), RHO_MASK), 0.5 * 1.0 / 3, rtol=1e-6)
    np.testing.assert_allclose(call(tv_estimate, log(RHO)), 0.5 * 2.0 / 4, rtol=1e-6)


def test_tv_filter_hand_computed(call):
    adv = f32(1.0, 1.0, -1.0, 1.0)
    # TV = 1/6 > 0.1: drop A * sign(rho - 1) > 0, i.e. element 0 (rho > 1, A > 0); element 1
    # (rho < 1, A > 0) pulls back, element 2 has rho = 1, element 3 is masked.
    keep, metrics = call(tv_filter_mask, log(RHO), adv, 0.1, RHO_MASK)
    np.testing.assert_array_equal(keep, [0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(metrics["tv"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(metrics["filter_fraction"], 1 / 3, rtol=1e-6)
    assert float(metrics["filter_active"]) == 1.0
    # Below the threshold nothing is filtered.
    keep, metrics = call(tv_filter_mask, log(RHO), adv, 0.2, RHO_MASK)
    np.testing.assert_array_equal(keep, RHO_MASK)
    assert float(metrics["filter_active"]) == 0.0 and float(metrics["filter_fraction"]) == 0.0


def _random_batch(seed, size=(16, 8), scale=0.5):
    rng = np.random.default_rng(seed)
    log_rho = (scale * rng.normal(size=size)).astype(np.float32)
    adv = rng.normal(size=size).astype(np.float32)
    mask = (rng.random(size) < 0.8).astype(np.float32)
    return log_rho, adv, mask


def test_tv_filter_is_the_identity_at_and_below_the_threshold(call):
    log_rho, adv, mask = _random_batch(0)
    tv = call(tv_estimate, log_rho, mask)
    # TV exactly equal to delta does not filter ...
    keep, metrics = call(tv_filter_mask, log_rho, adv, tv, mask)
    np.testing.assert_array_equal(keep, mask)
    assert float(metrics["filter_active"]) == 0.0
    # ... and just below it does.
    keep, _ = call(tv_filter_mask, log_rho, adv, np.nextafter(tv, np.float32(0)), mask)
    assert np.any(np.asarray(keep) != mask)
    # A given `tv` equal to delta does not filter either.
    keep, _ = call(tv_filter_mask, log_rho, adv, 0.3, mask, tv=0.3)
    np.testing.assert_array_equal(keep, mask)


def test_tv_filter_drops_exactly_the_tv_increasing_elements(call):
    log_rho, adv, mask = _random_batch(1)
    keep, metrics = call(tv_filter_mask, log_rho, adv, 0.01, mask)
    rho = np.exp(log_rho.astype(np.float64))
    increases = adv * np.sign(rho - 1) > 0
    expected = mask * ~increases
    np.testing.assert_array_equal(keep, expected)
    np.testing.assert_allclose(
        metrics["tv"], 0.5 * np.abs(rho - 1)[mask > 0].mean(), rtol=1e-5
    )
    np.testing.assert_allclose(
        metrics["filter_fraction"], (mask * increases).sum() / mask.sum(), rtol=1e-6
    )


def test_tv_filter_honours_a_given_tv(call):
    # Large measured TV, small given TV: nothing filtered.
    log_rho, adv, mask = _random_batch(2, scale=1.0)
    assert float(tv_estimate(log_rho, mask)) > 0.2
    keep, metrics = call(tv_filter_mask, log_rho, adv, 0.2, mask, tv=0.1)
    np.testing.assert_array_equal(keep, mask)
    np.testing.assert_allclose(metrics["tv"], 0.1)
    # Tiny measured TV, large given TV: filtered.
    log_rho, adv, mask = _random_batch(3, scale=0.01)
    keep, metrics = call(tv_filter_mask, log_rho, adv, 0.2, mask, tv=0.5)
    np.testing.assert_array_equal(keep, mask * ~(adv * np.sign(log_rho) > 0))
    assert float(metrics["filter_active"]) == 1.0


def test_tv_filter_mask_is_stop_gradient():
    log_rho, adv, mask = _random_batch(4)
    grad = jax.jit(jax.grad(lambda lr: tv_filter_mask(lr, adv, 0.01, mask)[0].sum()))(log_rho)
    np.testing.assert_array_equal(grad, 0.0)


def test_kept_samples_never_push_tv_up():
    log_rho, noise, mask = _random_batch(5)
    # As after a few steps of learning: rho tends to exceed 1 where the advantage is positive.
    adv = 2.0 * log_rho + 0.5 * noise

    @jax.jit
    def tv_change_rate(log_rho, keep):
        """d TV / d log_rho dotted with the descent direction of the surrogate on `keep`."""
        tv_grad = jax.grad(tv_estimate)(log_rho, mask)
        loss_grad = jax.grad(lambda lr: importance_sampled_loss(lr, adv, mask=keep)[0])(log_rho)
        return jnp.vdot(tv_grad, -loss_grad)

    keep, metrics = tv_filter_mask(log_rho, adv, 0.01, mask)
    assert float(metrics["filter_active"]) == 1.0
    assert float(tv_change_rate(log_rho, keep)) <= 0.0
    # Without the filter the same step does increase TV, so the check can fail.
    assert float(tv_change_rate(log_rho, jnp.asarray(mask))) > 0.0


# ---------------------------------------------------------------------------------------------
# Importance weights and masks.


def test_truncated_is_weights(call):
    log_w = log(f32(0.5, 2.0, 10.0))
    np.testing.assert_allclose(call(truncated_is_weights, log_w, 2.0), [0.5, 2.0, 2.0], rtol=1e-6)
    grad = jax.jit(jax.grad(lambda lw: truncated_is_weights(lw, 2.0).sum()))(log_w)
    np.testing.assert_array_equal(grad, 0.0)


def test_masked_is_mask(call):
    log_w = log(f32(0.05, 0.5, 2.0, 9.0))
    np.testing.assert_array_equal(call(masked_is_mask, log_w, 0.1, 8.0), [0.0, 1.0, 1.0, 0.0])
    # The bounds are inclusive: w = exp(0) = 1 exactly.
    np.testing.assert_array_equal(call(masked_is_mask, f32(0.0), 1.0, 1.0), [1.0])


def test_topr_weights(call):
    log_w = log(f32(0.5, 2.0, 0.5, 2.0))
    adv = f32(1.0, 0.0, -1.0, -1.0)
    # 1 for A >= 0; clip(w, 0, 1) = 0.5 and 1 for the negative ones.
    np.testing.assert_allclose(call(topr_weights, log_w, adv), [1.0, 1.0, 0.5, 1.0], rtol=1e-6)


def test_freshness_mask(call):
    gaps = np.array([0, 1, 2, 3], np.int32)
    np.testing.assert_array_equal(call(freshness_mask, gaps, 2), [1.0, 1.0, 1.0, 0.0])
    per_gap = jax.jit(jax.vmap(lambda g: freshness_mask(gaps, g)))(np.array([0, 3]))
    np.testing.assert_array_equal(per_gap, [[1, 0, 0, 0], [1, 1, 1, 1]])


def test_gspo_sequence_log_ratio(call):
    log_ratio = f32([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    mask = f32([1, 1, 0], [0, 0, 0])
    # (1 + 2) / 2 valid tokens; the empty sequence gets 0.
    np.testing.assert_allclose(call(gspo_sequence_log_ratio, log_ratio, mask), [1.5, 0.0])
    np.testing.assert_allclose(call(gspo_sequence_log_ratio, log_ratio), [2.0, 5.0])


# ---------------------------------------------------------------------------------------------
# M2PO.


def test_m2po_hand_computed(call):
    log_w = f32(0.1, -0.3, 0.4, 0.05)
    # (log w)^2 = 0.01, 0.09, 0.16, 0.0025; sorted prefix means 0.0025, 0.00625, 0.034167, 0.065625:
    # the first three are below tau = 0.04, so only the 0.16 element is dropped.
    keep, metrics = call(m2po_mask, log_w, 0.04)
    np.testing.assert_array_equal(keep, [1.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(metrics["m2"], 0.2625 / 4, rtol=1e-5)
    np.testing.assert_allclose(metrics["m2_kept"], 0.1025 / 3, rtol=1e-5)
    np.testing.assert_allclose(metrics["mask_fraction"], 0.25)
    # tau = 0.1: everything is kept.
    keep, metrics = call(m2po_mask, log_w, 0.1)
    np.testing.assert_array_equal(keep, 1.0)
    assert float(metrics["mask_fraction"]) == 0.0
    # The kept mean must be strictly below tau: (log w)^2 = 0.25, 0, 1 have prefix means 0, 0.125
    # (exactly tau = 0.125, so not kept) and 0.4167.
    keep, _ = call(m2po_mask, f32(0.5, 0.0, 1.0), 0.125)
    np.testing.assert_array_equal(keep, [0.0, 1.0, 0.0])


@pytest.mark.parametrize("seed", range(4))
def test_m2po_kept_moment_is_below_tau_with_the_fewest_drops(seed):
    rng = np.random.default_rng(seed)
    log_w = (rng.standard_t(2, size=(12, 10)) * 0.15).astype(np.float32)
    mask = rng.random((12, 10)) < 0.85
    log_w = np.where(mask, log_w, 1e6).astype(np.float32)  # masked garbage must not matter
    tau = 0.04
    keep, metrics = jax.jit(m2po_mask)(log_w, tau, mask)
    keep = np.asarray(keep) > 0
    second = log_w.astype(np.float64) ** 2
    dropped = mask & ~keep
    assert not np.any(keep & ~mask)
    assert dropped.any()
    assert second[keep].mean() < tau
    # Every dropped element is at least as large as every kept one ...
    assert second[dropped].min() >= second[keep].max()
    # ... and putting back the smallest dropped one breaks the bound: no drop was unnecessary.
    assert np.append(second[keep], second[dropped].min()).mean() >= tau
    np.testing.assert_allclose(metrics["m2_kept"], second[keep].mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["mask_fraction"], dropped.sum() / mask.sum(), rtol=1e-6)


def test_m2po_drops_nothing_when_already_below_tau():
    rng = np.random.default_rng(7)
    log_w = rng.uniform(-0.15, 0.15, size=(6, 9)).astype(np.float32)
    mask = rng.random((6, 9)) < 0.7
    keep, metrics = jax.jit(m2po_mask)(log_w, 0.04, mask)
    np.testing.assert_array_equal(keep, mask)
    assert float(metrics["mask_fraction"]) == 0.0


def test_m2po_with_nothing_valid():
    keep, metrics = jax.jit(m2po_mask)(f32(1.0, 2.0), 0.04, f32(0, 0))
    np.testing.assert_array_equal(keep, 0.0)
    assert all(float(v) == 0.0 for v in metrics.values())


# ---------------------------------------------------------------------------------------------
# BAPO.

# Contributions r |A|: positive tokens r = 2.0 (active once c_high >= 2) and r = 1.0; negative
# tokens r = 0.75 (active while c_low <= 0.75) and r = 1.0; a masked negative token r = 3.0.
BAPO_RATIO = f32(2.0, 1.0, 0.75, 1.0, 3.0)
BAPO_ADV = f32(1.0, 1.0, -1.0, -1.0, -50.0)
BAPO_MASK = f32(1, 1, 1, 1, 0)


def test_bapo_clip_bounds_hand_computed(call):
    # Candidates (c_low, c_high) = (0.6, 1.2), (0.7, 1.8), (0.8, 2.4), (0.9, 3.0) have positive
    # shares 1 / (1 + 1.75) = 0.36, 1 / 2.75 = 0.36, 3 / (3 + 1) = 0.75 and 0.75. The target 0.3
    # is met at the start, 0.4 first at (0.8, 2.4), 0.8 never (so the widest bounds are used).
    bounds = call(
        jax.vmap(
            lambda lr, a, s: bapo_clip_bounds(
                lr, a, mask=BAPO_MASK, positive_share=s, num_candidates=4
            ),
            (None, None, 0),
        ),
        log(BAPO_RATIO),
        BAPO_ADV,
        f32(0.3, 0.4, 0.8),
    )
    expected = [[0.4, 0.2], [0.2, 1.4], [0.1, 2.0]]
    np.testing.assert_allclose(np.stack(bounds, -1), expected, rtol=1e-5)


def _numpy_share(ratio, adv, low, high):
    positive = (ratio * adv)[(adv > 0) & (ratio <= high)].sum()
    negative = (ratio * -adv)[(adv < 0) & (ratio >= low)].sum()
    return positive / (positive + negative)


def test_bapo_picks_the_first_candidate_reaching_the_share():
    rng = np.random.default_rng(8)
    log_ratio = rng.normal(0.0, 0.5, size=(8, 16)).astype(np.float32)
    # Mostly negative advantages: the starting bounds are unbalanced.
    adv = (rng.normal(size=(8, 16)) - 0.2).astype(np.float32)
    low_eps, high_eps = jax.jit(bapo_clip_bounds)(log_ratio, adv)
    ratio = np.exp(log_ratio.astype(np.float64))
    assert _numpy_share(ratio, adv, 0.6, 1.2) < 0.4
    path = np.linspace(0.0, 1.0, 37)
    shares = [_numpy_share(ratio, adv, 0.6 + t * 0.3, 1.2 + t * 1.8) for t in path]
    # Widening only ever raises the share, so the first point reaching it is the tightest one.
    assert np.all(np.diff(shares) >= 0)
    first = int(np.argmax(np.array(shares) >= 0.4))
    assert 0 < first < 36 and shares[first] >= 0.4
    expected = [0.4 - path[first] * 0.3, 0.2 + path[first] * 1.8]
    np.testing.assert_allclose([low_eps, high_eps], expected, rtol=1e-5)


def test_bapo_bounds_feed_ppo_clip_under_jit_and_vmap():
    log_ratio, adv = log(BAPO_RATIO), BAPO_ADV

    @jax.jit
    def loss(share):
        clip_eps = bapo_clip_bounds(log_ratio, adv, mask=BAPO_MASK, positive_share=share,
                                    num_candidates=4)
        return ppo_clip_loss(log_ratio, adv, clip_eps, mask=BAPO_MASK)[0]

    # share 0.4 -> clip range [0.8, 2.4]: min(2, 2) = 2, min(1, 1) = 1, min(-0.75, -0.8) = -0.8,
    # min(-1, -1) = -1.
    np.testing.assert_allclose(loss(0.4), -(2.0 + 1.0 - 0.8 - 1.0) / 4, rtol=1e-5)
    np.testing.assert_allclose(jax.vmap(loss)(f32(0.4)), [loss(0.4)], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Traced hyper-parameters and bad inputs.


def test_thresholds_may_be_vmapped():
    log_rho, adv, mask = _random_batch(9)
    deltas = f32(0.0, 10.0)
    keeps = jax.jit(jax.vmap(lambda d: tv_filter_mask(log_rho, adv, d, mask)[0]))(deltas)
    np.testing.assert_array_equal(keeps[1], mask)
    assert np.any(np.asarray(keeps[0]) != mask)
    taus = jax.jit(jax.vmap(lambda t: m2po_mask(log_rho, t, mask)[0]))(f32(1e-3, 1e3))
    assert np.asarray(taus[0]).sum() < mask.sum()
    np.testing.assert_array_equal(taus[1], mask)


def test_bad_inputs_name_the_argument():
    with pytest.raises(AssertionError, match="advantages"):
        tv_filter_mask(jnp.zeros(3), jnp.zeros(4), 0.1)
    with pytest.raises(AssertionError, match="log_rho"):
        tv_estimate(jnp.zeros(3, jnp.int32))
    with pytest.raises(AssertionError, match="mask"):
        m2po_mask(jnp.zeros(3), 0.04, jnp.ones(2))
    with pytest.raises(AssertionError, match="advantages"):
        topr_weights(jnp.zeros(3), jnp.zeros(2))
    with pytest.raises(ValueError, match="num_candidates"):
        bapo_clip_bounds(jnp.zeros(3), jnp.zeros(3), num_candidates=1)
    with pytest.raises(ValueError, match="log_ratio"):
        gspo_sequence_log_ratio(jnp.float32(0.0))
