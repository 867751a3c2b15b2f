"""The token testbed's algorithm registry: each algorithm is a small composition of library pieces.

A `TokenAlgorithm` names how the group's rewards become advantages and its policy surrogate
(with any stabiliser inside it). The trainer hands the surrogate `TokenTerms`, the per-token
quantities every surrogate may need, and records the stabiliser metrics its entry declares
(`STABILISER_METRICS` holds them all). Adding an algorithm is one file in
`vaco_jax.tokens.methods` (its knobs, surrogate and entry: `methods/opsm.py`), or from an
installed package one `ALGORITHMS.register(...)` call in an entry point
(`vaco_jax.core.registry`); the control registry (`vaco_jax.control.algorithms`) is separate
because its surrogates see `[T, B]` control batches with a critic.

Hooks for algorithms that need more (VCPO): an entry's `advantages` receives `AdvantageInputs`,
which carries each sequence's log staleness and, on demand, the squared norms of each sequence's
log-probability gradient (an off-policy optimal baseline needs them); `ess_scaling=True` scales
every optimiser step by `sqrt(min(1, ess / ess_target))` (`losses.scale_by_ess`), `ess` being the
minibatch's ESS ratio of the sequence staleness weights `pi_T / beta`.

The advantages and surrogates the entries compose live in `vaco_jax.tokens.surrogates`, with
the ratios named there; those of the lag-robust methods of 2025-26 (`sapo`, `gmpo`, `icepop`,
`kl_cov`) in `vaco_jax.tokens.lag_robust`.
"""

from __future__ import annotations

from typing import Any, Mapping

from vaco_jax.core import knobs
from vaco_jax.core.registry import AlgorithmRegistry, Superseded
from vaco_jax.tokens import compat, lag_robust, methods, surrogates
from vaco_jax.tokens.entry import (IS_LEVELS, ROLLOUT_IS, TV_REFERENCES, TV_SCOPES,
                                   TokenAlgorithm)
from vaco_jax.tokens.lag_robust import (GATE_WEIGHT_MEAN, GMPO_CLIP_HIGH, GMPO_CLIP_LOW,
                                        KL_PENALTY_MEAN)
from vaco_jax.core.method_knobs import (ICEPOP_HIGH, ICEPOP_LOW, KL_COV_COEF, KL_COV_FRACTION,
                                        SAPO_TAU_NEG, SAPO_TAU_POS)
from vaco_jax.tokens.surrogates import (
    BAPO_HIGH_END, BAPO_HIGH_START, BAPO_LOW_END, BAPO_LOW_START, BAPO_POSITIVE_SHARE,
    BAPO_RATIO_HIGH, BAPO_RATIO_LOW, CISPO_EPS_HIGH, CISPO_EPS_LOW, CLIP_EPS, CLIP_FRACTION,
    DPPO_DELTA_HIGH, DPPO_DELTA_LOW, DPPO_KL_DELTA, ESS_TARGET, FILTER_FRACTION, FRESHNESS_ALPHA,
    GSPO_CLIP_HIGH, GSPO_CLIP_LOW, IS_CAP, IS_MASKED, IS_TAPERED, IS_TRUNCATED, IS_WEIGHT_MEAN,
    M2PO_TAU, MIS_LOW, STALE_DROPPED, TBA_BETA, TBA_BETA_DECAY_UPDATES, TBA_BETA_FINAL,
    TRUST_IS_CAP, TV_DELTA, VCPO_IS_CAP, AdvantageFn, group_centred, group_relative,
    leave_one_out, off_policy_optimal)

__all__ = ["ALGORITHMS", "IS_LEVELS", "ROLLOUT_IS", "STABILISER_METRICS", "TV_REFERENCES",
           "TV_SCOPES", "TokenAlgorithm"]


# The authors' `vcpo_k=10.sh`: AdamW with weight decay 0.1 (`WEIGHT_DECAY`'s default) and 16
# samples per prompt.
VCPO_SETTING = {"optimizer": "adamw", "group_size": 16}


