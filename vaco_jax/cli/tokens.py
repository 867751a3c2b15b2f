"""`vaco-jax tokens`: any token algorithm (GRPO by default) on a token task from a cached warm
start, over vmapped seeds, run by the driver like `vaco-jax train` (the same run flags, outputs,
checkpoints and resume)."""

from __future__ import annotations

import argparse
import dataclasses

from vaco_jax.cli.common import LAG_HELP, add_hparam_flag, parse_lag
from vaco_jax.cli.config_flags import Flag, add_config_flags, config_values
from vaco_jax.core.lag_models import LAG_WARMUPS
from vaco_jax import losses
from vaco_jax.tokens.algorithms import (ALGORITHMS, IS_LEVELS, ROLLOUT_IS, TV_REFERENCES,
                                        TV_SCOPES)
from vaco_jax.tokens.config import (GROUP_UNITS, IN_FLIGHT_CACHES, OPTIMIZERS, TokenConfig,
                                    TokenHParams, algorithm_setting)
from vaco_jax.tokens.tasks import REWARD_ON, TASKS
from vaco_jax.run.warm_start import default_cache_dir
from vaco_jax.tokens.warm_start import PRESETS, WarmStart


OUT = "runs/tokens"


COMPOSED = ("lag_model", "lag_preset", "warm_start")
"""The fields set by flags of their own: the lag model and its preset by `--lag` (with the `lag`
value), the warm start by `--warm-start` and the flags that override its preset."""


