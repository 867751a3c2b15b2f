"""`vaco-jax tokens`: any token algorithm (GRPO by default) on a token task from a cached warm
start, over vmapped seeds, run by the driver like `vaco-jax train` (the same run flags, outputs,
checkpoints and resume)."""

from __future__ import annotations

import argparse
import dataclasses

from vaco_jax.cli.common import HPARAM_HELP, LAG_HELP, hparam_type, parse_lag
from vaco_jax.core.lag_models import LAG_WARMUPS
from vaco_jax import losses
from vaco_jax.tokens.algorithms import IS_LEVELS, ROLLOUT_IS, TV_REFERENCES, TV_SCOPES
from vaco_jax.tokens.config import (ALGORITHMS, GROUP_UNITS, IN_FLIGHT_CACHES, OPTIMIZERS,
                                    TokenConfig, TokenHParams)
from vaco_jax.tokens.tasks import TASKS
from vaco_jax.run.warm_start import default_cache_dir
from vaco_jax.tokens.warm_start import PRESETS, WarmStart


OUT = "runs/tokens"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The token testbed's flags (the run flags are added by the caller)."""
    d = TokenConfig()
    p.add_argument("--task", default=d.task, choices=TASKS,
                   help="the verifiable task (README: token tasks)")
    p.add_argument("--algo", default=d.algo, choices=ALGORITHMS,
                   help="the algorithm (README: token algorithms); thresholds via --hparam")
    p.add_argument("--is-level", default=d.is_level, choices=IS_LEVELS,
                   help="tis / mis: importance weights per token or per sequence")
    p.add_argument("--rollout-is", default=d.rollout_is, choices=ROLLOUT_IS,
                   help="gspo, cispo: verl's rollout correction, the staleness pi_T/beta per "
                        "token or per sequence truncated at is_cap (none: verl's default)")
    p.add_argument("--tv-reference", default=d.tv_reference, choices=TV_REFERENCES,
                   help="vaco, grpo_tv_filter, dppo_*: the policy their trust region measures "
                        "the learner against, behaviour (beta, the authors' bypass mode) or "
                        "phase (pi_T; refused with one gradient step per version, where it "
                        "could never act)")
    p.add_argument("--tv-scope", default=d.tv_scope, choices=TV_SCOPES,
                   help="vaco (TVPO): a token is kept while the batch's or its prompt group's "
                        "TV is within the threshold (prompt), or the batch's alone (batch)")
    p.add_argument("--tv-delta-convention", default=d.tv_delta_convention,
                   choices=losses.TV_DELTA_CONVENTIONS,
                   help="how tv_delta reads: budget (the authors' code: an L1 budget, TV "
                        "threshold tv_delta / 2) or tv (the threshold itself, as in results "
                        "committed before 2026-11-25)")
    p.add_argument("--task-size", type=int, default=d.task_size,
                   help="digits per operand (add), list length (sort), steps (chain)")
    p.add_argument("--lag", type=parse_lag, default="fixed:0", help=LAG_HELP)
    p.add_argument("--lag-warmup", default=d.lag_warmup, choices=LAG_WARMUPS,
                   help="lags beyond the versions pushed so far: clip (to the oldest version) or "
                        "redraw (from the lag model restricted to the existing versions)")
    p.add_argument("--group-unit", default=d.group_unit, choices=GROUP_UNITS,
                   help="who draws its own stale policy: a prompt's group or each sample")
    p.add_argument("--buffer-capacity", type=int, default=d.buffer_capacity,
                   help="policy versions kept for stale generators (K)")
    p.add_argument("--prompts", type=int, default=d.prompts, help="prompts per update (P)")
    p.add_argument("--group-size", type=int, default=d.group_size, help="samples per prompt (G)")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS,
                   help="adam, or adamw with decoupled weight decay (hparam weight_decay, 0.1; "
                        "VCPO's scripts: adamw with --group-size 16)")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over each update's batch (forward lag, with --minibatches)")
    p.add_argument("--minibatches", type=int, default=d.minibatches,
                   help="minibatches per epoch")
    p.add_argument("--updates", type=int, default=d.num_updates, help="policy updates per run")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="updates between held-out evaluations")
    p.add_argument("--layers", type=int, default=d.layers, help="transformer layers")
    p.add_argument("--width", type=int, default=d.width, help="model width (a multiple of --heads)")
    p.add_argument("--heads", type=int, default=d.heads, help="attention heads")
    p.add_argument("--context", type=int, default=d.context,
                   help="context length, tokens (prompt + response)")
    p.add_argument("--bf16-behaviour", action="store_true",
                   help="behaviour log-probs computed in bfloat16 (sampler/trainer mismatch)")
    p.add_argument("--in-flight-cache", default=d.in_flight_cache, choices=IN_FLIGHT_CACHES,
                   help="in_flight decoding: per_snapshot (each snapshot its own key-value "
                        "cache, exact per-snapshot log-probs, K times the cost) or shared (one "
                        "cache across weight updates, as PipelineRL's engines keep it)")
    p.add_argument("--warm-start", default="calibrated", choices=tuple(PRESETS),
                   help="calibrated: trained to convergence, its held-out accuracy set by the "
                        "share of prompts whose demonstrations are mostly wrong; legacy: the "
                        "warm start of results committed before 2026-11-25, stopped mid-climb "
                        "(its accuracy depends on the CPU); the flags below override its values")
    p.add_argument("--warm-start-steps", type=int, default=None,
                   help="supervised steps of the warm start (calibrated 2000, legacy 250)")
    p.add_argument("--corrupted-share", type=float, default=None,
                   help="calibrated: share of prompts (first operand digit below 10 x share) "
                        "whose demonstrations are mostly wrong, 1 - the target accuracy")
    p.add_argument("--wrong-probability", type=float, default=None,
                   help="calibrated: probability that such a prompt's demonstration is wrong")
    p.add_argument("--corrupt-fraction", type=float, default=None,
                   help="legacy: share of the warm start's demonstrations given a wrong digit")
    p.add_argument("--warm-start-dir", default=str(default_cache_dir()),
                   help="cache of warm-start checkpoints, keyed by their settings and shared "
                        "by the runs that name it; by default the user's cache, "
                        "$XDG_CACHE_HOME/vaco_jax/warm_start, else ~/.cache/vaco_jax/warm_start")
    p.add_argument("--hparam", type=hparam_type(TokenHParams), action="append", default=[],
                   metavar="NAME=VALUE", help=HPARAM_HELP)


