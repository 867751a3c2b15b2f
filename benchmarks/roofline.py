"""The paper sweep's cost on paper: XLA's own count of the update programs, a roofline per update
on an H100 and a TPU v5e, and the sweep's predicted time beside published MJX physics rates.

    PYTHONPATH=$PWD python -m benchmarks.roofline --out benchmarks/results/roofline/roofline.json
    PYTHONPATH=$PWD python -m benchmarks.roofline --only tokens --out /tmp/tokens.json
    PYTHONPATH=$PWD python -m benchmarks.roofline --table benchmarks/results/roofline/roofline.json

Method. Each program is lowered and compiled for this machine's backend (the CPU; arguments are
shapes only, nothing is run or allocated) and XLA's `cost_analysis()` gives its floating-point
operations and bytes accessed, `memory_analysis()` its buffers. XLA counts the body of a loop
once, whatever its trip count (`test_xla_counts_a_loop_body_once` pins this), so every loop of
the engine is given a trip count of 1 at equal work:

- control (`ant`, `humanoid`): the paper's update of `N` environments x `T` steps, `E` epochs x
  `M` minibatches is compiled as `N x T` environments x 1 step, 1 epoch x 1 minibatch. The same
  operations then run once each: `T` steps of `N` environments become one step of `N x T`, and
  one epoch over `N x T` samples in one minibatch does the arithmetic of `M` minibatches of
  `N x T / M` (only the optimiser's own step, on parameters of a few hundred KB, is counted once
  instead of `M` times). Three programs split the update: the environment alone (`env`), the
  rollout (`collect`: environment, lags, behaviour policies, acting) and the whole update;
  acting = collect - env, one epoch of learning = update - collect (the phase-start pass and the
  push into the buffer included, so `E x` it counts them `E` times: an upper bound).
  MJX's own loops (the constraint solver's iterations, its line search) stay loops, counted
  once: XLA's count of the physics is a lower bound, reported but not used. The physics' time
  comes from published MJX rates instead (`PHYSICS_RATES`).
- tokens (the accelerator preset of `benchmarks/tokens.py`): the teacher-forced forward pass has
  no loop and is counted exactly; generation decodes the response one token at a time in a
  loop, so the generation's count is completed with `R - 1` more decode steps, one decode step
  (every generator's model on its rows, with its key-value cache) compiled alone; the update is
  a generation and `epochs x minibatches` gradient steps (1 x 1 in the preset, no loop).

Per program and device, time = max(flops / peak FLOP/s, bytes / memory bandwidth), the
roofline's floor: no implementation of that program's operations runs faster. The predicted
time of an update is physics (published rate) + acting + learning (rooflines), phases that run
one after the other; the predicted end-to-end rate is `N x T` over it, and its ratio to physics
alone says how much of the physics' rate the learner leaves.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.hardware import HARDWARE, Hardware  # noqa: E402
from benchmarks.roofline_tables import tables  # noqa: E402
from vaco_jax.infra import records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAPER_SWEEP = ROOT / "experiments" / "paper_lag_sweep.toml"


# Published MJX physics rates (environment steps per second, many environments in parallel),
# as quoted when the study was planned (not re-checked against their sources); an H100 has no published figure, so the H200's stands in
# (same chip, 4.8 against 3.35 TB/s of memory bandwidth: an optimistic stand-in).
PHYSICS_RATES = (
    {"env": "humanoid", "device": "A100", "steps_per_s": 950e3,
     "source": "MJX humanoid, about 950k steps/s on one A100 (published MJX figure, as quoted)"},
    {"env": "ant", "device": "H200", "steps_per_s": 814e3,
     "source": "MJX ant, 814k steps/s on one H200 (published MJX benchmark, as quoted)"},
    {"env": "humanoid", "device": "H200", "steps_per_s": 2.9e6,
     "source": "MJX humanoid, 2.9M steps/s on one H200 (published MJX benchmark, as quoted)"},
)


# ----------------------------------------------------------------------------------- arithmetic
def roofline(flops: float, bytes_accessed: float, peak_flops: float,
             bandwidth: float) -> dict[str, Any]:
    """The roofline's floor of one program: compute time, memory time, the larger, and which."""
    compute_s, memory_s = flops / peak_flops, bytes_accessed / bandwidth
    return {"compute_s": compute_s, "memory_s": memory_s, "time_s": max(compute_s, memory_s),
            "bound": "compute" if compute_s >= memory_s else "memory",
            "intensity_flop_per_byte": flops / bytes_accessed if bytes_accessed else math.inf}


