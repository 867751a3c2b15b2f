"""Registry entries that differ only in which ratio they clip."""

import jax.numpy as jnp
import numpy as np

from vaco_jax import losses
from vaco_jax.algorithms import ALGORITHMS, PolicyTerms
from vaco_jax.config import HParams


def _terms(behaviour_log_prob, phase_log_prob):
    log_prob = jnp.log(jnp.array([1.0, 1.5, 0.7, 1.1]))
    return PolicyTerms(log_prob=log_prob, behaviour_log_prob=behaviour_log_prob,
                       phase_log_prob=phase_log_prob,
                       advantages=jnp.array([1.0, 1.0, -1.0, -2.0]),
                       tv_log_rho=jnp.zeros(4), tv=None, kl_coef=jnp.asarray(0.0))


def test_ppo_recompute_clips_the_phase_ratio_and_ppo_the_behaviour_ratio():
    hp = HParams.create(clip_eps=0.2)
    # Ratios pi_theta/beta = (1, 1.5, 0.7, 1.1) and pi_theta/pi_T = (0.5, 1, 1.4, 1.1).
    behaviour = jnp.zeros(4)
    phase = jnp.log(jnp.array([2.0, 1.5, 0.5, 1.0]))
    terms = _terms(behaviour, phase)
    recompute, recompute_metrics = ALGORITHMS["ppo_recompute"].policy_loss(terms, hp)
    ppo, ppo_metrics = ALGORITHMS["ppo"].policy_loss(terms, hp)
    # Hand-computed: -mean(min(r A, clip(r) A)).
    np.testing.assert_allclose(recompute, -np.mean([0.5, 1.0, -1.4, -2.2]), rtol=1e-6)
    np.testing.assert_allclose(ppo, -np.mean([1.0, 1.2, -0.8, -2.2]), rtol=1e-6)
    np.testing.assert_allclose(recompute_metrics["clip_fraction"], 0.0)  # no zeroed gradient
    np.testing.assert_allclose(ppo_metrics["clip_fraction"], 0.5)  # 1.5 (A > 0), 0.7 (A < 0)
    # Swapping the two old log-probs swaps the losses: nothing but the clipped ratio differs.
    swapped, _ = ALGORITHMS["ppo"].policy_loss(_terms(phase, behaviour), hp)
    np.testing.assert_allclose(swapped, recompute, rtol=1e-6)
    np.testing.assert_allclose(
        recompute, losses.ppo_clip_loss(terms.log_prob - phase, terms.advantages, 0.2)[0], rtol=1e-6)
    assert ALGORITHMS["ppo_recompute"].advantages == ALGORITHMS["ppo"].advantages == "gae"
