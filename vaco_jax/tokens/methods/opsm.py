"""Off-policy sequence masking (DeepSeek-AI 2025, DeepSeek-V3.2): GRPO with every
negative-advantage sequence dropped whose mean token log(beta / pi_theta) exceeds `opsm_delta`,
so that the sequences that most mislead the update, stale and bad, do not push it. Averaged per
answer, then over answers, as the paper's objective writes it (1/G sum_i 1/|o_i| sum_t). One
file holds the method whole: its knob, its surrogate and its registry entry."""

from __future__ import annotations

import jax

from vaco_jax import losses
from vaco_jax.core import phase
from vaco_jax.core.knobs import Knob
from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import (CLIP_EPS, CLIP_FRACTION, IS_MASKED, TokenTerms, _kept,
                                        _ppo_clip, group_relative)

# DeepSeek-V3.2 gives no value; TRL's suggested start.
OPSM_DELTA = Knob("opsm_delta", 0.5, "opsm: the mean per-token log(beta/pi_theta), in nats, past "
                  "which a negative sequence is dropped", "[0, inf)")


def opsm(t: TokenTerms, hp):
    keep, masked = losses.off_policy_sequence_mask(
        jax.lax.stop_gradient(t.log_prob), t.behaviour_log_prob, t.advantages, hp.opsm_delta,
        t.mask)
    # A dropped sequence still counts among the answers averaged, as the paper's 1/G does.
    loss, metrics = _ppo_clip(t, hp, weights=keep)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_masked_fraction": masked["mask_fraction"], phase.KEPT: _kept(keep, t)}


ENTRY = TokenAlgorithm(
    "opsm", group_relative, opsm, knobs=(CLIP_EPS, OPSM_DELTA),
    metrics=(CLIP_FRACTION, IS_MASKED),
    aggregation="seq-mean-token-mean",
    description="GRPO with every negative-advantage sequence dropped whose mean token "
                "log(beta/pi_theta) exceeds opsm_delta, averaged per answer then over answers",
    source="DeepSeek-AI 2025 (DeepSeek-V3.2, off-policy sequence masking)")
