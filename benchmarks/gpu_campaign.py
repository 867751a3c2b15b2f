"""The GPU campaign: everything a short GPU lease should measure, as steps of under 10 minutes.

    python -m benchmarks.gpu_campaign --plan                    # steps, what each measures, budget
    python -m benchmarks.gpu_campaign --step setup --out DIR    # one step (on the GPU machine)
    python -m benchmarks.gpu_campaign --all --out DIR           # every step not yet in DIR
    python -m benchmarks.gpu_campaign --all --sizes tiny --out /tmp/dry   # the dry run, on a CPU
    python -m benchmarks.gpu_campaign --collect RETURNED   # results into benchmarks/results, committed

On the GPU machine `benchmarks/gpu_campaign.sh STEP ...` installs the carried wheels first and
runs the steps (README: "The GPU campaign"). Each step writes `DIR/STEP.json`
(beside the results files of the suites it runs) and is skipped when that file exists, so the
campaign resumes step by step. Every step reuses the benchmark suites: `benchmarks/run.py`
(preset `gpu`), `benchmarks/tokens.py` (preset `gpu`), the sweep machinery of `vaco-jax sweep`
and `benchmarks/roofline.py`'s prediction. `--sizes tiny` runs the same steps at the presets
`tiny` (the pure-JAX toy task, a one-layer token model, a toy sweep; Brax's trainer on
`inverted_pendulum`, the cheapest MJX task, since Brax has no toy task), writing the same files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from benchmarks import lease_study  # noqa: E402  (after the path above)

ROOT = Path(__file__).resolve().parent.parent
PAPER_SWEEP = ROOT / "experiments" / "paper_lag_sweep.toml"
DONE = ROOT / "benchmarks" / "results" / "gpu-campaign"  # the campaign's committed results
BUDGET_S = 55 * 60  # device time the campaign's steps may take together (about 4 leases)
MACHINE_START_S = 35  # a cold machine's start and the upload (33 s measured on the first lease)
CALL_LIMIT_S = 560  # gpu_campaign.sh stops a call's steps there, then packs what they wrote
# The steps grouped into one call: the limit less what their records' wall times leave out
# (each step's interpreter start and imports, the wheels' installation on a fresh machine).
CALL_S = CALL_LIMIT_S - 60


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
                return json.loads((folder / f"{step}.json").read_text())["result"]
        raise RuntimeError(f"step {step!r} has no result in {self.out} nor {DONE}: run it first")


# ----------------------------------------------------------------------------------- steps
def jax_check() -> dict[str, Any]:
    """The JAX found against the package's tested range (pyproject.toml): outside it is a
    warning, recorded, not a failure (the GPU image brings its own JAX)."""
    import tomllib
    from importlib import metadata

    import jax

    spec = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"] if re.match(r"jax[<>=]", d))
    version = metadata.version("jax")
    in_range, lower, upper = _in_range(version, spec)
    warning = None if in_range else (
        f"jax {version} is outside the tested range {spec!r} of pyproject.toml: results are "
        f"recorded with this version, and any failure may be the version's")
    if warning:
        print(f"WARNING: {warning}", flush=True)
    devices = [str(d) for d in jax.devices()]
    print(f"jax {version}, backend {jax.default_backend()}, devices {devices}", flush=True)
    return {"jax": version, "tested_range": spec, "in_tested_range": in_range,
            "warning": warning, "backend": jax.default_backend(), "devices": devices,
            "device_kind": jax.devices()[0].device_kind}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _in_range(version: str, spec: str) -> tuple[bool, str | None, str | None]:
    """Whether `version` meets `spec` (`name>=A,<B`), and its bounds."""
    lower = re.search(r">=\s*([\d.]+)", spec)
    upper = re.search(r"<\s*([\d.]+)", spec)
    v = _version(version)
    ok = ((lower is None or v >= _version(lower.group(1)))
          and (upper is None or v < _version(upper.group(1))))
    return ok, lower and lower.group(1), upper and upper.group(1)


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
    return json.loads(out.read_text())


def _run_py(ctx: Context, name: str, *args: str) -> dict[str, Any]:
    return _suite_process("benchmarks.run", ctx.out / f"{name}.run.json",
                          "--preset", ctx.sizes.preset, *args)


def _physics(task_index: int) -> Callable[[Context], dict[str, Any]]:
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


def _suite(only: str, *extra: str) -> Callable[[Context], dict[str, Any]]:
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


def _tokens(only: str, environment: dict[str, str] | None = None
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
    return lease_study.with_values(PAPER_SWEEP.read_text(), sizes.sweep_overrides,
                                   PAPER_SWEEP.name)


# The study's call: its training stops here (the engine's own stop after the chunk under way),
# leaving the call's last minute to packing and the call's start to the wheels and unpacking.
STUDY_TRAIN_S = 420
# Where the study's parts go: straight into the device's output folder when gpu_campaign.sh
# names it (each part one of the call's returned files), not into the campaign's archive.
STUDY_OUT = "CAMPAIGN_STUDY_OUT"


def step_study(ctx: Context) -> dict[str, Any]:
    """The GPU lag study's next slice (`benchmarks/lease_study.py`): continued from what the
    last lease returned (`.lease/upload/`, carried), trained, packed for the next."""
    import tempfile

    from vaco_jax.experiment import parse_experiment

    text = lease_study.with_values(lease_study.STUDY.read_text(), ctx.sizes.study_overrides,
                                   lease_study.STUDY.name)
    out = Path(os.environ.get(STUDY_OUT) or ctx.out / "study")
    seconds = STUDY_TRAIN_S if ctx.sizes.name == "gpu" else 120
    with tempfile.TemporaryDirectory() as work:
        return lease_study.run_slice(parse_experiment(text, name="gpu_lag_study"),
                                     lease_study.UPLOAD, out, Path(work), seconds)


def step_peers(ctx: Context) -> dict[str, Any]:
    """PureJaxRL's continuous PPO (its script, from a clone carried as `.purejaxrl/`) and
    Brax's trainer timed beside vaco_jax's synchronous ppo in one call, at the settings of
    `run.py`'s preset on `ant` (the dry run: the toy for PureJaxRL is not available: Brax's
    task), as ratios. Brax's side is the `brax` suite, which times vaco_jax around it."""
    brax = _suite("brax")(ctx)["result"]
    ours = brax["vaco_jax_steps_per_s"]
    checkout = ROOT / ".purejaxrl"
    result: dict[str, Any] = {"brax": brax, "vaco_jax_steps_per_s": ours,
                              "brax_steps_per_s": brax.get("steps_per_s")}
    if not checkout.is_dir():
        result["purejaxrl"] = "not run: no .purejaxrl/ clone carried (see benchmarks/README.md)"
        return result
    settings = brax["settings"]  # Brax's keyword arguments, as vaco_jax's settings map to them
    config = {"ENV_NAME": ctx.sizes.brax_env or "ant", "NUM_ENVS": settings["num_envs"],
              "NUM_STEPS": settings["unroll_length"],
              "UPDATE_EPOCHS": settings["num_updates_per_batch"],
              "NUM_MINIBATCHES": settings["num_minibatches"]}
    config["TOTAL_TIMESTEPS"] = 8 * config["NUM_ENVS"] * config["NUM_STEPS"]
    out = ctx.out / "peers_purejaxrl.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.purejaxrl", "--script",
                           "continuous", "--checkout", str(checkout), "--seeds", "1",
                           "--config", json.dumps(config), "--out", str(out)], cwd=ROOT)
    if done.returncode != 0 or not out.exists():
        result["purejaxrl"] = f"failed ({done.returncode})"
        return result
    pure = json.loads(out.read_text())
    result |= {"purejaxrl_steps_per_s": pure["steps_per_s"],
               "purejaxrl_compile_s": pure["compile_s"], "purejaxrl_config": config,
               "note": "PureJaxRL's rate includes its first update after compilation"}
    result["vaco_jax_over_purejaxrl"] = ours / pure["steps_per_s"]
    result["vaco_jax_over_brax"] = brax["ratio_vaco_jax_to_brax"]
    return result


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

    results = json.loads(path.read_text())
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


