"""The sub-benchmarks, their settings presets, and the memory probe run in a child process.

Every sub-benchmark is `fn(ctx) -> dict` (JSON-able). Training programs are measured through
`Context.train`, which remembers each (config, seeds) measurement so that sub-benchmarks
sharing a program (the synchronous baseline, a one-seed point) compile it once.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import jax

from benchmarks import brax_ppo, harness, programs
from vaco_jax.control.config import ControlConfig
from vaco_jax.control.train import ControlTrainer
from vaco_jax.infra import records
from vaco_jax.core.lag_models import Fixed, Uniform


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one benchmark run measures; `base` fixes task, env count, rollout, optimisation and
    network sizes for every throughput comparison."""

    name: str
    base: ControlConfig
    updates_per_call: int  # training updates (rollouts) per timed call
    repeats: int  # timed calls after the warm-up call
    sync_algos: tuple[str, ...]  # "ppo" first: the synchronous baseline of every comparison
    async_grid: tuple[tuple[str, int], ...]  # (algo, buffer capacity K), each with every acting
    breakdown_async: tuple[str, int]  # (algo, K) whose time is split into env / acting / learning
    actings: tuple[str, ...]
    seed_counts: tuple[int, ...]
    seeds_num_envs: int  # environments per seed in the seeds sweep
    memory_grid: tuple[tuple[int, int], ...]  # (seeds, buffer capacity K) per memory probe
    memory_chunks: int  # calls of an `updates_per_call` chunk per probe (N, 2N, ... updates)
    compile_env: str
    compile_num_envs: int
    brax_timed_epochs: int
    measure_eval: bool
    max_wait_s: float  # longest wait for other processes to leave the CPU before timing

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "base": self.base.to_dict()}


# Settings that only one sub-benchmark reads: a rerun of it may change them in a results file.
OWN_SETTINGS = {"memory_grid": "memory", "memory_chunks": "memory", "seed_counts": "seeds",
                "seeds_num_envs": "seeds", "compile_env": "compile",
                "compile_num_envs": "compile", "brax_timed_epochs": "brax"}


def _base(env: str, num_envs: int, rollout_length: int, epochs: int, minibatches: int,
          hidden: tuple[int, ...], buffer_capacity: int) -> ControlConfig:
    """Synchronous PPO (lag fixed:0) as `vaco-jax train` runs it: the policy buffer is there
    but every environment acts with the newest policy."""
    # A long evaluation interval: the timed programs never evaluate (evaluation is timed apart).
    return ControlConfig(env=env, algo="ppo", num_envs=num_envs, rollout_length=rollout_length,
                       epochs=epochs, minibatches=minibatches, lag_model=Fixed(),
                       buffer_capacity=buffer_capacity, actor_hidden=hidden,
                       critic_hidden=hidden, eval_every=1_000_000)


def presets(backend: str) -> dict[str, Settings]:
    """`quick` (minutes on a CPU), `full` sized for the backend it runs on, and the campaign's
    `gpu` and `tiny` (`campaign_presets`)."""
    quick = Settings(
        name="quick", base=_base("inverted_double_pendulum", 32, 16, 2, 2, (32, 32), 4),
        updates_per_call=4, repeats=16, sync_algos=("ppo",), async_grid=(("ppo", 4),),
        breakdown_async=("ppo", 4),
        actings=("gather", "select"), seed_counts=(1, 4), seeds_num_envs=32,
        memory_grid=((1, 4),), memory_chunks=3, compile_env="toy_reach", compile_num_envs=32,
        brax_timed_epochs=3, measure_eval=False, max_wait_s=0.0)
    if backend == "cpu":
        full = dataclasses.replace(
            quick, name="full",
            base=_base("inverted_double_pendulum", 256, 32, 4, 4, (64, 64), 16),
            updates_per_call=2, repeats=10, sync_algos=("ppo", "vaco"),
            # Per-environment acting is the same code for every algorithm, so on a CPU (where
            # each program compiles for a minute) only VACO runs the whole K grid.
            async_grid=(("vaco", 4), ("vaco", 16), ("vaco", 64), ("ppo", 16)),
            breakdown_async=("vaco", 16),
            seed_counts=(1, 4, 16, 64), memory_grid=((1, 4), (1, 64), (16, 4)), memory_chunks=8,
            compile_env="ant", compile_num_envs=64, measure_eval=False, max_wait_s=30.0)
    else:  # accelerators: the reference task, ant with 4096 environments
        full = dataclasses.replace(
            quick, name="full", base=_base("ant", 4096, 32, 4, 16, (64, 64), 16),
            updates_per_call=4, repeats=5, sync_algos=("ppo", "vaco"),
            async_grid=tuple((a, k) for a in ("ppo", "vaco") for k in (4, 16, 64)),
            breakdown_async=("vaco", 16),
            seed_counts=(1, 4, 16, 64),
            seeds_num_envs=1024, memory_grid=((1, 4), (1, 16), (1, 64), (4, 16), (16, 16)),
            memory_chunks=3, compile_env="ant", compile_num_envs=4096, measure_eval=True,
            max_wait_s=60.0)
    return {"quick": quick, "full": full, **campaign_presets()}


