"""Where the time of synchronous `ppo` and of PureJaxRL's continuous PPO goes at the parity
settings: each side's updates split into rollouts and learning, the learning's floor (its matrix
products), and each side's compilation (see README.md, "Speed, measured side by side").

Timed in alternating calls (`harness.timed_rounds`), `--updates` updates of `--seeds` seeds per
call, each program `vmap`-ed over the seeds:
- `vaco_jax`: whole updates (`programs.train_program`) and their rollouts alone
  (`programs.collect_program`); learning is the difference;
- `matmul_floor`: the matrix products no implementation of the same learning can skip, and
  nothing else: per minibatch step, every dense layer of actor and critic forward, its weight
  gradient and (all but the first layer) its input gradient at the minibatch's shapes, with the
  phase-start critic pass over the batch once per update (`linear_learner`);
- with `--checkout`, PureJaxRL's `make_train` at the same settings for `--updates` updates with
  its epochs and with none (its initialisation, rollouts and advantages alone).
The bound is PureJaxRL's time over vaco_jax's rollouts plus the floor: the ratio vaco_jax would
reach if its learning did its matrix products at this machine's rate for those shapes and
nothing else at all.

`--compile N` also lowers and compiles (without running) the whole programs of a run, each in a
process of its own, N times: vaco_jax's `ControlTrainer.train`, the same with the evaluation
left out (`WithoutEvaluation`), and with `--checkout` PureJaxRL's, which has no evaluation; and
times the wait of vaco_jax's driver before its first chunk (`driver_wait`), the same way.

    PYTHONPATH=$PWD python -m benchmarks.speed_split --checkout PATH/TO/purejaxrl --compile 2 \\
        --out benchmarks/results/parity/speed_split.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from benchmarks import harness, programs
from benchmarks.parity import PUREJAXRL_SETTINGS
from vaco_jax.control.config import ControlConfig
from vaco_jax.control.train import ControlTrainer
from vaco_jax.infra import io, records
from vaco_jax import testbeds
from vaco_jax.run.driver import Driver


@functools.cache
def layer_sizes(config: ControlConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Actor's and critic's widths, input to output:
    `((obs, *hidden, actions), (obs, *hidden, 1))` (the environment built once per config)."""
    env = ControlTrainer(config).env
    return ((env.observation_size, *config.actor_hidden, env.action_size),
            (env.observation_size, *config.critic_hidden, 1))


def learning_flops(config: ControlConfig) -> int:
    """Floating-point operations of one update's matrix products (those `linear_learner`
    performs) for one run."""
    actor, critic = layer_sizes(config)
    minibatch = config.steps_per_update // config.minibatches

    def products(sizes: Sequence[int], rows: int, backward: bool) -> int:
        pairs = list(zip(sizes[:-1], sizes[1:]))
        forward = sum(2 * rows * i * o for i, o in pairs)
        if not backward:
            return forward
        input_grads = sum(2 * rows * i * o for i, o in pairs[1:])
        return 2 * forward + input_grads  # forward, weight gradients, input gradients

    step = products(actor, minibatch, True) + products(critic, minibatch, True)
    return config.epochs * config.minibatches * step + products(critic, config.steps_per_update,
                                                                 False)


def linear_learner(config: ControlConfig, updates: int):
    """`(weights, inputs, lr) -> weights` after `updates` updates' minibatch steps of linear
    networks of the learner's widths: each step a forward pass, the weight and input gradients
    of `0.5 |output|^2` and a gradient step of size `lr`, for actor and critic; each update
    begins with a critic forward pass over the whole batch. No activation, no loss terms, no
    optimiser state: only the matrix products. `lr` is an argument so that no gradient can be
    folded away as unused."""
    steps = config.epochs * config.minibatches
    minibatch = config.steps_per_update // config.minibatches

    def forward(ws, x):
        activations = [x]
        for w in ws:
            activations.append(activations[-1] @ w)
        return activations

    def step(ws, x, lr):
        activations = forward(ws, x)
        grad = activations[-1]
        new = []
        for i in reversed(range(len(ws))):
            new.append(ws[i] - lr * (activations[i].T @ grad))
            if i:
                grad = grad @ ws[i].T
        return new[::-1]

    def update(weights, inputs, lr):
        actor, critic = weights
        # The phase-start pass; all of its output feeds the steps, so none of it is dead code.
        values = forward(critic, inputs)[-1]
        x = inputs[:minibatch] + 0.0 * jnp.sum(values)

        def one(carry, _):
            actor, critic = carry
            return (step(actor, x, lr), step(critic, x, lr)), None

        return list(jax.lax.scan(one, (actor, critic), None, length=steps)[0])

    def run(weights, inputs, lr):
        return jax.lax.fori_loop(0, updates, lambda _, w: update(w, inputs, lr), weights)

    return run


