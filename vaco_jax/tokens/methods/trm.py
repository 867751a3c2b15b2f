"""Trust Region Masking (Li et al. 2025, arXiv 2512.23075) as its authors' verl code runs it
(`rollout_rs="seq_max_k2"`): an answer any of whose tokens' k2 divergence between the policy the
update starts from and the sampler, `(log pi_T/beta)^2 / 2`, exceeds `trm_delta` is rejected
whole (out of the loss and of its token count), and the rest train by PPO-clip on the phase
ratio `pi_theta/pi_T`, token-mean. One file holds the method whole: its knob, its surrogate and
its registry entry."""

from __future__ import annotations

from vaco_jax import losses
from vaco_jax.core import phase
from vaco_jax.core.knobs import Knob
from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import (CLIP_EPS, CLIP_FRACTION, IS_MASKED, TokenTerms, _kept,
                                        group_relative)

# The paper gives no value we could read; verl's documented seq_max_k2 example (the authors'
# framework) sets 2.5, a token log-ratio of about 2.24 nats.
TRM_DELTA = Knob("trm_delta", 2.5, "trm: the bound on an answer's largest token "
                 "(log pi_T/beta)^2 / 2 past which it is rejected", "(0, inf)")


def trm(t: TokenTerms, hp):
    keep, masked = losses.trust_region_sequence_mask(t.log_staleness, hp.trm_delta, t.mask)
    # verl replaces the response mask by the kept one: rejected tokens leave the count too.
    loss, metrics = losses.ppo_clip_loss(t.phase_log_ratio, t.token_advantages, hp.clip_eps,
                                         mask=keep, aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_masked_fraction": masked["mask_fraction"], phase.KEPT: _kept(keep, t)}


ENTRY = TokenAlgorithm(
    "trm", group_relative, trm, knobs=(CLIP_EPS, TRM_DELTA),
    metrics=(CLIP_FRACTION, IS_MASKED),
    description="PPO-clip on the phase ratio pi_theta/pi_T over the answers whose every token "
                "keeps (log pi_T/beta)^2 / 2 within trm_delta; the others rejected whole",
    source="Li et al. 2025 (Trust Region Masking for Long-Horizon LLM RL, TRM)")
