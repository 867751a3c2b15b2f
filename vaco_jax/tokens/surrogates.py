"""The token testbed's advantages and policy surrogates: what each algorithm of the registry
(`vaco_jax.tokens.algorithms`) composes. A surrogate receives `TokenTerms`, the per-token
quantities every surrogate may need, and returns its loss and the stabiliser metrics it
measured; an advantage function receives `AdvantageInputs`, one row per prompt group.

Ratios, as they are named below:
- the behaviour ratio `pi_theta / beta`: learner over the policy that generated the token (stale
  by the generator's lag, and in bfloat16 under `bf16_behaviour`);
- the phase ratio `pi_theta / pi_T`, `pi_T` being the learner at the start of the phase;
- the staleness `pi_T / beta`, the behaviour ratio at the phase's first step;
- the trust-region ratio `pi_theta / reference` of `vaco` (the authors' TVPO), `grpo_tv_filter`
  and `dppo_*`, the reference being `tv_reference`: beta by default (the authors' bypass mode),
  or pi_T, refused at one gradient step per version, where that ratio is 1.

VCPO (`vcpo`, and its ablations `vcpo_ess_only` and `vcpo_opob_only`) computes its advantages once
per phase, at `pi_T`: the off-policy optimal baseline weighs each sequence by its squared
staleness times the squared norm of its log-probability gradient at `pi_T`. With the token
default of 1 epoch x 1 minibatch that is VCPO's own rule (norms at the parameters being
updated); with more steps per phase the later steps reuse the phase-start norms, an
approximation (exact per-step norms would need minibatches that keep whole groups together).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax import estimators, losses
from vaco_jax.core import phase
from vaco_jax.core.knobs import Knob, Metric


@struct.dataclass
class TokenTerms:
    """Per-token inputs of a surrogate, `[N, L]` (advantages `[N]`, one per sequence)."""

    log_prob: jax.Array  # under the current parameters (differentiable)
    behaviour_log_prob: jax.Array
    phase_log_prob: jax.Array
    advantages: jax.Array  # [N]
    mask: jax.Array  # 1 for a valid response token
    version_gap: jax.Array  # versions between the phase's learner and each token's behaviour
    group: jax.Array | None = None  # [N] int32, each sequence's prompt group
    reward: jax.Array | None = None  # [N]
    reference_log_prob: jax.Array | None = None  # under the warm start, for algorithms that read it
    num_groups: int = struct.field(pytree_node=False, default=1)
    aggregation: str = struct.field(pytree_node=False, default="token-mean")
    is_level: str = struct.field(pytree_node=False, default="token")
    rollout_is: str = struct.field(pytree_node=False, default="none")
    tv_reference: str = struct.field(pytree_node=False, default="behaviour")
    tv_scope: str = struct.field(pytree_node=False, default="prompt")
    tv_delta_convention: str = struct.field(pytree_node=False, default="budget")

    @property
    def token_advantages(self) -> jax.Array:
        return jnp.broadcast_to(self.advantages[:, None], self.log_prob.shape)

    @property
    def behaviour_log_ratio(self) -> jax.Array:
        return self.log_prob - self.behaviour_log_prob

    @property
    def phase_log_ratio(self) -> jax.Array:
        return self.log_prob - self.phase_log_prob

    @property
    def log_staleness(self) -> jax.Array:
        return self.phase_log_prob - self.behaviour_log_prob

    @property
    def trust_log_prob(self) -> jax.Array:
        """Log-probs of the policy a trust region measures the learner against
        (`tv_reference`)."""
        return self.phase_log_prob if self.tv_reference == "phase" else self.behaviour_log_prob

    @property
    def trust_log_ratio(self) -> jax.Array:
        """Stop-gradient `log(pi_theta / reference)`, 0 on invalid tokens."""
        return jax.lax.stop_gradient(
            jnp.where(self.mask > 0, self.log_prob - self.trust_log_prob, 0.0))


@dataclasses.dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage function may read, one row per prompt group: `[P, G]`."""

    reward: jax.Array
    log_staleness: jax.Array  # each sequence's summed log(pi_T / beta)
    scale_by_std: bool  # `TokenConfig.scale_advantages_by_std`
    # `() -> [P, G]` squared norms of each sequence's summed log-prob gradient at `pi_T`;
    # computed only when called.
    sequence_grad_sq_norms: Callable[[], jax.Array]


