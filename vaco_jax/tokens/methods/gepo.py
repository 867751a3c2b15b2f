"""GEPO, Group Expectation Policy Optimization (arXiv 2508.17850), as its authors' code runs it
(`loss_type = "gepo"` in HeteroRL's `online_rl.py`): each answer's length-normalised probability
under the learner, `p_i = exp(mean_t log pi_theta)`, over the group's expectation of the
sampler's, `E_q[q] = sum_j q_j^2 / sum_j q_j` with `q_j = exp(mean_t log beta)`, PPO-clipped as
one sequence weight and averaged over answers. Dividing by a group expectation rather than each
answer's own `q_i` keeps the weight's variance bounded when the sampler is far behind. One file
holds the method whole: its surrogate and its entry."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.tokens.entry import TokenAlgorithm
from vaco_jax.tokens.surrogates import CLIP_EPS, CLIP_FRACTION, TokenTerms, group_relative


def _mean_log_prob(log_prob: jax.Array, valid: jax.Array) -> jax.Array:
    return jnp.where(valid, log_prob, 0.0).sum(-1) / jnp.maximum(valid.sum(-1), 1)


def group_expectation_weights(t: TokenTerms) -> jax.Array:
    """`p_i / E_q[q]` per answer, the expectation over the answer's prompt group."""
    valid = t.mask > 0
    learner = jnp.exp(_mean_log_prob(t.log_prob, valid))
    sampler = jax.lax.stop_gradient(jnp.exp(_mean_log_prob(t.behaviour_log_prob, valid)))
    squares = jax.ops.segment_sum(sampler ** 2, t.group, t.num_groups)
    totals = jax.ops.segment_sum(sampler, t.group, t.num_groups)
    return learner / (squares / jnp.maximum(totals, jnp.finfo(sampler.dtype).tiny))[t.group]


def gepo(t: TokenTerms, hp):
    weight = group_expectation_weights(t)
    clipped = jnp.clip(weight, 1 - hp.clip_eps, 1 + hp.clip_eps)
    advantages = jax.lax.stop_gradient(t.advantages)
    per_answer = -jnp.minimum(weight * advantages, clipped * advantages)
    answered = (t.mask > 0).any(-1)
    count = jnp.maximum(answered.sum(), 1)
    bounded = jax.lax.stop_gradient(weight * advantages > clipped * advantages)
    return (jnp.where(answered, per_answer, 0.0).sum() / count,
            {"clip_fraction": jnp.where(answered, bounded, False).sum() / count})


ENTRY = TokenAlgorithm(
    "gepo", group_relative, gepo, knobs=(CLIP_EPS,), metrics=(CLIP_FRACTION,),
    description="PPO-clip on each answer's exp(mean_t log pi_theta) over its group's expectation "
                "of the sampler's, sum q^2 / sum q, averaged over answers",
    source="GEPO (arXiv 2508.17850), as the authors' HeteroRL code runs it")