def _flags() -> dict[str, Flag]:
    """Each field's flag but the `COMPOSED` ones; built with the parser, which reads the user's
    cache folder then."""
    return {
        "task": Flag("the verifiable task (docs/tokens.md)", choices=tuple(TASKS)),
        "task_size": Flag("digits per operand (add, add_steps), list length (sort), steps "
                          "(chain)"),
        "algo": Flag("the algorithm (docs/tokens.md); thresholds via --hparam",
                     choices=tuple(ALGORITHMS)),
        "is_level": Flag("tis / mis: importance weights per token or per sequence",
                         choices=IS_LEVELS),
        "rollout_is": Flag("gspo, cispo: verl's rollout correction, the staleness pi_T/beta per "
                           "token or per sequence truncated at is_cap (none: verl's default)",
                           choices=ROLLOUT_IS),
        "tv_reference": Flag("vaco, grpo_tv_filter, dppo_*: the policy their trust region measures "
                             "the learner against, behaviour (beta, the authors' bypass mode) or "
                             "phase (pi_T; refused with one gradient step per version, where it "
                             "could never act)", choices=TV_REFERENCES),
        "tv_scope": Flag("vaco (TVPO): a token is kept while the batch's or its prompt group's "
                         "TV is within the threshold (prompt), or the batch's alone (batch)",
                         choices=TV_SCOPES),
        "tv_delta_convention": Flag("how tv_delta reads: budget (the authors' code: an L1 "
                                    "budget, TV threshold tv_delta / 2) or tv (the threshold "
                                    "itself, as in the older committed results)",
                                    choices=losses.TV_DELTA_CONVENTIONS),
        "layers": Flag("transformer layers"),
        "width": Flag("model width (a multiple of --heads)"),
        "heads": Flag("attention heads"),
        "context": Flag("context length, tokens (prompt + response)"),
        "response_slack": Flag("tokens a response may run beyond the answer's length"),
        # Left unset unless given, so that an algorithm's own setting applies (vcpo's).
        "prompts": Flag("prompts per update (P; default 8, or what the algorithm's own group size "
                        "leaves of 64 samples)", default=None),
        "group_size": Flag("samples per prompt (G; default 8, or the algorithm's own: vcpo's "
                           "16)", default=None),
        "optimizer": Flag("adam, or adamw with decoupled weight decay (hparam weight_decay, 0.1); "
                          "default adam, or the algorithm's own: vcpo's adamw",
                          choices=OPTIMIZERS, default=None),
        "group_unit": Flag("who draws its own stale policy: a prompt's group or each sample",
                           choices=GROUP_UNITS),
        "scale_advantages_by_std": Flag("group-relative advantages divided by their group's "
                                        "reward std, else only centred"),
        "lag_warmup": Flag("lags beyond the versions pushed so far: clip (to the oldest version) "
                           "or redraw (from the lag model restricted to the existing versions)",
                           choices=LAG_WARMUPS),
        "buffer_capacity": Flag("policy versions kept for stale generators (K)"),
        "epochs": Flag("passes over each update's batch (forward lag, with --minibatches)"),
        "minibatches": Flag("minibatches per epoch"),
        "aggregation": Flag("how the per-token losses of a minibatch make its loss",
                            choices=losses.AGGREGATIONS),
        "bf16_behaviour": Flag("behaviour log-probs computed in bfloat16 (sampler/trainer "
                               "mismatch)"),
        "in_flight_cache": Flag("in_flight decoding: shared (one cache across weight updates, "
                                "as PipelineRL's engines keep it, at one policy's cost) or "
                                "per_snapshot (each snapshot its own key-value cache, exact "
                                "per-snapshot log-probs, K times the cost)",
                                choices=IN_FLIGHT_CACHES),
        "reward_on": Flag("what the verifier compares, also in the held-out evaluation: the "
                          "whole answer (solution) or its final result alone (result: the worked "
                          "steps of add_steps and chain need only be digits)", choices=REWARD_ON),
        "partial_credit": Flag("reward the share of compared answer positions that are right, "
                               "instead of 1 for an exact answer and 0 otherwise"),
        "format_penalty": Flag("subtracted from the reward of a malformed response (not the "
                               "answer's digits followed by EOS)"),
        "replay": Flag("train from TBA's replay buffer: each update's groups stored, the batch "
                       "drawn from them or the stored ones (hparam replay_online_prob, 0.95); "
                       "default off, or the algorithm's own: tba's on", default=None),
        "replay_capacity": Flag("prompt groups the replay buffer keeps (default: every group of "
                                "the run)"),
        "num_updates": Flag("policy updates per run", name="--updates"),
        "eval_every": Flag("updates between held-out evaluations"),
        "eval_prompts": Flag("held-out prompts of each evaluation (greedy accuracy)"),
        "warm_start_dir": Flag("cache of warm-start checkpoints, keyed by their settings and "
                               "shared by the runs that name it; by default the user's cache, "
                               "$XDG_CACHE_HOME/vaco_jax/warm_start, else "
                               "~/.cache/vaco_jax/warm_start", default=str(default_cache_dir())),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The token testbed's flags (the run flags are added by the caller)."""
    add_config_flags(p, TokenConfig, _flags(), COMPOSED)
    p.add_argument("--lag", type=parse_lag, default="fixed:0", help=LAG_HELP)
    p.add_argument("--warm-start", default="calibrated", choices=tuple(PRESETS),
                   help="calibrated: trained to convergence, its held-out accuracy set by the "
                        "share of prompts whose demonstrations are mostly wrong; legacy: the "
                        "warm start of the older committed results, stopped mid-climb "
                        "(its accuracy depends on the CPU); the flags below override its values")
    p.add_argument("--warm-start-steps", type=int, default=None,
                   help="supervised steps of the warm start (calibrated 2000, legacy 250) "
                        "(default: the preset's)")
    p.add_argument("--corrupted-share", type=float, default=None,
                   help="calibrated: share of prompts (first operand digit below 10 x share) "
                        "whose demonstrations are mostly wrong, 1 - the target accuracy "
                        "(default: the preset's)")
    p.add_argument("--wrong-probability", type=float, default=None,
                   help="calibrated: probability that such a prompt's demonstration is wrong "
                        "(default: the preset's)")
    p.add_argument("--corrupt-fraction", type=float, default=None,
                   help="legacy: share of the warm start's demonstrations given a wrong digit "
                        "(default: the preset's)")
    add_hparam_flag(p, TokenHParams)


def build(args: argparse.Namespace) -> tuple[TokenConfig, TokenHParams]:
    """The config and hyper-parameters the flags of `add_arguments` give: the algorithm's own
    setting (`algorithm_setting`) where no flag sets a field."""
    given = config_values(args, TokenConfig, COMPOSED)
    setting = algorithm_setting(given.get("algo", TokenConfig.algo), given, pinned=given)
    config = TokenConfig(**given, **setting, **args.lag.config_fields(),
                         warm_start=_warm_start(args))
    return config, TokenHParams.create(lag=args.lag.level, **dict(args.hparam))


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