def on_hardware(cost: dict[str, float], hw: Hardware) -> dict[str, Any]:
    """Roofline at the plain fp32 rate (every flop on the vector units: the conservative floor)
    and at the matrix unit's rate (every flop on it: the optimistic floor)."""
    return {"fp32": roofline(cost["flops"], cost["bytes"], hw.fp32_flops, hw.bandwidth),
            "matrix": roofline(cost["flops"], cost["bytes"], hw.matrix_flops, hw.bandwidth)}


def difference(a: dict[str, float], b: dict[str, float], times: float = 1.0) -> dict[str, float]:
    """`times x (a - b)`, field by field (never below 0)."""
    return {k: times * max(a[k] - b[k], 0.0) for k in ("flops", "bytes", "transcendentals")}


def total(*costs: dict[str, float]) -> dict[str, float]:
    return {k: sum(c[k] for c in costs) for k in ("flops", "bytes", "transcendentals")}


def scaled(cost: dict[str, float], times: float) -> dict[str, float]:
    return {k: times * cost[k] for k in ("flops", "bytes", "transcendentals")}


def predicted_rate(steps_per_update: int, physics_steps_per_s: float,
                   learner_s: float) -> dict[str, float]:
    """End-to-end steps/s of an update whose physics runs at the published rate and whose acting
    and learning take `learner_s` more, one after the other; and its share of physics alone."""
    physics_s = steps_per_update / physics_steps_per_s
    rate = steps_per_update / (physics_s + learner_s)
    return {"physics_s": physics_s, "learner_s": learner_s, "update_s": physics_s + learner_s,
            "steps_per_s": rate, "of_physics": rate / physics_steps_per_s}


# ----------------------------------------------------------------------------------- XLA counts
def xla_cost(fn: Callable, *args: Any) -> dict[str, Any]:
    """Lowers and compiles `fn` (a `jax.jit`-ed function) at `args` (arrays or shapes) on the
    default backend: XLA's cost analysis (`harness.xla_counts`: flops, bytes, the loops left),
    its memory analysis and the compile time."""
    from benchmarks import harness

    start = time.perf_counter()
    compiled = fn.lower(*args).compile()
    seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    return {**harness.xla_counts(compiled),
            "memory": None if memory is None else {
                name: int(getattr(memory, f"{name}_size_in_bytes"))
                for name in ("argument", "output", "temp", "alias", "generated_code")},
            "compile_s": round(seconds, 1)}


# ----------------------------------------------------------------------------------- control
def paper_config(env: str, algo: str = "vaco", experiment: Path = PAPER_SWEEP):
    """The control config of the paper sweep's group of `env` and `algo` (uniform lags over the
    newest 17 policies, the lag levels being hyper-parameters of its runs)."""
    from vaco_jax.experiment import load_experiment

    for group in load_experiment(experiment).groups:
        if group.config.env == env and group.config.algo == algo:
            return group.config
    raise ValueError(f"{experiment} has no group of {env} and {algo}")


def single_trip(config):
    """The same work with every engine loop of trip count 1: `N x T` environments x 1 step,
    1 epoch x 1 minibatch (see the module docstring). A TV filter measured against the
    phase-start policy is refused at one gradient step per phase (it would be inert); measured
    against the behaviour policy it does the same arithmetic on another stored log-prob, so the
    count takes that reference."""
    flat = config.replace(num_envs=config.num_envs * config.rollout_length, rollout_length=1,
                          epochs=1, minibatches=1)
    return flat.replace(tv_reference="behaviour") if flat.tv_reference == "phase" else flat


