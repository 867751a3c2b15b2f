"""The GPU campaign's parts that every step shares, and its measuring steps.

What a step is (`Step`), what it is given (`Context`: the sizes, its output folder, a log), the
campaign's two sizes (`gpu`, and `tiny` for the dry run on a CPU), and the steps that run the
benchmark suites in processes of their own (`benchmarks/run.py`, `benchmarks/tokens.py`), the
paper sweep's shortened groups and its plan. The study and the peers are
`benchmarks/campaign/lease.py`'s; the list of steps, the plan and `--collect` are
`benchmarks/campaign/gpu.py`'s.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from vaco_jax.infra import records

ROOT = Path(__file__).resolve().parents[2]
PAPER_SWEEP = ROOT / "experiments" / "paper_lag_sweep.toml"
DONE = ROOT / "benchmarks" / "results" / "gpu-campaign"  # the campaign's committed results


class StepUnavailable(RuntimeError):
    """A step cannot run here for want of something the lease must bring (said in one line,
    with how to get it): the campaign prints the line, not a traceback."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What differs between the campaign (`gpu`) and its dry run (`tiny`)."""

    name: str
    preset: str  # of benchmarks/run.py and benchmarks/tokens.py
    physics: tuple[tuple[str, tuple[int, ...]], ...]  # (task, environment counts) per step
    brax_env: str | None  # None: the preset's task
    sweep_groups: int  # the paper sweep's first groups run by `sweep_groups`
    sweep_overrides: dict[str, str]  # TOML values replaced in the paper sweep (shorter runs)
    plan_flags: tuple[str, ...]
    study_overrides: dict[str, str]  # TOML values replaced in the GPU lag study


SIZES = {
    "gpu": Sizes(
        name="gpu", preset="gpu",
        physics=(("ant", (4096, 16384)), ("humanoid", (4096,))), brax_env=None,
        sweep_groups=2,
        # 30 updates a run in 3 evaluation periods (chunks): the rate is read from the chunks
        # after the first; the runs keep the paper's sizes, evaluation every 10 updates
        # instead of 50 (so evaluation weighs 5 times more in R than in the sweep itself).
        sweep_overrides={"total_steps": str(30 * 2048 * 32), "eval_every": "10"},
        plan_flags=("--memory-budget", "70"), study_overrides={}),
    "tiny": Sizes(
        name="tiny", preset="tiny", physics=(("toy_reach", (8, 16)),),
        brax_env="inverted_pendulum", sweep_groups=1,
        sweep_overrides={"tasks": '["toy_reach"]', "seeds": "2", "levels": "[0, 2]",
                         "epochs": "1", "minibatches": "2", "total_steps": str(3 * 2 * 8 * 4),
                         "num_envs": "8", "rollout_length": "4", "buffer_capacity": "3",
                         "episode_length": "20", "eval_every": "2", "num_eval_envs": "2",
                         "actor_hidden": "[8]", "critic_hidden": "[8]"},
        plan_flags=(),
        study_overrides={"tasks": '["toy_reach"]', "algos": '["vaco"]', "seeds": "2",
                         "levels": "[0, 2]", "total_steps": str(4 * 8 * 4),
                         "num_envs": "8", "rollout_length": "4", "buffer_capacity": "3",
                         "episode_length": "20", "eval_every": "2", "num_eval_envs": "2",
                         "minibatches": "2", "actor_hidden": "[8]", "critic_hidden": "[8]"}),
}


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    measures: str
    expected_s: int  # device seconds, compilations included (measured where a lease ran it)
    run: Callable[["Context"], dict[str, Any]]
    needs: tuple[str, ...] = ()  # steps whose JSON this one reads


@dataclasses.dataclass
class Context:
    sizes: Sizes
    out: Path
    log: Callable[[str], None]

    def read(self, step: str) -> dict[str, Any]:
        """An earlier step's record: from this run's folder, else from the committed results
        (a campaign resumed on a fresh machine)."""
        for folder in (self.out, DONE):
            if (folder / f"{step}.json").exists():
                return records.load_json(folder / f"{step}.json",
                                         records.BENCHMARK_RESULT)["result"].value
        raise RuntimeError(f"step {step!r} has no result in {self.out} nor {DONE}: run it first")


def with_values(text: str, overrides: Mapping[str, str], name: str) -> str:
    """An experiment file's TOML with `overrides` put in place of its `key = ...` lines."""
    for key, value in overrides.items():
        text, count = re.subn(rf"^{key}\s*=.*$", f"{key} = {value}", text, count=1,
                              flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"{name} has no line `{key} = ...` to override")
    return text


