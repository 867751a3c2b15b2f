"""The sequence log-ratio's distribution on the token testbed, at lag 0 and at larger lags.

    python benchmarks/log_ratio_tails.py --task add_steps --task-size 5 --context 32 --lags 0,8
    python benchmarks/log_ratio_tails.py --task add --task-size 2 --context 16 --lags 0,8

Each response's log-ratio is `sum_t log pi_T(y_t) - log beta(y_t)` over its generated tokens,
`pi_T` the learner and `beta` the stale policy that generated it (`train.sequence_log_staleness`,
whose exponential is the sequence importance weight that TIS, M2PO, GSPO and VCPO correct or
bound). For each lag, runs start from the warm start (read from or written to the cache that
`--warm-start-dir` names; trained in-process without it), take `--updates` GRPO updates at that
lag (`fixed`, so that the buffer holds the versions the lag reaches), then collect `--batches`
batches from the last state, and the quantiles are taken over all their responses. At lag 0
`beta = pi_T` and the log-ratio is 0 up to rounding (bfloat16 behaviour log-probs aside,
`--bf16-behaviour`); at a larger lag its spread can grow with the answer's length, being a
sum over tokens. The lag is a traced hyper-parameter: every lag runs the same compiled program.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.tables import _table  # noqa: E402
from vaco_jax import losses  # noqa: E402
from vaco_jax.core.lag_models import Fixed  # noqa: E402
from vaco_jax.infra import io  # noqa: E402
from vaco_jax.run.warm_start import resolve  # noqa: E402
from vaco_jax.tokens import tasks  # noqa: E402
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate  # noqa: E402
from vaco_jax.tokens.train import TokenTrainer, sequence_log_staleness  # noqa: E402
from vaco_jax.tokens.warm_start import WarmStart  # noqa: E402

QUANTILES = {"p1": 1.0, "median": 50.0, "p99": 99.0}


def summary(log_ratios: np.ndarray) -> dict[str, float]:
    """Quantiles of the sequence log-ratios `[N]`, their largest, and the ESS ratio of their
    weights (`losses.ess_ratio`, 1 when the weights are equal, 1/N when one dominates)."""
    values = {name: float(np.percentile(log_ratios, q)) for name, q in QUANTILES.items()}
    return {**values, "max": float(log_ratios.max()),
            "ess_ratio": float(losses.ess_ratio(jnp.asarray(log_ratios)))}


def probe(collect: Callable[..., Any], state: Any, hp: TokenHParams, key: jax.Array,
          batches: int) -> dict[str, np.ndarray]:
    """Of the `batches x P x G` responses `collect` (`TokenTrainer.collect`) draws from `state`:
    each one's log-ratio, generated length (EOS included) and reward."""
    pooled: dict[str, list[jax.Array]] = {"log_ratio": [], "length": [], "reward": []}
    for batch_key in jax.random.split(key, batches):
        _, batch = collect(state, batch_key, hp)
        pooled["log_ratio"].append(sequence_log_staleness(
            batch.phase_log_prob, batch.behaviour_log_prob, batch.mask))
        pooled["length"].append(batch.mask.sum(axis=1))
        pooled["reward"].append(batch.reward)
    return {name: np.concatenate(values) for name, values in pooled.items()}


def measure(config: TokenConfig, hparams: TokenHParams, lags: Sequence[int], updates: int,
            batches: int, seed: int = 0) -> list[dict[str, Any]]:
    """One row per lag: the log-ratios' `summary` after `updates` updates at that lag from the
    warm start, with the responses' mean generated length and reward."""
    if updates < max(lags):
        raise ValueError(f"updates={updates} must reach the largest lag {max(lags)}, so that "
                         f"the buffer holds the version it names")
    trainer = TokenTrainer(config, resolve(TokenTrainer(config).pending_warm_start))
    update, collect = jax.jit(trainer.update), jax.jit(trainer.collect)
    run_key, probe_key = jax.random.split(jax.random.PRNGKey(seed))
    rows = []
    for lag in lags:
        hp = hparams.replace(lag=jnp.asarray(float(lag)))
        state = trainer.init(run_key, hp)
        for _ in range(updates):
            state, _ = update(state, hp)
        probed = probe(collect, state, hp, probe_key, batches)
        rows.append({"lag": lag, "responses": int(probed["log_ratio"].size),
                     "response_length": float(probed["length"].mean()),
                     "reward_mean": float(probed["reward"].mean()),
                     **summary(probed["log_ratio"])})
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    columns = ["lag", "responses", "response_length", "reward_mean", "median", "p1", "p99",
               "max", "ess_ratio"]
    return _table(columns, [[str(row["lag"]), str(row["responses"]),
                             f"{row['response_length']:.1f}", f"{row['reward_mean']:.3f}",
                             *(f"{row[c]:.3g}" for c in columns[4:])] for row in rows])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="add_steps", choices=tuple(tasks.TASKS))
    for flag, default in (("task_size", 5), ("layers", 2), ("width", 64), ("heads", 4),
                          ("context", 32), ("prompts", 8), ("group_size", 8)):
        p.add_argument(f"--{flag.replace('_', '-')}", type=int, default=default,
                       help=f"TokenConfig.{flag}")
    p.add_argument("--reward-on", default="solution", choices=tasks.REWARD_ON)
    p.add_argument("--partial-credit", action="store_true",
                   help="reward the share of right positions: a policy that is never exact "
                        "still learns, so that its versions differ")
    p.add_argument("--bf16-behaviour", action="store_true")
    p.add_argument("--lags", default="0,8", help="comma-separated fixed lags")
    p.add_argument("--updates", type=int, default=16, help="updates before the batches, at "
                   "least the largest lag")
    p.add_argument("--batches", type=int, default=8, help="batches of P x G responses pooled")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--warm-start-steps", type=int, default=WarmStart().steps)
    p.add_argument("--warm-start-dir", default=None,
                   help="cache of warm starts (default: none, trained in-process)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the rows and settings as JSON")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    lags = [int(lag) for lag in args.lags.split(",")]
    config = TokenConfig(task=args.task, task_size=args.task_size, layers=args.layers,
                         width=args.width, heads=args.heads, context=args.context,
                         prompts=args.prompts, group_size=args.group_size,
                         reward_on=args.reward_on, partial_credit=args.partial_credit,
                         bf16_behaviour=args.bf16_behaviour,
                         lag_model=Fixed(), buffer_capacity=max(lags) + 1,
                         warm_start=WarmStart(steps=args.warm_start_steps),
                         warm_start_dir=args.warm_start_dir)
    hparams = TokenHParams.create(learning_rate=args.learning_rate,
                                  temperature=args.temperature)
    validate(config, hparams)
    rows = measure(config, hparams, lags, args.updates, args.batches, args.seed)
    print(markdown(rows))
    if args.out:
        io.write_json(args.out, {"settings": {**vars(args), "config": config.to_dict()},
                                 "rows": rows})
    return rows


if __name__ == "__main__":
    main()
