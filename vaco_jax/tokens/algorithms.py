"""The token testbed's algorithm registry: each algorithm is a small composition of library pieces.

A `TokenAlgorithm` names how the group's rewards become advantages and its policy surrogate
(with any stabiliser inside it). The trainer hands the surrogate `TokenTerms`, the per-token
quantities every surrogate may need, and records the stabiliser metrics it returns (see
`STABILISER_METRICS`). Adding an algorithm is one entry in `ALGORITHMS`; the engine's registry
(`vaco_jax.control.algorithms`) is separate because its surrogates see `[T, B]` control batches with a
critic.

Ratios, as they are named below:
- the behaviour ratio `pi_theta / beta`: learner over the policy that generated the token (stale
  by the generator's lag, and in bfloat16 under `bf16_behaviour`);
- the phase ratio `pi_theta / pi_T`, `pi_T` being the learner at the start of the phase;
- the staleness `pi_T / beta`, the behaviour ratio at the phase's first step;
- the trust-region ratio `pi_theta / reference` of `vaco` (the authors' TVPO), `grpo_tv_filter`
  and `dppo_*`, the reference being `tv_reference`: beta by default (the authors' bypass mode),
  or pi_T, refused at one gradient step per version, where that ratio is 1.

Hooks for algorithms that need more (VCPO): an entry's `advantages` receives `AdvantageInputs`,
which carries each sequence's log staleness and, on demand, the squared norms of each sequence's
log-probability gradient (an off-policy optimal baseline needs them); `ess_scaling=True` scales
every optimiser step by `sqrt(min(1, ess / ess_target))` (`losses.scale_by_ess`), `ess` being the
minibatch's ESS ratio of the sequence staleness weights `pi_T / beta`.

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

IS_LEVELS = ("token", "sequence")
TV_REFERENCES = ("behaviour", "phase")
TV_SCOPES = ("prompt", "batch")

# Metrics a stabiliser makes meaningful, recorded per update for every algorithm (NaN where the
# algorithm has no such quantity) so that every program writes the same columns.
STABILISER_METRICS = (
    "clip_fraction",  # valid tokens (sequences for gspo) whose gradient a clip zeroes or bounds
    "is_weight_mean",  # mean importance weight applied (truncated, masked or tapered)
    "is_truncated_fraction",  # valid tokens (sequences for vcpo) whose weight hits its cap
    "is_masked_fraction",  # valid tokens a mask drops (mis, m2po, dppo_*)
    "stale_dropped_fraction",  # valid tokens of sequences older than `freshness_alpha` versions
    "filter_fraction",  # valid tokens VACO's (TVPO's) TV filter drops
    "bapo_ratio_low",  # the ratio bounds BAPO chose
    "bapo_ratio_high",
)


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


@dataclasses.dataclass(frozen=True)
class TokenAlgorithm:
    name: str
    advantages: AdvantageFn
    policy_loss: PolicyLoss
    description: str
    source: str
    hparams: tuple[str, ...]  # the traced `TokenHParams` its loss reads (beyond the optimiser's)
    # Overrides `TokenConfig.aggregation` where the algorithm defines its own normalisation.
    aggregation: str | None = None
    ess_scaling: bool = False
    # Its trust region measures pi_theta against `tv_reference`: with `phase` and one gradient
    # step per version that ratio is exactly 1, so the configuration is refused.
    trust_region_ratio: bool = False
    needs_reference: bool = False  # reads the reference policy's log-probs (the warm start)


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
def _grpo(t: TokenTerms, hp):
    loss, metrics = _ppo_clip(t, hp)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def _reinforce(t: TokenTerms, hp):
    return _policy_gradient(t), {}


def _tis(t: TokenTerms, hp):
    log_w = _importance_log_weights(t, t.behaviour_log_ratio)
    weights = losses.truncated_is_weights(log_w, hp.is_cap)
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_truncated_fraction": _fraction(losses.clamped_ratio(log_w) > hp.is_cap, t)}


def _mis(t: TokenTerms, hp):
    log_w = _importance_log_weights(t, t.behaviour_log_ratio)
    keep = losses.masked_is_mask(log_w, hp.mis_low, hp.is_cap)
    weights = losses.clamped_ratio(log_w) * keep
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_masked_fraction": _fraction(keep == 0, t)}


def _decoupled_ppo(t: TokenTerms, hp):
    loss, metrics = losses.decoupled_ppo_loss(
        t.phase_log_ratio, t.log_staleness, t.token_advantages, hp.clip_eps,
        staleness_cap=hp.is_cap, mask=t.mask, aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "is_weight_mean": metrics["staleness_mean"],
                  "is_truncated_fraction": _fraction(
                      losses.clamped_ratio(t.log_staleness) > hp.is_cap, t)}


def _freshness(t: TokenTerms, hp):
    # A sequence is as old as its oldest token (under `in_flight` later tokens are fresher).
    sequence_gap = jnp.where(t.mask > 0, t.version_gap, 0.0).max(axis=-1, keepdims=True)
    fresh = losses.freshness_mask(sequence_gap, hp.freshness_alpha) * t.mask
    loss, metrics = _ppo_clip(t, hp, mask=fresh)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "stale_dropped_fraction": _fraction(fresh == 0, t)}


def _m2po(t: TokenTerms, hp):
    keep, m2 = losses.m2po_mask(jax.lax.stop_gradient(t.behaviour_log_ratio), hp.m2po_tau,
                                mask=t.mask)
    # Dropped tokens keep their place in the mean: masking removes their gradient only.
    loss, _ = losses.importance_sampled_loss(t.behaviour_log_ratio, t.token_advantages,
                                             mask=t.mask, weights=keep,
                                             aggregation=t.aggregation)
    return loss, {"is_masked_fraction": m2["mask_fraction"]}


def _topr(t: TokenTerms, hp):
    log_w = _importance_log_weights(t.replace(is_level="sequence"), t.behaviour_log_ratio)
    weights = losses.topr_weights(log_w, t.token_advantages)
    return _policy_gradient(t, weights), {"is_weight_mean": losses.aggregate(weights, t.mask)}


def _gspo(t: TokenTerms, hp):
    loss, metrics = losses.gspo_loss(t.behaviour_log_ratio, t.advantages,
                                     (hp.gspo_clip_low, hp.gspo_clip_high), mask=t.mask)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def _cispo(t: TokenTerms, hp):
    loss, metrics = losses.cispo_loss(t.behaviour_log_ratio, t.log_prob, t.token_advantages,
                                      hp.cispo_eps_low, hp.cispo_eps_high, mask=t.mask,
                                      aggregation=t.aggregation)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def _bapo(t: TokenTerms, hp):
    low_eps, high_eps = losses.bapo_clip_bounds(
        jax.lax.stop_gradient(t.behaviour_log_ratio), t.token_advantages, mask=t.mask,
        positive_share=hp.bapo_positive_share, low_range=(hp.bapo_low_start, hp.bapo_low_end),
        high_range=(hp.bapo_high_start, hp.bapo_high_end))
    loss, metrics = _ppo_clip(t, hp, (low_eps, high_eps))
    return loss, {"clip_fraction": metrics["clip_fraction"], "bapo_ratio_low": 1.0 - low_eps,
                  "bapo_ratio_high": 1.0 + high_eps}


def _tv_threshold(t: TokenTerms, hp):
    return losses.tv_threshold(hp.tv_delta, t.tv_delta_convention)


def _grpo_tv_filter(t: TokenTerms, hp):
    keep, filtered = losses.tv_filter_mask(t.trust_log_ratio, t.token_advantages,
                                           _tv_threshold(t, hp), t.mask)
    # Dropped tokens stay in the mean's count (the engine's `filter_normalization="all"`).
    loss, metrics = _ppo_clip(t, hp, weights=keep)
    return loss, {"clip_fraction": metrics["clip_fraction"],
                  "filter_fraction": filtered["filter_fraction"]}


def _truncated_is_policy_gradient(t: TokenTerms, hp, keep: jax.Array):
    """`-A sg(min(r, C)) log pi` on the kept tokens, `r` the trust region's ratio and `C` =
    `trust_is_cap`, dropped tokens counted in the mean: the surrogate TVPO and DPPO share."""
    log_r = t.trust_log_ratio
    weights = losses.truncated_is_weights(log_r, hp.trust_is_cap) * keep
    return _policy_gradient(t, weights), {
        "is_weight_mean": losses.aggregate(weights, t.mask),
        "is_truncated_fraction": _fraction((losses.clamped_ratio(log_r) > hp.trust_is_cap)
                                           & (keep > 0), t)}


def _tvpo(t: TokenTerms, hp):
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


def _dppo(mask_fn: Callable[[TokenTerms, Any], tuple[jax.Array, dict]]) -> PolicyLoss:
    def loss(t: TokenTerms, hp):
        keep, masked = mask_fn(t, hp)
        value, metrics = _truncated_is_policy_gradient(t, hp, keep)
        return value, {**metrics, "is_masked_fraction": masked["mask_fraction"]}
    return loss


def _binary_tv_mask(t: TokenTerms, hp):
    return losses.dppo_binary_tv_mask(jax.lax.stop_gradient(t.log_prob), t.trust_log_prob,
                                      t.token_advantages, hp.dppo_delta_low, hp.dppo_delta_high,
                                      t.mask)


def _binary_kl_mask(t: TokenTerms, hp):
    return losses.dppo_binary_kl_mask(jax.lax.stop_gradient(t.log_prob), t.trust_log_prob,
                                      t.token_advantages, hp.dppo_kl_delta, t.mask)


def _tba(t: TokenTerms, hp):
    """Trajectory balance, `(log Z + log pi(y) - log p_ref(y) - R / beta)^2` per sequence, with
    log Z each prompt's VarGrad estimate: the stop-gradient mean over its samples in the
    minibatch of `R / beta - log pi(y) + log p_ref(y)`."""
    log_ratio = jnp.where(t.mask > 0, t.log_prob - t.reference_log_prob, 0.0).sum(axis=-1)
    residual = log_ratio - t.reward / hp.tba_beta
    totals = jax.ops.segment_sum(residual, t.group, t.num_groups)
    counts = jax.ops.segment_sum(jnp.ones_like(residual), t.group, t.num_groups)
    log_z = -jax.lax.stop_gradient(totals / jnp.maximum(counts, 1))[t.group]
    return jnp.mean(jnp.square(log_z + residual)), {}


def _vcpo(t: TokenTerms, hp):
    loss, metrics = losses.vcpo_loss(t.phase_log_ratio, t.log_staleness, t.advantages,
                                     is_cap=hp.vcpo_is_cap, mask=t.mask,
                                     aggregation=t.aggregation)
    # VCPO truncates whole sequences, so its truncated fraction counts sequences.
    return loss, {"is_weight_mean": metrics["is_weight_mean"],
                  "is_truncated_fraction": metrics["truncated_fraction"]}


def _vcpo_entry(name: str, advantages: AdvantageFn, ess_scaling: bool,
                summary: str) -> TokenAlgorithm:
    """VCPO or one of its ablations: VCPO's surrogate with `advantages`, and its ESS-scaled
    step if `ess_scaling`."""
    return TokenAlgorithm(
        name, advantages, _vcpo,
        hparams=("vcpo_is_cap",) + (("ess_target",) if ess_scaling else ()),
        aggregation="seq-mean-token-mean", ess_scaling=ess_scaling,
        description=f"{summary}; -min(w, vcpo_is_cap) A pi_theta/pi_T, w = pi_T(y)/beta(y) the "
                    "sequence staleness, seq-mean-token-mean",
        source="VCPO (Stable Asynchrony: variance-controlled off-policy RL for LLMs)")


ALGORITHMS: dict[str, TokenAlgorithm] = {a.name: a for a in (
    TokenAlgorithm(
        "grpo", group_relative, _grpo, hparams=("clip_eps",),
        description="token-level PPO-clip on the behaviour ratio, group-relative advantages "
                    "(std-scaled unless `scale_advantages_by_std=False`)",
        source="Shao et al. 2024 (DeepSeekMath)"),
    TokenAlgorithm(
        "dr_grpo", group_centred, _grpo, hparams=("clip_eps",),
        aggregation="seq-mean-token-sum-norm",
        description="GRPO without std scaling, each sequence's token sum divided by the constant "
                    "response length",
        source="Liu et al. 2025 (Understanding R1-Zero-like training, Dr. GRPO)"),
    TokenAlgorithm(
        "reinforce", group_centred, _reinforce, hparams=(),
        description="on-policy policy gradient -A log pi, group-mean baseline, no ratio",
        source="Williams 1992"),
    TokenAlgorithm(
        "rloo", leave_one_out, _reinforce, hparams=(),
        description="policy gradient with the leave-one-out group baseline",
        source="Kool et al. 2019; Ahmadian et al. 2024"),
    TokenAlgorithm(
        "tis", group_relative, _tis, hparams=("is_cap",),
        description="policy gradient weighted by the truncated behaviour ratio "
                    "min(pi_theta/beta, is_cap), per token or per sequence (`is_level`)",
        source="Espeholt et al. 2018; Yao et al. 2025 (truncated importance sampling)"),
    TokenAlgorithm(
        "mis", group_relative, _mis, hparams=("is_cap", "mis_low"),
        description="policy gradient weighted by the behaviour ratio pi_theta/beta, tokens or "
                    "sequences (`is_level`) with a ratio outside [mis_low, is_cap] dropped",
        source="Liu et al. 2025 (When speed kills stability, masked importance sampling)"),
    TokenAlgorithm(
        "decoupled_ppo", group_relative, _decoupled_ppo, hparams=("clip_eps", "is_cap"),
        description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the truncated "
                    "staleness min(pi_T/beta, is_cap)",
        source="Hilton et al. 2022; Fu et al. 2025 (AReaL)"),
    TokenAlgorithm(
        "freshness", group_relative, _freshness, hparams=("clip_eps", "freshness_alpha"),
        description="GRPO on the sequences at most `freshness_alpha` versions old (a sequence "
                    "is as old as its oldest token)",
        source="Lu et al. 2025 (ROLL Flash)"),
    TokenAlgorithm(
        "m2po", group_relative, _m2po, hparams=("m2po_tau",),
        description="unclipped -r A on the behaviour ratio, the tokens of largest (log r)^2 "
                    "masked until their second moment is below `m2po_tau`",
        source="Zheng et al. 2025 (M2PO)"),
    TokenAlgorithm(
        "topr", group_relative, _topr, hparams=(),
        description="policy gradient, weight 1 for A >= 0 and the sequence ratio clipped to "
                    "[0, 1] for A < 0",
        source="Le Roux et al. 2025 (TOPR)"),
    TokenAlgorithm(
        "gspo", group_relative, _gspo, hparams=("gspo_clip_low", "gspo_clip_high"),
        description="PPO-clip on the length-normalised sequence behaviour ratio",
        source="Zheng et al. 2025 (GSPO)"),
    TokenAlgorithm(
        "cispo", group_relative, _cispo, hparams=("cispo_eps_low", "cispo_eps_high"),
        description="policy gradient weighted by the stop-gradient behaviour ratio clipped to "
                    "[1 - cispo_eps_low, 1 + cispo_eps_high]: no token loses its gradient",
        source="MiniMax 2025 (MiniMax-M1, CISPO)"),
    TokenAlgorithm(
        "bapo", group_relative, _bapo,
        hparams=("bapo_positive_share", "bapo_low_start", "bapo_low_end", "bapo_high_start",
                 "bapo_high_end"),
        description="PPO-clip on the behaviour ratio with clip bounds widened per minibatch "
                    "until positive tokens carry `bapo_positive_share` of the gradient",
        source="Xi et al. 2025 (BAPO)"),
    TokenAlgorithm(
        "vaco", group_centred, _tvpo, hparams=("tv_delta", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="the authors' TVPO: -A sg(min(r, trust_is_cap)) log pi, no clip; once the "
                    "TV 0.5 mean|r - 1| of the batch and of a token's prompt group (`tv_scope`) "
                    "exceed the threshold (`tv_delta` read under `tv_delta_convention`), the "
                    "tokens whose step would raise it are dropped; r to `tv_reference`; "
                    "group-centred advantages; no advantage realignment (it needs a critic)",
        source="VACO (Align and Filter); TVPO in hmnhonari/verl"),
    TokenAlgorithm(
        "grpo_tv_filter", group_relative, _grpo_tv_filter, hparams=("clip_eps", "tv_delta"),
        trust_region_ratio=True,
        description="ablation (the token `vaco` before the fidelity review): GRPO's PPO-clip "
                    "with VACO's TV filter on the minibatch's TV to `tv_reference`",
        source="VACO"),
    TokenAlgorithm(
        "dppo_binary_tv", group_centred, _dppo(_binary_tv_mask),
        hparams=("dppo_delta_low", "dppo_delta_high", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once its probability "
                    "moved past dppo_delta_high (A > 0) or dppo_delta_low (A <= 0) in its "
                    "advantage's direction, against `tv_reference`",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "dppo_binary_kl", group_centred, _dppo(_binary_kl_mask),
        hparams=("dppo_kl_delta", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once the binary KL of "
                    "its probability exceeds dppo_kl_delta in its advantage's direction",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "tba", group_centred, _tba, hparams=("tba_beta",), needs_reference=True,
        description="trajectory balance to the warm start tilted by exp(R / tba_beta), log Z "
                    "per prompt by VarGrad; off-policy by construction, no importance weight",
        source="Bartoldson et al. 2025 (Trajectory Balance with Asynchrony, TBA)"),
    _vcpo_entry("vcpo", off_policy_optimal, True,
                "advantages with the off-policy optimal baseline, every step scaled by "
                "sqrt(min(1, ess / ess_target))"),
    _vcpo_entry("vcpo_ess_only", group_relative, True,
                "VCPO without its baseline: group-relative advantages, ESS-scaled steps"),
    _vcpo_entry("vcpo_opob_only", off_policy_optimal, False,
                "VCPO without its step scaling: advantages with the off-policy optimal baseline"),
)}
