"""An experiment's groups and runs: a group is one compiled program (`Group.config`) and its runs
(`RunSpec`: seed, lag level, grid point), validated before anything compiles; a tuning group is
the synchronous group of one method's tuning runs (`tuning_groups`)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp

from vaco_jax import testbeds
from vaco_jax.core import knobs
from vaco_jax.core.config import Config, axis_labels
from vaco_jax.core.lag_models import Fixed
from vaco_jax.experiment import fields, tune_spec
from vaco_jax.testbeds import Testbed


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a group: its seed, lag level and grid point (`hparams`, swept names only)."""

    run_id: str
    seed: int
    lag: float
    hparams: Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs sharing one compiled program (`config`); `fixed` holds the hyper-parameters every
    run shares, `swept` the names of those the runs' grid points set, `axes` the value of each
    config axis the experiment sweeps (`Config.axes`), which its name carries."""

    name: str
    config: Config
    fixed: Mapping[str, float]
    swept: tuple[str, ...]
    runs: tuple[RunSpec, ...]
    axes: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def axes_part(self) -> str:
        """The part of its name that its config axes give, e.g. `-bf16`."""
        return _axes_part(type(self.config), self.axes)

    def hparams(self, indices: Sequence[int]) -> Any:
        """The stacked hyper-parameters of `runs[i]` for each `i` in `indices` (leaves `[R]`):
        the knobs its algorithm reads (a value of `fixed` for another, from a table the groups
        share, is left out)."""
        runs = [self.runs[i] for i in indices]
        testbed = testbeds.named(self.config.testbed)
        values = testbed.hparams.create(
            **self.fixed, lag=[r.lag for r in runs],
            **{n: [r.hparams[n] for r in runs] for n in self.swept}
        ).only(testbed.knobs(self.config))
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (len(runs),)), values)

    def run_hparams(self, index: int) -> Any:
        return jax.tree.map(lambda x: x[0], self.hparams([index]))


def _axes_part(config_type: type[Config], axes: Mapping[str, Any]) -> str:
    return "".join(f"-{label}" for label in axis_labels(config_type, axes))


def group_steps(group: Group) -> int:
    """Environment steps of all the group's runs."""
    return len(group.runs) * group.config.num_updates * group.config.steps_per_update


def balanced_parts(weights: Sequence[int], count: int) -> list[int]:
    """The part (0-based) of each item: items in decreasing weight (equal weights in order)
    each join the part with the least weight so far (the lowest such part), the
    longest-processing-time rule. Equal weights thus go round-robin; no part's weight exceeds
    the mean by more than the largest item, and with `count <= len(weights)` none is empty."""
    loads, owners = [0] * count, [0] * len(weights)
    for item in sorted(range(len(weights)), key=lambda i: -weights[i]):
        part = min(range(count), key=lambda p: loads[p])
        owners[item] = part
        loads[part] += weights[item]
    return owners


def check_num_runs(num_runs: int) -> None:
    """Refuses an experiment of more than `fields.MAX_RUNS` runs, counted before any is built."""
    if num_runs > fields.MAX_RUNS:
        raise ValueError(f"the experiment expands into {num_runs:,} runs (tasks x algos x lag "
                         f"levels x grid points x seeds x forward variants x config axis "
                         f"values), more than the limit of {fields.MAX_RUNS:,} (MAX_RUNS); "
                         f"split it into several experiments or sweep fewer values")


def validated(group: Group, testbed: Testbed) -> Group:
    """`group`, refused (ValueError naming it) where its config or any run's hyper-parameters
    are not valid, or where it sweeps a hyper-parameter its algorithm does not read (its runs
    would differ in nothing)."""
    with fields.context(f"group {group.name}"):
        testbed.validate(group.config, group.hparams(range(len(group.runs))))
        knobs.refuse_unread(group.swept, testbed.knobs(group.config), group.config.algo,
                            "a sweep ([hparams], [overrides] or [tune])")
    return group


def grid_points(group: Group) -> list[tuple[float, ...]]:
    """The distinct points of the group's other grids, in order."""
    return list(dict.fromkeys(tuple(r.hparams[n] for n in group.swept) for r in group.runs))


def _tuning_name(group: Group, testbed: Testbed) -> str:
    """One per task, algorithm, config axis value and forward variant."""
    config = group.config
    return (f"{tune_spec.GROUP_PREFIX}{testbed.task(config)}-{config.algo}{group.axes_part}-"
            f"e{config.epochs}m{config.minibatches}")


def _tuning_group(name: str, group: Group, tune: tune_spec.Tune, values: Sequence[float],
                  testbed: Testbed) -> Group:
    """Lag 0 under `fixed`: value x other grid point x tuning seed, seed fastest."""
    config = group.config.replace(lag_model=Fixed(), lag_preset=None)
    points = itertools.product(values, grid_points(group), tune.seeds)
    runs = tuple(RunSpec(run_id=f"{name}-r{i}", seed=seed, lag=0.0,
                         hparams={tune.hparam: value, **dict(zip(group.swept, point))})
                 for i, (value, point, seed) in enumerate(points))
    return validated(Group(name=name, config=config, fixed=group.fixed,
                           swept=(tune.hparam, *group.swept), runs=runs, axes=group.axes),
                     testbed)


def extension_name(tuning: str, side: str) -> str:
    """The group that extends tuning group `tuning`'s grid past its end on `side`."""
    return f"{tuning}-{side}"


@dataclasses.dataclass(frozen=True)
class TuningGroups:
    """An experiment's tuning groups, the tuning group of each of its groups (`tuned_by`), and
    with `extend` the group past each end of each tuning group's grid (`extensions`: tuning
    group -> side -> its group), which runs only for a method whose choice is that end."""

    groups: tuple[Group, ...] = ()
    tuned_by: Mapping[str, str] = dataclasses.field(default_factory=dict)
    extensions: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)


def tuning_groups(groups: tuple[Group, ...], tune: tune_spec.Tune,
                  testbed: Testbed) -> TuningGroups:
    """The tuning groups of the experiment's `groups` (one per task, algorithm, config axis
    value and forward variant, shared by its lag models), each followed by its extensions."""
    tuned_by = {g.name: _tuning_name(g, testbed) for g in groups}
    first = {name: next(g for g in groups if tuned_by[g.name] == name)
             for name in dict.fromkeys(tuned_by.values())}
    sides = tune_spec.SIDES if tune.extend else ()
    check_num_runs(sum(len(g.runs) for g in groups) + sum(
        (len(tune.values) + len(sides) * tune.extend) * len(grid_points(g)) * len(tune.seeds)
        for g in first.values()))
    made, extensions = [], {}
    for name, group in first.items():
        made.append(_tuning_group(name, group, tune, tune.values, testbed))
        extensions[name] = {side: extension_name(name, side) for side in sides}
        made += [_tuning_group(extension_name(name, side), group, tune, tune.beyond(side),
                               testbed) for side in sides]
    return TuningGroups(groups=tuple(made), tuned_by=tuned_by,
                  extensions={k: v for k, v in extensions.items() if v})