def control_costs(config, log: Callable[[str], None] = print,
                  on_each: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """XLA's counts of the environment, rollout and update programs of `config` (one seed) at
    single trip counts, and the per-update costs assembled from them."""
    from benchmarks import programs

    flat = single_trip(config)
    out: dict[str, Any] = {"config": config.to_dict(), "single_trip_config": flat.to_dict(),
                           "programs": {}}
    builders = {"env": programs.env_program, "collect": programs.collect_program,
                "update": programs.train_program}
    for name, build in builders.items():
        program = build(flat, 1, 1, abstract=True)
        log(f"  compiling {name} of {config.env} ({flat.num_envs} envs x 1 step) on "
            f"{jax.default_backend()}")
        out["programs"][name] = xla_cost(program.fn, *program.args)
        log(f"    {out['programs'][name]['compile_s']} s: "
            f"{out['programs'][name]['flops']:.3g} flops, "
            f"{out['programs'][name]['bytes']:.3g} bytes")
        if on_each is not None:
            on_each(out)
    out["per_update"] = control_per_update(out["programs"], config.epochs)
    return out


def control_per_update(counts: dict[str, dict], epochs: int) -> dict[str, dict]:
    """Acting (collect - env), learning (`epochs x` (update - collect)) and the learner (both);
    the physics as XLA counts it (its solver loops once: a lower bound)."""
    acting = difference(counts["collect"], counts["env"])
    learning = difference(counts["update"], counts["collect"], times=epochs)
    return {"physics_xla_lower_bound": {k: counts["env"][k]
                                        for k in ("flops", "bytes", "transcendentals")},
            "acting": acting, "learning": learning, "learner": total(acting, learning)}


# ----------------------------------------------------------------------------------- tokens
def token_config(preset: str = "full", backend: str = "gpu"):
    from benchmarks import tokens

    return tokens.presets(backend)[preset].config


def decode_step_program(config) -> tuple[Callable, tuple]:
    """One decode step of a generation as `TokenTrainer._sample` runs it per prompt group: every
    generator's own parameters on its rows, one token each, with its key-value cache, then the
    next token drawn."""
    from vaco_jax.tokens.model import TokenPolicy

    policy = TokenPolicy(config.model_spec)
    params = jax.eval_shape(policy.init, jax.random.PRNGKey(0))
    generators, rows = config.generators, config.batch_size // config.generators
    stack = lambda x: jax.ShapeDtypeStruct((generators,) + x.shape, x.dtype)  # noqa: E731
    cache = jax.eval_shape(lambda: policy.empty_cache(rows))

    def step(params, token, cache, position, key):
        logits, cache = policy.module.apply(params, token, position[None], cache)
        return jax.random.categorical(key, logits[:, -1], axis=-1), cache

    args = (jax.tree.map(stack, params), jax.ShapeDtypeStruct((generators, rows, 1), jnp.int32),
            jax.tree.map(stack, cache), jax.ShapeDtypeStruct((), jnp.int32),
            jax.ShapeDtypeStruct((generators, 2), jnp.uint32))
    return jax.jit(jax.vmap(step, in_axes=(0, 0, 0, None, 0))), args


def token_costs(config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """XLA's counts of the forward pass, a generation, one decode step and an update of
    `config` (one seed), and the per-update costs with the decode loop completed."""
    from benchmarks import tokens

    if config.epochs * config.minibatches != 1:
        raise ValueError("token_costs counts an update of 1 epoch x 1 minibatch (no loop)")
    abstract = lambda tree: jax.tree.map(  # noqa: E731
        lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.asarray(x).dtype), tree)
    programs = {"forward": tokens.forward_program(config, 1),
                "generate": tokens.generate_program(config, 1),
                "update": tokens.update_program(config, 1, 1)}
    out: dict[str, Any] = {"config": config.to_dict(), "programs": {},
                           "response_length": config.response_length,
                           "response_tokens_per_update": config.batch_size * config.response_length}
    for name, program in programs.items():
        log(f"  compiling token {name}")
        out["programs"][name] = xla_cost(program.fn, *abstract(program.args))
    log("  compiling one token decode step")
    step, step_args = decode_step_program(config)
    out["programs"]["decode_step"] = xla_cost(step, *step_args)
    c = out["programs"]
    extra_steps = scaled(c["decode_step"], config.response_length - 1)
    generation = total(c["generate"], extra_steps)
    learning = difference(c["update"], c["generate"])
    out["per_update"] = {"forward": {k: c["forward"][k] for k in
                                     ("flops", "bytes", "transcendentals")},
                         "generation": generation, "learning": learning,
                         "update": total(generation, learning)}
    return out


# ----------------------------------------------------------------------------------- sweep
def sweep_steps(experiment: Path = PAPER_SWEEP, parts: int = 1) -> list[dict[str, int]]:
    """Environment steps per task of each part (`--part k/parts`) of the sweep: the groups each
    machine runs, as `vaco-jax sweep --part` assigns them (no padding: every group of the paper
    sweep fits one batch)."""
    from vaco_jax.experiment import group_steps, load_experiment, parse_part, selected_groups

    exp = load_experiment(experiment)
    out = []
    for k in range(1, parts + 1):
        groups = exp.groups if parts == 1 else selected_groups(exp, parse_part(f"{k}/{parts}"))
        steps: dict[str, int] = {}
        for g in groups:
            steps[g.config.env] = steps.get(g.config.env, 0) + group_steps(g)
        out.append(steps)
    return out


def sweep_hours(part_steps: list[dict[str, int]], rates: dict[str, float]) -> float:
    """Hours of the slowest part, each task's steps at its rate (all runs of a batch together)."""
    return max(sum(s / rates[env] for env, s in part.items()) for part in part_steps) / 3600


# ----------------------------------------------------------------------------------- predictions
def predictions(results: dict[str, Any]) -> dict[str, Any]:
    """Per task, device and physics rate: the rooflines of acting and learning, the predicted
    update time and end-to-end rate, its ratio to physics alone; the sweep's hours on 1 and 8
    GPUs; the token testbed's update time, tokens/s and model FLOPs utilisation bound."""
    out: dict[str, Any] = {"control": [], "sweep": [], "tokens": []}
    control = results.get("control", {})
    rates_by_device: dict[str, dict[str, float]] = {}
    for env, counts in control.items():
        if "per_update" not in counts:
            continue
        cfg = counts["config"]
        steps = cfg["num_envs"] * cfg["rollout_length"]
        per = counts["per_update"]
        for hw_key, hw in HARDWARE.items():
            acting, learning = on_hardware(per["acting"], hw), on_hardware(per["learning"], hw)
            physics_xla = on_hardware(per["physics_xla_lower_bound"], hw)["matrix"]["time_s"]
            learner_s = acting["fp32"]["time_s"] + learning["fp32"]["time_s"]
            learner_opt_s = acting["matrix"]["time_s"] + learning["matrix"]["time_s"]
            row = {"env": env, "hardware": hw_key, "steps_per_update": steps,
                   "acting": acting, "learning": learning, "learner_s": learner_s,
                   "learner_s_matrix_rate": learner_opt_s,
                   "physics_xla_lower_bound_s": physics_xla, "physics": []}
            if hw_key in ("h100", "h200"):  # published GPU physics rates (see PHYSICS_RATES)
                for p in PHYSICS_RATES:
                    if p["env"] != env:
                        continue
                    pred = predicted_rate(steps, p["steps_per_s"], learner_s)
                    row["physics"].append({**p, "physics_steps_per_s": p["steps_per_s"],
                                           **pred})
                    rates_by_device.setdefault((hw_key, p["device"]), {})[env] = \
                        pred["steps_per_s"]
            out["control"].append(row)
    one, eight = sweep_steps(parts=1), sweep_steps(parts=8)
    for (hw_key, device), rates in rates_by_device.items():
        if "ant" not in rates:  # a device with no published ant rate (the A100's humanoid only)
            continue
        for reading, chosen in _sweep_readings(rates):
            out["sweep"].append({"hardware": hw_key, "physics_device": device,
                                 "reading": reading,
                                 "rates": chosen, "hours_1_gpu": sweep_hours(one, chosen),
                                 "hours_8_gpus": sweep_hours(eight, chosen),
                                 "steps": sum(one[0].values())})
    tokens = results.get("tokens")
    if tokens and "per_update" in tokens:
        per = tokens["per_update"]
        for hw_key, hw in HARDWARE.items():
            update = on_hardware(per["update"], hw)
            for rate in ("fp32", "matrix"):
                t = update[rate]["time_s"]
                out["tokens"].append({
                    "hardware": hw_key, "peak": rate, "update_s": t,
                    "bound": update[rate]["bound"],
                    "generation_s": on_hardware(per["generation"], hw)[rate]["time_s"],
                    "learning_s": on_hardware(per["learning"], hw)[rate]["time_s"],
                    "tokens_per_s": tokens["response_tokens_per_update"] / t,
                    # The roofline's own MFU: counted flops over its time at the matrix peak.
                    "mfu_bound": per["update"]["flops"] / t / hw.matrix_flops})
    return out


def _sweep_readings(rates: dict[str, float]) -> list[tuple[str, dict[str, float]]]:
    """The sweep's five tasks at the rates known: each task at its own where predicted, the
    others at `ant`'s (halfcheetah, hopper and walker2d are planar and lighter); and every task
    at the fastest and at the slowest known rate."""
    tasks = ("ant", "halfcheetah", "hopper", "humanoid", "walker2d")
    readings = [("own rate where predicted, ant's for the other three",
                 {t: rates.get(t, rates["ant"]) for t in tasks})]
    readings.append(("every task at the slowest predicted rate",
                     {t: min(rates.values()) for t in tasks}))
    readings.append(("every task at the fastest predicted rate",
                     {t: max(rates.values()) for t in tasks}))
    return readings


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables, with what they predict."""
    return tables(results, predictions(results))


# ----------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from benchmarks import harness
    from vaco_jax.infra import io

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--out", default=None, help="results JSON, rewritten after every program")
    p.add_argument("--only", default="ant,humanoid,tokens",
                   help="comma-separated: control tasks of the paper sweep, and/or tokens")
    p.add_argument("--algo", default="vaco", help="the paper sweep's algorithm to count")
    p.add_argument("--table", default=None, metavar="JSON",
                   help="print the tables of an earlier results file and exit")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--append", action="store_true",
                   help="add to (replace the named parts of) an existing --out file")
    args = p.parse_args(argv)
    if args.table:
        results = records.load_json(args.table, records.BENCHMARK_RESULT).value
        print(markdown(results))
        return results
    if args.out and Path(args.out).exists() and not (args.overwrite or args.append):
        raise SystemExit(f"{args.out} exists; pass --overwrite to replace it or --append")
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {message}", flush=True)

    results: dict[str, Any] = {"machine": harness.machine(), "algo": args.algo,
                               "hardware": {k: dataclasses.asdict(v) for k, v in HARDWARE.items()},
                               "physics_rates": list(PHYSICS_RATES), "control": {}}
    if args.append and args.out and Path(args.out).exists():
        earlier = records.load_json(args.out, records.BENCHMARK_RESULT).value
        results = {**earlier, **{k: results[k] for k in ("hardware", "physics_rates")},
                   "control": earlier.get("control", {})}
        results.setdefault("appended_by", []).append(harness.machine())

    def save(*_: Any) -> None:
        if args.out:
            io.write_json(args.out, results)

    names = args.only.split(",")
    # A misspelt name is refused before the names ahead of it compile for minutes.
    configs = {name: paper_config(name, args.algo) for name in names if name != "tokens"}
    for name in names:
        if name == "tokens":
            log("tokens: the accelerator preset of benchmarks/tokens.py")
            results["tokens"] = token_costs(token_config(), log)
        else:
            config = configs[name]
            log(f"{name}: {args.algo}, {config.num_envs} envs x {config.rollout_length} steps, "
                f"{config.epochs} x {config.minibatches} minibatches, K={config.buffer_capacity}")
            results["control"][name] = {}
            results["control"][name] = control_costs(
                config, log, on_each=lambda partial, n=name: (
                    results["control"].__setitem__(n, partial), save()))
        results["predictions"] = predictions(results)
        save()
    results["wall_s"] = round(time.perf_counter() - start, 1)
    save()
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