def build(args) -> tuple[TokenConfig, TokenHParams]:
    """The config and hyper-parameters the flags of `add_arguments` give."""
    lag_model, lag = args.lag
    config = TokenConfig(
        task=args.task, task_size=args.task_size, algo=args.algo, is_level=args.is_level,
        rollout_is=args.rollout_is,
        tv_reference=args.tv_reference, tv_scope=args.tv_scope,
        tv_delta_convention=args.tv_delta_convention, layers=args.layers, width=args.width,
        heads=args.heads, context=args.context, prompts=args.prompts,
        group_size=args.group_size, optimizer=args.optimizer, group_unit=args.group_unit, lag_model=lag_model,
        lag_warmup=args.lag_warmup,
        buffer_capacity=args.buffer_capacity, epochs=args.epochs, minibatches=args.minibatches,
        bf16_behaviour=args.bf16_behaviour, in_flight_cache=args.in_flight_cache,
        num_updates=args.updates,
        eval_every=args.eval_every,
        warm_start=_warm_start(args),
        warm_start_dir=args.warm_start_dir)
    return config, TokenHParams.create(lag=lag, **dict(args.hparam))


# Each corruption's own flags: the other's would change nothing but the cache key.
_CORRUPTION_FLAGS = {"calibrated": ("corrupted_share", "wrong_probability"),
                     "random_digit": ("corrupt_fraction",)}


def _warm_start(args: argparse.Namespace) -> WarmStart:
    """The `--warm-start` preset with the values its flags name; a flag of the other
    corruption is refused."""
    preset = PRESETS[args.warm_start]
    own = _CORRUPTION_FLAGS[preset.corruption]
    foreign = [name for names in _CORRUPTION_FLAGS.values() for name in names
               if name not in own and getattr(args, name) is not None]
    if foreign:
        raise ValueError(f"{', '.join(_flag(n) for n in foreign)} does not apply to "
                         f"--warm-start {args.warm_start}; its own: "
                         f"{', '.join(_flag(n) for n in own)}")
    named = {"steps": args.warm_start_steps, **{name: getattr(args, name) for name in own}}
    return dataclasses.replace(preset, **{k: v for k, v in named.items() if v is not None})


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
