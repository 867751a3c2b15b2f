"""The token testbed's algorithm registry: each algorithm is a small composition of library pieces.

A `TokenAlgorithm` names how the group's rewards become advantages and its policy surrogate
(with any stabiliser inside it). The trainer hands the surrogate `TokenTerms`, the per-token
quantities every surrogate may need, and records the stabiliser metrics it returns (see
`STABILISER_METRICS`). Adding an algorithm is one entry in `ALGORITHMS` (or, from an installed
package, one `ALGORITHMS.register(...)` call in an entry point: `vaco_jax.core.registry`); the engine's registry
(`vaco_jax.control.algorithms`) is separate because its surrogates see `[T, B]` control batches with a
critic.

Hooks for algorithms that need more (VCPO): an entry's `advantages` receives `AdvantageInputs`,
which carries each sequence's log staleness and, on demand, the squared norms of each sequence's
log-probability gradient (an off-policy optimal baseline needs them); `ess_scaling=True` scales
every optimiser step by `sqrt(min(1, ess / ess_target))` (`losses.scale_by_ess`), `ess` being the
minibatch's ESS ratio of the sequence staleness weights `pi_T / beta`.

The advantages and surrogates the entries compose live in `vaco_jax.tokens.surrogates`, with
the ratios named there; those of the lag-robust methods of 2025-26 (`sapo`, `gmpo`, `icepop`,
`opsm`, `kl_cov`) in `vaco_jax.tokens.lag_robust`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from vaco_jax.core.registry import AlgorithmRegistry
from vaco_jax.tokens import lag_robust, surrogates
from vaco_jax.tokens.surrogates import (AdvantageFn, PolicyLoss, group_centred, group_relative,
                                        leave_one_out, off_policy_optimal)

IS_LEVELS = ("token", "sequence")
ROLLOUT_IS = ("none",) + IS_LEVELS
TV_REFERENCES = ("behaviour", "phase")
TV_SCOPES = ("prompt", "batch")

# Metrics a stabiliser makes meaningful, recorded per update for every algorithm (NaN where the
# algorithm has no such quantity) so that every program writes the same columns.
STABILISER_METRICS = (
    "clip_fraction",  # valid tokens (sequences for gspo) whose gradient a clip zeroes or bounds
    "is_weight_mean",  # mean importance weight applied (truncated, masked or tapered)
    "is_truncated_fraction",  # valid tokens (sequences for vcpo) whose weight hits its cap
    "is_masked_fraction",  # valid tokens a mask drops (mis, m2po_drop, dppo_*)
    "is_tapered_fraction",  # valid tokens whose weight TOPR's taper sets below 1
    # valid tokens of sequences older than `freshness_alpha` versions (freshness_mask), or the
    # generations refused at collection as that stale (freshness)
    "stale_dropped_fraction",
    "filter_fraction",  # valid tokens VACO's (TVPO's) TV filter drops
    "bapo_ratio_low",  # the ratio bounds BAPO chose
    "bapo_ratio_high",
    "gate_weight_mean",  # sapo: the mean slope of its soft gate, 1 on-policy
    "kl_penalty_mean",  # kl_cov: the mean penalty on the tokens of largest covariance
)


@dataclasses.dataclass(frozen=True)
class TokenAlgorithm:
    name: str
    advantages: AdvantageFn
    policy_loss: PolicyLoss
    description: str
    source: str
    # The `TokenHParams` its loss reads beyond every run's (`config.knobs`): a sweep or `--hparam`
    # of any other is refused, as it would change nothing.
    hparams: tuple[str, ...]
    # Overrides `TokenConfig.aggregation` where the algorithm defines its own normalisation.
    aggregation: str | None = None
    ess_scaling: bool = False
    # Its trust region measures pi_theta against `tv_reference`: with `phase` and one gradient
    # step per version that ratio is exactly 1, so the configuration is refused.
    trust_region_ratio: bool = False
    needs_reference: bool = False  # reads the reference policy's log-probs (the warm start)
    # Generations more than `freshness_alpha` versions old are refused at collection and
    # replaced (`lag_models.refuse_stale`), ROLL Flash's freshness bound.
    refuses_stale: bool = False
    # Takes its ratio to pi_T and may weight its loss by verl's rollout correction, the
    # truncated staleness pi_T / beta (`TokenConfig.rollout_is`).
    rollout_correction: bool = False
    # `(hparams, updates done) -> hparams` for this phase: hyper-parameters on a schedule.
    hparam_schedule: Callable[[Any, jax.Array], Any] | None = None


def _vcpo_entry(name: str, advantages: AdvantageFn, ess_scaling: bool,
                summary: str) -> TokenAlgorithm:
    """VCPO or one of its ablations: VCPO's surrogate with `advantages`, and its ESS-scaled
    step if `ess_scaling`."""
    return TokenAlgorithm(
        name, advantages, surrogates.vcpo,
        hparams=("vcpo_is_cap",) + (("ess_target",) if ess_scaling else ()),
        aggregation="seq-mean-token-mean", ess_scaling=ess_scaling,
        description=f"{summary}; -min(w, vcpo_is_cap) A pi_theta/pi_T, w = pi_T(y)/beta(y) the "
                    "sequence staleness, seq-mean-token-mean",
        source="VCPO (Stable Asynchrony: variance-controlled off-policy RL for LLMs)")


ALGORITHMS: AlgorithmRegistry[TokenAlgorithm] = AlgorithmRegistry("tokens", TokenAlgorithm, (
    TokenAlgorithm(
        "grpo", group_relative, surrogates.grpo, hparams=("clip_eps",),
        description="token-level PPO-clip on the behaviour ratio, group-relative advantages "
                    "(std-scaled unless `scale_advantages_by_std=False`)",
        source="Shao et al. 2024 (DeepSeekMath)"),
    TokenAlgorithm(
        "dr_grpo", group_centred, surrogates.grpo, hparams=("clip_eps",),
        aggregation="seq-mean-token-sum-norm",
        description="GRPO without std scaling, each sequence's token sum divided by the constant "
                    "response length",
        source="Liu et al. 2025 (Understanding R1-Zero-like training, Dr. GRPO)"),
    TokenAlgorithm(
        "reinforce", group_centred, surrogates.reinforce, hparams=(),
        description="on-policy policy gradient -A log pi, group-mean baseline, no ratio",
        source="Williams 1992"),
    TokenAlgorithm(
        "rloo", leave_one_out, surrogates.reinforce, hparams=(),
        description="policy gradient with the leave-one-out group baseline",
        source="Kool et al. 2019; Ahmadian et al. 2024"),
    TokenAlgorithm(
        "tis", group_relative, surrogates.tis, hparams=("is_cap",),
        description="policy gradient weighted by the truncated behaviour ratio "
                    "min(pi_theta/beta, is_cap), per token or per sequence (`is_level`)",
        source="Espeholt et al. 2018; Yao et al. 2025 (truncated importance sampling)"),
    TokenAlgorithm(
        "mis", group_relative, surrogates.mis, hparams=("is_cap", "mis_low"),
        description="policy gradient weighted by the behaviour ratio pi_theta/beta, tokens or "
                    "sequences (`is_level`) with a ratio outside [mis_low, is_cap] dropped",
        source="Liu et al. 2025 (When speed kills stability, masked importance sampling)"),
    TokenAlgorithm(
        "decoupled_ppo", group_relative, surrogates.decoupled_ppo, hparams=("clip_eps", "is_cap"),
        description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the truncated "
                    "staleness min(pi_T/beta, is_cap)",
        source="Hilton et al. 2022; Fu et al. 2025 (AReaL)"),
    TokenAlgorithm(
        "freshness", group_relative, surrogates.grpo, hparams=("clip_eps", "freshness_alpha"),
        refuses_stale=True,
        description="GRPO on a batch collected at most `freshness_alpha` versions stale: an "
                    "older generation is refused and replaced by one of the oldest admitted "
                    "version",
        source="Lu et al. 2025 (ROLL Flash)"),
    TokenAlgorithm(
        "freshness_mask", group_relative, surrogates.freshness_mask,
        hparams=("clip_eps", "freshness_alpha"),
        description="(`freshness` before the fidelity review) GRPO with the sequences more than "
                    "`freshness_alpha` versions old masked in the loss, no refill (a sequence is "
                    "as old as its oldest token)",
        source="Lu et al. 2025 (ROLL Flash), masking variant"),
    TokenAlgorithm(
        "m2po", group_relative, surrogates.m2po, hparams=("m2po_tau",),
        description="PPO-clip on the behaviour ratio with bounds [exp(-tau), exp(tau)], tau "
                    "capping the second moment of the harmful tokens' log-ratios (A > 0 and "
                    "r > 1, or A < 0 and r < 1) at `m2po_tau`, as the authors' code does",
        source="Zheng et al. 2025 (M2PO)"),
    TokenAlgorithm(
        "m2po_drop", group_relative, surrogates.m2po_drop, hparams=("m2po_tau",),
        description="the `m2po` before 2026-11-28 (the paper's prose): unclipped -r A on the "
                    "behaviour ratio, the tokens of largest (log r)^2 masked until their second "
                    "moment is below `m2po_tau`",
        source="Zheng et al. 2025 (M2PO)"),
    TokenAlgorithm(
        "topr", group_relative, surrogates.topr, hparams=(),
        description="policy gradient, weight 1 for A >= 0 and the sequence ratio clipped to "
                    "[0, 1] for A < 0",
        source="Le Roux et al. 2025 (TOPR)"),
    TokenAlgorithm(
        "gspo", group_relative, surrogates.gspo(surrogates.phase_ratio),
        hparams=("gspo_clip_low", "gspo_clip_high", "is_cap"), rollout_correction=True,
        description="PPO-clip on the length-normalised sequence phase ratio pi_theta/pi_T "
                    "(verl's recomputed old policy), optionally weighted by the truncated "
                    "staleness (`rollout_is`, cap `is_cap`)",
        source="Zheng et al. 2025 (GSPO)"),
    TokenAlgorithm(
        "gspo_behaviour", group_relative, surrogates.gspo(surrogates.behaviour_ratio),
        hparams=("gspo_clip_low", "gspo_clip_high"),
        description="the `gspo` before 2026-11-28: PPO-clip on the length-normalised sequence "
                    "behaviour ratio pi_theta/beta",
        source="Zheng et al. 2025 (GSPO)"),
    TokenAlgorithm(
        "cispo", group_relative, surrogates.cispo(surrogates.phase_ratio),
        hparams=("cispo_eps_low", "cispo_eps_high", "is_cap"), rollout_correction=True,
        description="policy gradient weighted by the stop-gradient phase ratio pi_theta/pi_T "
                    "clipped to [1 - cispo_eps_low, 1 + cispo_eps_high], optionally times the "
                    "truncated staleness (`rollout_is`, cap `is_cap`)",
        source="MiniMax 2025 (MiniMax-M1, CISPO)"),
    TokenAlgorithm(
        "cispo_behaviour", group_relative, surrogates.cispo(surrogates.behaviour_ratio),
        hparams=("cispo_eps_low", "cispo_eps_high"),
        description="the `cispo` before 2026-11-28: policy gradient weighted by the "
                    "stop-gradient behaviour ratio clipped to [1 - cispo_eps_low, "
                    "1 + cispo_eps_high]",
        source="MiniMax 2025 (MiniMax-M1, CISPO)"),
    TokenAlgorithm(
        "bapo", group_relative, surrogates.bapo,
        hparams=("bapo_positive_share", "bapo_low_start", "bapo_low_end", "bapo_high_start",
                 "bapo_high_end"),
        description="PPO-clip on the behaviour ratio with clip bounds widened per minibatch "
                    "until positive tokens carry `bapo_positive_share` of the gradient",
        source="Xi et al. 2025 (BAPO)"),
    TokenAlgorithm(
        "vaco", group_centred, surrogates.tvpo, hparams=("tv_delta", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="the authors' TVPO: -A sg(min(r, trust_is_cap)) log pi, no clip; once the "
                    "TV 0.5 mean|r - 1| of the batch and of a token's prompt group (`tv_scope`) "
                    "exceed the threshold (`tv_delta` read under `tv_delta_convention`), the "
                    "tokens whose step would raise it are dropped; r to `tv_reference`; "
                    "group-centred advantages; no advantage realignment (it needs a critic)",
        source="VACO (Align and Filter); TVPO in hmnhonari/verl"),
    TokenAlgorithm(
        "grpo_tv_filter", group_relative, surrogates.grpo_tv_filter, hparams=("clip_eps", "tv_delta"),
        trust_region_ratio=True,
        description="ablation (the token `vaco` before the fidelity review): GRPO's PPO-clip "
                    "with VACO's TV filter on the minibatch's TV to `tv_reference`",
        source="VACO"),
    TokenAlgorithm(
        "dppo_binary_tv", group_centred, surrogates.dppo(surrogates.binary_tv_mask),
        hparams=("dppo_delta_low", "dppo_delta_high", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once its probability "
                    "moved past dppo_delta_high (A > 0) or dppo_delta_low (A <= 0) in its "
                    "advantage's direction, against `tv_reference`",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "dppo_binary_kl", group_centred, surrogates.dppo(surrogates.binary_kl_mask),
        hparams=("dppo_kl_delta", "trust_is_cap"),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once the binary KL of "
                    "its probability exceeds dppo_kl_delta in its advantage's direction",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "tba", group_centred, surrogates.tba,
        hparams=("tba_beta", "tba_beta_final", "tba_beta_decay_updates"), needs_reference=True,
        hparam_schedule=surrogates.tba_beta_schedule,
        description="trajectory balance to the warm start tilted by exp(R / beta), log Z per "
                    "prompt by VarGrad, beta decayed linearly from tba_beta to tba_beta_final "
                    "over tba_beta_decay_updates updates; off-policy by construction, no "
                    "importance weight",
        source="Bartoldson et al. 2025 (Trajectory Balance with Asynchrony, TBA)"),
    _vcpo_entry("vcpo", off_policy_optimal, True,
                "advantages with the off-policy optimal baseline, every step scaled by "
                "sqrt(min(1, ess / ess_target))"),
    _vcpo_entry("vcpo_ess_only", group_relative, True,
                "VCPO without its baseline: group-relative advantages, ESS-scaled steps"),
    _vcpo_entry("vcpo_opob_only", off_policy_optimal, False,
                "VCPO without its step scaling: advantages with the off-policy optimal baseline"),
    TokenAlgorithm(
        "sapo", group_relative, lag_robust.sapo, hparams=("sapo_tau_pos", "sapo_tau_neg"),
        aggregation="seq-mean-token-mean",
        description="-4/tau sigmoid(tau (r - 1)) A on the behaviour ratio: a soft gate in place "
                    "of PPO's clip, tau = sapo_tau_pos for A > 0 and sapo_tau_neg otherwise; "
                    "seq-mean-token-mean",
        source="Gao et al. 2025 (Soft Adaptive Policy Optimization, SAPO)"),
    TokenAlgorithm(
        "gmpo", group_relative, lag_robust.gmpo, hparams=("gmpo_clip_low", "gmpo_clip_high"),
        description="-A exp(mean_t clip(log r)) per sequence: the geometric mean of the "
                    "behaviour ratios, each log-ratio clipped to [-gmpo_clip_low, "
                    "gmpo_clip_high] in its advantage's direction",
        source="Zhao et al. 2025 (Geometric-Mean Policy Optimization, GMPO)"),
    TokenAlgorithm(
        "icepop", group_relative, lag_robust.icepop,
        hparams=("clip_eps", "icepop_low", "icepop_high"),
        description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the staleness "
                    "pi_T/beta inside [icepop_low, icepop_high] and masked outside it",
        source="Ling Team 2025 (Every Step Evolves: Ring-1T, IcePop)"),
    TokenAlgorithm(
        "opsm", group_relative, lag_robust.opsm, hparams=("clip_eps", "opsm_delta"),
        description="GRPO with every negative-advantage sequence dropped whose mean token "
                    "log(beta/pi_theta) exceeds opsm_delta",
        source="DeepSeek-AI 2025 (DeepSeek-V3.2, off-policy sequence masking)"),
    TokenAlgorithm(
        "kl_cov", group_relative, lag_robust.kl_cov, hparams=("kl_cov_coef", "kl_cov_fraction"),
        description="unclipped -r A on the behaviour ratio plus kl_cov_coef |log r| on the "
                    "kl_cov_fraction of tokens (at least one) of largest covariance "
                    "(A - mean A)(log pi - mean log pi)",
        source="Cui et al. 2025 (The Entropy Mechanism of RL for Reasoning LMs, KL-Cov)"),
))
