"""Settings of the token testbed: static `TokenConfig`, and traced `TokenHParams` holding the
knobs every run reads, declared here, and its algorithm's (`vaco_jax.tokens.algorithms`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import numpy as np

from vaco_jax import losses
from vaco_jax.core.config import (Config, ConfigAxis, HParamsBase, check_choice,
                                   check_lag_settings, check_positive_int, once_per_config)
from vaco_jax.core.knobs import Knob, by_name
from vaco_jax.losses import AGGREGATIONS
from vaco_jax.core.lag_models import LAG, Fixed, LagModel
from vaco_jax.core.lag_presets import LagPreset
from vaco_jax.tokens import algorithms
from vaco_jax.tokens.model import ModelSpec
from vaco_jax.tokens.replay import REPLAY_ONLINE_PROB
from vaco_jax.tokens.tasks import REWARD_ON, TASKS, Task, make_task
from vaco_jax.tokens.warm_start import WarmStart

GROUP_UNITS = ("prompt", "sample")
IN_FLIGHT_CACHES = ("shared", "per_snapshot")
OPTIMIZERS = ("adam", "adamw")


@dataclasses.dataclass(frozen=True)
class TokenConfig(Config):
    """Everything that shapes the compiled program.

    One update samples `prompts` training prompts, `group_size` responses each. A generator is
    one prompt group (`group_unit="prompt"`) or one sample (`"sample"`); each draws its own
    behaviour policy from the last `buffer_capacity` policies under `lag_model` (any of the
    engine's; under `in_flight` each token has its own version). The phase then takes
    `epochs x minibatches` gradient steps (the forward lag). Every `eval_every` updates the
    learner's greedy accuracy on `eval_prompts` held-out prompts is measured.
    """

    testbed: ClassVar[str] = "tokens"
    # The sampler/trainer numeric mismatch as an axis of its own beside the lag: behaviour
    # log-probs from the learner's float32 weights or from bfloat16 copies.
    axes: ClassVar[tuple[ConfigAxis, ...]] = (
        ConfigAxis("bf16_behaviour", ((False, "fp32"), (True, "bf16"))),)
    task: str = "add"
    task_size: int = 2
    algo: str = "grpo"  # one of `vaco_jax.tokens.algorithms.ALGORITHMS`
    # `tis` and `mis`: one importance weight per token, or each sequence's product of ratios.
    is_level: str = "token"
    # `gspo`, `cispo` (ratio to pi_T): verl's rollout correction, the staleness pi_T / beta per
    # token or per sequence truncated at `is_cap`, multiplying the per-token loss; `none` is
    # verl's default (`rollout_is: null`).
    rollout_is: str = "none"
    # The policy the trust regions of `vaco`, `grpo_tv_filter` and `dppo_*` measure the learner
    # against: `behaviour` (beta, TVPO's and DPPO's bypass mode, as in the authors' research
    # scripts; the ratio that varies at one gradient step per version) or `phase` (pi_T, the
    # learner at the phase's start, verl's recomputed old policy).
    tv_reference: str = "behaviour"
    # `vaco` (TVPO): the TV estimate's scope, `prompt` (a token is kept while the batch's or
    # its prompt group's TV is within the threshold, the authors' default) or `batch`.
    tv_scope: str = "prompt"
    # How `tv_delta` becomes a TV threshold (`losses.TV_DELTA_CONVENTIONS`): `budget` (the
    # authors' code, threshold tv_delta / 2) or `tv` (tv_delta itself, as in results committed
    # before 2026-11-25).
    tv_delta_convention: str = "budget"
    layers: int = 2
    width: int = 64
    heads: int = 4
    context: int = 16
    response_slack: int = 1  # tokens a response may run beyond the answer's length
    prompts: int = 8
    group_size: int = 8
    group_unit: str = "prompt"
    scale_advantages_by_std: bool = True
    # A `vaco_jax.core.lag_models` object; `Empirical` holds P(lag = j) for j = 0..len-1,
    # e.g. a histogram measured on a cluster.
    lag_model: LagModel = Fixed()
    # Lags beyond the versions pushed so far: `redraw` (the default) or `clip` (`LagModel.draw`).
    lag_warmup: str = "redraw"
    # The `vaco_jax.core.lag_presets` object that named `lag_model`, or None.
    lag_preset: LagPreset | None = None
    buffer_capacity: int = 4
    epochs: int = 1
    minibatches: int = 1
    # `adam` (every committed result) or `adamw`, Adam with decoupled `weight_decay` as VCPO's
    # scripts run it (with `group_size=16`).
    optimizer: str = "adam"
    aggregation: str = "token-mean"
    bf16_behaviour: bool = False
    # `in_flight` decoding, when a generator's version changes mid-response: `shared` (one
    # cache, each position's keys and values from the snapshot that decoded it, the engine's own
    # log-prob recorded: PipelineRL's engines, so the default, at one policy's cost) or
    # `per_snapshot` (every buffered snapshot decodes every row with its own cache, so each
    # token's behaviour log-prob is one snapshot's over the whole prefix; K times the cost; the
    # committed `tokens_in_flight` study ran it).
    in_flight_cache: str = "shared"
    # What the verifier compares (`tasks.REWARD_ON`): the whole answer (`solution`), or only its
    # final result (`result`; the worked steps of `add_steps` and `chain` need only be digits).
    # It scores the held-out evaluation too.
    reward_on: str = "solution"
    partial_credit: bool = False
    format_penalty: float = 0.0
    # TBA's replay buffer (`vaco_jax.tokens.replay`): each update's generation is stored, and
    # its batch drawn from the update's own groups (`replay_online_prob`) or the stored ones.
    replay: bool = False
    # The prompt groups the store keeps, the oldest overwritten; None keeps every group of the
    # run, as TBA keeps every prompt it has seen.
    replay_capacity: int | None = None
    num_updates: int = 40
    eval_every: int = 10
    eval_prompts: int = 128
    warm_start: WarmStart = WarmStart()
    warm_start_dir: str | None = None

    @property
    def task_spec(self) -> Task:
        return make_task(self.task, self.task_size)

    @property
    def model_spec(self) -> ModelSpec:
        return ModelSpec(self.layers, self.width, self.heads, self.context)

    @property
    def response_length(self) -> int:
        return self.task_spec.answer_length + self.response_slack

    @property
    def batch_size(self) -> int:
        return self.prompts * self.group_size

    @property
    def replay_groups(self) -> int:
        """The prompt groups the replay store holds."""
        return self.replay_capacity or self.num_updates * self.prompts

    @property
    def generators(self) -> int:
        return self.prompts if self.group_unit == "prompt" else self.batch_size

    @property
    def num_periods(self) -> int:
        return self.num_updates // self.eval_every

    @property
    def updates_per_period(self) -> int:
        return self.eval_every

    @property
    def steps_per_update(self) -> int:
        """Responses sampled per update, the unit of training progress."""
        return self.batch_size


LEARNING_RATE = Knob("learning_rate", 3e-4, "Adam's step size (1e-3 is unstable on `add` from "
                     "the warm start)", "(0, inf)")
TEMPERATURE = Knob("temperature", 1.0, "the sampling temperature of generation and of the "
                   "log-probabilities", "(0, inf)")
MAX_GRAD_NORM = Knob("max_grad_norm", 1.0, "the global gradient norm clipped to", "(0, inf)")
EVERY_RUN_KNOBS = (LEARNING_RATE, LAG, TEMPERATURE, MAX_GRAD_NORM)
"""What every token run reads."""
WEIGHT_DECAY = Knob("weight_decay", 0.1, "`optimizer='adamw'` only: decoupled weight decay "
                    "(VCPO's 0.1)", "[0, inf)")


class TokenHParams(HParamsBase):
    """A token run's knobs, traced: vmappable over runs without recompiling."""

    recorded: ClassVar[tuple[str, ...]] = (
        "learning_rate", "weight_decay", "lag", "clip_eps", "temperature", "max_grad_norm",
        "is_cap", "mis_low", "freshness_alpha", "m2po_tau", "gspo_clip_low", "gspo_clip_high",
        "cispo_eps_low", "cispo_eps_high", "bapo_positive_share", "bapo_low_start",
        "bapo_low_end", "bapo_high_start", "bapo_high_end", "tv_delta", "trust_is_cap",
        "dppo_delta_low", "dppo_delta_high", "dppo_kl_delta", "tba_beta", "tba_beta_final",
        "tba_beta_decay_updates", "vcpo_is_cap", "ess_target", "sapo_tau_pos", "sapo_tau_neg",
        "gmpo_clip_low", "gmpo_clip_high", "icepop_low", "icepop_high", "opsm_delta",
        "kl_cov_coef", "kl_cov_fraction")

    @classmethod
    def knob_table(cls) -> Mapping[str, Knob]:
        return by_name([*EVERY_RUN_KNOBS, WEIGHT_DECAY, REPLAY_ONLINE_PROB,
                            *(k for a in algorithms.ALGORITHMS.values() for k in a.knobs)])


def knobs(config: TokenConfig) -> frozenset[str]:
    """The knobs a run of `config` reads: every run's, AdamW's weight decay where it runs AdamW,
    the replay's share of the update's own groups where it replays, and those its algorithm's
    entry declares (`TokenAlgorithm.knobs`)."""
    optimiser = (WEIGHT_DECAY,) if config.optimizer == "adamw" else ()
    replayed = (REPLAY_ONLINE_PROB,) if config.replay else ()
    return frozenset(k.name for k in (*EVERY_RUN_KNOBS, *optimiser, *replayed,
                                      *algorithms.ALGORITHMS[config.algo].knobs))


def algorithm_setting(algo: str, values: Mapping[str, Any],
                      pinned: Collection[str] = ()) -> dict[str, Any]:
    """The config values `algo`'s authors run it at (`TokenAlgorithm.setting`) that a run of
    `values` (the fields it sets; the others at `TokenConfig`'s defaults) takes: every one but
    those `pinned` for this algorithm (its own `[overrides.ALGO.config]`, a command line's
    flags). A group size so taken keeps the run's samples per update, `prompts x group_size`,
    with fewer or more prompts (refused, naming the fields, where they do not divide)."""
    if algo not in algorithms.ALGORITHMS:
        return {}  # `validate` refuses the name, listing the known ones
    taken = {k: v for k, v in algorithms.ALGORITHMS[algo].setting.items() if k not in pinned}
    if "group_size" in taken and "prompts" not in pinned:
        defaults = TokenConfig()
        samples = (values.get("prompts", defaults.prompts)
                   * values.get("group_size", defaults.group_size))
        if samples % taken["group_size"]:
            raise ValueError(f"{algo} runs at group_size={taken['group_size']} as its authors "
                             f"do, keeping the run's samples per update, but prompts x "
                             f"group_size = {samples} is not a multiple of it; set group_size "
                             f"for {algo} ([overrides.{algo}.config] or --group-size)")
        taken["prompts"] = samples // taken["group_size"]
    return taken


def validate(config: TokenConfig, hparams: TokenHParams | None = None) -> None:
    """Raises a `ValueError` naming the field and its allowed values, before any tracing."""
    _validate_config(config)
    if hparams is not None:
        validate_hparams(config, hparams)


@once_per_config
def _validate_config(config: TokenConfig) -> None:
    check_choice("task", config.task, tuple(TASKS))
    check_choice("reward_on", config.reward_on, REWARD_ON)
    check_choice("group_unit", config.group_unit, GROUP_UNITS)
    check_choice("in_flight_cache", config.in_flight_cache, IN_FLIGHT_CACHES)
    check_choice("optimizer", config.optimizer, OPTIMIZERS)
    check_choice("aggregation", config.aggregation, AGGREGATIONS)
    check_choice("algo", config.algo, tuple(algorithms.ALGORITHMS))
    check_choice("is_level", config.is_level, algorithms.IS_LEVELS)
    check_choice("rollout_is", config.rollout_is, algorithms.ROLLOUT_IS)
    check_choice("tv_reference", config.tv_reference, algorithms.TV_REFERENCES)
    check_choice("tv_scope", config.tv_scope, algorithms.TV_SCOPES)
    check_choice("tv_delta_convention", config.tv_delta_convention,
                 losses.TV_DELTA_CONVENTIONS)
    for field in ("task_size", "layers", "width", "heads", "context", "prompts", "group_size",
                  "buffer_capacity", "epochs", "minibatches", "num_updates", "eval_every",
                  "eval_prompts"):
        check_positive_int(field, getattr(config, field))
    check_lag_settings(config)
    if config.replay_capacity is not None and not config.replay:
        raise ValueError(f"replay_capacity={config.replay_capacity} is read only with "
                         f"replay=true")
    if config.replay and algorithms.ALGORITHMS[config.algo].refuses_stale:
        raise ValueError(f"replay=true is refused for algo={config.algo!r}, which refuses "
                         f"stale generations at collection: a replayed group is as old as it "
                         f"was stored, past any freshness bound")
    if config.replay_capacity is not None:
        check_positive_int("replay_capacity", config.replay_capacity)
        if config.replay_capacity < config.prompts:
            raise ValueError(f"replay_capacity={config.replay_capacity} must hold one update's "
                             f"prompt groups, prompts={config.prompts}")
    if config.width % config.heads:
        raise ValueError(f"width={config.width} must be a multiple of heads={config.heads}")
    if config.response_slack < 0:
        raise ValueError(f"response_slack must be >= 0, got {config.response_slack}")
    needed = config.task_spec.prompt_length + config.response_length
    if config.context < needed:
        raise ValueError(
            f"context={config.context} is too short for task={config.task!r} with "
            f"task_size={config.task_size}: prompt ({config.task_spec.prompt_length}) + response "
            f"({config.response_length}) need context >= {needed}")
    if config.group_size < 2:
        raise ValueError(f"group_size={config.group_size} leaves group-relative advantages "
                         f"always 0; allowed: group_size >= 2")
    algorithm = algorithms.ALGORITHMS[config.algo]
    if (algorithm.trust_region_ratio and config.tv_reference == "phase"
            and config.epochs * config.minibatches == 1):
        raise ValueError(
            f"algo={config.algo!r} with tv_reference='phase', epochs={config.epochs} and "
            f"minibatches={config.minibatches} is refused: its trust region measures "
            f"pi_theta/pi_T, which is exactly 1 at a phase's only gradient step, so it can "
            f"never act; set tv_reference='behaviour' (it then measures pi_theta/beta) or take "
            f"more than one step per version (epochs or minibatches > 1)")
    if config.rollout_is != "none" and not algorithm.rollout_correction:
        with_it = ", ".join(a.name for a in algorithms.ALGORITHMS.values() if a.rollout_correction)
        raise ValueError(f"rollout_is={config.rollout_is!r} is refused for algo={config.algo!r}, "
                         f"which has no rollout correction; allowed for: {with_it}")
    if config.batch_size % config.minibatches:
        raise ValueError(f"minibatches={config.minibatches} must divide prompts x group_size "
                         f"= {config.batch_size}")
    if config.num_updates % config.eval_every:
        raise ValueError(f"eval_every={config.eval_every} must divide "
                         f"num_updates={config.num_updates}")


def validate_hparams(config: TokenConfig, hparams: TokenHParams) -> None:
    """Each knob within its range (`HParamsBase.check`) and the lag within what the lag model
    and the buffer allow."""
    hparams.check()
    config.lag_model.check_level(np.asarray(hparams.lag, np.float64), config.buffer_capacity)
