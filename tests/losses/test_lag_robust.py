"""The lag-robust losses of 2025-26 (`vaco_jax.losses.lag_robust`) against hand-computed values,
with and without `jit` (the `call` fixture)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loss_helpers import f32
from vaco_jax import losses

log = np.log


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_sapo_gates_each_ratio_with_its_advantages_temperature(call):
    ratio, adv = f32(1.5, 0.5, 1.0), f32(1.0, -1.0, 2.0)
    # tau 1 for A > 0, 2 for A < 0: f = 4/tau sigmoid(tau (r - 1)) is 4 s(0.5) = 2.490,
    # 2 s(-1) = 0.538 and 4 s(0) = 2; the loss -f A per element is -2.490, +0.538, -4.
    gates = np.array([4 * _sigmoid(0.5), 2 * _sigmoid(-1.0), 2.0])
    loss, metrics = call(losses.sapo_loss, log(ratio), adv, 1.0, 2.0, aggregation="token-mean")
    np.testing.assert_allclose(loss, -(gates * adv).mean(), rtol=1e-5)
    assert float(loss) == pytest.approx((-2.48984 + 0.53788 - 4.0) / 3, rel=1e-4)
    # The slopes 4 s (1 - s) are 0.940, 0.786 and 1 (on-policy).
    s = np.array([_sigmoid(0.5), _sigmoid(-1.0), 0.5])
    np.testing.assert_allclose(metrics["gate_weight_mean"], (4 * s * (1 - s)).mean(), rtol=1e-5)
    # d(-f(r) A)/d log r = -A r 4 s (1 - s): on-policy that is -A, the gradient of -r A.
    grad = jax.jit(jax.grad(lambda x: losses.sapo_loss(x, adv, 1.0, 2.0,
                                                       aggregation="token-mean")[0]))(log(ratio))
    np.testing.assert_allclose(grad, -adv * ratio * 4 * s * (1 - s) / 3, rtol=1e-5)
    assert float(grad[2]) == pytest.approx(-2 / 3, rel=1e-5)


def test_sapo_defaults_to_the_mean_over_sequences(call):
    # Two sequences of 1 and 2 valid tokens, all on-policy: -2 A per token under tau = 1.
    mask = f32([1, 0], [1, 1])
    adv = f32([1.0, 1.0], [-1.0, -1.0])
    loss, _ = call(losses.sapo_loss, np.zeros((2, 2), np.float32), adv, 1.0, 1.0, mask=mask)
    assert float(loss) == pytest.approx((-2.0 + 2.0) / 2)
    loss, _ = call(losses.sapo_loss, np.zeros((2, 2), np.float32), adv * f32([1, 1], [1, 0]),
                   1.0, 1.0, mask=mask)
    assert float(loss) == pytest.approx((-2.0 + 1.0) / 2)


LOG_RATIO = np.array([[log(2.0), 0.0, 9.0], [log(0.5)] * 3, [7.0] * 3, [-0.6, 0.2, 5.0]],
                     np.float32)
MASK = f32([1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0])
SEQUENCE_ADV = f32(1.0, -1.0, 5.0, 1.0)


def test_gmpo_takes_the_geometric_mean_of_token_ratios_clipped_in_the_advantages_direction(call):
    loss, metrics = call(losses.gmpo_loss, LOG_RATIO, SEQUENCE_ADV, 0.4, mask=MASK)
    # Sequence 0 (A > 0): ln 2 capped at 0.4, mean 0.2. Sequence 1 (A < 0): each ln 0.5 floored
    # at -0.4. Sequence 2 is empty. Sequence 3 (A > 0): -0.6 is below the cap, mean -0.2.
    expected = -(np.exp(0.2) - np.exp(-0.4) + np.exp(-0.2)) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["clip_fraction"]) == pytest.approx(4 / 7)
    grad = jax.jit(jax.grad(lambda x: losses.gmpo_loss(x, SEQUENCE_ADV, 0.4, mask=MASK)[0]))(
        LOG_RATIO)
    # Clipped tokens pass nothing; the others -A exp(mean) / |y| / 3 sequences.
    expected_grad = np.zeros_like(LOG_RATIO)
    expected_grad[0, 1] = -np.exp(0.2) / 2 / 3
    expected_grad[3, :2] = -np.exp(-0.2) / 2 / 3
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    # An asymmetric range (0.1, 0.8): ln 2 is inside, ln 0.5 floored at -0.1.
    loss, metrics = call(losses.gmpo_loss, LOG_RATIO, SEQUENCE_ADV, (0.1, 0.8), mask=MASK)
    assert float(loss) == pytest.approx(-(np.sqrt(2.0) - np.exp(-0.1) + np.exp(-0.2)) / 3,
                                        rel=1e-5)
    assert float(metrics["clip_fraction"]) == pytest.approx(3 / 7)


def test_icepop_weights_keep_the_ratio_inside_the_band_and_zero_outside(call):
    w = f32(0.4, 0.5, 2.0, 5.0, 6.0)
    np.testing.assert_allclose(call(losses.masked_is_weights, log(w), 0.5, 5.0),
                               [0.0, 0.5, 2.0, 5.0, 0.0], rtol=1e-6)
    grad = jax.grad(lambda x: losses.masked_is_weights(x, 0.5, 5.0).sum())(log(w))
    np.testing.assert_array_equal(grad, 0.0)


def test_off_policy_sequence_mask_drops_negative_sequences_far_from_the_sampler(call):
    # Mean token log(beta / pi): 0.6, 1.0, 0.4, and 0.8 over the one valid token of the last
    # sequence (its masked -5 would bring the mean under 0.5).
    behaviour = f32([1.0, 0.2], [1.0, 1.0], [0.4, 0.4], [0.8, -5.0])
    mask = f32([1, 1], [1, 1], [1, 1], [1, 0])
    adv = f32(-1.0, 1.0, -1.0, -1.0)
    keep, metrics = call(losses.off_policy_sequence_mask, np.zeros((4, 2), np.float32),
                         behaviour, adv, 0.5, mask=mask)
    # The positive sequence is kept however far; the negative ones past 0.5 are dropped.
    np.testing.assert_array_equal(keep, [[0, 0], [1, 1], [1, 1], [0, 0]])
    assert float(metrics["mask_fraction"]) == pytest.approx(3 / 7)


@pytest.mark.parametrize("divergence, kept", [("k2", [1, 0, 1]), ("k3", [1, 1, 1])])
def test_trust_region_mask_rejects_a_sequence_by_its_largest_token_divergence(call, divergence,
                                                                              kept):
    # log rho per token; k2 = (log rho)^2 / 2, k3 = e^x - 1 - x. Largest k2: 0.125, 0.5 (the
    # -1.0), 0.32 (the masked -3.0 left out); largest k3: 0.149, 0.368 (e^-1 at -1), 0.186.
    log_rho = f32([0.5, 0.1], [0.2, -1.0], [-0.8, -3.0])
    mask = f32([1, 1], [1, 1], [1, 0])
    keep, metrics = call(losses.trust_region_sequence_mask, log_rho, 0.4, mask=mask,
                         divergence=divergence)
    np.testing.assert_array_equal(keep, np.asarray(kept)[:, None] * mask)
    largest = {"k2": [0.125, 0.5, 0.32],
               "k3": [np.expm1(0.5) - 0.5, np.expm1(-1.0) + 1.0, np.expm1(-0.8) + 0.8]}
    assert float(metrics["max_divergence_mean"]) == pytest.approx(np.mean(largest[divergence]),
                                                                  rel=1e-5)
    # k2 rejects the second sequence's 2 of the 5 valid tokens.
    assert float(metrics["mask_fraction"]) == pytest.approx({"k2": 2 / 5, "k3": 0.0}[divergence])
    grad = jax.grad(lambda x: losses.trust_region_sequence_mask(x, 0.4, mask)[0].sum())(log_rho)
    np.testing.assert_array_equal(grad, 0.0)
    with pytest.raises(ValueError, match="unknown divergence 'kl'"):
        losses.trust_region_sequence_mask(log_rho, 0.4, divergence="kl")


def test_covariance_selection_picks_the_largest_centred_covariances(call):
    log_prob = f32([-1.0, -2.0], [-0.5, -3.0])
    adv = f32([1.0, 1.0], [-1.0, -1.0])
    # Means 0 and -1.625: covariances 0.625, -0.375, -1.125, 1.375; half of 4 tokens is 2.
    np.testing.assert_array_equal(call(losses.covariance_top_mask, log_prob, adv, 0.5),
                                  [[1, 0], [0, 1]])
    # A tiny share still selects one token.
    np.testing.assert_array_equal(call(losses.covariance_top_mask, log_prob, adv, 0.002),
                                  [[0, 0], [0, 1]])
    # Means over the valid tokens only: 1/3 and -7/6, covariances 0.11, -0.56, -0.89.
    mask = f32([1, 1], [1, 0])
    np.testing.assert_array_equal(call(losses.covariance_top_mask, log_prob, adv, 0.5, mask),
                                  [[1, 0], [0, 0]])


def test_kl_cov_penalises_only_the_selected_tokens(call):
    log_prob = f32([-1.0, -2.0], [-0.5, -3.0])  # selects (0, 0) and (1, 1) at half
    adv = f32([1.0, 1.0], [-1.0, -1.0])
    log_ratio = f32([0.5, 0.0], [0.0, -0.2])
    loss, metrics = call(losses.kl_cov_loss, log_ratio, log_prob, adv, 2.0, 0.5)
    # -r A + 2 |log r| on the selected: -e^0.5 + 1, -1, +1, e^-0.2 + 0.4.
    assert float(loss) == pytest.approx((-np.exp(0.5) + 1 - 1 + 1 + np.exp(-0.2) + 0.4) / 4,
                                        rel=1e-5)
    assert float(metrics["kl_penalty_mean"]) == pytest.approx(1.4 / 4, rel=1e-5)
    grads = jax.jit(jax.grad(lambda x, lp: losses.kl_cov_loss(x, lp, adv, 2.0, 0.5)[0],
                             argnums=(0, 1)))(log_ratio, log_prob)
    np.testing.assert_allclose(grads[0], [[(2 - np.exp(0.5)) / 4, -0.25],
                                          [0.25, (np.exp(-0.2) - 2) / 4]], rtol=1e-5)
    np.testing.assert_array_equal(grads[1], 0.0)  # the selection passes no gradient
    # On-policy the penalty's gradient is 0 (its subgradient at |0|): -r A's gradient alone.
    grad = jax.grad(lambda x: losses.kl_cov_loss(x, log_prob, adv, 2.0, 0.5)[0])(
        jnp.zeros((2, 2)))
    np.testing.assert_allclose(grad, -adv / 4)


def test_sequence_losses_name_their_argument():
    with pytest.raises(AssertionError, match="advantages"):
        losses.gmpo_loss(jnp.zeros((3, 4)), jnp.ones((3, 4)), 0.4)
    with pytest.raises(AssertionError, match="advantages"):
        losses.off_policy_sequence_mask(jnp.zeros((3, 4)), jnp.zeros((3, 4)), jnp.ones(4), 0.5)
    with pytest.raises(AssertionError, match="behaviour_log_prob"):
        losses.off_policy_sequence_mask(jnp.zeros((3, 4)), jnp.zeros((3, 3)), jnp.ones(3), 0.5)