AdvantageFn = Callable[[AdvantageInputs], jax.Array]
PolicyLoss = Callable[[TokenTerms, Any], tuple[jax.Array, dict]]  # (terms, TokenHParams)

# ---------------------------------------------------------------------------- knobs
CLIP_EPS = Knob("clip_eps", 0.2, "PPO's clip range of the ratio, [1 - eps, 1 + eps]", "(0, inf)")
IS_CAP = Knob("is_cap", 2.0, "the truncation cap of tis, decoupled_ppo and the rollout "
              "correction of gspo and cispo (verl's rollout_is_threshold 2.0); mis: the upper "
              "bound", "[1, inf)")
MIS_LOW = Knob("mis_low", 0.0, "mis: the lower bound of the kept ratios", "[0, 1]")
FRESHNESS_ALPHA = Knob("freshness_alpha", 1.0, "freshness: the oldest version gap kept",
                       "[0, inf)")
M2PO_TAU = Knob("m2po_tau", 0.04, "m2po: the second-moment budget", "(0, inf)")
GSPO_CLIP_LOW = Knob("gspo_clip_low", 3e-4, "gspo: the sequence ratio's clip below 1", "(0, 1]")
GSPO_CLIP_HIGH = Knob("gspo_clip_high", 4e-4, "gspo: the sequence ratio's clip above 1",
                      "(0, inf)")
CISPO_EPS_LOW = Knob("cispo_eps_low", 1.0, "cispo: the weight's clip range [1 - low, ...]",
                     "[0, 1]")
CISPO_EPS_HIGH = Knob("cispo_eps_high", 1.0, "cispo: ... [..., 1 + high]", "(0, inf)")
BAPO_POSITIVE_SHARE = Knob("bapo_positive_share", 0.4, "bapo: the target share of positive "
                           "tokens' gradient", "(0, 1]")
BAPO_LOW_START = Knob("bapo_low_start", 0.6, "bapo: where the lower ratio bound's path starts",
                      "(0, 1]", at_most="bapo_low_end")
BAPO_LOW_END = Knob("bapo_low_end", 0.9, "bapo: where it ends", "(0, 1]")
BAPO_HIGH_START = Knob("bapo_high_start", 1.2, "bapo: where the upper ratio bound's path "
                       "starts", "[1, inf)", at_most="bapo_high_end")
BAPO_HIGH_END = Knob("bapo_high_end", 3.0, "bapo: where it ends", "[1, inf)")
TV_DELTA = Knob("tv_delta", 0.015, "vaco, grpo_tv_filter: the TV budget, read under "
                "`tv_delta_convention`; TVPO's language-model budget (`losses.TV_BUDGETS` names "
                "the authors' values)", "[0, 2]", named=losses.TV_BUDGETS)  # an L1 budget <= 2
# The authors' scripts set 10000, which leaves the weight untruncated in practice.
TRUST_IS_CAP = Knob("trust_is_cap", 1e4, "vaco, dppo_*: the cap C of their truncated-IS weight "
                    "sg(min(r, C))", "[1, inf)")
DPPO_DELTA_LOW = Knob("dppo_delta_low", 0.15, "dppo_binary_tv: how far p may fall (A <= 0) past "
                      "its old value", "[0, 1]")
DPPO_DELTA_HIGH = Knob("dppo_delta_high", 0.15, "dppo_binary_tv: how far p may rise (A > 0)",
                       "[0, 1]")
DPPO_KL_DELTA = Knob("dppo_kl_delta", 0.05, "dppo_binary_kl: the bound of "
                     "KL(Bernoulli(p_old) || Bernoulli(p))", "[0, inf)")
# TBA's GSM8K launch script: 0.014 to 0.004 over 500 updates; tba_beta_final = tba_beta holds
# it constant, as every result committed before 2026-11-28 did.
TBA_BETA = Knob("tba_beta", 0.014, "tba: the KL coefficient beta of trajectory balance at the "
                "start (rewards are divided by it)", "(0, inf)")