STEPS: tuple[Step, ...] = (
    # In each lease's order: the study's slice, then the open steps (R beside the roofline, the
    # token steps, the plan), then the peers; the steps done already after them.
    # expected_s: the wall time a lease measured where it ran the step, rounded up to 10 s:
    # the first lease's H100 (2026-11-26; wheel installation included in `setup`), the second's
    # H200 (2026-11-28) for `seeds` and `tokens`; the others are estimates.
    Step("setup", "install check, JAX version against pyproject.toml (warns), devices, imports",
         30, step_setup),
    Step("study", "the GPU lag study's next slice (experiments/gpu_lag_study.toml): continued "
         "from .lease/upload, trained for 420 s, packed into the call's returned files", 500,
         step_study),
    Step("seeds", "1, 4, 16, 64 vmapped seeds of ant (1,024 environments each), total steps/s",
         170, _suite("seeds")),
    Step("sweep_groups", "the paper sweep's first 2 groups (ant: ppo, ppo_recompute; 40 runs "
         "of 2,048 environments each), 30 updates: R measured", 330, step_sweep_groups),
    Step("tokens_seeds", "token testbed: 1 to 64 vmapped seeds, trained tokens/s (a count that "
         "does not fit in the device's memory recorded as such)", 240,
         _tokens("seeds", TOKENS_SEEDS_ENVIRONMENT)),
    Step("tokens_capacity", "largest token model (width doubled) and batch (prompts doubled) "
         "whose update fits, time-boxed", 200, _tokens("capacity")),
    Step("sweep_plan", "`vaco-jax sweep paper_lag_sweep.toml --plan --steps-per-second R` and "
         "the roofline's prediction beside R (needs no GPU: it can run on any machine once "
         "sweep_groups.json is committed)", 240, step_sweep_plan, needs=("sweep_groups",)),
    Step("peers", "PureJaxRL's continuous PPO and Brax's trainer beside vaco_jax's synchronous "
         "ppo on ant 4,096 at equal settings, in one call, as ratios", 240, step_peers),
    Step("physics_ant", "raw MJX rate (random actions) and synchronous ppo, timed alternately: "
         "ant at 4,096 and 16,384 environments", 180, _physics(0)),
    Step("physics_humanoid", "raw MJX rate and synchronous ppo: humanoid at 4,096 environments",
         130, _physics(1)),
    Step("async_k16", "per-environment stale policies (vaco, uniform lags over K = 16, "
         "gather) against vaco synchronous, ant 4,096", 100, _suite("async")),
    Step("brax", "Brax's PPO trainer on ant 4,096 at the same settings, against synchronous ppo",
         130, _suite("brax")),
    Step("tokens", "token testbed: forward, generated and trained tokens/s of synchronous and "
         "stale acting, MFU", 290, _tokens("throughput")),
)
_STEP_NAMES = [s.name for s in STEPS]
RECURRING = ("study",)  # run at every lease: never skipped as done, its history kept by the study