def _vcpo_entry(name: str, advantages: AdvantageFn, ess_scaling: bool, summary: str,
                setting: Mapping[str, Any] = VCPO_SETTING,
                superseded: Superseded | None = None) -> TokenAlgorithm:
    """VCPO or one of its ablations: VCPO's surrogate with `advantages`, and its ESS-scaled
    step if `ess_scaling`, at its authors' optimiser and group size unless `setting` says
    otherwise."""
    return TokenAlgorithm(
        name, advantages, surrogates.vcpo,
        knobs=(VCPO_IS_CAP,) + ((ESS_TARGET,) if ess_scaling else ()),
        metrics=(IS_WEIGHT_MEAN, IS_TRUNCATED), setting=setting, superseded=superseded,
        aggregation="seq-mean-token-mean", ess_scaling=ess_scaling,
        description=f"{summary}; -min(w, vcpo_is_cap) A pi_theta/pi_T, w = pi_T(y)/beta(y) the "
                    "sequence staleness, seq-mean-token-mean",
        source="VCPO (Stable Asynchrony: variance-controlled off-policy RL for LLMs)")


BUILT_IN: tuple[TokenAlgorithm, ...] = (
    TokenAlgorithm(
        "grpo", group_relative, surrogates.grpo, knobs=(CLIP_EPS,), metrics=(CLIP_FRACTION,),
        description="token-level PPO-clip on the behaviour ratio, group-relative advantages "
                    "(std-scaled unless `scale_advantages_by_std=False`)",
        source="Shao et al. 2024 (DeepSeekMath)"),
    TokenAlgorithm(
        "dr_grpo", group_centred, surrogates.grpo, knobs=(CLIP_EPS,), metrics=(CLIP_FRACTION,),
        aggregation="seq-mean-token-sum-norm",
        description="GRPO without std scaling, each sequence's token sum divided by the constant "
                    "response length",
        source="Liu et al. 2025 (Understanding R1-Zero-like training, Dr. GRPO)"),
    TokenAlgorithm(
        "reinforce", group_centred, surrogates.reinforce, knobs=(),
        description="on-policy policy gradient -A log pi, group-mean baseline, no ratio",
        source="Williams 1992"),
    TokenAlgorithm(
        "rloo", leave_one_out, surrogates.reinforce, knobs=(),
        description="policy gradient with the leave-one-out group baseline",
        source="Kool et al. 2019; Ahmadian et al. 2024"),
    TokenAlgorithm(
        "tis", group_relative, surrogates.tis, knobs=(IS_CAP,),
        metrics=(IS_WEIGHT_MEAN, IS_TRUNCATED),
        description="policy gradient weighted by the truncated behaviour ratio "
                    "min(pi_theta/beta, is_cap), per token or per sequence (`is_level`)",
        source="Espeholt et al. 2018; Yao et al. 2025 (truncated importance sampling)"),
    TokenAlgorithm(
        "mis", group_relative, surrogates.mis, knobs=(IS_CAP, MIS_LOW),
        metrics=(IS_WEIGHT_MEAN, IS_MASKED),
        description="policy gradient weighted by the behaviour ratio pi_theta/beta, tokens or "
                    "sequences (`is_level`) with a ratio outside [mis_low, is_cap] dropped",
        source="Liu et al. 2025 (When speed kills stability, masked importance sampling)"),
    TokenAlgorithm(
        "decoupled_ppo", group_relative, surrogates.decoupled_ppo, knobs=(CLIP_EPS, IS_CAP),
        metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN, IS_TRUNCATED),
        description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the truncated "
                    "staleness min(pi_T/beta, is_cap)",
        source="Hilton et al. 2022; Fu et al. 2025 (AReaL)"),
    TokenAlgorithm(
        "freshness", group_relative, surrogates.grpo, knobs=(CLIP_EPS, FRESHNESS_ALPHA),
        metrics=(CLIP_FRACTION, STALE_DROPPED),
        refuses_stale=True,
        description="GRPO on a batch collected at most `freshness_alpha` versions stale: an "
                    "older generation is refused and replaced by one of the oldest admitted "
                    "version",
        source="Lu et al. 2025 (ROLL Flash)"),
    TokenAlgorithm(
        "freshness_mask", group_relative, surrogates.freshness_mask,
        knobs=(CLIP_EPS, FRESHNESS_ALPHA), metrics=(CLIP_FRACTION, STALE_DROPPED),
        superseded=Superseded("freshness", "2026-11-28"),
        description="(`freshness` before the fidelity review) GRPO with the sequences more than "
                    "`freshness_alpha` versions old masked in the loss, no refill (a sequence is "
                    "as old as its oldest token)",
        source="Lu et al. 2025 (ROLL Flash), masking variant"),
    TokenAlgorithm(
        "m2po", group_relative, surrogates.m2po, knobs=(M2PO_TAU,), metrics=(CLIP_FRACTION,),
        description="PPO-clip on the behaviour ratio with bounds [exp(-tau), exp(tau)], tau "
                    "capping the second moment of the harmful tokens' log-ratios (A > 0 and "
                    "r > 1, or A < 0 and r < 1) at `m2po_tau`, as the authors' code does",
        source="Zheng et al. 2025 (M2PO)"),
    TokenAlgorithm(
        "m2po_drop", group_relative, surrogates.m2po_drop, knobs=(M2PO_TAU,), metrics=(IS_MASKED,),
        superseded=Superseded("m2po", "2026-11-28"),
        description="the `m2po` before 2026-11-28 (the paper's prose): unclipped -r A on the "
                    "behaviour ratio, the tokens of largest (log r)^2 masked until their second "
                    "moment is below `m2po_tau`",
        source="Zheng et al. 2025 (M2PO)"),
    TokenAlgorithm(
        "topr", group_relative, surrogates.topr, knobs=(), metrics=(IS_WEIGHT_MEAN, IS_TAPERED),
        description="policy gradient, weight 1 for A >= 0 and the sequence ratio clipped to "
                    "[0, 1] for A < 0",
        source="Le Roux et al. 2025 (TOPR)"),
    TokenAlgorithm(
        "gspo", group_relative, surrogates.gspo(surrogates.phase_ratio),
        knobs=(GSPO_CLIP_LOW, GSPO_CLIP_HIGH, IS_CAP),
        metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN, IS_TRUNCATED), rollout_correction=True,
        description="PPO-clip on the length-normalised sequence phase ratio pi_theta/pi_T "
                    "(verl's recomputed old policy), optionally weighted by the truncated "
                    "staleness (`rollout_is`, cap `is_cap`)",
        source="Zheng et al. 2025 (GSPO)"),
    TokenAlgorithm(
        "gspo_behaviour", group_relative, surrogates.gspo(surrogates.behaviour_ratio),
        knobs=(GSPO_CLIP_LOW, GSPO_CLIP_HIGH), metrics=(CLIP_FRACTION,),
        superseded=Superseded("gspo", "2026-11-28"),
        description="the `gspo` before 2026-11-28: PPO-clip on the length-normalised sequence "
                    "behaviour ratio pi_theta/beta",
        source="Zheng et al. 2025 (GSPO)"),
    TokenAlgorithm(
        "cispo", group_relative, surrogates.cispo(surrogates.phase_ratio),
        knobs=(CISPO_EPS_LOW, CISPO_EPS_HIGH, IS_CAP),
        metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN, IS_TRUNCATED), rollout_correction=True,
        description="policy gradient weighted by the stop-gradient phase ratio pi_theta/pi_T "
                    "clipped to [1 - cispo_eps_low, 1 + cispo_eps_high], optionally times the "
                    "truncated staleness (`rollout_is`, cap `is_cap`)",
        source="MiniMax 2025 (MiniMax-M1, CISPO)"),
    TokenAlgorithm(
        "cispo_behaviour", group_relative, surrogates.cispo(surrogates.behaviour_ratio),
        knobs=(CISPO_EPS_LOW, CISPO_EPS_HIGH), metrics=(CLIP_FRACTION,),
        superseded=Superseded("cispo", "2026-11-28"),
        description="the `cispo` before 2026-11-28: policy gradient weighted by the "
                    "stop-gradient behaviour ratio clipped to [1 - cispo_eps_low, "
                    "1 + cispo_eps_high]",
        source="MiniMax 2025 (MiniMax-M1, CISPO)"),
    TokenAlgorithm(
        "bapo", group_relative, surrogates.bapo,
        knobs=(BAPO_POSITIVE_SHARE, BAPO_LOW_START, BAPO_LOW_END, BAPO_HIGH_START, BAPO_HIGH_END),
        metrics=(CLIP_FRACTION, BAPO_RATIO_LOW, BAPO_RATIO_HIGH),
        description="PPO-clip on the behaviour ratio with clip bounds widened per minibatch "
                    "until positive tokens carry `bapo_positive_share` of the gradient",
        source="Xi et al. 2025 (BAPO)"),
    TokenAlgorithm(
        "vaco", group_centred, surrogates.tvpo, knobs=(TV_DELTA, TRUST_IS_CAP),
        metrics=(IS_WEIGHT_MEAN, IS_TRUNCATED, FILTER_FRACTION),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="the authors' TVPO: -A sg(min(r, trust_is_cap)) log pi, no clip; once the "
                    "TV 0.5 mean|r - 1| of the batch and of a token's prompt group (`tv_scope`) "
                    "exceed the threshold (`tv_delta` read under `tv_delta_convention`), the "
                    "tokens whose step would raise it are dropped; r to `tv_reference`; "
                    "group-centred advantages; no advantage realignment (it needs a critic)",
        source="VACO (Align and Filter); TVPO in hmnhonari/verl"),
    TokenAlgorithm(
        "grpo_tv_filter", group_relative, surrogates.grpo_tv_filter, knobs=(CLIP_EPS, TV_DELTA),
        metrics=(CLIP_FRACTION, FILTER_FRACTION),
        trust_region_ratio=True,
        superseded=Superseded("vaco", "2026-11-25"),
        description="ablation (the token `vaco` before the fidelity review): GRPO's PPO-clip "
                    "with VACO's TV filter on the minibatch's TV to `tv_reference`",
        source="VACO"),
    TokenAlgorithm(
        "dppo_binary_tv", group_centred, surrogates.dppo(surrogates.binary_tv_mask),
        knobs=(DPPO_DELTA_LOW, DPPO_DELTA_HIGH, TRUST_IS_CAP),
        metrics=(IS_WEIGHT_MEAN, IS_TRUNCATED, IS_MASKED),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once its probability "
                    "moved past dppo_delta_high (A > 0) or dppo_delta_low (A <= 0) in its "
                    "advantage's direction, against `tv_reference`",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "dppo_binary_kl", group_centred, surrogates.dppo(surrogates.binary_kl_mask),
        knobs=(DPPO_KL_DELTA, TRUST_IS_CAP), metrics=(IS_WEIGHT_MEAN, IS_TRUNCATED, IS_MASKED),
        aggregation="seq-mean-token-sum-norm", trust_region_ratio=True,
        description="TVPO's truncated-IS surrogate with a token masked once the binary KL of "
                    "its probability exceeds dppo_kl_delta in its advantage's direction",
        source="Qi et al. 2026 (Rethinking the Trust Region in LLM RL, DPPO)"),
    TokenAlgorithm(
        "tba", group_centred, surrogates.tba,
        knobs=(TBA_BETA, TBA_BETA_FINAL, TBA_BETA_DECAY_UPDATES), needs_reference=True,
        hparam_schedule=surrogates.tba_beta_schedule,
        description="trajectory balance to the warm start tilted by exp(R / beta), log Z per "
                    "prompt by VarGrad, beta decayed linearly from tba_beta to tba_beta_final "
                    "over tba_beta_decay_updates updates; off-policy by construction, no "
                    "importance weight; trained from its authors' replay buffer (replay = "
                    "false: on the update's fresh samples alone)",
        source="Bartoldson et al. 2025 (Trajectory Balance with Asynchrony, TBA)",
        setting={"replay": True}),
    _vcpo_entry("vcpo", off_policy_optimal, True,
                "advantages with the off-policy optimal baseline, every step scaled by "
                "sqrt(min(1, ess / ess_target))"),
    _vcpo_entry("vcpo_ess_only", group_relative, True,
                "VCPO without its baseline: group-relative advantages, ESS-scaled steps"),
    _vcpo_entry("vcpo_opob_only", off_policy_optimal, False,
                "VCPO without its step scaling: advantages with the off-policy optimal baseline"),
    _vcpo_entry("vcpo_grpo_setting", off_policy_optimal, True,
                "the `vcpo` before 2026-12-07: VCPO at the run's own optimiser and group size "
                "(Adam and GRPO's group unless a run sets them)", setting={},
                superseded=Superseded("vcpo", "2026-12-07")),
    TokenAlgorithm(
        "sapo", group_relative, lag_robust.sapo(surrogates.phase_ratio),
        knobs=(SAPO_TAU_POS, SAPO_TAU_NEG), metrics=(GATE_WEIGHT_MEAN,),
        aggregation="seq-mean-token-mean",
        description="-4/tau sigmoid(tau (r - 1)) A on the phase ratio pi_theta/pi_T (verl's "
                    "recomputed old policy): a soft gate in place of PPO's clip, tau = "
                    "sapo_tau_pos for A > 0 and sapo_tau_neg otherwise; seq-mean-token-mean",
        source="Gao et al. 2025 (Soft Adaptive Policy Optimization, SAPO)"),
    TokenAlgorithm(
        "sapo_behaviour", group_relative, lag_robust.sapo(surrogates.behaviour_ratio),
        knobs=(SAPO_TAU_POS, SAPO_TAU_NEG), metrics=(GATE_WEIGHT_MEAN,),
        aggregation="seq-mean-token-mean",
        superseded=Superseded("sapo", "2026-12-07"),
        description="the `sapo` before 2026-12-07: its gate on the behaviour ratio pi_theta/beta",
        source="Gao et al. 2025 (Soft Adaptive Policy Optimization, SAPO)"),
    TokenAlgorithm(
        "gmpo", group_relative, lag_robust.gmpo(surrogates.phase_ratio),
        knobs=(GMPO_CLIP_LOW, GMPO_CLIP_HIGH), metrics=(CLIP_FRACTION,),
        description="-A exp(mean_t clip(log r)) per sequence: the geometric mean of the phase "
                    "ratios pi_theta/pi_T, each log-ratio clipped to [-gmpo_clip_low, "
                    "gmpo_clip_high] in its advantage's direction",
        source="Zhao et al. 2025 (Geometric-Mean Policy Optimization, GMPO)"),
    TokenAlgorithm(
        "gmpo_behaviour", group_relative, lag_robust.gmpo(surrogates.behaviour_ratio),
        knobs=(GMPO_CLIP_LOW, GMPO_CLIP_HIGH), metrics=(CLIP_FRACTION,),
        superseded=Superseded("gmpo", "2026-12-07"),
        description="the `gmpo` before 2026-12-07: the geometric mean of the behaviour ratios "
                    "pi_theta/beta",
        source="Zhao et al. 2025 (Geometric-Mean Policy Optimization, GMPO)"),
    TokenAlgorithm(
        "icepop", group_relative, lag_robust.icepop,
        knobs=(CLIP_EPS, ICEPOP_LOW, ICEPOP_HIGH),
        metrics=(CLIP_FRACTION, IS_WEIGHT_MEAN, IS_MASKED),
        description="PPO-clip on the phase ratio pi_theta/pi_T weighted by the staleness "
                    "pi_T/beta inside [icepop_low, icepop_high] and masked outside it",
        source="Ling Team 2025 (Every Step Evolves: Ring-1T, IcePop)"),
    TokenAlgorithm(
        "kl_cov", group_relative, lag_robust.kl_cov(surrogates.phase_ratio),
        knobs=(KL_COV_COEF, KL_COV_FRACTION), metrics=(KL_PENALTY_MEAN,),
        description="unclipped -r A on the phase ratio pi_theta/pi_T plus kl_cov_coef |log r| "
                    "on the kl_cov_fraction of tokens (at least one) of largest covariance "
                    "(A - mean A)(log pi - mean log pi)",
        source="Cui et al. 2025 (The Entropy Mechanism of RL for Reasoning LMs, KL-Cov)"),
    TokenAlgorithm(
        "kl_cov_behaviour", group_relative, lag_robust.kl_cov(surrogates.behaviour_ratio),
        knobs=(KL_COV_COEF, KL_COV_FRACTION), metrics=(KL_PENALTY_MEAN,),
        superseded=Superseded("kl_cov", "2026-12-07"),
        description="the `kl_cov` before 2026-12-07: its loss and penalty on the behaviour ratio "
                    "pi_theta/beta",
        source="Cui et al. 2025 (The Entropy Mechanism of RL for Reasoning LMs, KL-Cov)"),
    *methods.entries())

STABILISER_METRICS = knobs.columns((m for e in BUILT_IN for m in e.metrics),
                                   compat.STABILISER_COLUMNS)
"""The stabiliser metrics the built-in algorithms report, recorded per update for every algorithm
(NaN where it has no such quantity) so that every program writes the same columns."""


ALGORITHMS: AlgorithmRegistry[TokenAlgorithm] = AlgorithmRegistry(
    "tokens", TokenAlgorithm, BUILT_IN, columns=STABILISER_METRICS)
