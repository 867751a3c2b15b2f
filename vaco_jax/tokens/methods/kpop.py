"""KPop (Guo, Sun et al. 2026, "Taming Training-Inference Mismatch in RL with Adaptive Masking
Regions") as AReaL runs it (`rejection_sampling.metric = "binary_kl"` under the decoupled loss):
IcePop's weighted PPO-clip with the band on the ratio replaced by a bound on the symmetric
Bernoulli KL, `max(KL_B(pi_T || beta), KL_B(beta || pi_T))` per token, each token probability
read as a Bernoulli parameter. One file holds the method whole: its knob, its surrogate and its
registry entry."""

from __future__ import annotations

import jax.numpy as jnp

from vaco_jax import losses
from vaco_jax.core import phase
from vaco_jax.core.knobs import Knob
from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import (CLIP_EPS, CLIP_FRACTION, IS_MASKED, IS_WEIGHT_MEAN,
                                        TokenTerms, _fraction, _kept, group_relative)

# AReaL's documented value and its KPop example's (`examples/math/gsm8k_kpop.yaml`).
KPOP_PHI = Knob("kpop_phi", 2.0, "kpop: the bound on a token's max(KL_B(pi_T||beta), "
                "KL_B(beta||pi_T)) past which it is masked", "(0, inf)")


def kpop(t: TokenTerms, hp):
    divergence = jnp.maximum(losses.binary_kl(t.phase_log_prob, t.behaviour_log_prob),
                             losses.binary_kl(t.behaviour_log_prob, t.phase_log_prob))
    keep = (divergence <= hp.kpop_phi) & (t.mask > 0)
    # AReaL's behaviour weight pi_T/beta, uncapped, zero where masked; the masked tokens stay
    # in the token count (the count is taken before the mask).
    weights = jnp.where(keep, jnp.exp(jnp.where(t.mask > 0, t.log_staleness, 0.0)), 0.0)
    loss, metrics = losses.ppo_clip_loss(t.phase_log_ratio, t.token_advantages, hp.clip_eps,
                                         mask=t.mask, weights=weights,
                                         aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_weight_mean": losses.aggregate(weights, t.mask),
                  "is_masked_fraction": _fraction(~keep, t), phase.KEPT: _kept(keep, t)}


ENTRY = TokenAlgorithm(
    "kpop", group_relative, kpop, knobs=(CLIP_EPS, KPOP_PHI),
    metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN, IS_MASKED),
    description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the staleness pi_T/beta, "
                "each token masked where its symmetric Bernoulli KL between pi_T and beta "
                "exceeds kpop_phi",
    source="Guo, Sun et al. 2026 (KPop: adaptive masking regions), as AReaL runs it")
