"""Merging sweep parts: the folders of `vaco-jax sweep EXP --part K/N` (or `--groups`), run on
several machines, into the report of the whole experiment.

The runs table is rebuilt from the parts' batch folders in the experiment's group order, so the
merged report equals the report of the same experiment run whole in one folder (batches split
alike). Each group must come from exactly one folder; a whole sweep folder counts as the one
part of itself. A merged report folder (one with `parts.json`) also counts as a part: it holds
the groups it merged finished, whose rows its `runs.parquet` keeps, so an incomplete merge can
be completed after its part folders (and their checkpoints) are gone. The merged folder receives
`experiment.toml`, the report, and `parts.json`, the record of which folders and parts were
merged.

An experiment that grew after some parts ran (a task or a method added) merges them too when it
is named (`experiment`): each of their groups must be the group of that name in it, run alike
(`foreign_groups`), so that their runs are the runs it would run.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from vaco_jax import report
from vaco_jax.experiment.folder import EXPERIMENT_FILE, batch_dir, load_sweep
from vaco_jax.experiment.plan import PLAN_FILE
from vaco_jax.experiment.results import (finished_batches_table, resolved_plan,
                                         unfinished_groups, write_experiment_report)
from vaco_jax.experiment.groups import Group
from vaco_jax.experiment.spec import Experiment, load_experiment, same_experiment
from vaco_jax.infra import io, manifest, records
from vaco_jax.report.summary import Summary
from vaco_jax.report.runs_table import REPORT_WRITES, SETTING_PREFIXES
from vaco_jax.infra.lock import folder_lock, refuse_if_in_use

PARTS_FILE = "parts.json"
_REMERGE = "merge its part folders again instead"


class _SweepFolder:
    """A sweep folder (a part, named groups, or the whole experiment): its rows come from its
    finished batches."""

    def __init__(self, folder: Path):
        self.folder = folder
        declared = load_sweep(folder)
        self.declared = declared.experiment  # as its file says, before any tuning's choice
        self.plan = resolved_plan(declared, folder)  # the tuned groups at their values
        self.experiment = self.plan.experiment
        self.groups = [g.name for g in self.plan.groups]
        self.unfinished = unfinished_groups(self.plan, folder)

    def table(self, group: str) -> pd.DataFrame | None:
        return finished_batches_table(
            self.experiment, [(b, batch_dir(self.folder, b)) for b in self.plan.batches
                              if b.group == group])

    def record(self) -> dict[str, Any]:
        return {"folder": str(self.folder.resolve()),
                "part": str(self.plan.part) if self.plan.part else None, "groups": self.groups}


class _MergedReport:
    """A merged report folder standing in for the parts it merged: it holds the groups they
    finished (never the unfinished ones, whose rows would be partial), rows from its runs
    table."""

    def __init__(self, folder: Path):
        self.folder = folder
        saved = records.load_json(folder / PARTS_FILE, records.PARTS, _REMERGE)
        self.experiment = load_experiment(folder / EXPERIMENT_FILE,
                                          name=saved["experiment"].string(records.MAX_NAME))
        self.declared = self.experiment
        unfinished = {g for _, names in saved["unfinished_groups"].entries()
                      for g in self._groups(names)}
        self.groups = [g for part in saved["parts"].items() for g in self._groups(part["groups"])
                       if g not in unfinished]
        self.merged = {key: saved[key].value
                       for key in ("parts", "missing_groups", "unfinished_groups")}
        self.unfinished: list[str] = []
        self.runs = records.read_parquet(folder / report.RUNS_FILE, _REMERGE, present=("run_id",))

    def _groups(self, names: records.Field) -> list[str]:
        """The group names a `parts.json` field lists, each one of the experiment's."""
        known = [g.name for g in self.experiment.groups]
        fields = names.items(len(known))
        for field in fields:
            if field.string(records.MAX_NAME) not in known:
                raise field.refuse(f"{records.shown(field.value)!r} is not a group of "
                                   f"experiment {self.experiment.name!r}")
        return [field.value for field in fields]

    def table(self, group: str) -> pd.DataFrame | None:
        run_ids = {run.run_id for run in self.experiment.group(group).runs}
        rows = self.runs[self.runs["run_id"].isin(run_ids)]
        return rows.reset_index(drop=True) if len(rows) else None

    def record(self) -> dict[str, Any]:
        return {"folder": str(self.folder.resolve()), "part": None, "groups": self.groups,
                "merged_from": self.merged}


def _source(folder: Path) -> _SweepFolder | _MergedReport:
    is_report = (folder / PARTS_FILE).is_file() and not (folder / PLAN_FILE).is_file()
    return _MergedReport(folder) if is_report else _SweepFolder(folder)