def steps_for(sizes: Sizes) -> tuple[Step, ...]:
    """The steps at `sizes`: the dry run's sizes name one physics task (the toy), so it runs one
    physics step."""
    physics = [f"physics_{task}" for task, _ in SIZES["gpu"].physics][len(sizes.physics):]
    return tuple(s for s in STEPS if s.name not in physics)


def plan_text(steps: Sequence[Step], budget_s: int = BUDGET_S,
              done: dict[str, float] | None = None) -> str:
    """The steps with their expected seconds (and the measured ones of the steps `done`), the
    total against the budget, and the steps left grouped into commands of at most `CALL_S`."""
    done = done or {}
    total = sum(s.expected_s for s in steps)
    width = max(len(s.name) for s in steps)
    lines = [f"{'step':<{width}}  {'expected s':>10}  {'done in s':>9}  measures"]
    lines += [f"{s.name:<{width}}  {s.expected_s:>10}  "
              f"{'' if s.name not in done else round(done[s.name]):>9}  {s.measures}"
              for s in steps]
    lines.append(f"{'total':<{width}}  {total:>10}  = {total / 60:.1f} min of device time "
                 f"(budget {budget_s / 60:.0f} min; add about {MACHINE_START_S} s for each "
                 f"call that finds the machine cold)")
    left = [s for s in steps if s.name not in done]
    if done:
        lines.append(f"left: {len(left)} step(s), {sum(s.expected_s for s in left)} s expected")
    lines += [f"call: bash benchmarks/gpu_campaign.sh {' '.join(call)}"
              for call in calls(left)]
    return "\n".join(lines)


