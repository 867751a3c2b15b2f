"""`vaco-jax train`: one control algorithm on one task over vmapped seeds."""

from __future__ import annotations

import argparse

from vaco_jax import testbeds
from vaco_jax.cli.common import LAG_HELP, add_hparam_flag, parse_lag
from vaco_jax.cli.config_flags import Flag, add_config_flags, config_values
from vaco_jax.control import algorithms, envs
from vaco_jax.control.config import ControlConfig, ControlHParams

OUT = "runs/train"


COMPOSED = ("lag_model", "lag_preset")
"""The fields set by flags of their own: the lag model and its preset by `--lag` (with the `lag`
value)."""


def _flags() -> dict[str, Flag]:
    """Each field's flag; built with the parser, since packages may register tasks (see
    `vaco-jax envs`)."""
    return {
        "env": Flag(f"task name, one of: {', '.join(envs.names())}"),
        "backend": Flag("physics backend (default: the task's first, as `vaco-jax envs` lists "
                        "them)"),
        "algo": Flag("the algorithm (docs/algorithms.md)", choices=tuple(algorithms.ALGORITHMS)),
        "num_envs": Flag("parallel environments per run, each acting with its own stale policy"),
        "rollout_length": Flag("steps per environment per update"),
        "total_steps": Flag("environment steps per run"),
        "epochs": Flag("passes over each update's batch (forward lag, with --minibatches)"),
        "minibatches": Flag("minibatches per epoch"),
        "buffer_capacity": Flag("policy buffer size K"),
        "lag_warmup": Flag("lags beyond the versions pushed so far: clip (to the oldest version) "
                           "or redraw (from the lag model restricted to the existing versions)"),
        "episode_length": Flag("time limit of an episode, steps (default: the task's own, as "
                               "`vaco-jax envs` lists it)", default=None),
        "actor_hidden": Flag("the actor MLP's hidden sizes, comma-separated"),
        "critic_hidden": Flag("the critic MLP's hidden sizes, comma-separated"),
        "activation": Flag("hidden-layer activation of both networks: tanh or relu"),
        "learning_rate_schedule": Flag("constant, or linear (decays to 0 over the run, once per "
                                       "update)"),
        "normalize_observations": Flag("observations normalised by running statistics, which "
                                       "every policy snapshot carries with it"),
        "advantage_normalization": Flag("minibatch advantages: scale, standardize or none"),
        "reward_scaling": Flag("learner's reward scaling: return_std or none"),
        "grad_clip": Flag("max_grad_norm over both networks (global) or each (per_network)"),
        "adaptive_kl": Flag("algorithms with an adaptive KL penalty (ppo_kl): adapt its "
                            "coefficient between phases, else keep it at its initial value"),
        "eval_every": Flag("updates between evaluations"),
        "num_eval_envs": Flag("environments of each evaluation (the current policy, "
                              "deterministic)"),
        "tv_reference": Flag("VACO's filter: the ratio's reference, phase (pi_T, the policy at "
                             "the phase's start) or behaviour (beta)"),
        "tv_scope": Flag("VACO's filter: the TV estimate per minibatch or over the whole batch"),
        "tv_delta_convention": Flag(
            "VACO's filter: how tv_delta reads. budget (the authors' code): an L1 budget, the "
            "filter acting once 0.5 mean |ratio - 1| > tv_delta / 2; tv: tv_delta is the TV "
            "threshold itself (the older committed results')"),
        "tv_estimator": Flag("VACO's filter: unweighted (the paper's 0.5 mean |ratio - 1|) or "
                             "weighted (importance-weighted, an estimate of the TV itself)"),
        "filter_normalization": Flag("VACO's filtered mean divides by all samples (all) or the "
                                     "kept ones (kept)"),
        "acting": Flag("per-environment policy strategy: gather or select"),
        "restart_from": Flag("where a finished environment restarts: fresh (an initial state "
                             "drawn once per rollout) or first (its own first one, as Brax's "
                             "auto-reset)"),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The control testbed's flags (the run flags are added by the caller)."""
    add_config_flags(p, ControlConfig, _flags(), COMPOSED)
    p.add_argument("--lag", type=parse_lag, default="fixed:0", help=LAG_HELP)
    add_hparam_flag(p, ControlHParams)


def build(args: argparse.Namespace) -> tuple[ControlConfig, ControlHParams]:
    """The config and hyper-parameters the flags of `add_arguments` give."""
    # What the flags leave out the task brings (its time limit), as it does in a sweep.
    config = ControlConfig(**{**testbeds.CONTROL.task_defaults(args.env),
                              **config_values(args, ControlConfig, COMPOSED)},
                           **args.lag.config_fields())
    return config, ControlHParams.create(lag=args.lag.level, **dict(args.hparam))
