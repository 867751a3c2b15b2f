"""Merging sweep parts: the folders of `vaco-jax sweep EXP --part K/N`, run on several
machines, into the report of the whole experiment.

The runs table is rebuilt from the parts' batch folders in the experiment's group order, so the
merged report equals the report of the same experiment run whole in one folder (batches split
alike). Each group must come from exactly one folder; a whole sweep folder counts as the one
part of itself. The merged folder receives `experiment.toml`, the report, and `parts.json`,
the record of which folders and parts were merged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from vaco_jax import io, sweep

PARTS_FILE = "parts.json"


def _groups_by_folder(folders: Sequence[Path],
                      plans: Sequence[sweep.Plan]) -> dict[str, tuple[Path, sweep.Plan]]:
    """The folder (and its plan) of every group some folder holds; refuses overlaps."""
    owners: dict[str, tuple[Path, sweep.Plan]] = {}
    for folder, plan in zip(folders, plans):
        overlap = [g.name for g in plan.groups if g.name in owners]
        if overlap:
            others = sorted({str(owners[name][0]) for name in overlap})
            raise ValueError(f"part folder {str(folder)!r} overlaps {', '.join(others)}: both "
                             f"hold group(s) {overlap}; give each part once")
        owners.update({g.name: (folder, plan) for g in plan.groups})
    return owners


def _check_out(out: Path, folders: Sequence[Path], overwrite: bool) -> None:
    io.check_output_dir(out)
    if any(out.resolve() == folder.resolve() for folder in folders):
        raise ValueError(f"the merged report's folder {str(out)!r} is one of the parts; choose "
                         f"another folder")
    if (out / sweep.PLAN_FILE).is_file():
        raise ValueError(f"{str(out)!r} is a sweep folder; choose another folder for the merged "
                         f"report")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"output folder {str(out)!r} already exists and is not empty; "
                              f"pass --overwrite to replace the merged report")


def merge_parts(part_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
                allow_incomplete: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Writes the report of the experiment whose parts were run into `part_dirs` into `out_dir`
    (refused if it exists, unless `overwrite`), with `experiment.toml` and `parts.json`; returns
    the report's summary.

    Refuses, naming the folder: a folder that is not a sweep folder, one of another experiment
    (parsed `experiment.toml` differs), parts that overlap, and, unless `allow_incomplete`
    (which marks the report's title), groups that no part holds or that are not finished. The
    runs of unfinished batches never enter the report.
    """
    folders = [Path(d) for d in part_dirs]
    if not folders:
        raise ValueError("--parts needs at least one part folder")
    out = Path(out_dir)
    _check_out(out, folders, overwrite)
    plans = [sweep.load_sweep(folder) for folder in folders]
    experiment = plans[0].experiment
    for folder, plan in zip(folders[1:], plans[1:]):
        if not sweep.same_experiment(plan.experiment, experiment):
            raise ValueError(f"part folder {str(folder)!r} holds another experiment "
                             f"({plan.experiment.name!r}) than {str(folders[0])!r} "
                             f"({experiment.name!r}); merge the parts of one experiment only")
    owners = _groups_by_folder(folders, plans)
    missing = [g.name for g in experiment.groups if g.name not in owners]
    unfinished = {str(f): names for f, p in zip(folders, plans)
                  if (names := sweep.unfinished_groups(p, f))}
    if (missing or unfinished) and not allow_incomplete:
        problems = ([f"no part holds group(s) {missing}"] if missing else []) + [
            f"{folder!r} has not finished group(s) {names} (resume it with vaco-jax sweep "
            f"--resume --out {folder})" for folder, names in unfinished.items()]
        raise ValueError(f"incomplete parts: {'; '.join(problems)}; pass --allow-incomplete "
                         f"for a report of what there is")
    io.prepare_output_dir(out, overwrite=True)  # refused above unless overwrite
    batches = [(batch, sweep.batch_dir(folder, batch))
               for group in experiment.groups if group.name in owners
               for folder, plan in [owners[group.name]]
               for batch in plan.batches if batch.group == group.name]
    table = sweep.finished_batches_table(experiment, batches)
    if table is None:
        raise FileNotFoundError(f"no part in {[str(f) for f in folders]} has a finished batch yet")
    absent = len(missing) + sum(len(names) for names in unfinished.values())
    note = (f"incomplete merge: {absent} of {len(experiment.groups)} groups missing or "
            f"unfinished, see {PARTS_FILE}") if absent else None
    io.write_text(out / sweep.EXPERIMENT_FILE, experiment.source)
    io.write_json(out / PARTS_FILE, _record(folders, plans, missing, unfinished))
    return sweep.write_experiment_report(experiment, table, out, note=note)


def _record(folders: Sequence[Path], plans: Sequence[sweep.Plan], missing: Sequence[str],
            unfinished: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    return {"experiment": plans[0].experiment.name,
            "complete": not missing and not unfinished,
            "parts": [{"folder": str(folder.resolve()),
                       "part": str(plan.part) if plan.part else None,
                       "groups": [g.name for g in plan.groups]}
                      for folder, plan in zip(folders, plans)],
            "missing_groups": list(missing),
            "unfinished_groups": dict(unfinished)}
