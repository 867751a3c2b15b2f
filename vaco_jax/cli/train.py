"""`vaco-jax train`: one control algorithm on one task over vmapped seeds."""

from __future__ import annotations

import argparse

from vaco_jax import testbeds
from vaco_jax.cli.common import HPARAM_HELP, LAG_HELP, hparam_type, parse_lag
from vaco_jax.control import algorithms, envs
from vaco_jax.control.config import ControlConfig, ControlHParams

OUT = "runs/train"


def _int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The control testbed's flags (the run flags are added by the caller)."""
    defaults = ControlConfig()
    # Listed when the parser is built: packages may register tasks (see `vaco-jax envs`).
    p.add_argument("--env", default=defaults.env,
                   help=f"task name, one of: {', '.join(envs.names())}")
    p.add_argument("--backend", default=None,
                   help="physics backend (default: the task's first, as `vaco-jax envs` lists "
                        "them)")
    p.add_argument("--algo", default=defaults.algo, choices=tuple(algorithms.ALGORITHMS),
                   help="the algorithm (README.md: Algorithms)")
    p.add_argument("--lag", type=parse_lag, default="fixed:0", help=LAG_HELP)
    p.add_argument("--lag-warmup", default=defaults.lag_warmup,
                   help="lags beyond the versions pushed so far: clip (to the oldest version) or "
                        "redraw (from the lag model restricted to the existing versions)")
    p.add_argument("--total-steps", type=int, default=defaults.total_steps,
                   help="environment steps per run")
    p.add_argument("--num-envs", type=int, default=defaults.num_envs,
                   help="parallel environments per run, each acting with its own stale policy")
    p.add_argument("--rollout-length", type=int, default=defaults.rollout_length,
                   help="steps per environment per update")
    p.add_argument("--epochs", type=int, default=defaults.epochs,
                   help="passes over each update's batch (forward lag, with --minibatches)")
    p.add_argument("--minibatches", type=int, default=defaults.minibatches,
                   help="minibatches per epoch")
    p.add_argument("--buffer-capacity", type=int, default=defaults.buffer_capacity,
                   help="policy buffer size K")
    p.add_argument("--episode-length", type=int, default=None,
                   help="time limit of an episode, steps (default: the task's own, as "
                        "`vaco-jax envs` lists it)")
    p.add_argument("--eval-every", type=int, default=defaults.eval_every,
                   help="updates between evaluations")
    p.add_argument("--num-eval-envs", type=int, default=defaults.num_eval_envs,
                   help="environments of each evaluation (the current policy, deterministic)")
    p.add_argument("--actor-hidden", type=_int_tuple,
                   default=",".join(map(str, defaults.actor_hidden)),
                   help="the actor MLP's hidden sizes, comma-separated")
    p.add_argument("--critic-hidden", type=_int_tuple,
                   default=",".join(map(str, defaults.critic_hidden)),
                   help="the critic MLP's hidden sizes, comma-separated")
    p.add_argument("--activation", default=defaults.activation,
                   help="hidden-layer activation of both networks: tanh or relu")
    p.add_argument("--learning-rate-schedule", default=defaults.learning_rate_schedule,
                   help="constant, or linear (decays to 0 over the run, once per update)")
    p.add_argument("--tv-reference", default=defaults.tv_reference,
                   help="VACO's filter: the ratio's reference, phase (pi_T, the policy at the "
                        "phase's start) or behaviour (beta)")
    p.add_argument("--tv-scope", default=defaults.tv_scope,
                   help="VACO's filter: the TV estimate per minibatch or over the whole batch")
    p.add_argument("--tv-delta-convention", default=defaults.tv_delta_convention,
                   help="VACO's filter: how tv_delta reads. budget (the authors' code): an L1 "
                        "budget, the filter acting once 0.5 mean |ratio - 1| > tv_delta / 2; tv: "
                        "tv_delta is the TV threshold itself (the older committed results')")
    p.add_argument("--tv-estimator", default=defaults.tv_estimator,
                   help="VACO's filter: unweighted (the paper's 0.5 mean |ratio - 1|) or weighted "
                        "(importance-weighted, an estimate of the TV itself)")
    p.add_argument("--filter-normalization", default=defaults.filter_normalization,
                   help="VACO's filtered mean divides by all samples (all) or the kept ones (kept)")
    p.add_argument("--acting", default=defaults.acting,
                   help="per-environment policy strategy: gather or select")
    p.add_argument("--restart-from", default=defaults.restart_from,
                   help="where a finished environment restarts: fresh (an initial state drawn "
                        "once per rollout) or first (its own first one, as Brax's auto-reset)")
    p.add_argument("--reward-scaling", default=defaults.reward_scaling,
                   help="learner's reward scaling: return_std or none")
    p.add_argument("--grad-clip", default=defaults.grad_clip,
                   help="max_grad_norm over both networks (global) or each (per_network)")
    p.add_argument("--advantage-normalization", default=defaults.advantage_normalization,
                   help="minibatch advantages: scale, standardize or none")
    p.add_argument("--hparam", type=hparam_type(ControlHParams), action="append", default=[],
                   metavar="NAME=VALUE", help=HPARAM_HELP)


def build(args) -> tuple[ControlConfig, ControlHParams]:
    """The config and hyper-parameters the flags of `add_arguments` give."""
    lag_model, lag = args.lag
    given = {} if args.episode_length is None else {"episode_length": args.episode_length}
    # What the flags leave out the task brings (its time limit), as it does in a sweep.
    config = ControlConfig(
        **{**testbeds.CONTROL.task_defaults(args.env), **given}, env=args.env,
        backend=args.backend, algo=args.algo, num_envs=args.num_envs,
        rollout_length=args.rollout_length, total_steps=args.total_steps, epochs=args.epochs,
        minibatches=args.minibatches, buffer_capacity=args.buffer_capacity,
        lag_model=lag_model, lag_warmup=args.lag_warmup,
        eval_every=args.eval_every, num_eval_envs=args.num_eval_envs,
        actor_hidden=args.actor_hidden, critic_hidden=args.critic_hidden, tv_reference=args.tv_reference,
        tv_scope=args.tv_scope, tv_delta_convention=args.tv_delta_convention,
        tv_estimator=args.tv_estimator,
        filter_normalization=args.filter_normalization, acting=args.acting,
        restart_from=args.restart_from, reward_scaling=args.reward_scaling,
        advantage_normalization=args.advantage_normalization, grad_clip=args.grad_clip,
        activation=args.activation, learning_rate_schedule=args.learning_rate_schedule)
    return config, ControlHParams.create(lag=lag, **dict(args.hparam))