def floor_program(config: ControlConfig, num_seeds: int, updates: int) -> harness.Program:
    key = jax.random.PRNGKey(0)
    weights = []
    networks = layer_sizes(config)
    for sizes in networks:
        layers = []
        for i, o in zip(sizes[:-1], sizes[1:]):
            key, sub = jax.random.split(key)
            layers.append(jax.random.normal(sub, (num_seeds, i, o)) / jnp.sqrt(i))
        weights.append(layers)
    inputs = jax.random.normal(key, (num_seeds, config.steps_per_update, networks[0][0]))
    lr = jnp.zeros(num_seeds)
    return harness.Program(fn=jax.jit(jax.vmap(linear_learner(config, updates))),
                           args=(weights, inputs, lr), advance=lambda args, out: args,
                           steps_per_call=num_seeds * updates * config.steps_per_update)


def purejaxrl_program(checkout: Path, config: ControlConfig, num_seeds: int, updates: int,
                      epochs: int) -> harness.Program:
    """PureJaxRL's continuous PPO at `config`'s settings, `updates` updates with `epochs` epochs,
    from its initialisation (one call is one whole short run)."""
    from benchmarks import purejaxrl

    make_train = purejaxrl.load_make_train(checkout, False, "continuous", config.backend or "mjx")
    settings = {**purejaxrl.CONTINUOUS_CONFIG, "ENV_NAME": config.env, "UPDATE_EPOCHS": epochs,
                "NUM_ENVS": config.num_envs, "NUM_STEPS": config.rollout_length,
                "NUM_MINIBATCHES": config.minibatches,
                "TOTAL_TIMESTEPS": updates * config.steps_per_update}
    return harness.Program(fn=jax.jit(jax.vmap(make_train(settings))),
                           args=(programs.seed_keys(num_seeds),), advance=lambda args, out: args,
                           steps_per_call=num_seeds * updates * config.steps_per_update)


class WithoutEvaluation(ControlTrainer):
    """The trainer with a constant for a score: its program is training alone."""

    def evaluate(self, policy, key):
        return jnp.zeros(())


COMPILED_PROGRAMS = ("vaco_jax", "vaco_jax_without_evaluation", "purejaxrl")
COMPILE_TIMED = (*COMPILED_PROGRAMS, "vaco_jax_driver")
"""What `--compile` times: the whole-run programs, and the wait of `Driver.run` before its first
chunk (`driver_wait`)."""


def parity_config(env: str, overrides: str) -> ControlConfig:
    """The parity settings on `env` with the task's defaults, updated by `overrides`, JSON
    `ControlConfig` fields (the `--config` of this module's and `hlo_census`'s commands)."""
    settings = ControlConfig(**{**testbeds.CONTROL.task_defaults(env), **PUREJAXRL_SETTINGS,
                                "env": env})
    changes = records.parse_json(overrides, "--config", records.COMMAND_LINE).table()
    return ControlConfig.from_dict({**settings.to_dict(), **changes})


