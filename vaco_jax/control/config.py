"""The control testbed's settings and their validation.

`ControlConfig` fixes the shape of the compiled program: changing any of its fields compiles a
new program. `ControlHParams` (`vaco_jax.control.hparams`, importable from here with the
config it goes with) holds the numeric hyper-parameters as pytree leaves, so one compiled
program can be `jax.vmap`-ed over seeds and hyper-parameter values alike. `validate` checks
both before anything compiles.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from vaco_jax import losses
from vaco_jax.control import algorithms, envs
from vaco_jax.control.hparams import EVERY_RUN_KNOBS, ControlHParams, algorithm_knobs
from vaco_jax.control.networks import ACTIVATIONS
from vaco_jax.core.config import (Config, check_choice, check_lag_settings, check_positive_int,
                                   once_per_config)
from vaco_jax.core.lag_models import Fixed, LagModel
from vaco_jax.core.lag_presets import LagPreset

TV_REFERENCES = ("phase", "behaviour")
TV_SCOPES = ("minibatch", "batch")
TV_ESTIMATORS = ("unweighted", "weighted")
FILTER_NORMALIZATIONS = ("all", "kept")
ACTING_STRATEGIES = ("gather", "select")
ADVANTAGE_NORMALIZATIONS = ("scale", "standardize", "none")
REWARD_SCALINGS = ("return_std", "none")  # see vaco_jax.control.reward_scaling
GRAD_CLIPS = ("global", "per_network")
LEARNING_RATE_SCHEDULES = ("constant", "linear")
RESTARTS = ("fresh", "first")  # see vaco_jax.control.envs.episodes.restart_states


@dataclasses.dataclass(frozen=True)
class ControlConfig(Config):
    """Structural settings of one training program (static under `jit`)."""

    testbed: ClassVar[str] = "control"
    env: str = "inverted_double_pendulum"
    backend: str | None = None  # None: the task's default (MJX for Brax tasks)
    algo: str = "ppo"
    num_envs: int = 64
    rollout_length: int = 32
    total_steps: int = 100_000
    epochs: int = 4
    minibatches: int = 4
    buffer_capacity: int = 16
    # A `vaco_jax.core.lag_models` object; `Empirical` holds P(lag = j) for j = 0..len-1,
    # e.g. a histogram measured on a cluster.
    lag_model: LagModel = Fixed()
    # Lags drawn beyond the versions pushed so far (the first `buffer_capacity - 1` updates):
    # `clip` acts with the oldest version, piling the excess probability there; `redraw` draws
    # them again from the lag model restricted to the existing versions (`LagModel.draw`), the
    # default: `clip` acts with the initial policy more often than the lag model says.
    lag_warmup: str = "redraw"
    # The `vaco_jax.core.lag_presets` object that named `lag_model` (a production system's
    # setting), recorded so that a run says which system it models; None: none did.
    lag_preset: LagPreset | None = None
    episode_length: int = 1000
    actor_hidden: tuple[int, ...] = (64, 64)
    critic_hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"  # of the hidden layers of both networks
    # `linear` decays the learning rate to 0 over the run, once per update (PureJaxRL's
    # `ANNEAL_LR`).
    learning_rate_schedule: str = "constant"
    normalize_observations: bool = True
    # `scale` divides minibatch advantages by their std and keeps their signs. Subtracting the
    # mean (`standardize`) biases surrogates whose ratio is not taken to the behaviour policy
    # (VACO, decoupled PPO): E_beta[grad pi_theta/pi_T] != 0 once beta != pi_T.
    advantage_normalization: str = "scale"
    # `return_std` divides the learner's rewards by the running std of discounted returns.
    reward_scaling: str = "return_std"
    # `max_grad_norm` bounds one norm over actor and critic (`global`) or each network's own.
    grad_clip: str = "global"
    adaptive_kl: bool = True
    eval_every: int = 10
    num_eval_envs: int = 16
    tv_reference: str = "phase"
    tv_scope: str = "minibatch"
    # How VACO's `tv_delta` becomes the filter's TV threshold: `budget` (the authors' code: an
    # L1 budget, the filter acting once 0.5 mean|rho - 1| > tv_delta / 2) or `tv` (tv_delta
    # is the threshold itself, as in results committed before 2026-11-25).
    tv_delta_convention: str = "budget"
    # VACO's filter TV: `unweighted` is the paper's `0.5 mean_beta |pi_theta/ref - 1|`;
    # `weighted` importance-weights each sample by `ref/beta` (self-normalised) so that it
    # estimates TV(pi_theta, ref) itself.
    tv_estimator: str = "unweighted"
    # The denominator of VACO's filtered surrogate: `all` divides by every sample of the
    # minibatch (filtering zeroes terms, so it also shrinks the step), `kept` by the samples the
    # filter keeps (filtering changes the step's direction only; 0 when nothing is kept).
    filter_normalization: str = "all"
    acting: str = "gather"
    # Where a finished environment restarts: `fresh`, an initial state drawn for each
    # environment once per rollout; `first`, its own first initial state every time (Brax's
    # `AutoResetWrapper`, which PureJaxRL wraps around Brax tasks: no reset inside the training
    # loop, every episode of an environment starting alike).
    restart_from: str = "fresh"

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_length

    @property
    def phase_shape(self) -> tuple[int, int]:
        """`(epochs, minibatches)` as the run takes them: `(1, 1)` for an algorithm that takes
        one step per batch (`Algorithm.one_step_per_batch`), whatever the fields say."""
        if algorithms.ALGORITHMS[self.algo].one_step_per_batch:
            return 1, 1
        return self.epochs, self.minibatches

    @property
    def updates_per_period(self) -> int:
        """Updates between two evaluations (never more than the whole run)."""
        return max(1, min(self.eval_every, self.total_steps // self.steps_per_update))

    @property
    def num_periods(self) -> int:
        """Evaluation periods; `total_steps` is rounded up to whole periods."""
        updates = max(1, math.ceil(self.total_steps / self.steps_per_update))
        return math.ceil(updates / self.updates_per_period)

    @property
    def num_updates(self) -> int:
        return self.num_periods * self.updates_per_period


def validate(config: ControlConfig, hparams: ControlHParams | None = None) -> None:
    """Raises `ValueError` naming the field and its allowed values; runs before any compilation."""
    _validate_config(config)
    if hparams is not None:
        validate_hparams(config, hparams)


@once_per_config
def _validate_config(config: ControlConfig) -> None:
    check_choice("env", config.env, envs.names())
    if config.backend is not None:
        check_choice("backend", config.backend, envs.backends_for(config.env))
    check_choice("algo", config.algo, tuple(algorithms.ALGORITHMS))
    check_lag_settings(config)
    check_choice("tv_reference", config.tv_reference, TV_REFERENCES)
    check_choice("tv_scope", config.tv_scope, TV_SCOPES)
    check_choice("tv_delta_convention", config.tv_delta_convention, losses.TV_DELTA_CONVENTIONS)
    check_choice("tv_estimator", config.tv_estimator, TV_ESTIMATORS)
    check_choice("filter_normalization", config.filter_normalization, FILTER_NORMALIZATIONS)
    check_choice("acting", config.acting, ACTING_STRATEGIES)
    check_choice("restart_from", config.restart_from, RESTARTS)
    check_choice("advantage_normalization", config.advantage_normalization, ADVANTAGE_NORMALIZATIONS)
    check_choice("reward_scaling", config.reward_scaling, REWARD_SCALINGS)
    check_choice("grad_clip", config.grad_clip, GRAD_CLIPS)
    check_choice("activation", config.activation, tuple(ACTIVATIONS))
    check_choice("learning_rate_schedule", config.learning_rate_schedule, LEARNING_RATE_SCHEDULES)
    for name in ("num_envs", "rollout_length", "total_steps", "epochs", "minibatches",
                 "buffer_capacity", "episode_length", "eval_every", "num_eval_envs"):
        check_positive_int(name, getattr(config, name))
    for name in ("actor_hidden", "critic_hidden"):
        sizes = getattr(config, name)
        if not isinstance(sizes, tuple) or not sizes or any(
                not isinstance(s, int) or s <= 0 for s in sizes):
            raise ValueError(f"{name} must be a non-empty tuple of positive integers, got {sizes!r}")
    epochs, minibatches = config.phase_shape
    inert = (algorithms.ALGORITHMS[config.algo].inert_at_one_step(config.tv_reference)
             if epochs * minibatches == 1 else None)
    if inert:
        raise ValueError(f"algo={config.algo!r} with epochs={epochs} and "
                         f"minibatches={minibatches} is refused: {inert}")
    if algorithms.ALGORITHMS[config.algo].minibatch_over_envs:
        if config.num_envs % minibatches:
            raise ValueError(
                f"num_envs={config.num_envs} must be divisible by minibatches={minibatches} "
                f"for algo={config.algo!r}, whose minibatches are whole environment trajectories")
    elif config.steps_per_update % minibatches:
        raise ValueError(
            f"num_envs * rollout_length = {config.steps_per_update} must be divisible by "
            f"minibatches={minibatches}")


def adapts_kl_coef(config: ControlConfig) -> bool:
    """Whether the run adapts its KL coefficient between phases (`adaptive_kl` algorithms)."""
    return config.adaptive_kl and algorithms.ALGORITHMS[config.algo].adaptive_kl


def validate_hparams(config: ControlConfig, hparams: ControlHParams) -> None:
    """Each knob within its range (`HParamsBase.check`), the adaptive KL coefficient within its
    own, and the lag within what the lag model and the buffer allow."""
    hparams.check()
    if adapts_kl_coef(config):
        values = {n: np.asarray(getattr(hparams, n), np.float64)
                  for n in ("kl_coef", "kl_coef_min", "kl_coef_max")}
        low, high = values["kl_coef_min"], values["kl_coef_max"]
        if np.any((values["kl_coef"] < low) | (values["kl_coef"] > high)):
            raise ValueError(f"hyper-parameter kl_coef must lie in [kl_coef_min, kl_coef_max] "
                             f"for the adaptive coefficient of algo={config.algo!r}, got kl_coef="
                             f"{values['kl_coef'].tolist()}, kl_coef_min={low.tolist()} and "
                             f"kl_coef_max={high.tolist()}")
    config.lag_model.check_level(np.asarray(hparams.lag, np.float64), config.buffer_capacity)


def knobs(config: ControlConfig) -> frozenset[str]:
    """The knobs a run of `config` reads: every run's and its algorithm's
    (`hparams.algorithm_knobs`)."""
    algorithm = algorithms.ALGORITHMS[config.algo]
    return frozenset(k.name for k in (*EVERY_RUN_KNOBS, *algorithm_knobs(algorithm)))
