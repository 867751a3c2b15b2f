"""Side-by-side speed of synchronous `ppo` and PureJaxRL's continuous PPO in interleaved rounds
(see README.md, "Speed, measured side by side").

Each round runs both programs as fresh processes, one after the other, at the continuous parity
settings (`benchmarks.parity --preset continuous` against `benchmarks.purejaxrl --script
continuous`), the order alternating from round to round so that neither side always meets the
machine's state the other left behind. A round's ratio is vaco_jax's training steps/s over
PureJaxRL's steps/s, by wall time and by the processes' CPU time: on a shared machine the two
sides of one round meet roughly the same load, and CPU time does not count the time a process
waits for a core. The summary is the median ratio over rounds with a percentile bootstrap
interval (10,000 resamples of the rounds, a fixed seed), and every round's final training
returns, which must agree for the ratio to compare equal learning.

Each side writes `{side}_round{r}.json` into the output folder (put in place once the process
exits cleanly, with its place in the round and the load other processes put on the CPU just
before it started); a round with both files is not run again, so an interrupted measurement
resumes where it stopped. `summary.json` and the printed table are recomputed from
the folder's files, alone with `--summarise DIR`.

    PYTHONPATH=$PWD python -m benchmarks.speed_rounds --checkout PATH/TO/purejaxrl --rounds 8 \\
        --out benchmarks/results/parity/speed_rounds_v2 [--cpus 0,1] [--config JSON]
    PYTHONPATH=$PWD python -m benchmarks.speed_rounds \\
        --summarise benchmarks/results/parity/speed_rounds_v2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks import harness
from vaco_jax.report import stats
from vaco_jax.infra import io, records

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("vaco_jax", "purejaxrl")
COMMANDS_FILE = "commands.json"
SUMMARY_FILE = "summary.json"
RESAMPLES = 10_000

Runner = Callable[[str, Path], None]
"""Runs one side (`SIDES`) and has it write its result JSON to the given path."""


def config_overrides(text: str) -> dict[str, Any]:
    """`--config`: a JSON table of `ControlConfig` overrides."""
    return dict(records.parse_json(text, "--config", records.COMMAND_LINE).table())


def round_order(r: int) -> tuple[str, str]:
    """The order of the sides in round `r` (from 1): vaco_jax first in odd rounds."""
    return SIDES if r % 2 else SIDES[::-1]


def result_path(folder: Path, side: str, r: int) -> Path:
    return folder / f"{side}_round{r}.json"


def run_rounds(folder: Path, rounds: int, runner: Runner) -> list[tuple[int, str]]:
    """Runs the rounds 1..`rounds` that lack a result of either side; returns what it ran."""
    folder.mkdir(parents=True, exist_ok=True)
    ran = []
    for r in range(1, rounds + 1):
        if all(result_path(folder, side, r).exists() for side in SIDES):
            continue
        # A lone result left by an interrupted round is run again: the two sides of a ratio
        # must run back to back to share the machine's state.
        for position, side in enumerate(round_order(r), start=1):
            print(f"--- round {r} of {rounds}: {side}", flush=True)
            final = result_path(folder, side, r)
            partial = final.with_name(f".{final.name}.tmp")
            load = {"loadavg_1min": os.getloadavg()[0], "busy_cores": harness.busy_cores()}
            runner(side, partial)
            result = records.load_json(partial, records.BENCHMARK_RESULT).value
            result["speed_round"] = {"round": r, "position": position, "load_before": load}
            io.write_text(final, json.dumps(result))
            partial.unlink()
            ran.append((r, side))
    return ran


def side_commands(checkout: Path, seeds: int, total_steps: int | None,
                  config: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """Each side's command line, less its `--out`; `config`: vaco_jax's `ControlConfig`
    overrides of the parity settings (e.g. `restart_from`)."""
    vaco = [sys.executable, "-m", "benchmarks.parity", "--preset", "continuous",
            "--seeds", str(seeds), "--variant", "default"]
    purejaxrl = [sys.executable, "-m", "benchmarks.purejaxrl", "--script", "continuous",
                 "--checkout", str(checkout.resolve()), "--seeds", str(seeds)]
    overrides = dict(config or {})
    if total_steps is not None:
        overrides["total_steps"] = total_steps
        purejaxrl += ["--config", json.dumps({"TOTAL_TIMESTEPS": total_steps})]
    if overrides:
        vaco += ["--config", json.dumps(overrides)]
    return {"vaco_jax": vaco, "purejaxrl": purejaxrl}


def subprocess_runner(commands: dict[str, list[str]], cpus: str | None) -> Runner:
    pin = ["taskset", "-c", cpus] if cpus else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}

    def run(side: str, out: Path) -> None:
        subprocess.run(pin + commands[side] + ["--out", str(out)], check=True, cwd=ROOT, env=env)
    return run


def keep_commands(folder: Path, commands: dict[str, Any]) -> None:
    """Records the commands in the folder; refuses to resume a folder measured with others,
    since its rounds would then pair unlike settings."""
    recorded = folder / COMMANDS_FILE
    if recorded.exists():
        if records.load_json(recorded, records.BENCHMARK_RESULT).value != commands:
            raise SystemExit(f"{folder} holds rounds of other settings ({recorded}); "
                             "choose another --out")
        return
    io.write_json(recorded, commands)


# ----------------------------------------------------------------------------------- summary
def median_interval(values: Sequence[float], resamples: int = RESAMPLES,
                    seed: int = 0) -> tuple[float, float, float]:
    """Median of `values` and the 95% percentile bootstrap interval of the median."""
    rounds = np.asarray(values, dtype=float)[:, None]  # one "task", the rounds its runs
    return stats.stratified_bootstrap_ci(rounds, lambda s: np.median(s[..., 0], axis=-1),
                                         reps=resamples, seed=seed)


def final_returns(result: dict[str, Any]) -> list[float | None]:
    """Each run's last per-update training return (updates in which no episode ended hold None)."""
    return [next((x for x in reversed(row) if x is not None), None)
            for row in result["episode_return"]]