TBA_BETA_FINAL = Knob("tba_beta_final", 0.004, "tba: beta after its linear decay", "(0, inf)")
TBA_BETA_DECAY_UPDATES = Knob("tba_beta_decay_updates", 500.0, "tba: the updates over which "
                              "beta decays", "(0, inf)")
# Not `is_cap`: VCPO's sequence weight is a product over tokens and its paper caps it at 8,
# while `is_cap` bounds the token weights of tis / mis / decoupled_ppo at 2.
VCPO_IS_CAP = Knob("vcpo_is_cap", 8.0, "vcpo*: the cap C of the sequence importance weight",
                   "[1, inf)")
ESS_TARGET = Knob("ess_target", 1.0, "vcpo, vcpo_ess_only: the ESS ratio below which the step "
                  "shrinks (VCPO's ess_0)", "(0, 1]")

# ---------------------------------------------------------------------------- metrics
CLIP_FRACTION = Metric("clip_fraction", "valid tokens (sequences for gspo and gepo) whose "
                       "gradient a clip zeroes or bounds")
IS_WEIGHT_MEAN = Metric("is_weight_mean", "the mean importance weight applied (truncated, "
                        "masked or tapered)")
IS_TRUNCATED = Metric("is_truncated_fraction", "valid tokens (sequences for vcpo) whose weight "
                      "hits its cap")
IS_MASKED = Metric("is_masked_fraction", "valid tokens a mask drops (mis, m2po_drop, dppo_*)")
IS_TAPERED = Metric("is_tapered_fraction", "valid tokens whose weight TOPR's taper sets below 1")
STALE_DROPPED = Metric("stale_dropped_fraction", "valid tokens of sequences older than "
                       "`freshness_alpha` versions (freshness_mask), or the generations refused "
                       "at collection as that stale (freshness)")
FILTER_FRACTION = Metric("filter_fraction", "valid tokens VACO's (TVPO's) TV filter drops")
BAPO_RATIO_LOW = Metric("bapo_ratio_low", "the lower ratio bound BAPO chose")
BAPO_RATIO_HIGH = Metric("bapo_ratio_high", "the upper ratio bound BAPO chose")


# ---------------------------------------------------------------------------- advantages
def group_relative(inputs: AdvantageInputs) -> jax.Array:
    """GRPO's `(R - mean) / (std + eps)`, or the centred reward without std scaling."""
    return estimators.group_relative_advantages(inputs.reward, scale_by_std=inputs.scale_by_std)


def group_centred(inputs: AdvantageInputs) -> jax.Array:
    """`R - mean_group(R)`: the group-mean baseline, no std scaling (Dr. GRPO, REINFORCE)."""
    return estimators.group_relative_advantages(inputs.reward, scale_by_std=False)


def off_policy_optimal(inputs: AdvantageInputs) -> jax.Array:
    """VCPO's `(R - b) / std_group(R)`, `b = sum W R / sum W` per group with
    `W = w^2 ||grad log pi_T(y)||^2` and `w = pi_T(y) / beta(y)` untruncated, as VCPO's paper
    defines it (`estimators.opob_advantages`). Always divided by the population std, VCPO's
    normalisation, whatever `scale_advantages_by_std` says."""
    return estimators.opob_advantages(inputs.reward, inputs.log_staleness,
                                      inputs.sequence_grad_sq_norms())


def leave_one_out(inputs: AdvantageInputs) -> jax.Array:
    """RLOO: `R_i - mean_{j != i} R_j`, which is `G / (G - 1)` times the centred reward."""
    group_size = inputs.reward.shape[-1]
    return group_centred(inputs) * (group_size / (group_size - 1))


# ---------------------------------------------------------------------------- helpers
def _importance_log_weights(t: TokenTerms, log_ratio: jax.Array) -> jax.Array:
    """Stop-gradient log weights per token, or each sequence's summed log-ratio on its tokens."""
    log_ratio = jax.lax.stop_gradient(jnp.where(t.mask > 0, log_ratio, 0.0))
    if t.is_level == "sequence":
        return jnp.broadcast_to(log_ratio.sum(axis=-1, keepdims=True), log_ratio.shape)
    return log_ratio


