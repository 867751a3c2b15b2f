"""What a token algorithm is (`TokenAlgorithm`): its advantages, its policy surrogate, the knobs
the surrogate reads and the metrics it reports, and the hooks an algorithm may need beyond
them. The registry (`vaco_jax.tokens.algorithms`) holds the entries; a method of its own file
(`vaco_jax.tokens.methods`) or a plugin builds one."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax

from vaco_jax.core.knobs import Knob, Metric
from vaco_jax.core.registry import Superseded
from vaco_jax.tokens.surrogates import AdvantageFn, PolicyLoss

IS_LEVELS = ("token", "sequence")
ROLLOUT_IS = ("none",) + IS_LEVELS
TV_REFERENCES = ("behaviour", "phase")
TV_SCOPES = ("prompt", "batch")


@dataclasses.dataclass(frozen=True)
class TokenAlgorithm:
    name: str
    advantages: AdvantageFn
    policy_loss: PolicyLoss
    description: str
    source: str
    # The knobs its loss reads beyond every run's (`config.knobs`): a run holds only those, and
    # a sweep or `--hparam` of any other is refused, as it would change nothing.
    knobs: tuple[Knob, ...]
    # The metrics its loss reports, among the trainer's columns (`algorithms.STABILISER_METRICS`).
    metrics: tuple[Metric, ...] = ()
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
    # `TokenConfig` values its authors run it at, where a run does not pin them for it
    # (`config.algorithm_setting`): a group size so set keeps the run's samples per update.
    setting: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # `(hparams, updates done) -> hparams` for this phase: hyper-parameters on a schedule.
    hparam_schedule: Callable[[Any, jax.Array], Any] | None = None
    # An older variant of another method, kept so that committed results reproduce.
    superseded: Superseded | None = None
