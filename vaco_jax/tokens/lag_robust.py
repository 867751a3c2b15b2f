"""The token surrogates of the lag-robust methods of 2025-26 in the registry
(`vaco_jax.tokens.algorithms`): `sapo`, `gmpo`, `icepop` and `kl_cov`, each the library's
loss (`vaco_jax.losses.lag_robust`) on the ratios `TokenTerms` names.

SAPO, GMPO and KL-Cov take their ratio to verl's recomputed `old_log_prob`, the phase-start
policy `pi_T`, as the authors' code does (`sapo`, `gmpo`, `kl_cov`): at one gradient step per
version that ratio is 1 and their mechanisms act on the update alone, never on staleness. The
registry keeps the behaviour ratio `pi_theta / beta` under `sapo_behaviour`, `gmpo_behaviour`
and `kl_cov_behaviour` (the defaults before 2026-12-07). IcePop separates the two ratios, as its
paper does: its clip reads the phase ratio `pi_theta / pi_T`, its mask the staleness
`pi_T / beta`.
"""

from __future__ import annotations

from typing import Callable

import jax

from vaco_jax import losses
from vaco_jax.core import phase
from vaco_jax.core.knobs import Knob, Metric
from vaco_jax.tokens.surrogates import PolicyLoss, TokenTerms, _fraction, _kept

# GMPO's README: 0.4 both, ratios e^+-0.4.
GMPO_CLIP_LOW = Knob("gmpo_clip_low", 0.4, "gmpo: the log-ratio's clip below 0", "(0, inf)")
GMPO_CLIP_HIGH = Knob("gmpo_clip_high", 0.4, "gmpo: the log-ratio's clip above 0", "(0, inf)")

GATE_WEIGHT_MEAN = Metric("gate_weight_mean", "sapo: the mean slope of its soft gate, 1 "
                          "on-policy")
KL_PENALTY_MEAN = Metric("kl_penalty_mean", "kl_cov: the mean penalty on the tokens of largest "
                         "covariance")


def sapo(log_ratio: Callable[[TokenTerms], jax.Array]) -> PolicyLoss:
    """SAPO's soft gate on the token log-ratios `log_ratio(terms)`."""
    def loss(t: TokenTerms, hp):
        value, metrics = losses.sapo_loss(log_ratio(t), t.token_advantages, hp.sapo_tau_pos,
                                          hp.sapo_tau_neg, mask=t.mask,
                                          aggregation=t.aggregation)
        return value, {"gate_weight_mean": metrics["gate_weight_mean"]}
    return loss


def gmpo(log_ratio: Callable[[TokenTerms], jax.Array]) -> PolicyLoss:
    """GMPO's geometric mean of the token ratios `exp(log_ratio(terms))`."""
    def loss(t: TokenTerms, hp):
        value, metrics = losses.gmpo_loss(log_ratio(t), t.advantages,
                                          (hp.gmpo_clip_low, hp.gmpo_clip_high), mask=t.mask)
        return value, {"clip_fraction": metrics["clip_fraction"]}
    return loss


def icepop(t: TokenTerms, hp):
    weights = losses.masked_is_weights(t.log_staleness, hp.icepop_low, hp.icepop_high)
    loss, metrics = losses.ppo_clip_loss(t.phase_log_ratio, t.token_advantages, hp.clip_eps,
                                         mask=t.mask, weights=weights,
                                         aggregation=t.aggregation)
    # A weight inside the band is exp(log w) > 0, so a zero weight is exactly a masked token.
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_weight_mean": losses.aggregate(weights, t.mask),
                  "is_masked_fraction": _fraction(weights == 0, t),
                  phase.KEPT: _kept(weights, t)}


def kl_cov(log_ratio: Callable[[TokenTerms], jax.Array]) -> PolicyLoss:
    """KL-Cov's penalty on the token log-ratios `log_ratio(terms)`."""
    def loss(t: TokenTerms, hp):
        value, metrics = losses.kl_cov_loss(log_ratio(t), t.log_prob, t.token_advantages,
                                            hp.kl_cov_coef, hp.kl_cov_fraction, mask=t.mask,
                                            aggregation=t.aggregation)
        return value, {"kl_penalty_mean": metrics["kl_penalty_mean"]}
    return loss
