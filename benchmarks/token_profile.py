"""Where a token study part's wall time goes: a slice of one part of an experiment, run end to
end as `vaco-jax sweep --groups` runs it, its wall time split by phase, then the programs inside
its chunks timed apart at the part's own settings.

    python -m benchmarks.token_profile experiments/tokens_long_main.toml \
        --groups tune-add_steps-grpo-e1m4,add_steps-grpo-e1m4 --updates 20

Phases of the sweep (wall seconds on the calling thread; work a sweep does in a background
thread, the next group's compilation and a chunk program compiled beside the first state, is
listed apart, since it overlaps the rest):

- process start and imports: `python -c "import vaco_jax.cli.sweep"` less `python -c pass`,
  a process of its own;
- warm start: restored from its cache, or trained (a first run on a new machine);
- first state and evaluation: compiles and runs the initial program (on the calling thread);
- chunk compile: the chunk program compiled (when not already compiled in the background);
- chunks: the compiled updates (generation, optimisation) and evaluations, on the device;
- metrics and status written, checkpoints written, the report;
- other: the rest of the wall time (planning, folder checks, host copies between phases).

Inside a chunk, `benchmarks/token_programs.py`'s programs at the part's first study group's
config split one update into its generation (`collect`) and the rest, beside the forward pass
alone, and XLA's operation count gives each program's achieved FLOP rate; the CPU's matrix-
product bound is measured here as the roofline measures a device (a large fp32 matmul). The
seed rows time the whole update with 1, 2, 8 and 30 runs vmapped in one program (`--seeds`),
what holding a group's runs in one program costs per run; `--only seeds` times them alone.

The slice runs twice in one process: first as on a fresh clone on a new machine (an empty
persistent compilation cache, the commands' own, and no warm start on disk), then again with
what the first left on disk, as a second run of the same part finds it; JAX's persistent cache
says how many programs it was asked for and found. The slice keeps the part's groups, batches
and seeds and shortens every run to `--updates` updates, so compilation and the warm start
weigh more in it than in the whole part: the JSON records both the slice's split and the
per-update rates, from which a whole part's split follows. Results go to a JSON file written
atomically (never over one without `--overwrite`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax
import jax.numpy as jnp

from benchmarks import harness, token_programs
from vaco_jax.experiment import NamedGroups, load_experiment, sweep
from vaco_jax.infra import io
from vaco_jax.run import compilation_cache

PHASES = (
    ("warm start", "vaco_jax.run.warm_start", "resolve"),
    ("first state and evaluation", "vaco_jax.run.program", "Program.initial"),
    ("chunk compile", "vaco_jax.run.program", "Program.compile_chunk"),
    ("chunks", "vaco_jax.run.program", "Program.run_chunk"),
    ("metrics and status written", "vaco_jax.run.run_record", "RunRecord.write"),
    ("checkpoints written", "vaco_jax.run.checkpoint", "Checkpoints.save"),
    ("report", "vaco_jax.experiment.execute", "write_sweep_report"),
    ("next group compiled", "vaco_jax.experiment.execute", "_compiled_driver"),
)
"""Each phase: its name and the function whose calls it times (module, attribute path)."""


@dataclasses.dataclass
class PhaseTimes:
    """Seconds and calls per phase, on the calling thread and in background threads."""

    foreground: dict[str, float] = dataclasses.field(default_factory=dict)
    background: dict[str, float] = dataclasses.field(default_factory=dict)
    calls: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, phase: str, seconds: float, on_main: bool) -> None:
        where = self.foreground if on_main else self.background
        where[phase] = where.get(phase, 0.0) + seconds
        self.calls[phase] = self.calls.get(phase, 0) + 1


@contextlib.contextmanager
def timed_phases(times: PhaseTimes) -> Iterator[None]:
    """Wraps each `PHASES` function while open, adding its calls' wall time to `times`; only the
    outermost of nested timed calls on a thread counts, so no second is counted twice."""
    depth = threading.local()
    restore: list[tuple[Any, str, Any]] = []

    def wrap(phase: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            outer = getattr(depth, "value", 0) == 0
            depth.value = getattr(depth, "value", 0) + 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth.value -= 1
                if outer:
                    times.add(phase, time.perf_counter() - start,
                              threading.current_thread() is threading.main_thread())
        return timed

    for phase, module, path in PHASES:
        owner: Any = importlib.import_module(module)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        original = getattr(owner, name)
        restore.append((owner, name, original))
        setattr(owner, name, wrap(phase, original))
    try:
        yield
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def import_seconds(repeats: int = 3) -> dict[str, float]:
    """The fastest of `repeats` process starts that import the command line, and of bare ones."""
    def fastest(code: str) -> float:
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            runs.append(time.perf_counter() - start)
        return min(runs)
    bare, command = fastest("pass"), fastest("import vaco_jax.cli.sweep")
    return {"python_start_s": round(bare, 3), "imports_s": round(command - bare, 3)}


def _with_config(experiment: Any, **fields: Any) -> Any:
    """`experiment` with `fields` set in every group's config (its other settings kept)."""
    groups = tuple(dataclasses.replace(g, config=dataclasses.replace(g.config, **fields))
                   for g in experiment.groups)
    return dataclasses.replace(experiment, groups=groups)