def jax_check() -> dict[str, Any]:
    """The JAX found against the package's tested range (pyproject.toml): outside it is a
    warning, recorded, not a failure (the GPU image brings its own JAX)."""
    from importlib import metadata

    import jax

    dependencies = records.load_toml(ROOT / "pyproject.toml", records.PROJECT)["project"][
        "dependencies"].items()
    spec = next(d for d in (d.string() for d in dependencies) if re.match(r"jax[<>=]", d))
    version = metadata.version("jax")
    tested = in_range(version, spec)
    warning = None if tested else (
        f"jax {version} is outside the tested range {spec!r} of pyproject.toml: results are "
        f"recorded with this version, and any failure may be the version's")
    if warning:
        print(f"WARNING: {warning}", flush=True)
    devices = [str(d) for d in jax.devices()]
    print(f"jax {version}, backend {jax.default_backend()}, devices {devices}", flush=True)
    return {"jax": version, "tested_range": spec, "in_tested_range": tested,
            "warning": warning, "backend": jax.default_backend(), "devices": devices,
            "device_kind": jax.devices()[0].device_kind}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def in_range(version: str, spec: str) -> bool:
    """Whether `version` meets `spec` (`name>=A,<B`)."""
    lower = re.search(r">=\s*([\d.]+)", spec)
    upper = re.search(r"<\s*([\d.]+)", spec)
    v = _version(version)
    return ((lower is None or v >= _version(lower.group(1)))
            and (upper is None or v < _version(upper.group(1))))


