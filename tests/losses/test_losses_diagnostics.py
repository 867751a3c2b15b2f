"""Weighted divergence estimators: exact on enumerated samples, plain means at unit weights."""

import jax.numpy as jnp
import numpy as np

from vaco_jax import losses

# Support {0, 1, 2}; the samples [0, 0, 1, 2] have exactly the behaviour policy's frequencies.
BEHAVIOUR = np.array([0.5, 0.5, 0.25, 0.25])
REFERENCE = np.array([0.2, 0.2, 0.4, 0.4])  # pi_T
POLICY = np.array([0.3, 0.3, 0.3, 0.4])  # pi_theta
LOG_RHO = jnp.log(POLICY / REFERENCE)
LOG_W = jnp.log(REFERENCE / BEHAVIOUR)


def test_weighted_tv_is_exact_on_enumerated_behaviour_samples():
    # TV(pi_theta, pi_T) = 0.5 (0.1 + 0.1 + 0) = 0.1; the plain mean over beta's samples
    # gives 0.5 mean(0.5, 0.5, 0.25, 0) = 0.15625 instead.
    np.testing.assert_allclose(losses.weighted_tv_estimate(LOG_RHO, LOG_W), 0.1, rtol=1e-6)
    np.testing.assert_allclose(losses.tv_estimate(LOG_RHO), 0.15625, rtol=1e-6)


def test_weighted_kl_is_exact_on_enumerated_behaviour_samples():
    exact = 0.2 * np.log(0.2 / 0.3) + 0.4 * np.log(0.4 / 0.3)  # KL(pi_T || pi_theta)
    np.testing.assert_allclose(losses.weighted_kl_estimate(LOG_RHO, LOG_W), exact, rtol=1e-5)


def test_unit_weights_give_the_plain_means():
    log_rho = jnp.array([0.3, -1.2, 0.0, 2.5, -0.1])
    ones = jnp.zeros(5)
    np.testing.assert_allclose(losses.weighted_tv_estimate(log_rho, ones),
                               losses.tv_estimate(log_rho), rtol=1e-6)
    np.testing.assert_allclose(losses.weighted_kl_estimate(log_rho, ones),
                               jnp.mean(jnp.expm1(log_rho) - log_rho), rtol=1e-6)
    # Self-normalised: a common shift of the log-weights changes nothing, even a huge one.
    np.testing.assert_allclose(losses.weighted_tv_estimate(log_rho, ones + 500.0),
                               losses.tv_estimate(log_rho), rtol=1e-6)


def test_median_and_p90():
    median, p90 = losses.median_and_p90(jnp.arange(11.0))
    assert float(median) == 5.0 and float(p90) == 9.0
    median, p90 = losses.median_and_p90(jnp.arange(10.0)[::-1].reshape(2, 5))
    np.testing.assert_allclose([median, p90], [4.5, 8.1], rtol=1e-6)
    np.testing.assert_allclose(losses.ratio_deviation(jnp.log(jnp.array([0.5, 1.0, 3.0]))),
                               [0.25, 0.0, 1.0], rtol=1e-6)