def campaign_presets() -> dict[str, Settings]:
    """The GPU campaign's sizes (`benchmarks/campaign/gpu.py`), whatever the backend: `gpu`, the
    accelerator targets (`ant`, 4096 environments; asynchrony at K = 16 with `gather`, against
    the same algorithm synchronous; 1 to 64 seeds of 1024 environments) with few compilations,
    since each MJX program compiles for minutes and a lease is short; and `tiny`, every
    sub-benchmark of it on the pure-JAX toy task in seconds, the campaign's dry run on a CPU."""
    gpu = Settings(
        name="gpu", base=_base("ant", 4096, 32, 4, 16, (64, 64), 16), updates_per_call=4,
        repeats=5, sync_algos=("ppo", "vaco"), async_grid=(("vaco", 16),),
        breakdown_async=("vaco", 16), actings=("gather",), seed_counts=(1, 4, 16, 64),
        seeds_num_envs=1024, memory_grid=((1, 16), (16, 16)), memory_chunks=3,
        compile_env="ant", compile_num_envs=4096, brax_timed_epochs=3, measure_eval=False,
        max_wait_s=5.0)
    tiny = dataclasses.replace(
        gpu, name="tiny", base=_base("toy_reach", 8, 4, 1, 2, (8,), 4), updates_per_call=1,
        repeats=2, async_grid=(("vaco", 4),), breakdown_async=("vaco", 4), seed_counts=(1, 2),
        seeds_num_envs=8, memory_grid=((1, 4),), memory_chunks=2, compile_env="toy_reach",
        compile_num_envs=8, brax_timed_epochs=1, max_wait_s=0.0)
    return {"gpu": gpu, "tiny": tiny}


ProgramKey = tuple[str, ControlConfig, int]  # (program kind, config, number of seeds)
_BUILDERS = {"train": programs.train_program, "env": programs.env_program,
             "eval": programs.eval_program}


