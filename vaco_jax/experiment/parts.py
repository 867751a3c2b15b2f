"""Parts of an experiment: the groups one sweep folder runs, so that several machines share an
experiment and `vaco_jax.experiment.merge` merges their folders into its report.

A `Part` (`--part K/N`) is part K of the experiment's groups split into N parts of about equal
environment steps, a split that depends on the experiment file only; `--part auto` reads K and N
from a SLURM job array (each of its tasks one part, `docs/multi_process.md`); `NamedGroups`
(`--groups`) names its groups, e.g. to run again those of a lost part folder. A sweep saves its
selection in `sweep.json`, so a resumed part stays that part.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Mapping

from vaco_jax.experiment.groups import Group
from vaco_jax.experiment.spec import Experiment


@dataclasses.dataclass(frozen=True)
class Part:
    """Part `index` of `count` (1-based) of an experiment's groups, split by `balanced_parts`
    over each group's environment steps: a split that depends on the experiment only."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str, environ: Mapping[str, str] = os.environ) -> "Part":
        """`K/N`, or `auto`: the part of this task of a SLURM job array (`from_job_array`)."""
        if text.strip() == "auto":
            return cls.from_job_array(environ)
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None or not 1 <= int(match[1]) <= int(match[2]):
            raise ValueError(f"--part must be K/N with integers 1 <= K <= N (e.g. 2/3), "
                             f"got {text!r}")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def from_job_array(cls, environ: Mapping[str, str]) -> "Part":
        """This task's part of a SLURM job array: its place among the array's
        `SLURM_ARRAY_TASK_COUNT` tasks, counted from `SLURM_ARRAY_TASK_MIN` (0 if unset) in
        steps of `SLURM_ARRAY_TASK_STEP` (1 if unset), so `--array=0-3` and `--array=1-4`
        both run parts 1/4 to 4/4."""
        names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")
        missing = [name for name in names if not environ.get(name)]
        if missing:
            unset = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set"
            raise ValueError(f"--part auto reads the part from a SLURM job array (sbatch "
                             f"--array), but {unset}; give --part K/N instead")
        try:
            task, count, first, step = (
                int(environ[names[0]]), int(environ[names[1]]),
                int(environ.get("SLURM_ARRAY_TASK_MIN") or 0),
                int(environ.get("SLURM_ARRAY_TASK_STEP") or 1))
        except ValueError:
            raise ValueError(f"--part auto: SLURM_ARRAY_TASK_ID, _COUNT, _MIN and _STEP must be "
                             f"integers, got {environ.get(names[0])!r}, "
                             f"{environ.get(names[1])!r}, {environ.get('SLURM_ARRAY_TASK_MIN')!r}, "
                             f"{environ.get('SLURM_ARRAY_TASK_STEP')!r}") from None
        index = (task - first) // max(step, 1) + 1
        if count < 1 or not 1 <= index <= count or (task - first) % max(step, 1):
            raise ValueError(f"--part auto: task {task} is not one of the {count} tasks of the "
                             f"job array from {first} in steps of {step}; give --part K/N instead")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def groups(self, experiment: Experiment) -> tuple[Group, ...]:
        """This part's groups, in the experiment's order."""
        total = len(experiment.units)  # a tuning group and the groups it tunes are one
        if self.count > total:
            raise ValueError(f"--part {self}: experiment {experiment.name!r} has {total} "
                             f"group(s){' to run apart' if experiment.tune else ''}, so N must "
                             f"lie in 1..{total}")
        owners = experiment.partition(self.count)
        return tuple(g for g, owner in zip(experiment.groups, owners) if owner == self.index - 1)

    @property
    def label(self) -> str:
        return f"part {self}"


@dataclasses.dataclass(frozen=True)
class NamedGroups:
    """The groups of an experiment named one by one (`--groups`), a part chosen by hand: to run
    again the groups of a part folder that was lost, or those an incomplete merge misses."""

    names: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "NamedGroups":
        names = sorted({name.strip() for name in text.split(",") if name.strip()})
        if not names:
            raise ValueError(f"--groups must name at least one group (comma-separated, as "
                             f"--plan prints them), got {text!r}")
        return cls(tuple(names))

    def __str__(self) -> str:
        return ",".join(self.names)

    @property
    def label(self) -> str:
        return f"groups {', '.join(self.names)}"

    def groups(self, experiment: Experiment) -> tuple[Group, ...]:
        """The named groups, with the extensions of a named tuning group, in the experiment's
        order."""
        known = [g.name for g in experiment.groups]
        unknown = [name for name in self.names if name not in known]
        if unknown:
            raise ValueError(f"--groups: experiment {experiment.name!r} has no group(s) "
                             f"{unknown}; its groups are {known}")
        untuned = sorted({experiment.tuned_by[n] for n in self.names if n in experiment.tuned_by}
                         - set(self.names))
        if untuned:
            raise ValueError(f"--groups: the named groups take their {experiment.tune.hparam} "
                             f"from tuning group(s) {untuned}; name those too")
        extensions = {e for n in self.names for e in experiment.extensions.get(n, {}).values()}
        return tuple(g for g in experiment.groups if g.name in {*self.names, *extensions})


def parse_part(text: str) -> Part | NamedGroups:
    """A part as `sweep.json` saves it: `K/N` or comma-separated group names."""
    return Part.parse(text) if "/" in text else NamedGroups.parse(text)


Selection = Part | NamedGroups | None
"""The groups of an experiment a sweep runs: a `Part`, `NamedGroups`, or None for all."""


def selected_groups(experiment: Experiment, selection: Selection) -> tuple[Group, ...]:
    """The groups of `selection` in the experiment's order; refuses a part or group the
    experiment does not have."""
    return experiment.groups if selection is None else selection.groups(experiment)
