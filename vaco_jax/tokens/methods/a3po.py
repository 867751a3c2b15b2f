"""A-3PO (arXiv 2512.06547) as AReaL runs it (`prox_logp_method = "loglinear"` under the
decoupled loss): decoupled PPO whose proximal policy is not recomputed but interpolated in log
space between the sampler and the learner by each token's staleness, `log pi_prox = log beta +
alpha (sg(log pi_theta) - log beta)` with `alpha = g / (g + 1)` for a token `g` versions behind
the phase's learner (AReaL's `(v_prox - v_behave) / (v_theta - v_behave)`, the proximal one
version behind the learner being trained). PPO-clip on `pi_theta/pi_prox`, weighted by
`pi_prox/beta`, token-mean. One file holds the method whole: its surrogate and its entry."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax import losses
from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import (CLIP_EPS, CLIP_FRACTION, IS_WEIGHT_MEAN, TokenTerms,
                                        group_relative)


def proximal_log_prob(t: TokenTerms) -> jax.Array:
    """AReaL's log-linear approximation of the proximal policy's token log-probs."""
    gap = jnp.maximum(t.version_gap, 0.0)
    alpha = gap / (gap + 1.0)
    current = jax.lax.stop_gradient(t.log_prob)
    return jax.lax.stop_gradient(
        t.behaviour_log_prob + alpha * (current - t.behaviour_log_prob))


def a3po(t: TokenTerms, hp):
    proximal = proximal_log_prob(t)
    # The paper's code applies the behaviour weight uncapped (`behav_imp_weight_cap` None).
    weights = jnp.exp(jnp.where(t.mask > 0, proximal - t.behaviour_log_prob, 0.0))
    loss, metrics = losses.ppo_clip_loss(t.log_prob - proximal, t.token_advantages,
                                         hp.clip_eps, mask=t.mask, weights=weights,
                                         aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_weight_mean": losses.aggregate(weights, t.mask)}


ENTRY = TokenAlgorithm(
    "a3po", group_relative, a3po, knobs=(CLIP_EPS,), metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN),
    description="decoupled PPO with the proximal policy interpolated, log-linearly by each "
                "token's staleness g (alpha = g / (g + 1)), between the sampler and the learner",
    source="A-3PO (arXiv 2512.06547), as AReaL's prox_logp_method='loglinear' runs it")
