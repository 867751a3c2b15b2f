"""One 100M-step run end to end on the CPU, killed once and resumed, with its memory sampled
(see README.md, "A 100M-step run").

The run is `vaco-jax train` as a child process (`PRESET`, or the `train` arguments given after
`--`). Every `--sample-every` seconds the child's resident set (`VmRSS`) and its peak (`VmHWM`)
are read from `/proc/PID/status`, with the newest checkpoint written so far. Once a checkpoint
covers `--kill-after` of the run the child is killed with SIGKILL (no chance to save anything
more), then `vaco-jax train --resume` finishes it. The results folder gets `memory.csv` (every
sample of both segments), `summary.json` (commands, wall time, compile and training time, the
rate each segment printed, memory at the start, end and peak of each segment), the two
segments' logs, and the run's `config.json`, `status.json` and `metrics.parquet`; the run folder
itself, checkpoints included, stays in `--run-dir`.

    PYTHONPATH=$PWD python -m benchmarks.hundred_million --out benchmarks/results/hundred_million \\
        --run-dir runs/hundred_million
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from benchmarks import harness
from vaco_jax.infra import io, records, run_folder
from vaco_jax.run.checkpoint import committed_steps

PRESET = ("--env", "inverted_double_pendulum", "--algo", "vaco", "--lag", "uniform:4",
          "--num-envs", "320", "--rollout-length", "50", "--total-steps", "100000000",
          "--seeds", "1", "--eval-every", "125")
"""A small MJX task under VACO with stale actors (lag uniform over 0..4): 6,250 updates of
16,000 steps, evaluated every 2M steps, a checkpoint every tenth of the run."""
MEMORY_FIELDS = ("VmRSS", "VmHWM")
_TRAINED = re.compile(r"trained(?: its last \d+ updates)? in ([\d.]+) s \(([\d,]+) ")
_COMPILED = re.compile(r"^compiled in ([\d.]+) s$", re.MULTILINE)  # said before training starts


def memory_mb(pid: int) -> dict[str, float] | None:
    """`MEMORY_FIELDS` of process `pid` in MB, None once it has exited."""
    memory = harness.proc_memory_mb(pid)
    if not set(MEMORY_FIELDS) <= set(memory):
        return None
    return {name: memory[name] for name in MEMORY_FIELDS}


def kill_period(run_dir: Path, fraction: float) -> int:
    """The first checkpoint period at or past `fraction` of the run, from its `config.json`."""
    config = records.load_json(run_dir / run_folder.CONFIG_FILE, records.RUN_CONFIG,
                               "the run has not started")
    periods = (config["num_updates"].integer(1, run_folder.MAX_UPDATES)
               // config["updates_per_period"].integer(1, run_folder.MAX_UPDATES))
    return max(1, math.ceil(fraction * periods))


def run_segment(name: str, command: Sequence[str], run_dir: Path, log: Path,
                sample_every: float, kill_fraction: float | None) -> dict[str, Any]:
    """Runs `command`, sampling its memory; kills it (SIGKILL) once a checkpoint covers
    `kill_fraction` of the run when that is given. Returns the segment's record and samples."""
    samples: list[dict[str, Any]] = []
    start = time.perf_counter()
    killed_at = None
    with open(log, "w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        target = None
        while child.poll() is None:
            memory = memory_mb(child.pid)
            checkpoint = max(committed_steps(run_dir / run_folder.CHECKPOINT_DIR), default=0)
            if memory is not None:
                samples.append({"segment": name, "seconds": time.perf_counter() - start,
                                "checkpoint": checkpoint, **memory})
            if (kill_fraction is not None and target is None
                    and (run_dir / run_folder.CONFIG_FILE).exists()):
                target = kill_period(run_dir, kill_fraction)
            if target is not None and checkpoint >= target:
                child.send_signal(signal.SIGKILL)
                child.wait()
                killed_at = checkpoint
                break
            time.sleep(sample_every)
    text = log.read_text()
    trained, compiled = _TRAINED.search(text), _COMPILED.search(text)
    rss = [s["VmRSS"] for s in samples]
    # The first checkpoint this segment wrote: the program is compiled and has trained a while.
    checkpointed = [s["VmRSS"] for s in samples if s["checkpoint"] > samples[0]["checkpoint"]]
    record = {
        "segment": name, "command": list(command), "exit_code": child.returncode,
        "killed_after_checkpoint": killed_at, "wall_seconds": time.perf_counter() - start,
        "compile_seconds": float(compiled[1]) if compiled else None,
        "train_seconds": float(trained[1]) if trained else None,
        "steps_per_second": float(trained[2].replace(",", "")) if trained else None,
        "rss_mb_at_first_checkpoint": checkpointed[0] if checkpointed else None,
        "rss_mb_last": rss[-1] if rss else None,
        "rss_mb_max_sampled": max(rss, default=None),
        "peak_rss_mb": samples[-1]["VmHWM"] if samples else None, "samples": len(samples)}
    return {"record": record, "samples": samples}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="the training run's folder (default: OUT/run)")
    parser.add_argument("--kill-after", type=float, default=0.5,
                        help="kill once a checkpoint covers this share of the run")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("train_args", nargs="*",
                        help="after --: `vaco-jax train` arguments replacing the preset")
    args = parser.parse_args(argv)
    if not 0 < args.kill_after < 1:
        parser.error(f"--kill-after must lie in (0, 1), got {args.kill_after}")
    run_dir = args.run_dir or args.out / "run"
    if run_dir.exists():
        parser.error(f"{str(run_dir)!r} exists: the measurement starts a fresh run")
    args.out.mkdir(parents=True, exist_ok=True)
    train = [sys.executable, "-m", "vaco_jax.cli", "train"]
    first = [*train, *(args.train_args or PRESET), "--out", str(run_dir)]
    segments = [run_segment("first", first, run_dir, args.out / "first.log", args.sample_every,
                            args.kill_after)]
    if segments[0]["record"]["killed_after_checkpoint"] is None:
        raise SystemExit(f"the run ended (exit code {segments[0]['record']['exit_code']}) before "
                         f"a checkpoint covered {args.kill_after} of it; see {args.out}/first.log")
    resume = [*train, "--resume", str(run_dir)]
    segments.append(run_segment("resumed", resume, run_dir, args.out / "resumed.log",
                                args.sample_every, None))
    samples = [s for segment in segments for s in segment["samples"]]
    io.write_table(args.out / "memory.csv", pd.DataFrame(samples))
    for name in (run_folder.CONFIG_FILE, run_folder.STATUS_FILE, run_folder.METRICS_FILE):
        shutil.copyfile(run_dir / name, args.out / name)
    records = [segment["record"] for segment in segments]
    io.write_json(args.out / "summary.json", {
        "segments": records, "complete": records[-1]["exit_code"] == 0,
        "wall_seconds": sum(r["wall_seconds"] for r in records)})
    for r in records:
        print(f"{r['segment']}: exit {r['exit_code']}, {r['wall_seconds']:.0f} s, RSS "
              f"{r['rss_mb_at_first_checkpoint']} -> {r['rss_mb_last']} MB, "
              f"peak {r['peak_rss_mb']} MB")
    return 0 if records[-1]["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