def _fraction(condition: jax.Array, t: TokenTerms) -> jax.Array:
    return losses.aggregate(condition.astype(jnp.float32), t.mask)


def _kept(keep: jax.Array, t: TokenTerms) -> jax.Array:
    """The valid tokens a mask `keep` leaves in the surrogate (`phase.KEPT`)."""
    return jnp.sum((keep > 0) & (t.mask > 0))


def _ppo_clip(t: TokenTerms, hp, clip_eps=None, *, mask=None, weights=None):
    """PPO-clip on the behaviour ratio, the group-relative surrogate GRPO and its kin share."""
    return losses.ppo_clip_loss(
        t.behaviour_log_ratio, t.token_advantages, hp.clip_eps if clip_eps is None else clip_eps,
        mask=t.mask if mask is None else mask, weights=weights, aggregation=t.aggregation)


def _policy_gradient(t: TokenTerms, weights=None):
    loss, _ = losses.policy_gradient_loss(t.log_prob, t.token_advantages, weights=weights,
                                          mask=t.mask, aggregation=t.aggregation)
    return loss


# ---------------------------------------------------------------------------- surrogates
def grpo(t: TokenTerms, hp):
    loss, metrics = _ppo_clip(t, hp)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def reinforce(t: TokenTerms, hp):
    return _policy_gradient(t), {}


def tis(t: TokenTerms, hp):
    log_w = _importance_log_weights(t, t.behaviour_log_ratio)
    weights = losses.truncated_is_weights(log_w, hp.is_cap)
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_truncated_fraction": _fraction(losses.exceeds_cap(log_w, hp.is_cap), t)}


def mis(t: TokenTerms, hp):
    log_w = _importance_log_weights(t, t.behaviour_log_ratio)
    weights = losses.masked_is_weights(log_w, hp.mis_low, hp.is_cap)
    # A weight inside the bounds is exp(log w) > 0, so a zero weight is exactly a masked token.
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_masked_fraction": _fraction(weights == 0, t), phase.KEPT: _kept(weights > 0, t)}


def decoupled_ppo(t: TokenTerms, hp):
    loss, metrics = losses.decoupled_ppo_loss(
        t.phase_log_ratio, t.log_staleness, t.token_advantages, hp.clip_eps,
        staleness_cap=hp.is_cap, mask=t.mask, aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_weight_mean": metrics["staleness_mean"],
                  "is_truncated_fraction": _fraction(
                      losses.exceeds_cap(t.log_staleness, hp.is_cap), t)}


def freshness_mask(t: TokenTerms, hp):
    # A sequence is as old as its oldest token (under `in_flight` later tokens are fresher).
    sequence_gap = jnp.where(t.mask > 0, t.version_gap, 0.0).max(axis=-1, keepdims=True)
    fresh = losses.freshness_mask(sequence_gap, hp.freshness_alpha) * t.mask
    loss, metrics = _ppo_clip(t, hp, mask=fresh)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "stale_dropped_fraction": _fraction(fresh == 0, t),
                  phase.KEPT: _kept(fresh, t)}


def m2po(t: TokenTerms, hp):
    """M2PO as its authors' code runs it: PPO-clip on the behaviour ratio with bounds that cap
    the harmful tokens' second moment at `m2po_tau` (`losses.m2po_clip_bounds`), solved per
    minibatch."""
    bounds, _ = losses.m2po_clip_bounds(jax.lax.stop_gradient(t.behaviour_log_ratio),
                                        t.token_advantages, hp.m2po_tau, mask=t.mask)
    loss, metrics = _ppo_clip(t, hp, bounds)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def m2po_drop(t: TokenTerms, hp):
    keep, m2 = losses.m2po_mask(jax.lax.stop_gradient(t.behaviour_log_ratio), hp.m2po_tau,
                                mask=t.mask)
    # Dropped tokens keep their place in the mean: masking removes their gradient only.
    loss, _ = losses.importance_sampled_loss(t.behaviour_log_ratio, t.token_advantages,
                                             mask=t.mask, weights=keep,
                                             aggregation=t.aggregation)
    return loss, {"is_masked_fraction": m2["mask_fraction"], phase.KEPT: _kept(keep, t)}


