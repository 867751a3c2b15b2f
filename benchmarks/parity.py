"""vaco_jax's side of the parity checks with PureJaxRL's PPO (see README.md).

Runs synchronous `ppo` at the settings of one of PureJaxRL's scripts (`--preset`): `continuous`
is `ppo_continuous_action.py` (64 envs x 32 steps, 4 epochs x 4 minibatches, 256x256 tanh
networks, lr 3e-4, 244 updates = 499,712 steps), `cartpole` is `ppo.py` as published (4 envs
x 128 steps, 4 epochs x 4 minibatches, 64x64 tanh networks, lr 2.5e-4 annealed, entropy 0.01,
value clipping 0.2, no observation or reward normalisation, centred advantages), `minatar` its
MinAtar settings (64 envs x 128 steps, 4 epochs x 8 minibatches, relu, lr 5e-3 annealed). Every
variant x seed is vmapped into one compiled program; the output holds per-update
training-episode returns and the throughput.
PureJaxRL's program has no evaluation, so the final deterministic evaluation is also timed on
its own (the same compiled evaluation on the trained state) and `training_steps_per_s` leaves it
out: that is the figure to set beside PureJaxRL's steps/s. `training_cpu_steps_per_s` is the same
by the process's CPU time (all its threads), the figure to set beside PureJaxRL's
`cpu_steps_per_s`: on a shared machine it moves less than wall time with other processes' load.

    PYTHONPATH=$PWD python -m benchmarks.parity --env inverted_double_pendulum --seeds 2 \\
        --variant default --variant 'value_clip_eps=0.2' --out benchmarks/results/parity_x.json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import Compiled, Program
from vaco_jax.control.config import ControlHParams, ControlConfig
from vaco_jax.control.train import ControlTrainer
from vaco_jax import testbeds
from vaco_jax.core.lag_models import Fixed
from vaco_jax.infra import records

PUREJAXRL_SETTINGS = dict(algo="ppo", num_envs=64, rollout_length=32, epochs=4, minibatches=4,
                          total_steps=499_712, actor_hidden=(256, 256), critic_hidden=(256, 256),
                          lag_model=Fixed(), eval_every=244)
_DISCRETE = dict(algo="ppo", lag_model=Fixed(), actor_hidden=(64, 64), critic_hidden=(64, 64),
                 normalize_observations=False, reward_scaling="none",
                 advantage_normalization="standardize", learning_rate_schedule="linear")
# preset -> (config, hyper-parameters), PureJaxRL's settings in vaco_jax's names.
PRESETS = {
    "continuous": (PUREJAXRL_SETTINGS, {}),
    "cartpole": ({**_DISCRETE, "env": "CartPole-v1", "num_envs": 4, "rollout_length": 128,
                  "epochs": 4, "minibatches": 4, "total_steps": 499_712, "eval_every": 976},
                 {"learning_rate": 2.5e-4, "entropy_coef": 0.01, "value_clip_eps": 0.2}),
    "minatar": ({**_DISCRETE, "env": "SpaceInvaders-MinAtar", "num_envs": 64,
                 "rollout_length": 128, "epochs": 4, "minibatches": 8, "activation": "relu",
                 "total_steps": 9_994_240, "eval_every": 1220},
                {"learning_rate": 5e-3, "entropy_coef": 0.01, "value_clip_eps": 0.2}),
}


def parse_variant(text: str) -> dict[str, float]:
    """`default` or `name=value,name=value` over `ControlHParams` fields."""
    if text == "default":
        return {}
    return {k: float(v) for k, v in (item.split("=") for item in text.split(","))}


def time_evaluation(trainer: ControlTrainer, state, keys: jax.Array,
                    repeats: int = 3) -> tuple[float, float]:
    """Wall and CPU seconds of one vmapped final evaluation of `state` (each the least of
    `repeats` warm calls)."""
    evaluation = Compiled(Program(fn=jax.jit(jax.vmap(trainer.evaluate)),
                                  args=(trainer.evaluated(state), keys),
                                  advance=lambda args, out: args, steps_per_call=0))
    wall, cpu = [], []
    for _ in range(repeats):
        start_cpu = time.process_time()
        wall.append(evaluation.call())
        cpu.append(time.process_time() - start_cpu)
    return min(wall), min(cpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="continuous", choices=sorted(PRESETS))
    p.add_argument("--env", default=None, help="the task (default: the preset's)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--variant", action="append", default=[], help="ControlHParams overrides, repeatable")
    p.add_argument("--config", default="{}", help="JSON ControlConfig overrides")
    p.add_argument("--label", default="vaco_jax", help="curve label in the figure")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    variants = args.variant or ["default"]
    settings, preset_hparams = PRESETS[args.preset]
    overrides = records.parse_json(args.config, "--config", records.COMMAND_LINE).table()
    settings = {"env": "inverted_double_pendulum", **settings, **overrides,
                **({"env": args.env} if args.env else {})}
    config = ControlConfig(**{**testbeds.CONTROL.task_defaults(settings["env"]), **settings})
    runs = [(v, s) for v in variants for s in range(args.seeds)]
    hparams = ControlHParams.stack([ControlHParams.create(**{**preset_hparams, **parse_variant(v)})
                                    for v, _ in runs])
    keys = jnp.stack([jax.random.PRNGKey(s) for _, s in runs])
    trainer = ControlTrainer(config)
    start = time.time()
    train = jax.jit(jax.vmap(trainer.train)).lower(keys, hparams).compile()
    compile_s = time.time() - start
    start, start_cpu = time.time(), time.process_time()
    state, metrics = jax.block_until_ready(train(keys, hparams))
    run_s, run_cpu_s = time.time() - start, time.process_time() - start_cpu
    eval_s, eval_cpu_s = time_evaluation(trainer, state, keys)
    returns = np.asarray(metrics["episode_return"], np.float64)
    steps = config.num_updates * config.steps_per_update * len(runs)
    result = {
        "impl": "vaco_jax", "label": args.label, "env": config.env, "config": config.to_dict(), "variants": variants,
        "runs": [{"variant": v, "seed": s} for v, s in runs], "compile_s": compile_s,
        "run_s": run_s, "steps_per_s": steps / run_s, "eval_s": eval_s,
        "training_steps_per_s": steps / (run_s - eval_s),
        "run_cpu_s": run_cpu_s, "eval_cpu_s": eval_cpu_s,
        "training_cpu_steps_per_s": steps / (run_cpu_s - eval_cpu_s),
        "env_steps": np.asarray(metrics["env_steps"][0]).tolist(),
        "episode_return": [[None if np.isnan(x) else float(x) for x in r] for r in returns],
        "eval_return": np.asarray(metrics["eval_return"])[:, -1].tolist(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    for (v, s), r, e in zip(runs, returns, result["eval_return"]):
        print(f"{config.env} {v:40s} seed {s}: final training return {r[~np.isnan(r)][-1]:9.1f}"
              f"  eval {e:9.1f}")
    print(f"compile {compile_s:.0f} s, run {run_s:.0f} s, {steps / run_s:,.0f} steps/s; "
          f"final evaluation {eval_s:.1f} s, {steps / (run_s - eval_s):,.0f} training steps/s, "
          f"{steps / (run_cpu_s - eval_cpu_s):,.0f} training steps per CPU second "
          f"({len(runs)} runs)")


if __name__ == "__main__":
    main()