class Context:
    """Settings and the compiled programs of one benchmark run.

    Programs are compiled once and kept, so that comparisons time their two programs in
    alternating calls (`measure` with several keys): a ratio then compares two rates taken in
    the same spell of load from other processes.
    """

    def __init__(self, settings: Settings, log: Callable[[str], None]):
        self.settings = settings
        self.log = log
        self._compiled: dict[ProgramKey, harness.Compiled] = {}
        self._first: dict[ProgramKey, dict[str, Any]] = {}

    def compiled(self, key: ProgramKey) -> harness.Compiled:
        if key not in self._compiled:
            kind, config, seeds = key
            self.log(f"  compiling {kind}: {describe(config)}, {seeds} seed(s)")
            updates = self.settings.updates_per_call
            if kind == "collect":  # from the state training has reached: versions are pushed
                state = self.compiled(("train", config, seeds)).args[0]
                program = programs.collect_program(config, seeds, updates, state)
            else:
                program = _BUILDERS[kind](config, seeds, updates)
            self._compiled[key] = compiled = harness.Compiled(program)
            self.log(f"    compiled in {compiled.lower_s + compiled.compile_s:.1f} s")
        return self._compiled[key]

    def measure(self, *keys: ProgramKey) -> list[dict[str, Any]]:
        """Times the programs of `keys` in interleaved rounds; one summary per key."""
        compiled = [self.compiled(key) for key in keys]
        results = harness.timed_rounds(compiled, repeats=self.settings.repeats,
                                       max_wait_s=self.settings.max_wait_s)
        for (kind, config, seeds), result in zip(keys, results):
            self.log(f"    {kind} {describe(config)}, {seeds} seed(s): "
                     f"{result['steps_per_s']:,.0f} steps/s (load {result['load']})")
        return results

    def first(self, key: ProgramKey) -> dict[str, Any]:
        """The program's own measurement, taken once and remembered."""
        if key not in self._first:
            self._first[key] = self.measure(key)[0]
        return self._first[key]

    def sync_config(self, algo: str = "ppo") -> ControlConfig:
        return self.settings.base.replace(algo=algo)

    def breakdown_configs(self) -> list[ControlConfig]:
        """Synchronous ppo (and the breakdown's algorithm), then that algorithm asynchronous
        with every acting strategy."""
        algo, capacity = self.settings.breakdown_async
        sync = [self.sync_config()] + ([self.sync_config(algo)] if algo != "ppo" else [])
        return sync + [self.async_config(algo, capacity, a) for a in self.settings.actings]

    def async_config(self, algo: str, capacity: int, acting: str) -> ControlConfig:
        return self.settings.base.replace(algo=algo, lag_model=Uniform(),
                                          buffer_capacity=capacity, acting=acting)


def describe(config: ControlConfig) -> str:
    lag = "fixed:0" if isinstance(config.lag_model, Fixed) else \
        f"{config.lag_model.name}:{config.buffer_capacity - 1}"
    return (f"{config.algo} on {config.env}, {config.num_envs} envs, K={config.buffer_capacity}, "
            f"lag {lag}, acting={config.acting}")


