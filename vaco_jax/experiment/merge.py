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

A tuned group is merged only at the value the experiment's rule chooses from the tuning runs
merged with it, each method (its tuning group, extensions and tuned groups) taken whole from one
folder. So an experiment re-tuned by another rule merges the parts it ran before: the methods
whose choice is unchanged join as they are, the copies at a value it no longer chooses are void
(`parts.json` says why), and a part that re-ran those methods under the new rule replaces them.
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
from vaco_jax.experiment import tune
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
        self._tables: dict[str, pd.DataFrame | None] = {}

    def table(self, group: str) -> pd.DataFrame | None:
        # Read once: the merge asks for a tuned group's rows to check its value, then to merge.
        if group not in self._tables:
            self._tables[group] = finished_batches_table(
                self.experiment, [(b, batch_dir(self.folder, b)) for b in self.plan.batches
                                  if b.group == group])
        return self._tables[group]

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


@dataclasses.dataclass(frozen=True)
class _Holding:
    """Which source each group is taken from (`owners`), the copies left out and why (`void`:
    the groups of a method whose tuned groups ran at a value the experiment's rule does not
    choose from the tuning runs beside them, whether or not another part replaces them), and
    the extension groups no choice needs (`unneeded`, never run)."""

    owners: dict[str, _SweepFolder | _MergedReport]
    void: dict[str, str]
    unneeded: set[str]


def _overlap(source: _SweepFolder | _MergedReport, names: Sequence[str],
             others: Sequence[_SweepFolder | _MergedReport]) -> ValueError:
    folders = ", ".join(sorted({str(other.folder) for other in others}))
    return ValueError(f"part folder {str(source.folder)!r} overlaps {folders}: both hold "
                      f"group(s) {list(names)}; give each part once")


def _owners(sources: Sequence[_SweepFolder | _MergedReport], experiment: Experiment
            ) -> _Holding:
    """The source of every group some source holds. A method (a tuning group, its extensions
    and the groups it tunes: `Experiment.units`) is taken whole from the one source whose tuned
    groups ran at the values `experiment`'s rule chooses from that source's tuning runs; the
    copies of a method whose values it would not choose (re-tuned by another rule, or waiting
    for an extension) are void. Refuses a group, or a method, that two sources hold validly."""
    owners: dict[str, _SweepFolder | _MergedReport] = {}
    void: dict[str, str] = {}
    unneeded: set[str] = set()
    for unit in experiment.units:
        names = [experiment.groups[i].name for i in unit]
        holders = [s for s in sources if any(name in s.groups for name in names)]
        if len(names) == 1:  # a group no tuning decides
            if len(holders) > 1:
                raise _overlap(holders[1], names, holders[:1])
            owners.update({names[0]: holders[0]} if holders else {})
            continue
        tuning = next(name for name in names if name in experiment.tuned_by.values())
        valid = []
        for holder in holders:
            made, why = _method_choices(experiment, holder, tuning)
            if why:
                void.update({name: f"{why} in {str(holder.folder)!r}" for name in names
                             if name in holder.groups})
            else:
                valid.append((holder, made))
        if len(valid) > 1:
            raise _overlap(valid[1][0], [n for n in names if n in valid[1][0].groups],
                           [valid[0][0]])
        if valid:
            holder, made = valid[0]
            owners.update({name: holder for name in names if name in holder.groups})
            unneeded |= tune.unneeded_extensions(experiment, made)
    return _Holding(owners, void, unneeded)


