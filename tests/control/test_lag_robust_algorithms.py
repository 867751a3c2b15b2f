"""The control registry's lag-robust methods of 2025-26 (`sapo`, `icepop`, `kl_cov`): the ratio
each reads, by hand; on-policy each steps as PPO; refused thresholds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.algorithms import ALGORITHMS, GAE, PolicyTerms
from vaco_jax.control.config import ControlHParams, validate
from vaco_jax.control.train import METRICS, algorithm_mechanisms
from engine_configs import TOY

ADVANTAGES = jnp.array([1.0, 1.0, -1.0, -2.0])


def _terms(log_prob, behaviour, phase):
    return PolicyTerms(log_prob=jnp.asarray(log_prob, jnp.float32),
                       behaviour_log_prob=jnp.asarray(behaviour, jnp.float32),
                       phase_log_prob=jnp.asarray(phase, jnp.float32), advantages=ADVANTAGES,
                       tv_log_rho=jnp.zeros(4), tv=None, kl_coef=jnp.asarray(0.0))


def _loss_and_grad(algo, terms, **hparams):
    hp = ControlHParams.create(**hparams)
    fn = lambda lp: ALGORITHMS[algo].policy_loss(terms.replace(log_prob=lp), hp)  # noqa: E731
    (loss, metrics), grad = jax.value_and_grad(fn, has_aux=True)(terms.log_prob)
    return float(loss), np.asarray(grad), metrics


def test_icepop_clips_the_phase_ratio_and_masks_the_staleness_outside_its_band():
    # Staleness pi_T/beta = 0.4, 2, 1, 6: weights 0, 2, 1, 0. Phase ratios 1, 1.5, 1, 1: the
    # second (A > 0) is clipped at 1.2.
    staleness = np.array([0.4, 2.0, 1.0, 6.0])
    log_prob = np.log([1.0, 1.5, 1.0, 1.0])
    loss, grad, metrics = _loss_and_grad("icepop", _terms(log_prob, -np.log(staleness),
                                                          np.zeros(4)))
    assert loss == pytest.approx(-(0.0 + 2 * 1.2 - 1.0 + 0.0) / 4, rel=1e-5)
    np.testing.assert_allclose(grad, [0, 0, 0.25, 0], atol=1e-7)
    assert float(metrics["is_masked_fraction"]) == pytest.approx(0.5)
    assert float(metrics["clip_fraction"]) == pytest.approx(0.25)


def test_sapo_and_kl_cov_read_the_behaviour_ratio():
    # pi_theta = pi_T, the behaviour ratios 2, 1, 1, 0.5.
    behaviour = -np.log([2.0, 1.0, 1.0, 0.5])
    terms = _terms(np.zeros(4), behaviour, np.zeros(4))
    loss, _, metrics = _loss_and_grad("sapo", terms, sapo_tau_pos=1.0, sapo_tau_neg=2.0)
    s = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    gates = np.array([4 * s(1.0), 2.0, 2 * s(0.0), 2 * s(-1.0)])  # 4/tau s(tau (r - 1))
    assert loss == pytest.approx(-(gates * np.asarray(ADVANTAGES)).mean(), rel=1e-5)
    slopes = [4 * s(1.0) * s(-1.0), 1.0, 1.0, 4 * s(-1.0) * s(1.0)]
    assert float(metrics["gate_weight_mean"]) == pytest.approx(np.mean(slopes), rel=1e-5)
    # All four samples selected: the penalty is |log r| on each, ln 2 twice.
    _, _, metrics = _loss_and_grad("kl_cov", terms, kl_cov_fraction=1.0, kl_cov_coef=1.0)
    assert float(metrics["kl_penalty_mean"]) == pytest.approx(2 * np.log(2.0) / 4, rel=1e-5)


@pytest.mark.parametrize("algo", ["sapo", "icepop", "kl_cov"])
def test_on_policy_the_new_methods_step_as_ppo(algo):
    # pi_theta = pi_T = beta: every ratio is 1, SAPO's slope is 1, nothing is masked and
    # KL-Cov's penalty has zero gradient.
    log_prob = np.log([0.3, 0.6, 0.2, 0.9])
    terms = _terms(log_prob, log_prob, log_prob)
    _, expected, _ = _loss_and_grad("ppo", terms)
    _, grad, _ = _loss_and_grad(algo, terms, kl_cov_fraction=0.5)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)
    assert ALGORITHMS[algo].advantages is GAE


def test_their_stabilisers_are_recorded_and_nan_elsewhere():
    assert {"gate_weight_mean", "kl_penalty_mean", "is_masked_fraction"} <= set(METRICS)
    # IcePop's mask can drop every sample: such a step is skipped, and counted.
    assert algorithm_mechanisms("icepop") == {"clip_fraction", "is_masked_fraction",
                                              "skipped_step_fraction"}
    assert algorithm_mechanisms("sapo") == algorithm_mechanisms("kl_cov") == frozenset()


@pytest.mark.parametrize("hparams,message", [
    ({"sapo_tau_pos": 0.0}, r"sapo_tau_pos must lie in \(0, inf\)"),
    ({"icepop_low": 1.5}, r"icepop_low must lie in \[0, 1\]"),
    ({"icepop_high": 0.5}, r"icepop_high must lie in \[1, inf\)"),
    ({"kl_cov_coef": -1.0}, r"kl_cov_coef must lie in \[0, inf\)"),
    ({"kl_cov_fraction": 1.5}, r"kl_cov_fraction must lie in \(0, 1\]"),
])
def test_bad_thresholds_fail_before_compilation(hparams, message):
    with pytest.raises(ValueError, match=message):
        validate(TOY.replace(algo="icepop"), ControlHParams.create(**hparams))