def shortened(experiment: Any, updates: int) -> Any:
    """`experiment` with every group's runs `updates` updates long (its other settings kept)."""
    return _with_config(experiment, num_updates=updates)


def sweep_profile(experiment: Any, groups: str, warm_start_dir: Path,
                  out: Path) -> dict[str, Any]:
    """The sweep of `groups` into `out`, its wall time split by `PHASES`, and JAX's count of
    its compilations."""
    experiment = _with_config(experiment, warm_start_dir=str(warm_start_dir))
    times = PhaseTimes()
    with harness.CompileEvents() as compiles, timed_phases(times):
        start = time.perf_counter()
        sweep(out, experiment, part=NamedGroups.parse(groups), progress=False)
        wall = time.perf_counter() - start
    phases = {name: round(s, 3) for name, s in times.foreground.items()}
    phases["other"] = round(wall - sum(times.foreground.values()), 3)
    return {"wall_s": round(wall, 3), "phases_s": phases,
            "background_s": {n: round(s, 3) for n, s in times.background.items()},
            "calls": times.calls, "compilation": compiles.summary()}


def _update(config: Any, num_seeds: int) -> harness.Compiled:
    """`num_seeds` runs' update program of four updates a call, compiled once for the split and
    the seed rows alike (`token_programs.compiled_update`) and warmed up."""
    compiled = token_programs.compiled_update(config, num_seeds, 4)
    compiled.warm_up()
    return compiled


def seed_scaling(config: Any, counts: Sequence[int], repeats: int,
                 max_wait_s: float) -> dict[str, Any]:
    """Whole updates of `config` with each of `counts` runs vmapped in one program, timed in
    alternating rounds: seconds per run and update, the cost of holding a group's runs in one
    program."""
    compiled = [_update(config, n) for n in counts]
    summaries = harness.timed_rounds(compiled, repeats=repeats, max_wait_s=max_wait_s)
    return {"rows": {str(n): {"seconds_per_run_update": round(min(s["calls_s"]) / (4 * n), 5),
                              "compile_s": s["compile_s"]}
                     for n, s in zip(counts, summaries)},
            "load": summaries[0]["load"]}