def round_record(r: int, vaco: dict[str, Any], purejaxrl: dict[str, Any]) -> dict[str, Any]:
    trained = (len(vaco["runs"]), vaco["env_steps"][-1])
    if trained != (purejaxrl["seeds"], purejaxrl["env_steps"][-1]):
        raise ValueError(f"round {r}: vaco_jax trained {trained} (runs, steps per run), "
                         f"PureJaxRL ({purejaxrl['seeds']}, {purejaxrl['env_steps'][-1]})")
    # Results written before CPU time was recorded have a wall-time ratio only, and those
    # written by other means no record of their order or load.
    cpu = (vaco.get("training_cpu_steps_per_s"), purejaxrl.get("cpu_steps_per_s"))
    placed = {side: result.get("speed_round", {})
              for side, result in zip(SIDES, (vaco, purejaxrl))}
    first = [side for side in SIDES if placed[side].get("position") == 1]
    return {
        "round": r, "first": first[0] if first else None,
        "load_before": {side: placed[side].get("load_before") for side in SIDES},
        "vaco_jax_steps_per_s": vaco["training_steps_per_s"],
        "purejaxrl_steps_per_s": purejaxrl["steps_per_s"],
        "ratio_wall": vaco["training_steps_per_s"] / purejaxrl["steps_per_s"],
        "vaco_jax_cpu_steps_per_s": cpu[0], "purejaxrl_cpu_steps_per_s": cpu[1],
        "ratio_cpu": cpu[0] / cpu[1] if None not in cpu else None,
        "compile_s": {"vaco_jax": vaco["compile_s"], "purejaxrl": purejaxrl["compile_s"]},
        "final_returns": {"vaco_jax": final_returns(vaco), "purejaxrl": final_returns(purejaxrl)},
    }


