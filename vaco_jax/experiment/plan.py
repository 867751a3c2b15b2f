"""Plans: an experiment's groups (or a part's) split into batches of runs that fit memory.

A group's runs execute in *batches* of equal size, so every batch reuses the group's single
compilation. The size is the most runs whose estimated memory (`vaco_jax.run.memory`) fits the
device-memory budget, the host budget and `max_runs_per_batch`, a multiple of the device count
(the `Driver` shards runs over devices); the last batch is padded with duplicates of its own
runs, whose results are dropped. A group of which not even one run per device fits is refused.
Planning traces shapes only: nothing compiles, nothing is written.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import jax

from vaco_jax.core.config import Config, HParamsBase
from vaco_jax.experiment.parts import Selection, parse_part, selected_groups
from vaco_jax.experiment.groups import Group, group_steps
from vaco_jax.experiment.spec import Experiment
from vaco_jax.infra.records import Field, shown
from vaco_jax.run.memory import (device_memory_budget, device_refusal, host_memory_budget,
                                 host_refusal, run_memory, size_advice)

PLAN_FILE = "sweep.json"
"""The file of a sweep folder that saves its plan."""


def batch_capacity(run_bytes: int, budget_bytes: int, num_devices: int,
                   max_runs_per_batch: int | None = None, *, host_run_bytes: int = 0,
                   host_budget_bytes: int | None = None,
                   advice: str = "lower the run's size") -> int:
    """Most runs per batch: those fitting each device's budget and, all of the batch's
    together, the host budget (`host_run_bytes` each, when `host_budget_bytes` is given),
    capped by `max_runs_per_batch` (rounded down to a multiple of `num_devices`). Refuses with
    `advice` runs of which not even one per device fits: they would fail, or swap the machine,
    only once the sweep allocates them, its folder written and earlier groups trained."""
    per_device = budget_bytes // max(run_bytes, 1)
    if per_device < 1:
        raise ValueError(device_refusal(1, run_bytes, budget_bytes, advice))
    if host_budget_bytes is not None:
        host_per_device = host_budget_bytes // max(host_run_bytes * num_devices, 1)
        if host_per_device < 1:
            raise ValueError(host_refusal(num_devices, host_run_bytes, host_budget_bytes, advice))
        per_device = min(per_device, host_per_device)
    capacity = per_device * num_devices
    if max_runs_per_batch is not None:
        capacity = min(capacity, max(1, max_runs_per_batch // num_devices) * num_devices)
    return capacity


def split_runs(num_runs: int, capacity: int, num_devices: int = 1) -> tuple[int, list[list[int]]]:
    """Splits runs `0..num_runs-1` into the fewest batches of at most `capacity` runs, all of one
    size (a multiple of `num_devices`, so one compilation serves every batch and each device
    gets the same share). Returns the size and each batch's runs; the last batch may hold fewer
    runs than the size, to be padded."""
    if capacity < num_devices or capacity % num_devices:
        raise ValueError(f"capacity={capacity} must be a positive multiple of "
                         f"num_devices={num_devices}")
    count = math.ceil(num_runs / capacity)
    size = math.ceil(math.ceil(num_runs / count) / num_devices) * num_devices
    return size, [list(range(start, min(start + size, num_runs)))
                  for start in range(0, num_runs, size)]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Runs of one group executed together: `runs` index the group's runs; the driver executes
    `size` runs, `runs` first and then duplicates of them as padding."""

    name: str
    group: str
    runs: tuple[int, ...]
    size: int

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(self.runs[i % len(self.runs)] for i in range(self.size))