def whole_run_program(name: str, config: ControlConfig, num_seeds: int,
                      checkout: Path | None) -> harness.Program:
    """Whole-run program `name` of `COMPILED_PROGRAMS` (one call is one whole run)."""
    if name == "purejaxrl":
        return purejaxrl_program(checkout, config, num_seeds, config.num_updates, config.epochs)
    trainer = (ControlTrainer if name == "vaco_jax" else WithoutEvaluation)(config)
    return harness.Program(
        fn=jax.jit(jax.vmap(trainer.train)),
        args=(programs.seed_keys(num_seeds), programs.hparams_for(config, num_seeds)),
        advance=lambda args, out: args, steps_per_call=0)


def driver_wait(config: ControlConfig, num_seeds: int) -> dict[str, float]:
    """Seconds `Driver.run` waits before its first chunk, what a user of `vaco-jax train` waits
    for: the programs of the initial state, of the update-0 evaluation and of a chunk compiled
    (the last beside the first two), and the first two run."""
    driver = Driver(config, programs.hparams_for(config, num_seeds), range(num_seeds))
    return {"total_s": driver.run(None, max_chunks=0, progress=False).timing.compile_seconds}


def compile_one(name: str, config: ControlConfig, num_seeds: int,
                checkout: Path | None) -> dict[str, float]:
    """Seconds to lower and to compile whole-run program `name` of `COMPILED_PROGRAMS`, or the
    driver's wait (`driver_wait`)."""
    if name == "vaco_jax_driver":
        return driver_wait(config, num_seeds)
    compiled = harness.Compiled(whole_run_program(name, config, num_seeds, checkout),
                                warm_up=False)
    return {"lower_s": compiled.lower_s, "compile_s": compiled.compile_s,
            "total_s": compiled.lower_s + compiled.compile_s}


def compile_times(argv: Sequence[str], checkout: Path | None,
                  rounds: int) -> dict[str, list[dict[str, float]]]:
    """`compile_one` of each of `COMPILE_TIMED` in a process of its own (no trace or compile
    of one can warm another's caches), `rounds` times, the order reversed every other round."""
    names = [n for n in COMPILE_TIMED if n != "purejaxrl" or checkout is not None]
    out: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            print(f"compiling the whole run in a fresh process: {name} ...", flush=True)
            found = subprocess.run([sys.executable, "-m", "benchmarks.speed_split", *argv,
                                    "--compile-one", name], capture_output=True, text=True,
                                   check=True, cwd=Path(__file__).resolve().parent.parent)
            out[name].append(records.parse_json(
                found.stdout.strip().splitlines()[-1], f"the last line of --compile-one {name}",
                records.BENCHMARK_RESULT).value)
    return out


