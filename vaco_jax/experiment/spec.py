"""Experiment files: parsing and validating the TOML of an experiment into its groups and runs.

An experiment (see `experiments/README.md`) names a testbed, tasks, algorithms, lag models with
their levels, forward-lag settings, hyper-parameter grids and seeds. It expands into *groups*,
one per (task, algorithm, lag model, config axis value, epochs, minibatches), each one compiled
program, and each combination of lag level x grid point x seed is one *run* of a group.
Everything is validated here, before anything compiles, and an error names the offending key
and its allowed values.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from pathlib import Path
from typing import Any, Mapping

from vaco_jax import testbeds
from vaco_jax.core.config import ConfigAxis
from vaco_jax.core.lag_models import LAG_MODELS, LagModel
from vaco_jax.core.lag_presets import LAG_PRESETS, LagPreset
from vaco_jax.experiment import compat, fields, tune_spec
from vaco_jax.experiment.groups import (Group, RunSpec, _axes_part, balanced_parts, check_num_runs,
                                       TuningGroups, group_steps, tuning_groups, validated)
from vaco_jax.experiment.cell_rule_spec import parse_cell_rule
from vaco_jax.infra import records
from vaco_jax.report.rule_records import CellRule
from vaco_jax.testbeds import Testbed

REFERENCE_KEY = "reference_scores"
TOP_LEVEL_KEYS = ("name", "description", "testbed", "tasks", "algos", "seeds", "focus_algo",
                  "lag", "forward", "config", "hparams", "overrides", "tune", "cell_rule",
                  "protocol", REFERENCE_KEY)
LAG_KEYS = ("model", "preset", "levels")
FORWARD_KEYS = ("epochs", "minibatches")
OVERRIDE_KEYS = ("forward", "config", "hparams")
SET_ELSEWHERE = {"testbed": "the top-level testbed key", "algo": "algos",
                 "lag_model": "[lag] model", "lag_preset": "[lag] preset",
                 "epochs": "[forward] epochs",
                 "minibatches": "[forward] minibatches"}
"""Keys a `[config]` table may not set (nor the testbed's task field, which `tasks` sets), and
where the experiment sets them."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    source: str  # the TOML text, kept verbatim in the sweep folder
    testbed: Testbed
    focus_algo: str
    reference_scores: Mapping[str, float]  # per task: its score (return, accuracy) scored 1
    groups: tuple[Group, ...]
    tune: tune_spec.Tune | None = None
    tuned_by: Mapping[str, str] = dataclasses.field(default_factory=dict)  # group -> its tuning
    cell_rule: CellRule | None = None
    # tuning group -> side -> the group that extends its grid there (`[tune] extend`)
    extensions: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    protocol: int | None = None  # the study protocol it keeps (`tune_spec.PROTOCOL`)
    _partitions: dict[int, tuple[int, ...]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False)

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    @property
    def extended(self) -> Mapping[str, str]:
        """Each extension group's tuning group."""
        return {name: tuning for tuning, sides in self.extensions.items()
                for name in sides.values()}

    @property
    def tuning_groups(self) -> tuple[Group, ...]:
        """The tuning groups and their extensions: every synchronous run a choice may read."""
        names = {*self.tuned_by.values(), *self.extended}
        return tuple(g for g in self.groups if g.name in names)

    @property
    def units(self) -> list[list[int]]:
        """Groups (indices) run in one part: a tuning group with its extensions and the groups
        it tunes, others alone."""
        units: dict[str, list[int]] = {}
        owner = {**self.tuned_by, **self.extended}
        for index, group in enumerate(self.groups):
            units.setdefault(owner.get(group.name, group.name), []).append(index)
        return list(units.values())

    def partition(self, count: int) -> tuple[int, ...]:
        """The part (0-based) of each group in the split of its `units` into `count` parts of
        about equal environment steps (`balanced_parts`). Computed once per count: the part's
        check, its plan, its saved plan and its report all ask for it."""
        if count not in self._partitions:
            units = self.units
            owners = balanced_parts(
                [sum(group_steps(self.groups[i]) for i in unit) for unit in units], count)
            by_group = {i: owner for unit, owner in zip(units, owners) for i in unit}
            self._partitions[count] = tuple(by_group[i] for i in range(len(self.groups)))
        return self._partitions[count]

    @property
    def swept_hparams(self) -> tuple[str, ...]:
        """Every hyper-parameter some group sweeps, in order of appearance (the `hp_*` columns),
        but the tuned one (its own column, `Tune.column`)."""
        tuned = self.tune.hparam if self.tune else None
        return tuple(dict.fromkeys(n for g in self.groups for n in g.swept if n != tuned))

    @property
    def swept_config(self) -> tuple[str, ...]:
        """Every config axis some group sweeps, in order of appearance (the `cfg_*` columns)."""
        return tuple(dict.fromkeys(n for g in self.groups for n in g.axes))

    @property
    def num_runs(self) -> int:
        return sum(len(g.runs) for g in self.groups)


def _hparam_values(table: Mapping[str, Any],
                   testbed: Testbed) -> dict[str, float | tuple[float, ...]]:
    """`name = value` (shared by every run) or `name = [values]` (a grid axis)."""
    if "lag" in table:
        raise ValueError("lag is set by [lag] levels, not as a hyper-parameter")
    testbed.hparams.create(**{n: 0.0 for n in table})  # names only: rejects unknown ones

    def numbers(name: str, value: Any) -> tuple[float, ...]:
        # A name a field takes (`HParamsBase.named_values`) stands for its number.
        named = [testbed.hparams.value_of(name, v) if isinstance(v, str) else v
                 for v in (value if isinstance(value, list) else [value])]
        return tuple(float(x) for x in fields.values(name, named if isinstance(value, list)
                                                else named[0]))
    return {n: numbers(n, v) if isinstance(v, list) else numbers(n, v)[0]
            for n, v in table.items()}


def _config_values(table: Mapping[str, Any], testbed: Testbed) -> dict[str, Any]:
    """The fields as given, but a config axis's: its value, or its list of values as a tuple
    (each value groups of their own)."""
    elsewhere = {testbed.task_field: "tasks", **SET_ELSEWHERE}
    misplaced = {k: elsewhere[k] for k in table if k in elsewhere}
    if misplaced:
        raise ValueError("; ".join(f"{k} is set by {where}" for k, where in misplaced.items()))
    testbed.config.check_record_names(table)
    axes = {axis.field: axis for axis in testbed.config.axes}
    return {name: _axis_values(axes[name], value) if name in axes else value
            for name, value in table.items()}


def _axis_values(axis: ConfigAxis, value: Any) -> Any:
    """One value of `axis`, or a non-empty list of distinct ones as a tuple."""
    if not isinstance(value, list):
        axis.check(value)
        return value
    if not value:
        raise ValueError(f"{axis.field}: the list is empty; give at least one value")
    for item in value:
        axis.check(item)
    if len({axis.label(v) for v in value}) != len(value):
        raise ValueError(f"{axis.field} lists a value twice: {fields.quoted(value)}")
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class _LagSpec:
    """One `[lag]` entry: a lag model and its levels (each level one lag value of the runs),
    and the preset that named the model, if any."""

    model: type[LagModel]
    levels: tuple[float, ...]
    preset: LagPreset | None = None

    @property
    def label(self) -> str:
        """What names the entry's groups beside others: its preset, else its model."""
        return self.preset.name if self.preset else self.model.name


def _lag_spec(table: Any) -> _LagSpec:
    """`model` and `levels`, or `preset` and optionally `levels` (default: the preset's)."""
    if not isinstance(table, dict):
        raise ValueError(f"must be a table with keys {list(LAG_KEYS)}, got "
                         f"{fields.quoted(table)}")
    fields.check_keys(table, LAG_KEYS)
    if ("model" in table) == ("preset" in table):
        raise ValueError("needs either model (with levels) or preset, not both")
    if "preset" in table:
        return _preset_spec(table)
    if "levels" not in table:
        raise ValueError("needs both ['model', 'levels']")
    model = table["model"]
    if not isinstance(model, str):
        raise ValueError(f"model must be one lag model name, got {fields.quoted(model)}")
    if model in LAG_PRESETS:
        raise ValueError(f"model: {model!r} is a lag preset; write preset = {model!r}")
    fields.check_names("model", [model], tuple(LAG_MODELS))
    return _LagSpec(model=LAG_MODELS[model], levels=fields.values("levels", table["levels"]))


def _preset_spec(table: Mapping[str, Any]) -> _LagSpec:
    """A preset's entry: its model, at the given levels or its own."""
    name = table["preset"]
    if not isinstance(name, str):
        raise ValueError(f"preset must be one lag preset name, got {fields.quoted(name)}")
    fields.check_names("preset", [name], tuple(LAG_PRESETS))
    preset = LAG_PRESETS[name]
    levels = (fields.values("levels", table["levels"]) if "levels" in table
              else (preset.choice().level,))
    return _LagSpec(model=type(preset.model), levels=levels, preset=preset)


def _lag_specs(value: Any) -> tuple[_LagSpec, ...]:
    """`[lag]`, one table, or `[[lag]]`, an array of tables of distinct models."""
    if isinstance(value, dict):
        with fields.context("[lag]"):
            return (_lag_spec(value),)
    if not isinstance(value, list) or not value:
        raise ValueError(f"[lag] must be a table ([lag]) or a non-empty array of tables "
                         f"([[lag]]), got {fields.quoted(value)}")
    specs = []
    for index, table in enumerate(value):
        with fields.context(f"[lag][{index}]"):
            specs.append(_lag_spec(table))
    # One entry per model: each model's runs are one group, their levels vmapped runs, and
    # the report tells its variants apart by model (two presets of one model are its levels).
    models = [s.model.name for s in specs]
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        where = "; ".join(f"{m!r} in entries "
                          f"{fields.quoted([i for i, n in enumerate(models) if n == m])}"
                          for m in repeated)
        raise ValueError(f"[lag]: each lag model may appear once (list all its levels in one "
                         f"entry; a preset counts as its model), got {where}")
    return tuple(specs)


def _forward_values(table: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    fields.check_keys(table, FORWARD_KEYS)
    return {k: fields.values(k, v, int) for k, v in table.items()}


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The view of one (task, algorithm) of an experiment: the shared values with the task's
    overrides applied, then the algorithm's."""

    testbed: Testbed
    config: Mapping[str, Any]
    hparams: Mapping[str, float | tuple[float, ...]]
    forward: Mapping[str, tuple[int, ...]]
    pinned: frozenset[str] = frozenset()  # config fields the algorithm's own overrides set

    def forward_variants(self) -> list[tuple[int, int]]:
        """Every (epochs, minibatches) pair; an unset axis takes the testbed config's default."""
        defaults = self.testbed.config()
        return list(itertools.product(self.forward.get("epochs", (defaults.epochs,)),
                                      self.forward.get("minibatches", (defaults.minibatches,))))

    def axis_variants(self) -> list[dict[str, Any]]:
        """Every combination of the config axes given as lists (field -> value), in the
        config's order of axes; one empty combination where none is."""
        fields = [axis.field for axis in self.testbed.config.axes
                  if isinstance(self.config.get(axis.field), tuple)]
        return [dict(zip(fields, values))
                for values in itertools.product(*(self.config[f] for f in fields))]

    def overridden(self, override: Mapping[str, Any], *, pins: bool = False) -> "_Settings":
        """With the values `override` sets; with `pins` (an algorithm's), its config fields
        are pinned against the algorithm's own setting."""
        fields.check_keys(override, OVERRIDE_KEYS)
        config = _config_values(fields.table(override, "config"), self.testbed)
        hparams = _hparam_values(fields.table(override, "hparams"), self.testbed)
        return _Settings(testbed=self.testbed, config={**self.config, **config},
                         hparams={**self.hparams, **hparams},
                         forward={**self.forward, **_forward_values(fields.table(override, "forward"))},
                         pinned=self.pinned | (frozenset(config) if pins else frozenset()))


def _num_runs(settings: _Settings, lag: _LagSpec, num_seeds: int) -> int:
    """The runs of every group of one (task, algorithm, lag model), counted as `_group` builds
    them but without building them: config axis values x forward variants x lag levels x grid
    points x seeds."""
    grid = math.prod(len(v) for v in settings.hparams.values() if isinstance(v, tuple))
    return (len(settings.axis_variants()) * len(settings.forward_variants()) * len(lag.levels)
            * grid * num_seeds)


def _group(task: str, algo: str, epochs: int, minibatches: int, lag: _LagSpec,
           lag_specs: tuple[_LagSpec, ...], axes: Mapping[str, Any], seeds: tuple[int, ...],
           settings: _Settings) -> Group:
    """One group with its runs in the order lag level, grid point, seed (seed varies fastest).

    With several lag models (`lag_specs`) the group's name includes its model (or preset), and
    the shared `lag_probabilities` belong to the groups of the model that takes them only; the
    value of each config axis swept (`axes`) is named after it."""
    model_part = f"-{lag.label}" if len(lag_specs) > 1 else ""
    testbed = settings.testbed
    name = (f"{task}-{algo}{model_part}{_axes_part(testbed.config, axes)}"
            f"-e{epochs}m{minibatches}")
    shared = {**settings.config, **axes}
    if not lag.model.takes_probabilities and any(s.model.takes_probabilities
                                                 for s in lag_specs):
        shared.pop("lag_probabilities", None)
    with fields.context(f"group {name}"):
        shared = {**testbed.task_defaults(task), **shared}
        shared.update(testbed.algorithm_setting(algo, shared, settings.pinned))
        config = testbed.config.from_dict({**shared,
                                           testbed.task_field: task, "algo": algo,
                                           "lag_model": lag.model.name,
                                           "lag_preset": lag.preset.name if lag.preset else None,
                                           "epochs": epochs,
                                           "minibatches": minibatches})
    swept = tuple(n for n, v in settings.hparams.items() if isinstance(v, tuple))
    fixed = {n: v for n, v in settings.hparams.items() if n not in swept}
    grid = itertools.product(*(settings.hparams[n] for n in swept))
    points = itertools.product(lag.levels, grid, seeds)
    runs = tuple(RunSpec(run_id=f"{name}-r{i}", seed=seed, lag=float(level),
                         hparams=dict(zip(swept, point)))
                 for i, (level, point, seed) in enumerate(points))
    return validated(Group(name=name, config=config, fixed=fixed, swept=swept, runs=runs,
                           axes=axes), testbed)


def parse_experiment(text: str, name: str = "experiment") -> Experiment:
    """Parses and fully validates an experiment (no compilation); `name` is the default name.

    Raises `ValueError` naming the offending key and its allowed values.
    """
    with fields.context(f"experiment {fields.quoted(name)}"):
        spec = dict(records.parse_toml(text, "", records.EXPERIMENT).table())
        fields.check_keys(compat.without_older_keys(spec), TOP_LEVEL_KEYS)
        missing = [k for k in ("tasks", "algos", "seeds", "lag") if k not in spec]
        if missing:
            raise ValueError(f"missing required key(s) {missing}")
    name = spec.get("name", name)
    with fields.context(f"experiment {fields.quoted(name)}"):
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {fields.quoted(name)}")
        if len(name) > records.MAX_NAME or not name.isprintable():
            # Plans, progress bars, reports and messages show the name, and sweep.json keeps
            # it: a terminal escape or a newline in it would act on the reader's terminal.
            raise ValueError(f"name must be one line of at most {records.MAX_NAME} printable "
                             f"characters (no newline or terminal escape)")
        testbed = testbeds.named(fields.values("testbed", spec.get("testbed", "control"), str)[0])
        tasks = fields.values("tasks", spec["tasks"], str, testbed.tasks())
        algos = fields.values("algos", spec["algos"], str, testbed.algorithms())
        seeds = fields.seeds(spec["seeds"])
        focus_algo = spec.get("focus_algo", "vaco" if "vaco" in algos else algos[0])
        fields.values("focus_algo", focus_algo, str, algos)
        lag_specs = _lag_specs(spec["lag"])
        reference_key = compat.given_key(spec, REFERENCE_KEY)
        references = fields.table(spec, reference_key)
        with fields.context(f"[{reference_key}]"):
            fields.check_names("task", list(references), tasks)
            reference_scores = {t: float(fields.values(t, v)[0]) for t, v in references.items()}
        with fields.context("[config]"):
            config = _config_values(fields.table(spec, "config"), testbed)
        with fields.context("[hparams]"):
            hparams = _hparam_values(fields.table(spec, "hparams"), testbed)
        with fields.context("[forward]"):
            forward = _forward_values(fields.table(spec, "forward"))
        shared = _Settings(testbed=testbed, config=config, hparams=hparams, forward=forward)
        overrides = fields.table(spec, "overrides")
        with fields.context("[overrides]"):
            fields.check_names("task or algorithm", list(overrides), tasks + algos)
        settings = {}
        for task in tasks:
            with fields.context(f"[overrides.{task}]"):
                per_task = shared.overridden(fields.table(overrides, task))
            for algo in algos:
                with fields.context(f"[overrides.{algo}]"):
                    settings[task, algo] = per_task.overridden(fields.table(overrides, algo),
                                                               pins=True)
        check_num_runs(sum(_num_runs(settings[task, algo], lag, len(seeds))
                            for task in tasks for algo in algos for lag in lag_specs))
        tune = _tune(spec, testbed, settings)
        protocol = (tune_spec.check_protocol(spec["protocol"], tune) if "protocol" in spec
                    else None)
        with fields.context("[cell_rule]"):
            cell_rule = (parse_cell_rule(spec["cell_rule"], algos, tasks,
                                         {lv for lag in lag_specs for lv in lag.levels},
                                         reference_scores)
                         if "cell_rule" in spec else None)
        if tune and tune.rule.in_cell and (cell_rule is None or not cell_rule.normalised):
            raise ValueError(f"[tune] rule: {tune.rule.name} chooses among the values whose "
                             f"synchronous runs meet [cell_rule]'s min_gain, max_final or "
                             f"rising_window, and the experiment sets none of them")
        groups = tuple(_group(task, algo, epochs, minibatches, lag, lag_specs, axes, seeds,
                              settings[task, algo])
                       for task in tasks for algo in algos for lag in lag_specs
                       for axes in settings[task, algo].axis_variants()
                       for epochs, minibatches in settings[task, algo].forward_variants())
        tuning = tuning_groups(groups, tune, testbed) if tune else TuningGroups()
        groups = tuning.groups + groups  # the tuning runs go first
    return Experiment(name=name, description=str(spec.get("description", "")), source=text,
                      testbed=testbed, focus_algo=focus_algo,
                      reference_scores=reference_scores, groups=groups, tune=tune,
                      tuned_by=tuning.tuned_by, cell_rule=cell_rule,
                      extensions=tuning.extensions, protocol=protocol)


def _tune(spec: Mapping[str, Any], testbed: Testbed,
          settings: Mapping[tuple[str, str], _Settings]) -> tune_spec.Tune | None:
    """The `[tune]` table, if any, refused where the hyper-parameters also set its value."""
    with fields.context("[tune]"):
        tune = tune_spec.parse_tune(spec["tune"], testbed) if "tune" in spec else None
    for (task, algo), pair in settings.items() if tune else ():
        tune_spec.check_not_fixed(tune, pair.hparams, f"[hparams], [overrides.{task}] and "
                                                   f"[overrides.{algo}]")
    return tune


def load_experiment(path: str | os.PathLike, name: str | None = None) -> Experiment:
    """The experiment file `path` (a sweep folder's `experiment.toml` or the user's), its text
    bounded as an experiment record; `name` (default: the file's stem) where it names none."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"experiment file {str(path)!r} does not exist")
    text = records.read_text(path, records.EXPERIMENT)
    try:
        return parse_experiment(text, name=path.stem if name is None else name)
    except ValueError as error:  # TOML syntax and content alike
        raise ValueError(f"experiment file {str(path)!r}: {error}") from None


def same_experiment(a: Experiment, b: Experiment) -> bool:
    """Whether two experiment files say the same thing (parsed TOML; comments, layout and the
    older name of a key aside), so a sweep started before a key's rename resumes and merges."""
    return compat.read_as_now(a.source) == compat.read_as_now(b.source)