def _paired(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """`candidate`'s measurement with the baseline timed beside it, and the extra time per step
    over the baseline: from the rounds' paired rates (`overhead`), and from the two fastest
    calls (`overhead_best_calls`)."""
    return {**candidate, "paired_baseline_steps_per_s": baseline["steps_per_s"],
            "paired_baseline_calls_s": baseline["calls_s"],
            "overhead": 1.0 / harness.paired_rate_ratio(candidate, baseline) - 1.0,
            "overhead_best_calls": baseline["steps_per_s"] / candidate["steps_per_s"] - 1.0}


# ----------------------------------------------------------------------------------- benchmarks
def bench_env(ctx: Context) -> dict[str, Any]:
    """1. Physical limit: the task alone, random actions, the engine's stepping."""
    env, sync = ctx.measure(("env", ctx.settings.base, 1), ("train", ctx.sync_config(), 1))
    # Training rate over environment rate, both timed in the same rounds: the learner's cost.
    return {**env, "paired_sync_ppo": sync,
            "sync_ppo_over_env_limit": harness.paired_rate_ratio(sync, env),
            "sync_ppo_over_env_limit_best_calls": sync["steps_per_s"] / env["steps_per_s"]}


def bench_sync(ctx: Context) -> dict[str, Any]:
    """2. Synchronous training (lag fixed:0), per algorithm; evaluation timed apart."""
    out: dict[str, Any] = {"rows": {a: ctx.first(("train", ctx.sync_config(a), 1))
                                    for a in ctx.settings.sync_algos}}
    if ctx.settings.measure_eval:
        config = ctx.sync_config()
        out["eval"] = ctx.first(("eval", config, 1))
        ctx.log(f"    {min(out['eval']['calls_s']):.2f} s per evaluation of "
                f"{config.num_eval_envs} episodes")
    return out


def bench_async(ctx: Context) -> dict[str, Any]:
    """3. Per-environment stale policies (uniform lags over the whole buffer), both strategies."""
    s = ctx.settings
    rows = []
    for algo, capacity in s.async_grid:
        # The same algorithm synchronous where measured, so that the overhead is asynchrony's.
        baseline = algo if algo in s.sync_algos else "ppo"
        for acting in s.actings:
            sync, result = ctx.measure(("train", ctx.sync_config(baseline), 1),
                                       ("train", ctx.async_config(algo, capacity, acting), 1))
            rows.append({"algo": algo, "buffer_capacity": capacity, "acting": acting,
                         "baseline": f"{baseline} synchronous", **_paired(sync, result)})
    return {"rows": rows, "winners": _acting_winners(rows)}


def _acting_winners(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per algorithm and K, the faster per-environment strategy and its margin."""
    winners = []
    for algo in sorted({r["algo"] for r in rows}):
        for capacity in sorted({r["buffer_capacity"] for r in rows}):
            rates = {r["acting"]: r["steps_per_s"] for r in rows
                     if r["algo"] == algo and r["buffer_capacity"] == capacity}
            if len(rates) == 2:
                best = max(rates, key=rates.get)
                other = min(rates, key=rates.get)
                winners.append({"algo": algo, "buffer_capacity": capacity, "winner": best,
                                "speedup": rates[best] / rates[other]})
    return winners


def bench_breakdown(ctx: Context) -> dict[str, Any]:
    """Where training time goes: environment, acting (policies), learning, per env step."""
    rows = []
    for config in ctx.breakdown_configs():
        env, collect, train = ctx.measure(("env", ctx.settings.base, 1), ("collect", config, 1),
                                          ("train", config, 1))
        per_step = {name: 1e6 / m["steps_per_s"] for name, m in
                    (("env", env), ("collect", collect), ("train", train))}
        rows.append({"config": describe(config), "algo": config.algo,
                     "lag_model": config.lag_model.name,
                     "buffer_capacity": config.buffer_capacity,
                     "acting": config.acting, "env": env, "collect": collect, "train": train,
                     "us_per_step": {"environment": per_step["env"],
                                     "acting": per_step["collect"] - per_step["env"],
                                     "learning": per_step["train"] - per_step["collect"],
                                     "total": per_step["train"]}})
    return {"rows": rows}


def bench_brax(ctx: Context) -> dict[str, Any]:
    """4. Brax's PPO trainer on the same task and settings, against synchronous vaco_jax PPO."""
    config = ctx.sync_config()
    key = ("train", config, 1)
    before = ctx.measure(key)[0]
    ctx.log("  Brax PPO: compiling and timing its training epochs")
    load = harness.wait_for_quiet(ctx.settings.max_wait_s)
    result = brax_ppo.run(config, updates=ctx.settings.updates_per_call,
                          timed_epochs=ctx.settings.brax_timed_epochs)
    ctx.log(f"    Brax PPO: {result['steps_per_s']:,.0f} steps/s "
            f"(first epoch {result['compile_s']:.0f} s longer: compilation)")
    after = ctx.measure(key)[0]
    # vaco_jax is timed right before and right after Brax's epochs; the better of the two.
    vaco = max(before["steps_per_s"], after["steps_per_s"])
    return {**result, "load": load, "vaco_jax_before": before, "vaco_jax_after": after,
            "vaco_jax_steps_per_s": vaco, "ratio_vaco_jax_to_brax": vaco / result["steps_per_s"]}


def bench_seeds(ctx: Context) -> dict[str, Any]:
    """5. Throughput and compile time against the number of vmapped seeds."""
    config = ctx.sync_config().replace(num_envs=ctx.settings.seeds_num_envs)
    one = ("train", config, 1)
    rows = []
    for n in ctx.settings.seed_counts:
        single, result = (ctx.first(one),) * 2 if n == 1 else ctx.measure(one, ("train", config, n))
        rows.append({"seeds": n, **result,
                     "speedup_vs_one_seed": harness.paired_rate_ratio(result, single),
                     "speedup_vs_one_seed_best_calls":
                         result["steps_per_s"] / single["steps_per_s"]})
    return {"num_envs_per_seed": config.num_envs, "rows": rows}


def bench_memory(ctx: Context) -> dict[str, Any]:
    """6. Host (and device) memory against seeds and K, and across run length; one child process
    per configuration so that each peak RSS is that configuration's alone."""
    s = ctx.settings
    rows = []
    for seeds, capacity in s.memory_grid:
        config = ctx.async_config(s.async_grid[0][0], capacity, s.base.acting)
        ctx.log(f"  memory probe: {describe(config)}, {seeds} seed(s)")
        probe = {"config": config.to_dict(), "seeds": seeds, "updates": s.updates_per_call,
                 "chunks": s.memory_chunks}
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("run.py")),
                               "--memory-probe", json.dumps(probe)],
                              capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"memory probe failed ({done.returncode}): {done.stderr[-2000:]}")
        measured = records.parse_json(lines[-1], "the memory probe's last line",
                                      records.BENCHMARK_RESULT).table()
        row = {"seeds": seeds, "buffer_capacity": capacity, **measured}
        ctx.log(f"    peak RSS {row['peak_rss_mb']:,.0f} MB, RSS after N/2N/.. updates "
                f"{[round(x) for x in row['rss_mb_after_chunk']]} MB")
        rows.append(row)
    return {"updates_per_chunk": s.updates_per_call, "rows": rows}