def bound(calls: dict[str, Sequence[float]]) -> dict[str, Any]:
    """The split and the bound from each program's seconds per call, call `i` of every program
    made in the same round: every share and ratio is the median over rounds of that round's
    own, so that a machine whose speed drifts between rounds moves all the terms together."""
    rounds = [dict(zip(calls, times)) for times in zip(*calls.values(), strict=True)]

    def median(of) -> float:
        return statistics.median(of(t) for t in rounds)

    def learning(t, side):
        return t[f"{side}_update"] - t[f"{side}_rollouts"]

    result = {"vaco_jax_learning_s": median(lambda t: learning(t, "vaco_jax")),
              "vaco_jax_learning_share": median(
                  lambda t: learning(t, "vaco_jax") / t["vaco_jax_update"]),
              "floor_share_of_vaco_jax_learning": median(
                  lambda t: t["matmul_floor"] / learning(t, "vaco_jax"))}
    if "purejaxrl_update" in calls:
        result.update(
            purejaxrl_learning_s=median(lambda t: learning(t, "purejaxrl")),
            purejaxrl_learning_share=median(
                lambda t: learning(t, "purejaxrl") / t["purejaxrl_update"]),
            floor_share_of_purejaxrl_learning=median(
                lambda t: t["matmul_floor"] / learning(t, "purejaxrl")),
            ratio_now=median(lambda t: t["purejaxrl_update"] / t["vaco_jax_update"]),
            ratio_bound=median(lambda t: t["purejaxrl_update"] / (
                t["vaco_jax_rollouts"] + t["matmul_floor"])),
            ratio_bound_with_purejaxrl_rollouts=median(lambda t: t["purejaxrl_update"] / (
                t["purejaxrl_rollouts"] + t["matmul_floor"])))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="inverted_double_pendulum")
    p.add_argument("--config", default="{}",
                   help="JSON ControlConfig overrides of the parity settings")
    p.add_argument("--checkout", type=Path, default=None, help="a clone of PureJaxRL")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--updates", type=int, default=20, help="updates per timed call")
    p.add_argument("--repeats", type=int, default=7, help="alternating calls of each program")
    p.add_argument("--max-wait", type=float, default=120.0,
                   help="seconds to wait for other processes to leave the CPU before timing")
    p.add_argument("--compile", type=int, default=0, metavar="ROUNDS",
                   help="also time the compilation of each side's whole-run program, each in "
                        "a fresh process, this many times")
    p.add_argument("--compile-one", choices=COMPILE_TIMED, help=argparse.SUPPRESS)
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and not args.overwrite and not args.compile_one:
        sys.exit(f"{out} exists; pass --overwrite to replace it")
    config = parity_config(args.env, args.config)
    if args.compile_one:
        print(json.dumps(compile_one(args.compile_one, config, args.seeds, args.checkout)))
        return {}
    side_argv = ["--env", args.env, "--config", args.config, "--seeds", str(args.seeds),
                 "--out", args.out,
                 *(["--checkout", str(args.checkout)] if args.checkout is not None else [])]
    built = {"vaco_jax_update": programs.train_program(config, args.seeds, args.updates),
             "vaco_jax_rollouts": programs.collect_program(config, args.seeds, args.updates),
             "matmul_floor": floor_program(config, args.seeds, args.updates)}
    if args.checkout is not None:
        built["purejaxrl_update"] = purejaxrl_program(args.checkout, config, args.seeds,
                                                      args.updates, config.epochs)
        built["purejaxrl_rollouts"] = purejaxrl_program(args.checkout, config, args.seeds,
                                                        args.updates, 0)
    compiled = {}
    for name, program in built.items():
        print(f"compiling {name} ...", flush=True)
        compiled[name] = harness.Compiled(program)
    print(f"timing {len(compiled)} programs, {args.repeats} alternating calls each ...", flush=True)
    summaries = dict(zip(compiled, harness.timed_rounds(list(compiled.values()),
                                                       repeats=args.repeats,
                                                       max_wait_s=args.max_wait)))
    times = {name: statistics.median(s["calls_s"]) for name, s in summaries.items()}
    flops = learning_flops(config) * args.updates * args.seeds
    result = {"machine": harness.machine(), "config": config.to_dict(), "seeds": args.seeds,
              "updates_per_call": args.updates, "layer_sizes": layer_sizes(config),
              "learning_flops_per_call": flops,
              "floor_flops_per_s": flops / times["matmul_floor"],
              "median_call_s": times, "programs": summaries,
              **bound({name: s["calls_s"] for name, s in summaries.items()})}
    if args.compile:
        result["whole_run_compile"] = compile_times(side_argv, args.checkout, args.compile)
    io.write_json(out, result)
    for name, t in times.items():
        print(f"{name:20s} {t:8.3f} s per {args.updates} updates of {args.seeds} seeds")
    for name in ("vaco_jax_learning_share", "floor_share_of_vaco_jax_learning",
                 "purejaxrl_learning_share", "floor_share_of_purejaxrl_learning", "ratio_now",
                 "ratio_bound", "ratio_bound_with_purejaxrl_rollouts"):
        if name in result:
            print(f"{name:36s} {result[name]:.3f}")
    print(f"matrix products at {result['floor_flops_per_s'] / 1e9:,.0f} GFLOP/s")
    for name, tries in result.get("whole_run_compile", {}).items():
        totals = ", ".join(f"{t['lower_s']:.1f} + {t['compile_s']:.1f} s" if "lower_s" in t
                           else f"{t['total_s']:.1f} s" for t in tries)
        print(f"whole run {name:28s} lowered + compiled in {totals}")
    return result


if __name__ == "__main__":
    main()