def _method_choices(experiment: Experiment, source: _SweepFolder | _MergedReport,
                    tuning: str) -> tuple[list[tune.Choice], str | None]:
    """The choices `experiment`'s rule makes for the method tuned by group `tuning` from
    `source`'s tuning runs, and why `source`'s copy of the method is void (None if it is not):
    a tuned group it holds without the tuning runs, or at another value than the rule
    chooses, or while the choice waits for an extension's runs."""
    tuning_names = [tuning, *experiment.extensions.get(tuning, {}).values()]
    tables = [t for name in tuning_names if name in source.groups
              and (t := source.table(name)) is not None]
    runs = pd.concat(tables, ignore_index=True) if tables else None
    made = ([c for c in tune.choices(experiment, runs, experiment.testbed.score)
             if c.group == tuning] if runs is not None else [])
    # Only the tuned groups with runs: a group a sweep has not reached yet contradicts nothing.
    tuned = {name: rows for name, by in experiment.tuned_by.items()
             if by == tuning and name in source.groups
             and (rows := source.table(name)) is not None}
    if not tuned:
        return made, None
    if not made:
        return made, f"group(s) {list(tuned)} ran without the finished tuning runs of {tuning!r}"
    pending = [c.extension for c in made if c.pending]
    if pending:
        return made, (f"group(s) {list(tuned)} ran before the rule's choice, which waits for "
                      f"the runs of {pending}")
    resolved = tune.resolved(experiment, {c.key: c.chosen for c in made})
    column, hparam = experiment.tune.column, experiment.tune.hparam
    for name, rows in tuned.items():
        expected = {r.run_id: r.hparams[hparam] for r in resolved.group(name).runs}
        ran = dict(zip(rows["run_id"], rows[column]))
        off = sorted({value for run_id, value in ran.items() if value != expected[run_id]})
        if off:
            chosen = sorted(set(expected.values()))
            return made, (f"group {name!r} ran at {hparam} {off}, where the rule chooses "
                          f"{chosen} from the tuning runs beside it")
    return made, None


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
    why: `whole` has no group of its name, or one with other runs or another program, or tuned
    by another group. How a tuned group's value was chosen is not asked here: the merge keeps
    it only where `whole`'s rule chooses that value from the tuning runs merged with it
    (`_owners`), so a part tuned by another rule joins wherever the choice agrees. Empty when
    every group joins `whole`."""
    whole_groups = {group.name: group for group in whole.groups}
    foreign = {}
    declared = {group.name: group for group in part.groups}
    for name in names:
        if name not in declared:
            foreign[name] = f"the part's own experiment has no group {name!r}"
        elif name not in whole_groups:
            foreign[name] = f"{whole.name!r} has no group {name!r}"
        elif whole_groups[name] != declared[name]:
            foreign[name] = (f"{whole.name!r} runs group {name!r} otherwise "
                             f"({_differences(declared[name], whole_groups[name])})")
        elif whole.tuned_by.get(name) != part.tuned_by.get(name):
            foreign[name] = f"{whole.name!r} tunes group {name!r} by another group"
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
        declared = experiment
        for source in sources:
            foreign = foreign_groups(source.declared, experiment, source.groups)
            if foreign:
                raise ValueError(f"part folder {str(source.folder)!r} holds groups that "
                                 f"{experiment.name!r} does not run alike: "
                                 f"{'; '.join(foreign.values())}")
    else:
        experiment, declared = sources[0].experiment, sources[0].declared
        for source in sources[1:]:
            if not same_experiment(source.experiment, experiment):
                raise ValueError(f"part folder {str(source.folder)!r} holds another experiment "
                                 f"({source.experiment.name!r}) than {str(folders[0])!r} "
                                 f"({experiment.name!r}); merge the parts of one experiment "
                                 f"only, or name the experiment that extends them "
                                 f"(--experiment)")
    holding = _owners(sources, declared)
    owners = holding.owners
    missing = [g.name for g in experiment.groups
               if g.name not in owners and g.name not in holding.unneeded]
    # A source's unfinished groups count only where it is the one they are taken from: a void
    # copy another part replaces leaves nothing unfinished.
    unfinished = {str(s.folder): names for s in sources
                  if (names := [n for n in s.unfinished if owners.get(n) is s])}
    if (missing or unfinished) and not allow_incomplete:
        absent = [name for name in missing if name not in holding.void]
        problems = ([f"no part holds group(s) {absent}"] if absent else []) + [
            f"void: {why}" for why in dict.fromkeys(holding.void[name] for name in missing
                                                    if name in holding.void)] + [
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
    planned = len(experiment.groups) - len(holding.unneeded)
    note = (f"incomplete merge: {absent} of {planned} groups missing or unfinished, see "
            f"{PARTS_FILE}") if absent else None
    io.write_text(out / EXPERIMENT_FILE, experiment.source)
    io.write_json(out / PARTS_FILE, {"experiment": experiment.name,
                                     "complete": not missing and not unfinished,
                                     "parts": [source.record() for source in sources],
                                     "missing_groups": missing,
                                     "void_groups": holding.void,
                                     "unfinished_groups": unfinished})
    return write_experiment_report(experiment, table, out, note=note)
