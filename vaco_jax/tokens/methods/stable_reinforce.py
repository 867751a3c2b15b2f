"""StableReinforce (R1-Reward, arXiv 2505.02835) as its authors' code runs it
(`yfzhang114/r1_reward`, an OpenRLHF fork): REINFORCE++ advantages, the rewards normalised over
the whole batch rather than per prompt, with every normalised advantage outside `mean +- 3` (the
raw mean, as the code writes it) or beyond 10 set to 0; and PPO-clip on the phase ratio
`pi_theta/pi_T` with its log pre-clipped to `+-log(1e3)` before the exponential, averaged per
answer then over answers. One file holds the method whole: its advantages, its surrogate and its
entry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax import losses
from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import (CLIP_EPS, CLIP_FRACTION, AdvantageInputs, TokenTerms)

PRE_CLIP = float(np.log(1e3))
"""The bound on `|log(pi_theta/pi_T)|` before the exponential (`PolicyLoss`'s clamp)."""
FILTER_WIDTH = 3.0
"""Normalised advantages outside `mean +- FILTER_WIDTH` are zeroed."""
FILTER_LIMIT = 10.0
"""And so is any beyond `+-FILTER_LIMIT`."""


def filtered_batch_advantages(inputs: AdvantageInputs) -> jax.Array:
    """`(R - mean) / std` over every answer of the batch, filtered as the authors' replay
    buffer's `normalize` does."""
    reward = inputs.reward
    mean = reward.mean()
    rstd = jax.lax.rsqrt(jnp.maximum(((reward - mean) ** 2).mean(), 1e-8))
    normalised = (reward - mean) * rstd + 1e-8
    outside = ((normalised < mean - FILTER_WIDTH) | (normalised > mean + FILTER_WIDTH)
               | (jnp.abs(normalised) > FILTER_LIMIT) | ~jnp.isfinite(normalised))
    return jnp.where(outside, 0.0, normalised)


def stable_reinforce(t: TokenTerms, hp):
    log_ratio = jnp.clip(t.phase_log_ratio, -PRE_CLIP, PRE_CLIP)
    loss, metrics = losses.ppo_clip_loss(log_ratio, t.token_advantages, hp.clip_eps,
                                         mask=t.mask, aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


ENTRY = TokenAlgorithm(
    "stable_reinforce", filtered_batch_advantages, stable_reinforce, knobs=(CLIP_EPS,),
    metrics=(CLIP_FRACTION,), aggregation="seq-mean-token-mean",
    description="batch-normalised REINFORCE++ advantages with those outside mean +- 3 zeroed, "
                "PPO-clip on the phase ratio with log r pre-clipped to +-log 1e3, averaged per "
                "answer then over answers",
    source="Zhang et al. 2025 (R1-Reward, StableReinforce), as its authors' code runs it")