def memory_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a child process: trains `chunks` chunks and reports its memory after each."""
    config = ControlConfig.from_dict(spec["config"])
    after_import = harness.rss_mb()
    program = programs.train_program(config, spec["seeds"], spec["updates"])
    after_init = harness.rss_mb()
    compiled = harness.Compiled(program, warm_up=False)
    after_compile = harness.rss_mb()
    rss, device = [], []
    for _ in range(spec["chunks"]):
        compiled.call(carry_on=True)
        rss.append(harness.rss_mb())
        device.append(harness.device_memory())
    return {"rss_mb_after_import": after_import, "rss_mb_after_init": after_init,
            "rss_mb_after_compile": after_compile, "rss_mb_after_chunk": rss,
            "peak_rss_mb": harness.peak_rss_mb(), "device_memory_after_chunk": device,
            "growth_mb_last_vs_first_chunk": rss[-1] - rss[0],
            "growth_mb_second_half": rss[-1] - rss[len(rss) // 2]}


def bench_compile(ctx: Context) -> dict[str, Any]:
    """7. Compile time of the whole `train` program (rollouts, updates, evaluation) of a
    locomotion task, and no recompilation when numeric hyper-parameters change."""
    s = ctx.settings
    config = s.base.replace(env=s.compile_env, num_envs=s.compile_num_envs, algo="vaco",
                            lag_model=Uniform(), buffer_capacity=16, num_eval_envs=4,
                            total_steps=s.compile_num_envs * s.base.rollout_length, eval_every=1)
    train = jax.jit(jax.vmap(ControlTrainer(config).train))
    calls = []
    for seed, values in ((0, {}), (1, {"learning_rate": 1e-3, "clip_eps": 0.1, "tv_delta": 0.05,
                                        "gamma": 0.95, "entropy_coef": 0.01, "lag": 3.0})):
        hp = programs.hparams_for(config, 1, **values)
        keys = jax.random.PRNGKey(seed)[None]
        ctx.log(f"  train() of {describe(config)}: call with seed {seed}, "
                f"hyper-parameters {values or 'default'}")
        with harness.CompileEvents() as events:
            start = time.perf_counter()
            jax.block_until_ready(train(keys, hp))
            elapsed = time.perf_counter() - start
        calls.append({"seed": seed, "hparams": values, "call_s": round(elapsed, 3),
                      **events.summary()})
        ctx.log(f"    {elapsed:.1f} s, {calls[-1]['backend_compiles']} backend compilation(s)")
    first, second = calls
    return {"env": config.env, "config": describe(config), "calls": calls,
            "compile_s": first["trace_s"] + first["lower_s"] + first["backend_compile_s"],
            "recompiled_on_new_hparams": second["backend_compiles"] > 0,
            "jit_cache_size": train._cache_size()}


BENCHMARKS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "env": bench_env, "sync": bench_sync, "async": bench_async, "breakdown": bench_breakdown,
    "brax": bench_brax,
    "seeds": bench_seeds, "memory": bench_memory, "compile": bench_compile,
}