@dataclasses.dataclass(frozen=True)
class Plan:
    """An experiment (or one `part` of it) split into batches; `run_bytes` is the estimate per
    run of each of its groups."""

    experiment: Experiment
    batches: tuple[Batch, ...]
    num_devices: int
    budget_bytes: int
    run_bytes: Mapping[str, int]
    part: Selection = None

    @property
    def groups(self) -> tuple[Group, ...]:
        """The groups this plan runs: the experiment's, or its part's."""
        return selected_groups(self.experiment, self.part)

    def driver_arguments(self, batch: Batch) -> tuple[Config, HParamsBase, list[int]]:
        """What a `Driver` of `batch` takes: its group's config, the hyper-parameters of its
        runs (padding included) and their seeds."""
        group = self.experiment.group(batch.group)
        return (group.config, group.hparams(batch.padded),
                [group.runs[i].seed for i in batch.padded])

    def to_json(self) -> dict[str, Any]:
        return {"experiment": self.experiment.name,
                "part": None if self.part is None else str(self.part),
                "num_devices": self.num_devices,
                "budget_bytes_per_device": self.budget_bytes,
                "groups": [{"name": g.name, "config": g.config.to_dict(),
                            "run_bytes": self.run_bytes[g.name],
                            "runs": [dataclasses.asdict(r) for r in g.runs],
                            "batches": [dataclasses.asdict(b) for b in self.batches
                                        if b.group == g.name]}
                           for g in self.groups]}

    @classmethod
    def from_json(cls, experiment: Experiment, saved: Field) -> "Plan":
        """The plan `saved` (a `sweep.json` read by `records`) of `experiment`, refusing in one
        line naming the field a plan whose groups, batch names, run indices or sizes are not
        those the experiment itself derives at the saved batch sizes: a batch's name becomes a
        folder, so a forged one must never be taken as written (nor silently re-derived)."""
        saved.table()
        part_field = saved.get("part")
        part = None
        if part_field:
            label = part_field.string(MAX_SELECTION)
            try:
                part = parse_part(label)
            except ValueError as error:  # it speaks of the command line's --part and --groups
                raise part_field.refuse(str(error)) from None
        expected = selected_groups(experiment, part)
        num_devices = saved["num_devices"].integer(1, MAX_DEVICES)
        groups = saved["groups"].items(length=len(expected))
        batches, run_bytes = [], {}
        for group, entry in zip(expected, groups):
            if entry["name"].string(MAX_SELECTION) != group.name:
                raise entry["name"].refuse(f"{shown(entry['name'].value)!r} is not the "
                                           f"experiment's group {group.name!r} here")
            run_bytes[group.name] = entry["run_bytes"].integer(0)
            batches += _saved_batches(group, entry["batches"], num_devices)
        return cls(experiment=experiment, num_devices=num_devices,
                   budget_bytes=saved["budget_bytes_per_device"].integer(1),
                   run_bytes=run_bytes, batches=tuple(batches), part=part)


MAX_DEVICES = 1 << 16
"""The most devices a saved plan may share a batch over."""
MAX_SELECTION = 1 << 16
"""The most characters of a group's name or a part's label in a saved plan."""


def _saved_batches(group: Group, saved: Field, num_devices: int) -> list[Batch]:
    """The batches of `group` as `make_plan` splits its runs at the saved batch size, refusing
    saved batches that differ from them in any field."""
    entries = saved.items(len(group.runs))
    if not entries:
        raise saved.refuse(f"lists no batch for the {len(group.runs)} runs of group "
                           f"{group.name!r}")
    padded = math.ceil(len(group.runs) / num_devices) * num_devices
    size = entries[0]["size"].integer(num_devices, padded)
    if size % num_devices:
        raise entries[0]["size"].refuse(f"{size} is not a multiple of the plan's "
                                        f"{num_devices} devices")
    size, split = split_runs(len(group.runs), size, num_devices)
    derived = [Batch(name=f"{group.name}-{i}", group=group.name, runs=tuple(runs), size=size)
               for i, runs in enumerate(split)]
    saved.items(length=len(derived))
    for batch, entry in zip(derived, entries):
        entry.table(tuple(dataclasses.asdict(batch)))
        entry["name"].name()  # a forged name is refused as a path before as a mismatch
        for key, value in dataclasses.asdict(batch).items():
            expected = list(value) if isinstance(value, tuple) else value
            if entry[key].value != expected:
                raise entry[key].refuse(
                    f"{shown(entry[key].value, 80)!r} is not what the experiment derives for "
                    f"this batch ({shown(expected, 80)!r})")
    return derived