def summarise(folder: Path) -> dict[str, Any]:
    """The rounds whose two results are in `folder`, their ratios' medians and intervals;
    written to `folder/summary.json`."""
    rounds = sorted(int(m.group(1)) for p in folder.glob("vaco_jax_round*.json")
                    if (m := re.fullmatch(r"vaco_jax_round(\d+)\.json", p.name))
                    and result_path(folder, "purejaxrl", int(m.group(1))).exists())
    if not rounds:
        raise SystemExit(f"{folder} holds no round with both results")
    rows = [round_record(r, *(records.load_json(result_path(folder, side, r),
                                                records.BENCHMARK_RESULT).value
                              for side in SIDES)) for r in rounds]
    summary: dict[str, Any] = {"rounds": rows, "resamples": RESAMPLES, "seed": 0}
    for clock in ("wall", "cpu"):
        ratios = [rec[f"ratio_{clock}"] for rec in rows]
        if None not in ratios:
            median, low, high = median_interval(ratios)
            summary[f"ratio_{clock}"] = {"median": median, "low": low, "high": high}
    io.write_json(folder / SUMMARY_FILE, summary)
    return summary


def _returns(values: Sequence[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:,.1f}" for v in values)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| round | first | vaco_jax training steps/s | PureJaxRL steps/s | ratio (wall) "
             "| vaco_jax per CPU s | PureJaxRL per CPU s | ratio (CPU) "
             "| vaco_jax final returns | PureJaxRL final returns |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for rec in summary["rounds"]:
        cpu_ratio = "-" if rec["ratio_cpu"] is None else f"{rec['ratio_cpu']:.3f}"
        lines.append(
            f"| {rec['round']} | {rec['first'] or '-'} | {_rate(rec['vaco_jax_steps_per_s'])} "
            f"| {_rate(rec['purejaxrl_steps_per_s'])} | {rec['ratio_wall']:.3f} "
            f"| {_rate(rec['vaco_jax_cpu_steps_per_s'])} "
            f"| {_rate(rec['purejaxrl_cpu_steps_per_s'])} "
            f"| {cpu_ratio} | {_returns(rec['final_returns']['vaco_jax'])} "
            f"| {_returns(rec['final_returns']['purejaxrl'])} |")
    lines.append("")
    rounds = len(summary["rounds"])
    for clock, name in (("wall", "wall"), ("cpu", "CPU")):
        if f"ratio_{clock}" in summary:
            s = summary[f"ratio_{clock}"]
            lines.append(f"Median ratio by {name} time over {rounds} round{'s' * (rounds != 1)}: "
                         f"**{s['median']:.3f}x**, 95% bootstrap interval "
                         f"[{s['low']:.3f}, {s['high']:.3f}].")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--summarise", type=Path, metavar="DIR",
                   help="only recompute the summary of the rounds in DIR")
    p.add_argument("--checkout", type=Path, help="a clone of PureJaxRL")
    p.add_argument("--out", type=Path, help="the rounds' folder")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seeds", type=int, default=2, help="seeds vmapped into each program")
    p.add_argument("--cpus", help="pin both sides to these CPUs (taskset -c), e.g. 0,1")
    p.add_argument("--total-steps", type=int,
                   help="environment steps per run (default: the parity settings' 499,712)")
    p.add_argument("--config", type=config_overrides, default={},
                   help="JSON ControlConfig overrides for the vaco_jax side, e.g. "
                        "'{\"restart_from\": \"first\", \"buffer_capacity\": 1}'")
    args = p.parse_args(argv)
    if args.summarise is None:
        if args.checkout is None or args.out is None:
            p.error("--checkout and --out are needed unless --summarise is given")
        if "total_steps" in args.config:
            p.error("set the run length with --total-steps, which both sides receive, not in "
                    "--config, which only vaco_jax reads")
        commands = side_commands(args.checkout, args.seeds, args.total_steps, args.config)
        keep_commands(args.out, {"commands": commands, "cpus": args.cpus})
        run_rounds(args.out, args.rounds, subprocess_runner(commands, args.cpus))
    print(markdown(summarise(args.summarise or args.out)))


if __name__ == "__main__":
    main()
