"""The GPU campaign's `study_groups` step: the groups a committed CPU study still misses, run
on a lent GPU one call at a time, and (`returned_parts`, `move_parts`) put beside the study
back home.

`control_long_lag` ran its MJX tasks (`inverted_double_pendulum`, `reacher`) for two of its nine
methods on the 2-core CPU, where each method costs over an hour; its `parts.json` names the
groups still missing. The step runs them cell by cell (a method on a task: its tuning group, the
extension its choice needs, its study group, as `vaco-jax sweep --groups` runs them), each cell
into a part folder of its own, starting a cell only while `CELL_S` of the call's `TRAIN_S` are
left, and drops the finished parts' checkpoints, so that what returns is each part's runs and
report. Back home, `--collect` copies the returned parts into `.lease/STUDY/` (ignored by
git), and they are merged with the committed results as any part is:

    vaco-jax report /tmp/merged --parts experiments/results/control_long_lag \
        .lease/control_long_lag/* --allow-incomplete

A part that did not finish (the call's time ran out) is left on the device; its cell runs again
at the next call. The dry run (`--sizes tiny`) runs the same step on a toy study with nothing
committed, so every cell is missing and the first one runs.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.campaign.steps import ROOT, Context, StepUnavailable
from vaco_jax.infra import records

STUDY = "control_long_lag"
EXPERIMENT = ROOT / "experiments" / f"{STUDY}.toml"
RESULTS = ROOT / "experiments" / "results" / STUDY
LOCAL = ROOT / ".lease" / STUDY
# The study's parts.json as the call carries it: the committed results stay behind.
CARRIED = ROOT / ".lease" / f"{STUDY}.parts.json"
CARRY = f"cp experiments/results/{STUDY}/parts.json .lease/{STUDY}.parts.json"
TRAIN_S = 420  # of a call's 560 s: the rest for the wheels, the start and the packing
CELL_S = 150  # a cell's expected seconds on a GPU (three MJX compilations and 60 short runs)
PART = re.compile(r"part-\d{3}-[A-Za-z0-9_.-]+")
"""A returned part folder's name: its cell's number and study group."""

DRY_RUN = """
name = "control_long_lag"
description = "the step's dry run: two methods on the toy task, tuned"
tasks = ["toy_reach"]
algos = ["ppo", "vaco"]
seeds = 2
[lag]
model = "uniform"
levels = [0, 2]
[forward]
epochs = 1
minibatches = 2
[config]
total_steps = 96
num_envs = 8
rollout_length = 4
buffer_capacity = 3
episode_length = 20
eval_every = 1
num_eval_envs = 2
actor_hidden = [8]
critic_hidden = [8]
[tune]
hparam = "learning_rate"
values = [3e-4, 1e-3]
rule = "best_sync_final"
seeds = [100, 101]
"""


def missing_cells(experiment: Any, parts: Path | None) -> list[tuple[str, str]]:
    """Each missing cell's (tuning group, study group), in the experiment's order: those of
    the study groups the `parts` file (a merge's parts.json, read through its validated reader)
    names missing, or every tuned study group when `parts` is None (nothing committed)."""
    missing = None
    if parts is not None:
        saved = records.load_json(parts, records.PARTS).value
        missing = set(saved.get("missing_groups") or ())
    return [(experiment.tuned_by[g.name], g.name) for g in experiment.groups
            if g.name in experiment.tuned_by and (missing is None or g.name in missing)]


def step_study_groups(ctx: Context) -> dict[str, Any]:
    """The missing cells of `STUDY`, run until `TRAIN_S` is spent, each a part folder in
    `ctx.out/STUDY/` without its checkpoints."""
    from vaco_jax.experiment import execute, parse_experiment
    from vaco_jax.experiment.parts import NamedGroups

    gpu = ctx.sizes.name == "gpu"
    parts = next((p for p in (RESULTS / "parts.json", CARRIED) if p.is_file()), None)
    if gpu and parts is None:
        raise StepUnavailable(f"no parts.json of {STUDY} here: run `{CARRY}` before the call "
                              "and carry .lease")
    experiment = parse_experiment(EXPERIMENT.read_text() if gpu else DRY_RUN, name=STUDY)
    cells = missing_cells(experiment, parts if gpu else None)
    began = time.perf_counter()
    done, seconds = [], []
    # The dry run's check is one cell; the campaign starts a cell while one fits in the call.
    for index, (tuning, study) in enumerate(cells if gpu else cells[:1]):
        if gpu and TRAIN_S - (time.perf_counter() - began) < CELL_S:
            break
        ctx.log(f"study_groups: {study} ({len(done) + 1} of {len(cells)} cells missing)")
        part = ctx.out / STUDY / f"part-{index:03d}-{study}"
        start = time.perf_counter()
        execute.sweep(part, experiment, part=NamedGroups((tuning, study)), progress=False)
        seconds.append(round(time.perf_counter() - start, 1))
        for checkpoints in part.glob("runs/*/checkpoint"):
            shutil.rmtree(checkpoints)
        done.append(study)
    return {"study": STUDY, "cells_missing": len(cells), "cells_run": done,
            "cell_seconds": seconds, "cells_left": len(cells) - len(done)}


def returned_parts(folder: Path, overwrite: bool = False) -> list[Path]:
    """The part folders in the returned campaign files (`folder`, extracted): only real folders
    named as the step names them, with no link inside; refuses a part already in `LOCAL`
    unless `overwrite`. Moves nothing (`move_parts` does), so a refusal comes first."""
    returned = folder / STUDY
    if not returned.is_dir() or returned.is_symlink():
        return []
    parts = sorted(returned.iterdir())
    odd = [p.name for p in parts if not PART.fullmatch(p.name) or p.is_symlink()
           or not p.is_dir() or any(q.is_symlink() for q in p.rglob("*"))]
    if odd:
        raise ValueError(f"{returned} holds {odd}, not part folders the study_groups step "
                         "writes (named so, with no link inside): not collected")
    there = [p.name for p in parts if (LOCAL / p.name).exists()]
    if there and not overwrite:
        raise ValueError(f"{LOCAL} holds {there} already: pass --overwrite to replace them")
    return parts


def move_parts(parts: list[Path]) -> list[Path]:
    """`returned_parts` copied into `LOCAL` (a part there replaced); the copies."""
    moved = []
    LOCAL.mkdir(parents=True, exist_ok=True)
    for part in parts:
        target = LOCAL / part.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(part, target)
        moved.append(target)
    return moved