def step_setup(ctx: Context) -> dict[str, Any]:
    from benchmarks import harness

    result = {"jax_check": jax_check(), "machine": harness.machine()}
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        result["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        result["nvidia_smi"] = None
    import jax
    import jax.numpy as jnp

    x = jnp.ones((1024, 1024))
    result["smoke_matmul"] = float(jax.block_until_ready(x @ x)[0, 0])
    for module in ("brax", "mujoco", "mujoco.mjx", "vaco_jax"):
        __import__(module)  # fails the step if the install did not take
    return result


def _suite_process(module: str, out: Path, *args: str,
                   environment: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs a benchmark suite (`benchmarks.run`, `benchmarks.tokens`) in a process of its own,
    so that each starts with the device's memory and the compilation cache to itself, and
    returns its results file. `environment`: variables set for it where not already set."""
    command = [sys.executable, "-m", module, "--out", str(out), "--overwrite", *args]
    env = {**(environment or {}), **os.environ}
    done = subprocess.run(command, cwd=ROOT, check=False, env=env)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode})")
    return records.load_json(out, records.BENCHMARK_RESULT).value


def _run_py(ctx: Context, name: str, *args: str) -> dict[str, Any]:
    return _suite_process("benchmarks.run", ctx.out / f"{name}.run.json",
                          "--preset", ctx.sizes.preset, *args)


def physics(task_index: int) -> Callable[[Context], dict[str, Any]]:
    def step(ctx: Context) -> dict[str, Any]:
        task, counts = ctx.sizes.physics[task_index]
        rows = []
        for n in counts:
            results = _run_py(ctx, f"physics_{task}_{n}", "--only", "env", "--env", task,
                              "--num-envs", str(n))
            env = results["benchmarks"]["env"]
            rows.append({"num_envs": n, "error": env.get("error"),
                         "env_steps_per_s": env.get("steps_per_s"),
                         "sync_ppo_steps_per_s": (env.get("paired_sync_ppo") or {}).get(
                             "steps_per_s"),
                         "sync_ppo_over_env": env.get("sync_ppo_over_env_limit"),
                         "compile_s": {k: (env.get(k) or {}).get("compile_s") for k in
                                       ("paired_sync_ppo",)} | {"env": env.get("compile_s")},
                         "file": f"physics_{task}_{n}.run.json"})
        return {"task": task, "rows": rows}
    return step


def suite(only: str, *extra: str) -> Callable[[Context], dict[str, Any]]:
    def step(ctx: Context) -> dict[str, Any]:
        args = ["--only", only, *extra]
        if only == "brax" and ctx.sizes.brax_env:
            args += ["--env", ctx.sizes.brax_env]
        results = _run_py(ctx, only, *args)
        return {"file": f"{only}.run.json", "result": results["benchmarks"][only]}
    return step


# The token testbed's vmapped seeds: at 64 seeds one call's temporary buffer alone is 83.3 GiB
# (H200, 2026-11-28), beside the 64 states' 5.7 GB and the smaller counts' states; JAX's
# allocator stops at 75% of the device unless told more (112.6e9 of the H200's 150e9 bytes), so
# this step lets it take 90%. A count that still does not fit is recorded as not fitting
# (`benchmarks/tokens.py`, `seeds`), the others are timed.
TOKENS_SEEDS_ENVIRONMENT = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"}


def tokens(only: str, environment: dict[str, str] | None = None
            ) -> Callable[[Context], dict[str, Any]]:
    def step(ctx: Context) -> dict[str, Any]:
        name = f"tokens_{only.split(',')[0]}"
        results = _suite_process("benchmarks.tokens", ctx.out / f"{name}.tokens.json",
                                 "--preset", ctx.sizes.preset, "--only", only,
                                 environment=environment)
        return {"file": f"{name}.tokens.json", "parts": results["parts"]}
    return step


def shortened_sweep(sizes: Sizes) -> str:
    """The paper sweep's TOML with `sizes.sweep_overrides` put in place of its values."""
    return with_values(PAPER_SWEEP.read_text(), sizes.sweep_overrides, PAPER_SWEEP.name)


# The study's call: its training stops here (the engine's own stop after the chunk under way),
# leaving the call's last minute to packing and the call's start to the wheels and unpacking.
def step_sweep_groups(ctx: Context) -> dict[str, Any]:
    """The first groups of the paper sweep, shortened, run by the sweep machinery itself; each
    group's rate R from its chunks after the first (compilation and first-call set-up apart)."""
    import shutil

    from vaco_jax.experiment import parse_experiment, sweep
    from vaco_jax.experiment.parts import NamedGroups

    text = shortened_sweep(ctx.sizes)
    (ctx.out / "sweep_shortened.toml").write_text(text)
    experiment = parse_experiment(text, name="paper_lag_sweep_shortened")
    groups = experiment.groups[:ctx.sizes.sweep_groups]
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"vaco_jax_campaign_sweep_{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    chunks: dict[str, list[tuple[float, int]]] = {}
    batches: dict[str, Any] = {}
    started = time.perf_counter()

    def on_chunk(batch, result) -> None:
        batches[batch.name] = batch
        chunks.setdefault(batch.name, []).append((time.perf_counter(), result.updates_done))

    sweep(folder, experiment, part=NamedGroups(tuple(g.name for g in groups)), progress=False,
          on_chunk=on_chunk)
    rows = []
    for name, batch in batches.items():
        group = experiment.group(batch.group)
        marks = chunks[name]
        per_update = group.config.steps_per_update * batch.size
        row = {"group": batch.group, "batch": name, "runs": batch.size,
               "num_envs_per_run": group.config.num_envs, "chunks": len(marks),
               "updates": marks[-1][1]}
        if len(marks) >= 2:
            (t0, u0), (t1, u1) = marks[0], marks[-1]
            row["steps_per_s"] = (u1 - u0) * per_update / (t1 - t0)
        rows.append(row)
    shutil.rmtree(folder, ignore_errors=True)
    rates = [r["steps_per_s"] for r in rows if "steps_per_s" in r]
    return {"experiment": "paper_lag_sweep, shortened (sweep_shortened.toml)",
            "overrides": ctx.sizes.sweep_overrides, "rows": rows,
            "steps_per_s": sum(rates) / len(rates) if rates else None,
            "wall_s": round(time.perf_counter() - started, 1),
            "note": "R counts the environment steps of all runs of a batch together, evaluation "
                    "included (every eval_every updates as overridden), compilation excluded"}


def step_sweep_plan(ctx: Context) -> dict[str, Any]:
    """`vaco-jax sweep ... --plan --steps-per-second R` of the whole paper sweep (the shortened
    toy sweep in the dry run), R from `sweep_groups`; beside it the roofline's prediction."""
    measured = ctx.read("sweep_groups")
    rate = measured["steps_per_s"]
    if not rate:
        raise RuntimeError("sweep_groups measured no rate")
    experiment = (str(PAPER_SWEEP) if ctx.sizes.name == "gpu"
                  else str(ctx.out / "sweep_shortened.toml"))
    command = [sys.executable, "-m", "vaco_jax.cli", "sweep", experiment, "--plan",
               "--steps-per-second", f"{rate:.0f}", *ctx.sizes.plan_flags]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    plan = done.stdout.strip()
    hours = re.search(r"= ([\d.,]+) (d|h|min|s),", plan)
    return {"command": " ".join(["vaco-jax"] + command[3:]), "steps_per_s": rate,
            "plan": plan.splitlines(), "estimate": hours.group(0) if hours else None,
            "prediction": roofline_check(rate, measured)}


def roofline_check(rate: float, measured: dict[str, Any]) -> dict[str, Any] | None:
    """The roofline's predicted end-to-end rate of the measured groups' task (from
    `benchmarks/results/roofline/roofline.json`, for this device) beside the measured R per run."""
    path = ROOT / "benchmarks" / "results" / "roofline" / "roofline.json"
    if not path.exists():
        return None
    import jax

    from benchmarks import hardware, roofline

    results = records.load_json(path, records.BENCHMARK_RESULT).value
    peak = hardware.peak_for(jax.devices()[0].device_kind)
    hw = next((k for k, v in hardware.HARDWARE.items() if v is peak), None)
    if hw not in ("h100", "h200"):  # predicted for those GPUs only (the dry run: none)
        return None
    predicted = [{"env": row["env"], "physics_device": p["device"],
                  "predicted_steps_per_s_per_run": p["steps_per_s"]}
                 for row in (results.get("predictions") or roofline.predictions(results))[
                     "control"] if row["hardware"] == hw for p in row["physics"]]
    runs = measured["rows"][0]["runs"] if measured["rows"] else 1
    return {"device_rates": hw, "measured_steps_per_s": rate, "runs_per_batch": runs,
            "predicted": predicted,
            "note": "the prediction is a device rate (the physics at its published rate, "
                    "the floor of vaco's learner per 65,536 steps), so it compares with the "
                    "measured R of a batch of runs directly; the groups measured are ppo and "
                    "ppo_recompute, whose learners do less than vaco's"}