def topr(t: TokenTerms, hp):
    log_w = _importance_log_weights(t.replace(is_level="sequence"), t.behaviour_log_ratio)
    weights = losses.topr_weights(log_w, t.token_advantages)
    return _policy_gradient(t, weights), {"is_weight_mean": losses.aggregate(weights, t.mask),
                                          "is_tapered_fraction": _fraction(weights < 1, t)}


def phase_ratio(t: TokenTerms) -> jax.Array:
    return t.phase_log_ratio


def behaviour_ratio(t: TokenTerms) -> jax.Array:
    return t.behaviour_log_ratio


def _rollout_correction(t: TokenTerms, hp) -> tuple[jax.Array | None, dict]:
    """verl's rollout correction in its decoupled mode: the staleness `pi_T / beta` per token or
    per sequence (`rollout_is`), truncated at `is_cap`, multiplying the per-token loss; `None`
    and no metrics when `rollout_is` is `none` (verl's default)."""
    if t.rollout_is == "none":
        return None, {}
    log_w = _importance_log_weights(t.replace(is_level=t.rollout_is), t.log_staleness)
    weights = losses.truncated_is_weights(log_w, hp.is_cap)
    return weights, {"is_weight_mean": losses.aggregate(weights, t.mask),
                     "is_truncated_fraction": _fraction(losses.exceeds_cap(log_w, hp.is_cap),
                                                        t)}


def gspo(log_ratio: Callable[[TokenTerms], jax.Array]) -> PolicyLoss:
    """GSPO on the token log-ratios `log_ratio(terms)`, weighted by the rollout correction."""
    def loss(t: TokenTerms, hp):
        weights, corrected = _rollout_correction(t, hp)
        value, metrics = losses.gspo_loss(log_ratio(t), t.advantages,
                                          (hp.gspo_clip_low, hp.gspo_clip_high), mask=t.mask,
                                          weights=weights)
        return value, {"clip_fraction": metrics["clip_fraction"], **corrected}
    return loss


def cispo(log_ratio: Callable[[TokenTerms], jax.Array]) -> PolicyLoss:
    """CISPO's clipped weight on the token log-ratios `log_ratio(terms)`, times the rollout
    correction."""
    def loss(t: TokenTerms, hp):
        weights, corrected = _rollout_correction(t, hp)
        value, metrics = losses.cispo_loss(log_ratio(t), t.log_prob, t.token_advantages,
                                           hp.cispo_eps_low, hp.cispo_eps_high, mask=t.mask,
                                           weights=weights, aggregation=t.aggregation)
        return value, {"clip_fraction": metrics["clip_fraction"], **corrected}
    return loss


def bapo(t: TokenTerms, hp):
    low_eps, high_eps = losses.bapo_clip_bounds(
        jax.lax.stop_gradient(t.behaviour_log_ratio), t.token_advantages, mask=t.mask,
        positive_share=hp.bapo_positive_share, low_range=(hp.bapo_low_start, hp.bapo_low_end),
        high_range=(hp.bapo_high_start, hp.bapo_high_end))
    loss, metrics = _ppo_clip(t, hp, (low_eps, high_eps))
    return loss, {"clip_fraction": metrics["clip_fraction"], "bapo_ratio_low": 1.0 - low_eps,
                  "bapo_ratio_high": 1.0 + high_eps}


def _tv_threshold(t: TokenTerms, hp):
    return losses.tv_threshold(hp.tv_delta, t.tv_delta_convention)


def grpo_tv_filter(t: TokenTerms, hp):
    keep, filtered = losses.tv_filter_mask(t.trust_log_ratio, t.token_advantages,
                                           _tv_threshold(t, hp), t.mask)
    # Dropped tokens stay in the mean's count (the engine's `filter_normalization="all"`).
    loss, metrics = _ppo_clip(t, hp, weights=keep)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "filter_fraction": filtered["filter_fraction"], phase.KEPT: _kept(keep, t)}


