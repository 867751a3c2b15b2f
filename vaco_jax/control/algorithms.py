"""The algorithm registry: each algorithm is a small composition of library pieces.

An `Algorithm` names its advantage estimator, its policy surrogate (with any filter or
stabiliser applied inside it) and its optimiser transforms. The engine supplies the surrogate
with `PolicyTerms`, the per-sample quantities every surrogate may need. Adding an algorithm is
one entry in `ALGORITHMS`, or, from an installed package, one `ALGORITHMS.register(...)` call
in an entry point (`vaco_jax.core.registry`).

Advantage estimators (`Advantages`, each a function of `ValueTerms`):
- `GAE`: GAE on the behaviour data, ignoring lag (what naive asynchronous PPO does).
- `VTRACE_PHASE`: V-trace with the staleness ratio `pi_T / beta`, computed once per phase with
  the phase-start policy `pi_T` and kept fixed for every epoch and minibatch (VACO's
  realignment).
- `VTRACE_MINIBATCH`: V-trace recomputed from the current parameters at every minibatch with the
  behaviour ratio `pi_theta / beta` (IMPALA's on-the-fly correction); minibatches are then whole
  environment trajectories so the recursion sees complete sequences.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
from flax import struct

from vaco_jax import estimators, losses
from vaco_jax.core import knobs, phase
from vaco_jax.core.config import HParamsBase
from vaco_jax.core.knobs import Knob, Metric
from vaco_jax.core.method_knobs import (ICEPOP_HIGH, ICEPOP_LOW, KL_COV_COEF, KL_COV_FRACTION,
                                        SAPO_TAU_NEG, SAPO_TAU_POS)
from vaco_jax.core.registry import AlgorithmRegistry, Superseded


@struct.dataclass
class ValueTerms:
    """What an advantage estimator reads, time-major `[T, E]`."""

    reward: jax.Array
    values: jax.Array  # V(obs[t])
    next_values: jax.Array  # V of the true next observation
    discounts: jax.Array  # gamma (1 - terminated)
    continuations: jax.Array  # 0 where the step ended its episode for any reason
    log_rho: jax.Array  # log(pi / beta), pi the policy whose values V-trace estimates


GAE_LAMBDA = Knob("gae_lambda", 0.95, "GAE's lambda", "[0, 1]")
VTRACE_LAMBDA = Knob("vtrace_lambda", 1.0, "V-trace's lambda", "[0, 1]")
RHO_BAR = Knob("rho_bar", 1.0, "V-trace: the truncation of the ratio in its value targets (and "
               "the share truncated reported)", "(0, inf)")
C_BAR = Knob("c_bar", 1.0, "V-trace: the truncation of its trace coefficients", "(0, inf)")
RHO_BAR_PG = Knob("rho_bar_pg", 1.0, "V-trace: the truncation of the ratio in its "
                  "policy-gradient advantages", "(0, inf)")


def _gae(t: ValueTerms, hp: HParamsBase) -> tuple[jax.Array, jax.Array]:
    return estimators.gae(t.reward, t.values, t.next_values, t.discounts, t.continuations,
                          hp.gae_lambda)


def _vtrace(t: ValueTerms, hp: HParamsBase) -> tuple[jax.Array, jax.Array]:
    return estimators.vtrace(t.reward, t.values, t.next_values, t.discounts, t.continuations,
                             t.log_rho, lambda_=hp.vtrace_lambda, rho_bar=hp.rho_bar,
                             c_bar=hp.c_bar, rho_bar_pg=hp.rho_bar_pg)


@struct.dataclass
class PolicyTerms:
    """Per-sample inputs of a policy surrogate (flat or `[T, B]`, all the same shape)."""

    log_prob: jax.Array  # under the current parameters (differentiable)
    behaviour_log_prob: jax.Array  # under the policy that acted
    phase_log_prob: jax.Array  # under pi_T, the learner at the start of the phase
    advantages: jax.Array
    tv_log_rho: jax.Array  # log-ratio to the TV filter's reference policy
    tv: jax.Array | None  # a batch-level TV estimate overriding the minibatch one, if configured
    kl_coef: jax.Array  # current KL penalty coefficient (adaptive for ppo_kl)
    # The denominator of the TV-filtered surrogate (`ControlConfig.filter_normalization`).
    filter_normalization: str = struct.field(pytree_node=False, default="all")
    # How `tv_delta` becomes the filter's TV threshold (`losses.tv_threshold`).
    tv_delta_convention: str = struct.field(pytree_node=False, default="budget")


PolicyLoss = Callable[[PolicyTerms, HParamsBase], tuple[jax.Array, dict]]

CLIP_FRACTION = Metric("clip_fraction", "samples whose gradient a clip zeroes or bounds")
FILTER_FRACTION = Metric("filter_fraction", "samples VACO's TV filter drops")
IS_TRUNCATED = Metric("is_truncated_fraction", "samples whose importance weight hits its cap "
                      "(V-trace's rho_bar, or decoupled PPO's is_cap)")
IS_MASKED = Metric("is_masked_fraction", "samples a mask drops (IcePop's band)")
GATE_WEIGHT_MEAN = Metric("gate_weight_mean", "sapo: the mean slope of its soft gate, 1 "
                          "on-policy")
KL_PENALTY_MEAN = Metric("kl_penalty_mean", "kl_cov: the mean penalty on the samples of "
                         "largest covariance")


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """An algorithm of the control testbed: its advantage estimator, its policy surrogate, the
    knobs the surrogate reads (`knobs`, beside the estimator's and every run's: `knobs.py`)
    and the metrics it reports (`metrics`, among the trainer's columns)."""

    name: str
    advantages: Advantages
    policy_loss: PolicyLoss
    knobs: tuple[Knob, ...] = ()
    metrics: tuple[Metric, ...] = ()
    ess_scaling: bool = False
    adaptive_kl: bool = False
    description: str = ""
    # Its trust region, where it reads the phase ratio pi_theta/pi_T only: VACO's TV filter
    # (on that ratio when `tv_reference="phase"`) or a clip of that ratio. With one gradient
    # step per phase the ratio is exactly 1 there, so such a mechanism can never act.
    tv_filter: bool = False
    phase_clip_only: bool = False
    # One gradient step on the whole phase batch, whatever `epochs` and `minibatches` say
    # (`ControlConfig.phase_shape`): IMPALA's learner, which never reuses a batch.
    one_step_per_batch: bool = False
    # An older variant of another method, kept so that committed results reproduce.
    superseded: Superseded | None = None

    @property
    def minibatch_over_envs(self) -> bool:
        return self.advantages.per_minibatch

    def loss(self, t: PolicyTerms, hp: HParamsBase) -> tuple[jax.Array, dict]:
        """The policy surrogate, with the share of samples whose V-trace ratio the advantage
        estimator truncated (`is_truncated_fraction`) where it truncates one."""
        value, metrics = self.policy_loss(t, hp)
        if self.advantages.truncated_log_rho is None:
            return value, metrics
        truncated = losses.exceeds_cap(self.advantages.truncated_log_rho(t), hp.rho_bar)
        return value, {**metrics,
                       "is_truncated_fraction": truncated.mean(dtype=jax.numpy.float32)}

    def inert_at_one_step(self, tv_reference: str) -> str | None:
        """Why its trust region could never act with one gradient step per phase, or None."""
        if self.tv_filter and tv_reference == "phase":
            return ("its TV filter measures pi_theta/pi_T (tv_reference='phase'), which is "
                    "exactly 1 at a phase's only gradient step; set tv_reference='behaviour' "
                    "(the filter then measures pi_theta/beta) or take more than one step per "
                    "phase (epochs or minibatches > 1)")
        if self.phase_clip_only:
            return ("its clip bounds pi_theta/pi_T, which is exactly 1 at a phase's only "
                    "gradient step; take more than one step per phase (epochs or minibatches "
                    "> 1), or use algo='ppo' (clipped to the behaviour policy)")
        return None


def _behaviour_ratio(t: PolicyTerms):
    return t.log_prob - t.behaviour_log_prob


def _phase_ratio(t: PolicyTerms):
    return t.log_prob - t.phase_log_prob


def _staleness(t: PolicyTerms):
    return t.phase_log_prob - t.behaviour_log_prob


@dataclasses.dataclass(frozen=True)
class Advantages:
    """An advantage estimator: `estimate(terms, hp) -> (advantages, value targets)`, taken once
    at phase start with `pi_T` as the target policy, or, `per_minibatch`, again at every
    minibatch from the current parameters. `truncated_log_rho`, for V-trace, reads from a
    surrogate's terms the log-ratio whose exp it truncates at `rho_bar`, so that the truncation
    is reported as a mechanism (`Algorithm.loss`); None for GAE, which truncates nothing."""

    name: str
    estimate: Callable[[ValueTerms, HParamsBase], tuple[jax.Array, jax.Array]]
    knobs: tuple[Knob, ...]
    per_minibatch: bool = False
    truncated_log_rho: Callable[[PolicyTerms], jax.Array] | None = None


_VTRACE_KNOBS = (VTRACE_LAMBDA, RHO_BAR, C_BAR, RHO_BAR_PG)
GAE = Advantages("gae", _gae, (GAE_LAMBDA,))
VTRACE_PHASE = Advantages("vtrace_phase", _vtrace, _VTRACE_KNOBS, truncated_log_rho=_staleness)
VTRACE_MINIBATCH = Advantages("vtrace_minibatch", _vtrace, _VTRACE_KNOBS, per_minibatch=True,
                              truncated_log_rho=_behaviour_ratio)

CLIP_EPS = Knob("clip_eps", 0.2, "PPO's clip range of the ratio, [1 - eps, 1 + eps]", "(0, inf)")
IS_CAP = Knob("is_cap", 8.0, "decoupled PPO: the truncation of the staleness pi_T/beta",
              "(0, inf)")
TV_DELTA = Knob("tv_delta", 0.2, "VACO's TV budget, read under `tv_delta_convention`: the "
                "paper's MuJoCo 0.2 (`losses.TV_BUDGETS` names the authors' others)", "[0, inf)",
                named=losses.TV_BUDGETS)


def _ppo(t: PolicyTerms, hp: HParamsBase):
    return losses.ppo_clip_loss(_behaviour_ratio(t), t.advantages, hp.clip_eps)


def _ppo_kl(t: PolicyTerms, hp: HParamsBase):
    return losses.ppo_kl_loss(_behaviour_ratio(t), t.advantages, t.kl_coef)


def _spo(t: PolicyTerms, hp: HParamsBase):
    return losses.spo_loss(_behaviour_ratio(t), t.advantages, hp.clip_eps)


def _decoupled_ppo(t: PolicyTerms, hp: HParamsBase):
    loss, metrics = losses.decoupled_ppo_loss(_phase_ratio(t), _staleness(t), t.advantages,
                                              hp.clip_eps, staleness_cap=hp.is_cap)
    truncated = losses.exceeds_cap(_staleness(t), hp.is_cap)
    return loss, {**metrics, "is_truncated_fraction": truncated.mean(dtype=jax.numpy.float32)}


def _impala(t: PolicyTerms, hp: HParamsBase):
    # The V-trace policy-gradient advantages already carry the truncated ratio min(rho_bar_pg, r).
    return losses.policy_gradient_loss(t.log_prob, t.advantages)


def _tv_filtered(surrogate_log_ratio: Callable[[PolicyTerms], jax.Array]) -> PolicyLoss:
    """VACO's surrogate `-rho A`, with the samples that would raise TV dropped above `delta`.

    `filter_normalization="all"`: dropped samples contribute zero but stay in the mean's count,
    so filtering also shrinks the step by the kept fraction. `"kept"`: the mean runs over the
    kept samples only, so filtering changes the step's direction, not its scale (the loss is 0
    when nothing is kept).
    """
    def loss(t: PolicyTerms, hp: HParamsBase):
        threshold = losses.tv_threshold(hp.tv_delta, t.tv_delta_convention)
        keep, filter_metrics = losses.tv_filter_mask(t.tv_log_rho, t.advantages, threshold,
                                                     tv=t.tv)
        log_ratio = surrogate_log_ratio(t)
        if t.filter_normalization == "kept":
            value, metrics = losses.importance_sampled_loss(log_ratio, t.advantages, mask=keep)
        else:
            value, metrics = losses.importance_sampled_loss(log_ratio, t.advantages, weights=keep)
        return value, {**metrics, **filter_metrics, phase.KEPT: keep.sum()}
    return loss


def _phase_importance_sampled(t: PolicyTerms, hp: HParamsBase):
    """VACO's surrogate `-r_T A` without its filter: the unclipped phase ratio."""
    return losses.importance_sampled_loss(_phase_ratio(t), t.advantages)


def _phase_ppo(t: PolicyTerms, hp: HParamsBase):
    return losses.ppo_clip_loss(_phase_ratio(t), t.advantages, hp.clip_eps)


def _sapo(t: PolicyTerms, hp: HParamsBase):
    return losses.sapo_loss(_behaviour_ratio(t), t.advantages, hp.sapo_tau_pos, hp.sapo_tau_neg,
                            aggregation="token-mean")


def _icepop(t: PolicyTerms, hp: HParamsBase):
    weights = losses.masked_is_weights(_staleness(t), hp.icepop_low, hp.icepop_high)
    loss, metrics = losses.ppo_clip_loss(_phase_ratio(t), t.advantages, hp.clip_eps,
                                         weights=weights)
    # A weight inside the band is exp(log w) > 0, so a zero weight is exactly a masked sample.
    return loss, {**metrics, "is_masked_fraction": jax.numpy.mean(weights == 0,
                                                                  dtype=jax.numpy.float32),
                  phase.KEPT: (weights > 0).sum()}


def _kl_cov(t: PolicyTerms, hp: HParamsBase):
    return losses.kl_cov_loss(_behaviour_ratio(t), t.log_prob, t.advantages, hp.kl_cov_coef,
                              hp.kl_cov_fraction)


BUILT_IN: tuple[Algorithm, ...] = (
    Algorithm("ppo", GAE, _ppo, (CLIP_EPS,), (CLIP_FRACTION,),
              description="PPO-clip on the behaviour ratio pi_theta/beta (naive asynchronous PPO)"),
    Algorithm("ppo_recompute", GAE, _phase_ppo, (CLIP_EPS,), (CLIP_FRACTION,),
              phase_clip_only=True,
              description="PPO-clip on pi_theta/pi_T, old log-probs recomputed at phase start, "
                          "no staleness correction (what most asynchronous systems run)"),
    Algorithm("ppo_kl", GAE, _ppo_kl, adaptive_kl=True,
              description="PPO with a KL(beta || pi_theta) penalty, its coefficient adapted to "
                          "the phase's KL(pi_T || pi_T+1)"),
    Algorithm("spo", GAE, _spo, (CLIP_EPS,),
              description="Simple policy optimisation (quadratic ratio penalty)"),
    Algorithm("decoupled_ppo", GAE, _decoupled_ppo, (CLIP_EPS, IS_CAP),
              (CLIP_FRACTION, IS_TRUNCATED),
              description="Clip pi_theta/pi_T, weight by truncated staleness pi_T/beta "
                          "(Hilton et al.)"),
    Algorithm("impala", VTRACE_MINIBATCH, _impala, (), (IS_TRUNCATED,), one_step_per_batch=True,
              description="IMPALA policy gradient, V-trace from the current parameters, one "
                          "gradient step per batch"),
    Algorithm("impala_multistep", VTRACE_MINIBATCH, _impala, (), (IS_TRUNCATED,),
              superseded=Superseded("impala", "2026-11-28"),
              description="IMPALA's loss reused for epochs x minibatches steps, V-trace "
                          "recomputed every minibatch (`impala` before the fidelity review)"),
    Algorithm("vaco", VTRACE_PHASE, _tv_filtered(_phase_ratio), (TV_DELTA,),
              (FILTER_FRACTION, IS_TRUNCATED), tv_filter=True,
              description="VACO: V-trace realignment once per phase + TV filtering of gradients"),
    Algorithm("vaco_filter_only", GAE, _tv_filtered(_phase_ratio), (TV_DELTA,),
              (FILTER_FRACTION,), tv_filter=True,
              description="VACO ablation: vaco with GAE advantages instead of the realignment"),
    Algorithm("vaco_filter_only_behaviour", GAE, _tv_filtered(_behaviour_ratio), (TV_DELTA,),
              (FILTER_FRACTION,), tv_filter=True,
              superseded=Superseded("vaco_filter_only", "2026-11-28"),
              description="VACO ablation (`vaco_filter_only` before the fidelity review): GAE "
                          "advantages and -r A on the behaviour ratio, two changes from vaco"),
    Algorithm("vaco_realign_only", VTRACE_PHASE, _phase_ppo, (CLIP_EPS,),
              (CLIP_FRACTION, IS_TRUNCATED), phase_clip_only=True,
              description="VACO ablation: PPO-clip on realigned advantages, no filter"),
    Algorithm("vaco_no_filter", VTRACE_PHASE, _phase_importance_sampled, (), (IS_TRUNCATED,),
              description="VACO ablation (one change): vaco without its TV filter, the unclipped "
                          "-r A on pi_theta/pi_T with realigned advantages"),
    # Not VCPO: VCPO targets an ESS ratio of 1 with clipping effectively off; this keeps
    # decoupled PPO's clip and `ess_target` (default 0.5) and borrows only the ESS step scaling.
    Algorithm("decoupled_ppo_ess", GAE, _decoupled_ppo, (CLIP_EPS, IS_CAP),
              (CLIP_FRACTION, IS_TRUNCATED), ess_scaling=True,
              description="Decoupled PPO (clip, truncated IS) with an ESS-scaled learning rate "
                          "(sqrt(min(1, ess/ess_target)))"),
    Algorithm("sapo", GAE, _sapo, (SAPO_TAU_POS, SAPO_TAU_NEG), (GATE_WEIGHT_MEAN,),
              description="SAPO: -4/tau sigmoid(tau (r - 1)) A on the behaviour ratio, a soft gate "
                          "in place of PPO's clip (Gao et al. 2025)"),
    Algorithm("icepop", GAE, _icepop, (CLIP_EPS, ICEPOP_LOW, ICEPOP_HIGH),
              (CLIP_FRACTION, IS_MASKED),
              description="IcePop: PPO-clip on pi_theta/pi_T weighted by the staleness pi_T/beta "
                          "inside [icepop_low, icepop_high], masked outside (Ling Team 2025)"),
    Algorithm("kl_cov", GAE, _kl_cov, (KL_COV_COEF, KL_COV_FRACTION), (KL_PENALTY_MEAN,),
              description="KL-Cov: unclipped -r A on the behaviour ratio plus kl_cov_coef |log r| "
                          "on the samples of largest covariance (A - mean A)(log pi - mean log pi) "
                          "(Cui et al. 2025)"),
)

# The stabiliser columns in the order control metrics tables listed them before each entry
# declared its metrics (`knobs.columns`).
_COLUMNS = ("clip_fraction", "filter_fraction", "is_truncated_fraction", "is_masked_fraction",
            "gate_weight_mean", "kl_penalty_mean")
_REPORTED = knobs.columns((m for a in BUILT_IN for m in a.metrics), _COLUMNS)
MECHANISMS = tuple(n for n in _REPORTED if n in phase.MECHANISM_FRACTIONS)
"""The stabilisers control algorithms have (`phase.MECHANISM_FRACTIONS`), recorded for every
algorithm, NaN where it has none, with the share of each phase's steps at which they acted."""
SOFT_STABILISERS = tuple(n for n in _REPORTED if n not in phase.MECHANISM_FRACTIONS)
"""Soft stabilisers weigh every sample rather than drop some: their per-step means, NaN where an
algorithm has none (SAPO's gate slope, 1 on-policy; KL-Cov's penalty)."""


ALGORITHMS: AlgorithmRegistry[Algorithm] = AlgorithmRegistry(
    "control", Algorithm, BUILT_IN, columns=_REPORTED)
