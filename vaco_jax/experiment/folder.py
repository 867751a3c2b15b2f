"""The sweep folder: its layout, creating it with its plan, and reading the plan back.

- `experiment.toml`: the experiment's text, verbatim; `sweep.json`: the plan (its part, groups,
  batches and memory estimates);
- `runs/<group>-<batch>/`: each batch's `Driver` folder (metrics, status, checkpoints), so an
  interrupted sweep resumes: finished batches are skipped, a partial one continues from its
  checkpoint;
- the report (`vaco_jax.experiment.results`);
- with `--log`, the trackers' folders, `tensorboard/<run_id>/` and `wandb/`
  (`vaco_jax.run.trackers`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Sequence

from vaco_jax.experiment.parts import Selection, selected_groups
from vaco_jax.experiment.plan import MAX_DEVICES, PLAN_FILE, Batch, Plan, make_plan
from vaco_jax.experiment.spec import Experiment, load_experiment, same_experiment
from vaco_jax.report.runs_table import REPORT_WRITES
from vaco_jax.infra import io, manifest, records
from vaco_jax.infra.run_folder import CONFIG_FILE, read_status
from vaco_jax.infra.lock import folder_lock
from vaco_jax.infra.provenance import provenance
from vaco_jax.run.trackers import FOLDERS as TRACKER_FOLDERS

EXPERIMENT_FILE = "experiment.toml"
RUNS_DIR = "runs"


def batch_dir(out_dir: str | os.PathLike, batch: Batch) -> Path:
    # The one place a batch's name becomes a path: never one leading out of the sweep folder.
    return Path(out_dir) / RUNS_DIR / records.plain_name(batch.name, "batch name")


def batch_finished(folder: Path) -> bool:
    """Finished: complete, or stopped early because every run diverged."""
    status = read_status(folder)
    return status is not None and status.finished


def start_sweep(experiment: Experiment, out_dir: str | os.PathLike, *, overwrite: bool = False,
                keep: Sequence[str] = (), part: Selection = None, **plan_options: Any) -> Plan:
    """Plans the batches of the experiment or its `part` (`make_plan` options), then creates the
    sweep folder and saves the plan there. A folder holding results is refused unless
    `overwrite`, which removes what vaco_jax wrote there (its batches too) and refuses anything
    else but the `keep` paths."""
    # Refused before any folder is made: a part the experiment lacks, runs that do not fit.
    selected_groups(experiment, part)
    plan = make_plan(experiment, part=part, **plan_options)
    with folder_lock(out_dir):
        out = io.prepare_output_dir(out_dir, overwrite=overwrite, keep=keep, writes=(
            EXPERIMENT_FILE, PLAN_FILE, *REPORT_WRITES, *TRACKER_FOLDERS,
            *(f"{RUNS_DIR}/{batch.name}" for batch in plan.batches)))
        record_sweep(out, plan, new=True)
        io.write_text(out / EXPERIMENT_FILE, experiment.source)
        _write_plan(out, plan)
    return plan


def _write_plan(out: Path, plan: Plan) -> None:
    """`sweep.json`: the plan, with the provenance of the process that planned it."""
    io.write_json(out / PLAN_FILE, {**plan.to_json(), "provenance": provenance()})


def record_sweep(out_dir: str | os.PathLike, plan: Plan, *, new: bool) -> None:
    """Records the sweep's files and batch folders in the folder's manifest before they are
    written: a `new` sweep's in a new manifest, a resumed one's (a `--replan` may have added
    batches) only where the folder keeps one already."""
    entries = {EXPERIMENT_FILE: manifest.FILE, PLAN_FILE: manifest.FILE,
               RUNS_DIR: manifest.FOLDER,
               **{f"{RUNS_DIR}/{b.name}": manifest.RUN for b in plan.batches}}
    (manifest.record if new else manifest.extend)(out_dir, entries)


def load_sweep(out_dir: str | os.PathLike) -> Plan:
    """The plan saved in a sweep folder (its experiment re-parsed from `experiment.toml`),
    refused in one line where `sweep.json` is not the plan that experiment derives."""
    out = Path(out_dir)
    for name in (EXPERIMENT_FILE, PLAN_FILE):
        if not (out / name).is_file():
            raise FileNotFoundError(f"{str(out)!r} is not a sweep folder: {name} is missing")
    replan = (f"its finished batches are kept if the sweep is planned again: vaco-jax sweep "
              f"--resume --replan --out {shlex.quote(str(out))} (with the --part or --groups it "
              f"was started with)")
    saved = records.load_json(out / PLAN_FILE, records.SWEEP_PLAN, replan)
    experiment = load_experiment(out / EXPERIMENT_FILE,
                                 name=saved["experiment"].string(records.MAX_NAME))
    try:
        return Plan.from_json(experiment, saved)
    except ValueError as error:
        raise ValueError(f"{error}; {replan}") from None


def replan_sweep(out_dir: str | os.PathLike, experiment: Experiment | None = None,
                 part: Selection = None, **plan_options: Any) -> Plan:
    """Plans again the sweep saved in `out_dir` (its `experiment.toml`; an `experiment` given
    must be the same) whose plan file is lost or damaged, and saves the plan: each group's batch
    size is read from its first batch folder, so the batches already run are the plan's again
    (a batch folder of other runs is refused when the sweep resumes it)."""
    out = Path(out_dir)
    if not (out / EXPERIMENT_FILE).is_file():
        raise FileNotFoundError(f"{str(out)!r} is not a sweep folder: {EXPERIMENT_FILE} is missing")
    saved = load_experiment(out / EXPERIMENT_FILE, name=out.name)  # the file's own `name`, if any
    if experiment is not None and not same_experiment(experiment, saved):
        raise ValueError(f"cannot plan {str(out)!r} again: it holds a different experiment "
                         f"({saved.name!r}); leave the experiment out")
    sizes = {}
    for group in selected_groups(saved, part):
        first = out / RUNS_DIR / f"{group.name}-0" / CONFIG_FILE
        if first.is_file():
            saved_seeds = records.load_json(first, records.RUN_CONFIG,
                                            "move the batch folder away")["seeds"]
            sizes[group.name] = len(saved_seeds.items(len(group.runs) * MAX_DEVICES))
    plan = make_plan(saved, part=part, batch_sizes=sizes, **plan_options)
    with folder_lock(out):
        _write_plan(out, plan)
    return plan


def load_sweep_to_resume(out_dir: str | os.PathLike, experiment: Experiment | None = None,
                         part: Selection = None) -> Plan:
    """The plan saved in `out_dir`, refusing an `experiment` or `part` other than the saved
    ones (None: whatever is saved)."""
    plan = load_sweep(out_dir)
    # What a resumed sweep writes into: none may lead outside its folder.
    manifest.refuse_links(out_dir, (RUNS_DIR, *TRACKER_FOLDERS,
                                    *(f"{RUNS_DIR}/{batch.name}" for batch in plan.batches)))
    if experiment is not None and not same_experiment(experiment, plan.experiment):
        raise ValueError(f"cannot resume {str(out_dir)!r}: it holds a different experiment "
                         f"({plan.experiment.name!r}); leave the experiment out to resume it")
    if part is not None and part != plan.part:
        saved = plan.part.label if plan.part else "the whole experiment, no part"
        raise ValueError(f"{part.label} disagrees with the sweep saved in {str(out_dir)!r} "
                         f"({saved}); leave --part and --groups out to resume it")
    return plan