def _owners(sources: Sequence[_SweepFolder | _MergedReport]
            ) -> dict[str, _SweepFolder | _MergedReport]:
    """The source of every group some source holds; refuses overlaps."""
    owners: dict[str, _SweepFolder | _MergedReport] = {}
    for source in sources:
        overlap = [name for name in source.groups if name in owners]
        if overlap:
            others = sorted({str(owners[name].folder) for name in overlap})
            raise ValueError(f"part folder {str(source.folder)!r} overlaps {', '.join(others)}: "
                             f"both hold group(s) {overlap}; give each part once")
        owners.update({name: source for name in source.groups})
    return owners


def _check_out(out: Path, folders: Sequence[Path], overwrite: bool) -> None:
    io.check_output_dir(out)
    target = out.resolve()
    for folder in folders:
        part = folder.resolve()
        if target == part:
            raise ValueError(f"the merged report's folder {str(out)!r} is one of the parts; "
                             f"choose another folder")
        if part in target.parents:  # the report would be written among what the merge reads
            raise ValueError(f"the merged report's folder {str(out)!r} lies in the part folder "
                             f"{str(folder)!r}; choose a folder outside it")
    if (out / PLAN_FILE).is_file():
        raise ValueError(f"{str(out)!r} is a sweep folder; choose another folder for the merged "
                         f"report")
    if manifest.has_results(out) and not overwrite:
        raise FileExistsError(f"output folder {str(out)!r} already exists and is not empty; "
                              f"pass --overwrite to replace the merged report")


def _merged_table(experiment: Experiment,
                  owners: Mapping[str, _SweepFolder | _MergedReport]) -> pd.DataFrame | None:
    """The runs table of the owned groups in the experiment's order; refuses a part whose runs
    table has other columns than the others' (written by another version). A setting column
    (`hp_*`, `cfg_*`) that only some parts hold is added, empty, to the others, where none of
    their methods has a value in it elsewhere: a part run before the experiment grew a method
    with a grid of its own sweeps nothing there."""
    tables = {}
    for group in experiment.groups:
        if group.name in owners and (table := owners[group.name].table(group.name)) is not None:
            tables[group.name] = table
    if not tables:
        return None
    columns = {name: list(table.columns) for name, table in tables.items()}
    expected = columns[max(columns, key=lambda name: (
        sum(c.startswith(SETTING_PREFIXES) for c in columns[name]),
        isinstance(owners[name], _SweepFolder)))]
    for name, found in columns.items():
        lacking = [c for c in expected if c not in found]
        if (found != [c for c in expected if c in found]
                or not all(c.startswith(SETTING_PREFIXES) for c in lacking)):
            raise ValueError(f"the runs table of {str(owners[name].folder)!r} has columns "
                             f"{found}, the other parts {expected}; merge parts written by one "
                             f"version of vaco_jax")
        for column in lacking:
            set_elsewhere = {algo for other in tables.values() if column in other.columns
                             for algo in other.loc[other[column].notna(), "algo"]}
            shared = sorted(set(tables[name]["algo"]) & set_elsewhere)
            if shared:
                raise ValueError(f"the runs of {shared} in {str(owners[name].folder)!r} have no "
                                 f"{column}, which other parts set for them: they ran before "
                                 f"it was swept, at a value the merge cannot name; run them "
                                 f"again under the grown experiment")
    return pd.concat([table.reindex(columns=expected) for table in tables.values()],
                     ignore_index=True)


def foreign_groups(part: Experiment, whole: Experiment, names: Sequence[str]) -> dict[str, str]:
    """Each of the groups `names`, declared by `part`, that `whole` would not run alike, with
    why: `whole` has no group of its name, or one with other runs or another program, tuned by
    another group, or chosen by another tuning (`[tune]`, and the `[cell_rule]` and the task's
    reference score that an in-cell rule reads). Empty when every group joins `whole`."""
    whole_groups = {group.name: group for group in whole.groups}
    tuned = set(part.tuned_by) | set(part.tuned_by.values()) | set(part.extended)
    foreign = {}
    declared = {group.name: group for group in part.groups}
    for name in names:
        if name not in declared:
            foreign[name] = f"the part's own experiment has no group {name!r}"
            continue
        group = declared[name]
        task = part.testbed.task(group.config)
        if name not in whole_groups:
            foreign[name] = f"{whole.name!r} has no group {name!r}"
        elif whole_groups[name] != group:
            foreign[name] = (f"{whole.name!r} runs group {name!r} otherwise "
                             f"({_differences(group, whole_groups[name])})")
        elif whole.tuned_by.get(name) != part.tuned_by.get(name):
            foreign[name] = f"{whole.name!r} tunes group {name!r} by another group"
        elif name in tuned and whole.tune != part.tune:
            foreign[name] = f"{whole.name!r} tunes group {name!r} by another [tune]"
        elif name in tuned and part.tune.rule.in_cell and (
                whole.cell_rule != part.cell_rule
                or whole.reference_scores.get(task) != part.reference_scores.get(task)):
            foreign[name] = (f"{whole.name!r} judges the tuning of group {name!r} by another "
                             f"[cell_rule] or reference score of {task!r}")
    return foreign