def matmul_bound(size: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` fp32 `size` x `size` matrix products on the default
    device: the roofline's compute bound, measured."""
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    product = jax.jit(lambda x: x @ x)
    jax.block_until_ready(product(a))
    best = min(_timed(lambda: jax.block_until_ready(product(a))) for _ in range(repeats))
    return 2 * size ** 3 / best


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def program_split(config: Any, repeats: int, max_wait_s: float) -> dict[str, Any]:
    """One update of `config` timed whole and its generation alone, beside the forward pass,
    in alternating rounds: seconds per update or pass, and each program's FLOP rate."""
    # Each program compiled, the calls (passes or updates) inside one of its calls, and whether
    # it keeps a decode loop (whose body XLA counts once).
    programs = {
        "forward pass": (harness.Compiled(token_programs.forward_program(config, 4)), 4, False),
        "generation": (harness.Compiled(token_programs.generate_program(config, 4)), 4, True),
        "whole update": (_update(config, 1), 4, True)}
    summaries = harness.timed_rounds([c for c, _, _ in programs.values()], repeats=repeats,
                                     max_wait_s=max_wait_s)
    rows = {}
    for (name, (compiled, inside, decodes)), summary in zip(programs.items(), summaries):
        per_call = min(summary["calls_s"]) / inside
        flops = token_programs.flops_fields(compiled, summary, inside, decodes)
        rows[name] = {"seconds_each": round(per_call, 5), "compile_s": summary["compile_s"],
                      "tokens_per_s": summary["steps_per_s"],
                      "flops_per_s": flops["flops_per_s"],
                      "loops_counted_once": flops["loops_counted_once"]}
    forward = rows["forward pass"]["tokens_per_s"]
    for row in rows.values():
        row["rate_vs_forward"] = round(row["tokens_per_s"] / forward, 4)
    return {"config": {"task": config.task, "task_size": config.task_size,
                       "prompts": config.prompts, "group_size": config.group_size,
                       "response_length": config.response_length,
                       "epochs": config.epochs, "minibatches": config.minibatches},
            "programs": rows, "load": summaries[0]["load"]}


def markdown(result: dict[str, Any]) -> str:
    runs = ("first run", "second run")
    lines = [f"Slice: {result['groups']} of `{result['experiment']}`, {result['updates']} "
             f"updates per run; the first run with no compiled program and no warm start on "
             f"disk, the second with what the first left there.", "",
             "| phase | first run (s) | share | second run (s) | share |", "|---|---|---|---|---|"]
    starts = result["process"]
    begin = starts["python_start_s"] + starts["imports_s"]
    lines.append(f"| process start and imports (own process) | {begin:.1f} | - | {begin:.1f} "
                 f"| - |")
    names = dict.fromkeys(n for run in runs for n in result[run]["phases_s"])
    for name in names:
        cells = []
        for run in runs:
            seconds = result[run]["phases_s"].get(name, 0.0)
            cells += [f"{seconds:.1f}", f"{seconds / result[run]['wall_s']:.1%}"]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines.append(f"| **wall** | {result[runs[0]]['wall_s']:.1f} | | "
                 f"{result[runs[1]]['wall_s']:.1f} | |")
    background = dict.fromkeys(n for run in runs for n in result[run]["background_s"])
    for name in background:
        cells = [f"{result[run]['background_s'].get(name, 0.0):.1f}" for run in runs]
        lines.append(f"| {name} (background, overlapped) | {cells[0]} | - | {cells[1]} | - |")
    for run in runs:
        compiled = result[run]["compilation"]
        cache = compiled["persistent_cache"]
        lines.append(f"\n{run}: {compiled['backend_compiles']} XLA compilations "
                     f"({compiled['backend_compile_s']:.1f} s); persistent cache: "
                     f"{cache['found']} of {cache['looked_up']} programs looked up found.")
    split = result["inside_a_chunk"]["programs"]
    lines += ["", "| program (the study group's config) | seconds each | tokens/s | vs the "
              "forward pass | GFLOP/s (XLA count) |", "|---|---|---|---|---|"]
    for name, row in split.items():
        flops = row["flops_per_s"]
        lines.append(f"| {name} | {row['seconds_each']:.4f} | {row['tokens_per_s']:,.0f} | "
                     f"{row['rate_vs_forward']:.3f} | "
                     f"{'-' if flops is None else f'{flops / 1e9:.2f}'}"
                     f"{' (lower bound)' if row['loops_counted_once'] else ''} |")
    seeds = result.get("seeds", {}).get("rows", {})
    if seeds:
        lines += ["", "| runs in one program | seconds per run and update |", "|---|---|"]
        lines += [f"| {n} | {row['seconds_per_run_update']:.4f} |" for n, row in seeds.items()]
    lines.append(f"\nfp32 matrix-product bound of this device: "
                 f"{result['matmul_bound_flops'] / 1e9:.1f} GFLOP/s.")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", help="experiment TOML file, e.g. experiments/tokens_long_main.toml")
    p.add_argument("--groups", required=True, help="the part's groups, as `vaco-jax sweep "
                   "--groups` takes them")
    p.add_argument("--updates", type=int, default=20, help="updates per run in the slice")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds of the programs")
    p.add_argument("--max-wait", type=float, default=30.0, help="seconds to wait for a quiet "
                   "machine before timing the programs")
    p.add_argument("--seeds", default="1,2,8,30", help="runs per program timed by the seed "
                   "scaling rows (comma-separated)")
    p.add_argument("--only", choices=("all", "seeds"), default="all", help="seeds: only the "
                   "seed scaling rows (no sweep)")
    p.add_argument("--out", default=None, help="JSON file (default benchmarks/results/"
                   "token_profile/BACKEND-DATE.json)")
    p.add_argument("--markdown", default=None, help="also write the tables to this file")
    p.add_argument("--overwrite", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    out = Path(args.out or Path(__file__).parent / "results" / "token_profile" /
               f"{jax.default_backend()}-{datetime.date.today()}.json")
    if out.exists() and not args.overwrite:
        raise SystemExit(f"{out} exists; pass --overwrite to replace it")
    experiment = shortened(load_experiment(args.experiment), args.updates)
    groups = NamedGroups.parse(args.groups).groups(experiment)  # refuses an unknown group
    study = next((g for g in groups if g.name in experiment.tuned_by), groups[0])
    counts = [int(n) for n in args.seeds.split(",")]
    if args.only == "seeds":
        result = {"machine": harness.machine(), "experiment": args.experiment,
                  "group": study.name,
                  "seeds": seed_scaling(study.config, counts, args.repeats, args.max_wait)}
        io.write_json(out, result)
        print(json.dumps(result["seeds"], indent=1))
        return result
    result: dict[str, Any] = {"machine": harness.machine(), "experiment": args.experiment,
                              "groups": args.groups, "updates": args.updates,
                              "process": import_seconds()}
    with tempfile.TemporaryDirectory(prefix="token-profile-") as scratch:
        # As a fresh clone on a new machine: no compiled program and no warm start on disk.
        os.environ[compilation_cache.ENVIRONMENT_VARIABLE] = str(Path(scratch) / "xla")
        compilation_cache.enable()
        for run in ("first run", "second run"):
            jax.clear_caches()  # the second run finds only what the first left on disk
            result[run] = sweep_profile(experiment, args.groups, Path(scratch) / "warm_start",
                                        Path(scratch) / run.replace(" ", "_"))
    result["inside_a_chunk"] = program_split(study.config, args.repeats, args.max_wait)
    result["seeds"] = seed_scaling(study.config, counts, args.repeats, args.max_wait)
    result["matmul_bound_flops"] = matmul_bound()
    io.write_json(out, result)
    harness.publish(markdown(result), args.markdown, out, print)
    return result


if __name__ == "__main__":
    main()