def make_plan(experiment: Experiment, *, part: Selection = None,
              max_runs_per_batch: int | None = None, memory_budget: int | None = None,
              devices: Sequence[jax.Device] | None = None,
              batch_sizes: Mapping[str, int] | None = None) -> Plan:
    """Estimates the run memory of each group (of `part`, if given) and splits its runs into
    equal batches that fit `memory_budget` bytes per device (default: `device_memory_budget`)
    on `devices` (default: `jax.devices()`) and, each batch, this machine's host budget
    (`host_memory_budget`). The estimate traces shapes; nothing compiles. Raises `ValueError`
    naming the group whose runs do not fit even one per device. `batch_sizes` fixes the batch
    size of the groups it names (those of a sweep planned before, `replan_sweep`)."""
    groups = selected_groups(experiment, part)
    devices = list(jax.devices() if devices is None else devices)
    budget = memory_budget if memory_budget is not None else device_memory_budget(devices[0])
    host_budget = host_memory_budget()
    batches, run_bytes, estimates = [], {}, {}
    for group in groups:
        # Epochs and minibatches shape neither the train state, the rollout nor the metrics:
        # groups that differ in them alone share one estimate.
        shape = group.config.replace(epochs=1, minibatches=1)
        if shape not in estimates:
            estimates[shape] = run_memory(group.config, group.run_hparams(0))
        estimate = estimates[shape]
        run_bytes[group.name] = estimate.device
        try:
            capacity = batch_capacity(estimate.device, budget, len(devices), max_runs_per_batch,
                                      host_run_bytes=estimate.host, host_budget_bytes=host_budget,
                                      advice=size_advice(group.config))
        except ValueError as error:
            raise ValueError(f"group {group.name}: {error}") from None
        saved = (batch_sizes or {}).get(group.name)
        if saved is not None and saved % len(devices):
            raise ValueError(f"group {group.name}: its batches of {saved} runs were planned for "
                             f"another device count; here {len(devices)} devices share each "
                             f"batch: resume it on a machine like the one it started on")
        if saved is not None and saved > capacity:
            raise ValueError(f"group {group.name}: its batches of {saved} runs were planned on "
                             f"another machine; here at most {capacity} fit (raise "
                             f"--memory-budget or --max-runs-per-batch, or resume it there)")
        capacity = saved or capacity
        size, split = split_runs(len(group.runs), capacity, len(devices))
        batches += [Batch(name=f"{group.name}-{i}", group=group.name, runs=tuple(runs), size=size)
                    for i, runs in enumerate(split)]
    return Plan(experiment=experiment, batches=tuple(batches), num_devices=len(devices),
                budget_bytes=budget, run_bytes=run_bytes, part=part)


def _count(number: float) -> str:
    return f"{number:,.0f}"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


def plan_text(plan: Plan, steps_per_second: float | None = None) -> str:
    """The plan as a table: per group its runs, memory estimate, batches and environment steps;
    the totals; and the estimated training time at `steps_per_second` (all runs of a batch
    together): executed steps (padding included) / `steps_per_second`, compilation aside."""
    experiment = plan.experiment
    groups = plan.groups
    scope = (f"{plan.part.label}: {len(groups)} of {len(experiment.groups)} groups"
             if plan.part else f"{len(groups)} groups")
    programs = {(plan.experiment.group(b.group).config, b.size) for b in plan.batches}
    width = max([len("group"), *(len(g.name) for g in groups)])
    lines = [f"{experiment.name}, {scope}, {len(plan.batches)} batches in {len(programs)} "
             f"compiled program(s); {plan.num_devices} device(s), memory budget "
             f"{plan.budget_bytes / 2**30:,.1f} GiB per device",
             f"{'group':<{width}} {'runs':>5} {'GiB/run':>8} {'batches':>10} {'env steps':>17}"]
    steps = executed = 0
    for group in groups:
        batches = [b for b in plan.batches if b.group == group.name]
        steps += group_steps(group)
        executed += sum(b.size for b in batches) * group_steps(group) // len(group.runs)
        lines.append(f"{group.name:<{width}} {len(group.runs):>5} "
                     f"{plan.run_bytes[group.name] / 2**30:>8.3f} "
                     f"{f'{len(batches)} x {batches[0].size}':>10} {_count(group_steps(group)):>17}")
    runs = sum(len(g.runs) for g in groups)
    lines.append(f"total: {_count(runs)} runs, {_count(steps)} environment steps "
                 f"({_count(executed)} executed, with batch padding)")
    extensions = [g for g in groups if g.name in experiment.extended]
    if extensions:
        extension_steps = sum(group_steps(g) for g in extensions)
        lines.append(f"of which {len(extensions)} extension groups ({_count(extension_steps)} "
                     f"steps): each runs only if its method's choice is that end of the "
                     f"grid, so at most one of each tuning group's two")
    if steps_per_second is None:
        lines.append("estimated time: executed steps / R, where R is the steps/s of a batch's "
                     "runs together (give --steps-per-second R)")
    else:
        lines.append(f"estimated time: {_count(executed)} executed steps / "
                     f"{_count(steps_per_second)} steps/s = "
                     f"{_duration(executed / steps_per_second)}, plus compilation (one per "
                     f"program, each but the first overlapping the previous group's training)")
    return "\n".join(lines)