def _differences(group: Group, other: Group) -> str:
    """The fields in which two groups of one name differ; for the config, which of its fields."""
    named = []
    for field in dataclasses.fields(Group):
        mine, theirs = getattr(group, field.name), getattr(other, field.name)
        if mine == theirs:
            continue
        if field.name == "config":
            named += [f"config.{f.name}" for f in dataclasses.fields(mine)
                      if getattr(mine, f.name) != getattr(theirs, f.name)] or ["config"]
        else:
            named.append(field.name)
    return ", ".join(named)


def merge_parts(part_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
                allow_incomplete: bool = False, overwrite: bool = False,
                keep: Sequence[str] = (), experiment: Experiment | None = None) -> Summary:
    """Writes the report of the experiment whose parts were run into `part_dirs` (sweep folders
    or merged reports) into `out_dir` (refused if it exists, unless `overwrite`), with
    `experiment.toml` and `parts.json`; returns the report's summary. The experiment is the
    parts' own, or `experiment`, which may extend theirs (`foreign_groups`).

    Refuses, naming the folder: a folder that is neither a sweep folder nor a merged report, one
    of another experiment (parsed `experiment.toml` differs; with `experiment`, a group it
    would not run alike), parts that overlap, and, unless
    `allow_incomplete` (which marks the report's title), groups that no part holds or that are
    not finished, and a part folder that a live process writes. The runs of unfinished batches
    never enter the report. It holds the lock of `out_dir`; `overwrite` and `keep` are
    `io.prepare_output_dir`'s.
    """
    folders = [Path(d) for d in part_dirs]
    if not folders:
        raise ValueError("--parts needs at least one part folder")
    out = Path(out_dir)
    _check_out(out, folders, overwrite)  # before the lock makes the folder
    with folder_lock(out):
        _check_out(out, folders, overwrite)  # again: another process may have written it
        for folder in folders:
            for held in (folder, *manifest.nested_runs(folder)):
                refuse_if_in_use(held)
        return _merge(folders, out, allow_incomplete=allow_incomplete, keep=keep,
                      experiment=experiment)


def _merge(folders: Sequence[Path], out: Path, *, allow_incomplete: bool, keep: Sequence[str],
           experiment: Experiment | None) -> Summary:
    sources = [_source(folder) for folder in folders]
    if experiment is not None:
        for source in sources:
            foreign = foreign_groups(source.declared, experiment, source.groups)
            if foreign:
                raise ValueError(f"part folder {str(source.folder)!r} holds groups that "
                                 f"{experiment.name!r} does not run alike: "
                                 f"{'; '.join(foreign.values())}")
    else:
        experiment = sources[0].experiment
        for source in sources[1:]:
            if not same_experiment(source.experiment, experiment):
                raise ValueError(f"part folder {str(source.folder)!r} holds another experiment "
                                 f"({source.experiment.name!r}) than {str(folders[0])!r} "
                                 f"({experiment.name!r}); merge the parts of one experiment "
                                 f"only, or name the experiment that extends them "
                                 f"(--experiment)")
    owners = _owners(sources)
    missing = [g.name for g in experiment.groups if g.name not in owners]
    unfinished = {str(s.folder): s.unfinished for s in sources if s.unfinished}
    if (missing or unfinished) and not allow_incomplete:
        problems = ([f"no part holds group(s) {missing}"] if missing else []) + [
            f"{folder!r} has not finished group(s) {names} (resume it with vaco-jax sweep "
            f"--resume --out {folder})" for folder, names in unfinished.items()]
        raise ValueError(f"incomplete parts: {'; '.join(problems)}; pass --allow-incomplete "
                         f"for a report of what there is")
    table = _merged_table(experiment, owners)
    if table is None:
        raise FileNotFoundError(f"no part in {[str(f) for f in folders]} has a finished batch yet")
    io.prepare_output_dir(out, overwrite=True, keep=keep,  # refused above unless overwrite
                          writes=(EXPERIMENT_FILE, PARTS_FILE, *REPORT_WRITES))
    manifest.record(out, {EXPERIMENT_FILE: manifest.FILE, PARTS_FILE: manifest.FILE})
    absent = len(missing) + sum(len(names) for names in unfinished.values())
    note = (f"incomplete merge: {absent} of {len(experiment.groups)} groups missing or "
            f"unfinished, see {PARTS_FILE}") if absent else None
    io.write_text(out / EXPERIMENT_FILE, experiment.source)
    io.write_json(out / PARTS_FILE, {"experiment": experiment.name,
                                     "complete": not missing and not unfinished,
                                     "parts": [source.record() for source in sources],
                                     "missing_groups": missing,
                                     "unfinished_groups": unfinished})
    return write_experiment_report(experiment, table, out, note=note)