def _truncated_is_policy_gradient(t: TokenTerms, hp, keep: jax.Array):
    """`-A sg(min(r, C)) log pi` on the kept tokens, `r` the trust region's ratio and `C` =
    `trust_is_cap`, dropped tokens counted in the mean: the surrogate TVPO and DPPO share."""
    log_r = t.trust_log_ratio
    weights = losses.truncated_is_weights(log_r, hp.trust_is_cap) * keep
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_truncated_fraction": _fraction(losses.exceeds_cap(log_r, hp.trust_is_cap)
                                           & (keep > 0), t),
        phase.KEPT: _kept(keep, t)}


def tvpo(t: TokenTerms, hp):
    log_rho = t.trust_log_ratio
    tv = None  # `batch`: the minibatch's token-weighted TV
    if t.tv_scope == "prompt":
        # A token is kept while the batch's TV (the mean of the group TVs) or its group's is
        # within the threshold: the filter acts where both exceed it.
        group_tv, batch_tv = losses.group_tv_estimate(log_rho, t.group, t.num_groups, t.mask)
        tv = jnp.minimum(group_tv, batch_tv)
    keep, filtered = losses.tv_filter_mask(log_rho, t.token_advantages, _tv_threshold(t, hp),
                                           t.mask, tv=tv)
    loss, metrics = _truncated_is_policy_gradient(t, hp, keep)
    return loss, {**metrics, "filter_fraction": filtered["filter_fraction"]}


def dppo(mask_fn: Callable[[TokenTerms, Any], tuple[jax.Array, dict]]) -> PolicyLoss:
    def loss(t: TokenTerms, hp):
        keep, masked = mask_fn(t, hp)
        value, metrics = _truncated_is_policy_gradient(t, hp, keep)
        return value, {**metrics, "is_masked_fraction": masked["mask_fraction"]}
    return loss


def binary_tv_mask(t: TokenTerms, hp):
    return losses.dppo_binary_tv_mask(jax.lax.stop_gradient(t.log_prob), t.trust_log_prob,
                                      t.token_advantages, hp.dppo_delta_low, hp.dppo_delta_high,
                                      t.mask)


def binary_kl_mask(t: TokenTerms, hp):
    return losses.dppo_binary_kl_mask(jax.lax.stop_gradient(t.log_prob), t.trust_log_prob,
                                      t.token_advantages, hp.dppo_kl_delta, t.mask)


def tba_beta_schedule(hp, update: jax.Array):
    """TBA's KL coefficient at `update` updates done: linear from `tba_beta` to
    `tba_beta_final` over `tba_beta_decay_updates` updates, then constant."""
    progress = jnp.clip(update / hp.tba_beta_decay_updates, 0.0, 1.0)
    return hp.replace(tba_beta=hp.tba_beta + progress * (hp.tba_beta_final - hp.tba_beta))


def tba(t: TokenTerms, hp):
    """Trajectory balance, `(log Z + log pi(y) - log p_ref(y) - R / beta)^2` per sequence, with
    log Z each prompt's VarGrad estimate: the stop-gradient mean over its samples in the
    minibatch of `R / beta - log pi(y) + log p_ref(y)`."""
    log_ratio = jnp.where(t.mask > 0, t.log_prob - t.reference_log_prob, 0.0).sum(axis=-1)
    residual = log_ratio - t.reward / hp.tba_beta
    totals = jax.ops.segment_sum(residual, t.group, t.num_groups)
    counts = jax.ops.segment_sum(jnp.ones_like(residual), t.group, t.num_groups)
    log_z = -jax.lax.stop_gradient(totals / jnp.maximum(counts, 1))[t.group]
    return jnp.mean(jnp.square(log_z + residual)), {}


def vcpo(t: TokenTerms, hp):
    loss, metrics = losses.vcpo_loss(t.phase_log_ratio, t.log_staleness, t.advantages,
                                     is_cap=hp.vcpo_is_cap, mask=t.mask,
                                     aggregation=t.aggregation)
    # VCPO truncates whole sequences, so its truncated fraction counts sequences.
    return loss, {"is_weight_mean": metrics["is_weight_mean"],
                  "is_truncated_fraction": metrics["truncated_fraction"]}
