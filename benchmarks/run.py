"""Measures how fast vaco_jax trains and where the time goes, side by side on one machine.

    python benchmarks/run.py --quick              # minutes on a CPU: small task and grids
    python benchmarks/run.py                      # the full set, sized for the backend
    python benchmarks/run.py --only env,sync,brax --out results.json

Sub-benchmarks (`--only`): env (physical limit), sync (synchronous training, evaluation apart),
async (buffer sizes x acting strategies), brax (Brax's PPO trainer), seeds (vmapped seeds),
memory (child process per configuration), compile (`train` of a locomotion task, and no
recompilation on new hyper-parameters). Results go to a JSON file, rewritten atomically after
every sub-benchmark, and the tables are printed at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import faulthandler
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Memory probes run in child processes beside this one: without preallocation every process
# holds the accelerator memory it uses rather than 75% of it from the start.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

from benchmarks import harness, suites, tables  # noqa: E402
from vaco_jax.infra import io, records  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small task and grids (minutes on CPU)")
    p.add_argument("--preset", default=None, choices=("quick", "full", "gpu", "tiny"),
                   help="settings preset (default: full, or quick with --quick); gpu and tiny "
                        "are the GPU campaign's sizes and its dry run (benchmarks/campaign/gpu.py)")
    p.add_argument("--only", default=",".join(suites.BENCHMARKS),
                   help="comma-separated sub-benchmarks to run")
    p.add_argument("--out", default=None,
                   help="results JSON (default benchmarks/results/<backend>-<date>[-quick].json)")
    p.add_argument("--append", action="store_true",
                   help="add the selected sub-benchmarks to the existing --out file (same "
                        "settings), replacing their earlier results")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file (and --markdown file)")
    p.add_argument("--markdown", default=None, help="also write the tables to this file")
    p.add_argument("--env", default=None, help="task of the throughput comparisons")
    p.add_argument("--num-envs", type=int, default=None, help="environments per seed")
    p.add_argument("--compile-env", default=None, help="task of the compile benchmark")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per program")
    p.add_argument("--max-wait", type=float, default=None,
                   help="seconds to wait for other processes to leave the CPU before timing")
    p.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)  # child process
    args = p.parse_args(argv)
    if args.quick and args.preset not in (None, "quick"):
        p.error("--quick is --preset quick; give one of them")
    unknown = set(args.only.split(",")) - set(suites.BENCHMARKS)
    if unknown:
        p.error(f"unknown sub-benchmark(s) {sorted(unknown)}; choose from "
                f"{', '.join(suites.BENCHMARKS)}")
    return args


def settings_from(args: argparse.Namespace) -> suites.Settings:
    settings = suites.presets(jax.default_backend())[preset_name(args)]
    base = settings.base
    if args.env is not None:
        base = base.replace(env=args.env)
    if args.num_envs is not None:
        base = base.replace(num_envs=args.num_envs)
    changes: dict[str, Any] = {"base": base}
    for field, value in (("compile_env", args.compile_env), ("repeats", args.repeats),
                         ("max_wait_s", args.max_wait)):
        if value is not None:
            changes[field] = value
    return dataclasses.replace(settings, **changes)


def preset_name(args: argparse.Namespace) -> str:
    return args.preset or ("quick" if args.quick else "full")


def default_out(preset: str) -> Path:
    date = datetime.date.today().isoformat()
    suffix = "" if preset == "full" else f"-{preset}"
    name = f"{jax.default_backend()}-{date}{suffix}.json"
    return Path(__file__).resolve().parent / "results" / name


def _existing(out: Path, settings: suites.Settings, selected: set[str]) -> dict[str, Any]:
    """The results file to append to; the settings both runs know must agree, except those
    that only a sub-benchmark being measured again reads."""
    results = records.load_json(out, records.BENCHMARK_RESULT).value
    new = json.loads(json.dumps(settings.to_dict()))
    old = results["settings"]
    differ = {k for k, v in new.items()
              if k in old and old[k] != v and suites.OWN_SETTINGS.get(k) not in selected}
    if differ:
        raise SystemExit(f"--append: {out} was measured with other settings: {sorted(differ)}")
    results["settings"] = new
    results.setdefault("appended_by", []).append(harness.machine())
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # A long run that seems stuck can be asked where it is: `kill -USR1 <pid>` prints the stacks.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = parse_args(argv)
    if args.memory_probe is not None:
        probe = records.parse_json(args.memory_probe, "--memory-probe", records.COMMAND_LINE)
        print(json.dumps(suites.memory_probe(probe.value)), flush=True)
        return {}
    settings = settings_from(args)
    out = Path(args.out) if args.out else default_out(preset_name(args))
    if not args.append and not args.overwrite:
        existing = [str(p) for p in (out, args.markdown) if p is not None and Path(p).exists()]
        if existing:
            raise SystemExit(f"{', '.join(existing)} exists; pass --overwrite to replace it, "
                             f"--append to add sub-benchmarks to it, or another --out")
    with tempfile.TemporaryDirectory(prefix="vaco_jax_bench_xla_") as cache:
        # A compilation cache private to this run: programs that several measurements build
        # alike (the initial training states of equal shapes) compile once. Every timed program
        # is compiled once per run anyway, so its compile time stays a cold one.
        jax.config.update("jax_compilation_cache_dir", cache)
        return _run(args, settings, out)


def _run(args: argparse.Namespace, settings: suites.Settings, out: Path) -> dict[str, Any]:
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {message}", flush=True)

    results = _existing(out, settings, set(args.only.split(","))) if args.append else {
        "machine": harness.machine(), "settings": settings.to_dict(), "benchmarks": {}}
    log(f"{results['machine']['device_kind']} ({jax.default_backend()}); settings "
        f"{settings.name}; results -> {out}")
    ctx = suites.Context(settings, log)
    for name in args.only.split(","):
        log(f"{name}: {suites.BENCHMARKS[name].__doc__.splitlines()[0]}")
        began = time.perf_counter()
        try:
            results["benchmarks"][name] = suites.BENCHMARKS[name](ctx)
        except Exception as error:  # noqa: BLE001  (recorded; the other measurements go on)
            traceback.print_exc()
            results["benchmarks"][name] = {"error": f"{type(error).__name__}: {error}"}
        results["benchmarks"][name]["wall_s"] = round(time.perf_counter() - began, 1)
        results["wall_s"] = round(sum(b["wall_s"] for b in results["benchmarks"].values()), 1)
        io.write_json(out, results)
    harness.publish(tables.markdown(results), args.markdown, out, log)
    return results


if __name__ == "__main__":
    main()