def calls(steps: Sequence[Step], limit_s: int = CALL_S) -> list[list[str]]:
    """`steps` in order, grouped into commands whose expected seconds stay within `limit_s`."""
    groups: list[list[str]] = []
    used = 0
    for step in steps:
        if not groups or used + step.expected_s > limit_s:
            groups.append([])
            used = 0
        groups[-1].append(step.name)
        used += step.expected_s
    return groups


def done_steps(folder: Path) -> dict[str, float]:
    """The measured wall seconds of the step records in `folder` (the committed results); a
    record that does not parse or has no wall time is left out."""
    done = {}
    for name in (n for n in _STEP_NAMES if n not in RECURRING):
        try:
            done[name] = float(json.loads((folder / f"{name}.json").read_text())["wall_s"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return done


def check_budget(steps: Sequence[Step], budget_s: int = BUDGET_S) -> None:
    """Refuses a campaign whose expected steps exceed the budget, or one step the limit."""
    total = sum(s.expected_s for s in steps)
    if total > budget_s:
        raise ValueError(f"the campaign's steps expect {total} s, over the budget of {budget_s} s")
    long = [s.name for s in steps if s.expected_s > CALL_S]
    if long:
        raise ValueError(f"steps over the {CALL_S} s that one call gives its steps: {long}")


# ----------------------------------------------------------------------------------- main
def run_step(step: Step, ctx: Context, overwrite: bool = False) -> dict[str, Any] | None:
    """Runs `step` unless its JSON exists (then None); writes `STEP.json` with its wall time,
    or `STEP.failed.json` with the error or interruption that stopped it (and re-raises)."""
    from vaco_jax.infra import io

    path = ctx.out / f"{step.name}.json"
    if path.exists() and not overwrite:
        ctx.log(f"{step.name}: done already ({path}), skipped")
        return None
    ctx.log(f"{step.name}: {step.measures} (expected {step.expected_s} s on a GPU)")
    began = time.perf_counter()
    record: dict[str, Any] = {"step": step.name, "measures": step.measures,
                              "sizes": ctx.sizes.name, "expected_s": step.expected_s}
    try:
        record["result"] = step.run(ctx)
    except (Exception, KeyboardInterrupt) as error:  # KeyboardInterrupt: the call's time ran out
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
        record["wall_s"] = round(time.perf_counter() - began, 1)
        io.write_json(path.with_suffix(".failed.json"), record)
        raise
    record["wall_s"] = round(time.perf_counter() - began, 1)
    io.write_json(path, record)
    path.with_suffix(".failed.json").unlink(missing_ok=True)  # an earlier try's
    ctx.log(f"{step.name}: {record['wall_s']} s -> {path}")
    return record


def _sizes_of(record: Any) -> str | None:
    """The sizes a results file was measured at: a step record's `sizes`, a suite's preset."""
    if not isinstance(record, dict):
        return None
    settings = record.get("settings")
    return record.get("sizes") or (settings.get("name") if isinstance(settings, dict) else None)


def collect(returned: Path, commit: bool = True, overwrite: bool = False) -> list[str]:
    """Copies what the GPU machine returned (`returned`: a folder, or the `campaign.tar.gz` that
    `gpu_campaign.sh` packs, or a folder holding only it; step records, suite results, the
    shortened sweep, the log) into `benchmarks/results/gpu-campaign/` and commits them there, so
    a later call skips the steps done. Refuses the files of a dry run and, unless `overwrite`, a
    step already collected. Returns the steps collected."""
    import shutil
    import tarfile
    import tempfile

    if not returned.exists():
        raise ValueError(f"{returned} does not exist")
    if returned.is_dir() and (returned / lease_study.MANIFEST).is_file():
        collect_study(returned)
    packed = returned / "campaign.tar.gz" if returned.is_dir() else returned
    if packed.is_file():
        loose = [p.name for p in returned.glob("*.json")
                 if p.name != lease_study.MANIFEST] if returned.is_dir() else []
        if loose:
            raise ValueError(f"{returned} holds campaign.tar.gz and loose results {loose}: "
                             "collect one of them")
        with tempfile.TemporaryDirectory() as folder:
            try:
                with tarfile.open(packed) as tar:
                    tar.extractall(folder, filter="data")
            except tarfile.TarError as error:
                raise ValueError(f"{packed} is not a readable archive ({error})") from error
            return collect(Path(folder), commit, overwrite)
    for path in sorted(returned.glob("*.json")):
        try:
            sizes = _sizes_of(json.loads(path.read_text()))
        except ValueError as error:
            raise ValueError(f"{path.name} is not valid JSON ({error})") from error
        if sizes not in (None, "gpu"):
            raise ValueError(f"{path.name} was measured at the sizes {sizes!r}, not the "
                             "campaign's 'gpu': not collected")
        if path.stem in _STEP_NAMES and (DONE / path.name).exists() and not overwrite:
            raise ValueError(f"{DONE / path.name} exists: pass --overwrite to replace it")
    DONE.mkdir(parents=True, exist_ok=True)
    steps, copied = [], []
    for path in sorted(returned.iterdir()):
        if path.stem in RECURRING or path.name == lease_study.MANIFEST:
            continue  # the study's record and history are kept by `collect_study`
        if path.suffix in (".json", ".toml") or path.name == "campaign.log":
            target = DONE / path.name
            if path.name == "campaign.log" and target.exists():  # calls' logs one after another
                target.write_text(target.read_text() + path.read_text())
            else:
                shutil.copyfile(path, target)
            copied.append(str(target.relative_to(ROOT)))
            if path.suffix == ".json" and path.stem in _STEP_NAMES:
                steps.append(path.stem)
                (DONE / f"{path.stem}.failed.json").unlink(missing_ok=True)  # an earlier try's
    if commit and copied:  # the folder whole: the files copied and the failed records removed
        folder = str(DONE.relative_to(ROOT))
        subprocess.run(["git", "add", "-A", "--", folder], cwd=ROOT, check=True)
        subprocess.run(["git", "commit", "-m", f"GPU campaign results: {', '.join(steps) or 'logs'}",
                        "--", folder], cwd=ROOT, check=True)
    return steps


def collect_study(returned: Path, seconds: float = STUDY_TRAIN_S) -> dict[str, Any]:
    """The study's returned slice merged into its folder (`.lease/gpu_lag_study`), its report
    re-rendered in experiments/results/gpu_lag_study with the lease's device and the steps done,
    and the next slice packed into `.lease/upload` for the next lease to carry."""
    manifest = lease_study.merge(returned)
    history = lease_study.write_report(lease=manifest)
    piece = lease_study.prepare(lease_study.LOCAL, lease_study.UPLOAD,
                                lease_study.SIZING_SHARE * seconds,
                                lease_study.measured_rates(history))
    print(f"study: slice {manifest['slice']} from {manifest['device']} merged; next: "
          f"{piece.to_json() if piece else 'none, the study is complete'}", flush=True)
    return history


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--plan", action="store_true", help="print the steps and the budget, exit")
    p.add_argument("--step", action="append", default=[], choices=_STEP_NAMES,
                   help="run this step (repeatable)")
    p.add_argument("--all", action="store_true", help="run every step not yet done")
    p.add_argument("--sizes", default="gpu", choices=tuple(SIZES),
                   help="gpu: the campaign; tiny: its dry run on a CPU")
    p.add_argument("--out", default=None, help="results folder (one JSON per step)")
    p.add_argument("--overwrite", action="store_true",
                   help="run steps already done again (with --collect: replace steps collected)")
    p.add_argument("--collect", default=None, metavar="DIR",
                   help="copy the files a GPU call returned (DIR, or its campaign.tar.gz) into "
                        "benchmarks/results/gpu-campaign/ and commit them, then exit")
    p.add_argument("--no-commit", action="store_true", help="with --collect: copy only")
    args = p.parse_args(argv)
    if args.collect:
        try:
            steps = collect(Path(args.collect), commit=not args.no_commit,
                            overwrite=args.overwrite)
        except ValueError as error:
            p.error(f"--collect {args.collect}: {error}")
        print(f"collected {', '.join(steps) or 'no step records'} into {DONE}")
        return 0
    sizes = SIZES[args.sizes]
    steps = steps_for(sizes)
    print(plan_text(steps, done=done_steps(DONE) if sizes.name == "gpu" else None), flush=True)
    check_budget(steps)
    if args.plan:
        return 0
    if args.out is None or not (args.all or args.step):
        p.error("give --out and --step NAME (or --all), or --plan")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[campaign {time.perf_counter() - start:6.0f} s] {message}", flush=True)

    ctx = Context(sizes, out, log)
    chosen = steps if args.all else [s for s in steps if s.name in args.step]
    for step in chosen:
        run_step(step, ctx, overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
