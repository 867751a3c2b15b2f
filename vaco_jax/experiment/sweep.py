"""Sweeps: a declarative experiment expanded into compiled groups of vmapped runs.

An experiment (a TOML file, see `experiments/README.md`) names a testbed (`control`, the
default, or `tokens`), tasks, algorithms, one or several lag models each with its lag levels,
forward-lag settings (epochs, minibatches), hyper-parameter grids and seeds. It expands into
*groups*, one per (task, algorithm, lag model, epochs, minibatches): everything
structural is fixed within a group, so a group is one compiled program, and each combination
of lag level x hyper-parameter grid point x seed is one *run* of it (vmapped by the `Driver`).

A group's runs execute in *batches* of equal size, so every batch reuses the group's single
compilation (and the next group compiles in a background thread while the current one trains).
The size is the most runs whose estimated memory fits the device-memory budget
(and `max_runs_per_batch`), a multiple of the device count (the `Driver` shards runs over
devices); the last batch is padded with duplicates of its own runs, whose results are dropped.

Sweep folder:
- `experiment.toml`: the experiment's text, verbatim; `sweep.json`: the batches and estimates;
- `runs/<group>-<batch>/`: each batch's `Driver` folder (metrics, status, checkpoints), so an
  interrupted sweep resumes: finished batches are skipped, a partial one continues from its
  checkpoint;
- the report of `report.write_report` (`runs.parquet`, `summary.json`, `report.md`, `fig_*`),
  built from the runs table: one row per run per evaluation point, with the training metrics
  averaged over the updates since the previous evaluation point, scored by the testbed's
  score metric (`eval_return`, `eval_accuracy`).

A sweep may run one *part* of its experiment (`Part`, `--part K/N`): the groups split into N
parts of about equal environment steps, whatever the machine, so that N machines can each run
one part (batching each part's groups for their own memory) and `vaco_jax.experiment.merge` can
merge the part folders into the report of the whole experiment. A part may also name its
groups (`NamedGroups`, `--groups`), e.g. to run again the groups of a lost part folder. The
part is saved in `sweep.json`, so a resumed part stays that part.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import math
import os
import re
import shutil
import threading
import time
import tomllib
import warnings
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from vaco_jax.run import io, testbeds
from vaco_jax.report import report
from vaco_jax.core.config import Config
from vaco_jax.run.driver import Driver, TrainingResult, read_status
from vaco_jax.core.policy_buffer import LAG_MODELS
from vaco_jax.run.testbeds import Testbed

TOP_LEVEL_KEYS = ("name", "description", "testbed", "tasks", "algos", "seeds", "focus_algo",
                  "lag", "forward", "config", "hparams", "overrides", "reference_returns")
LAG_KEYS = ("model", "levels")
FORWARD_KEYS = ("epochs", "minibatches")
OVERRIDE_KEYS = ("forward", "config", "hparams")
SET_ELSEWHERE = {"testbed": "the top-level testbed key", "algo": "algos",
                 "lag_model": "[lag] model", "epochs": "[forward] epochs",
                 "minibatches": "[forward] minibatches"}
"""Keys a `[config]` table may not set (nor the testbed's task field, which `tasks` sets), and
where the experiment sets them."""
SAFETY_FACTOR = 4.0
"""Estimated run memory = (train state + one update's rollout) x this: it covers the input and
output state of a chunk, the phase batch with its shuffled minibatch copies, activations and
gradients."""
DEVICE_MEMORY_FRACTION = 0.9
HOST_MEMORY_FRACTION = 0.5
EXPERIMENT_FILE = "experiment.toml"
PLAN_FILE = "sweep.json"
RUNS_DIR = "runs"


# ---------------------------------------------------------------- the experiment


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
    run shares, `swept` the names of those the runs' grid points set."""

    name: str
    config: Config
    fixed: Mapping[str, float]
    swept: tuple[str, ...]
    runs: tuple[RunSpec, ...]

    def hparams(self, indices: Sequence[int]) -> Any:
        """The stacked hyper-parameters of `runs[i]` for each `i` in `indices` (leaves `[R]`)."""
        runs = [self.runs[i] for i in indices]
        values = testbeds.of_config(self.config).hparams.create(
            **self.fixed, lag=[r.lag for r in runs],
            **{n: [r.hparams[n] for r in runs] for n in self.swept})
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (len(runs),)), values)

    def run_hparams(self, index: int) -> Any:
        return jax.tree.map(lambda x: x[0], self.hparams([index]))


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    source: str  # the TOML text, kept verbatim in the sweep folder
    testbed: Testbed
    focus_algo: str
    reference_returns: Mapping[str, float]  # per task: its score (return, accuracy) scored 1
    groups: tuple[Group, ...]

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    @property
    def swept_hparams(self) -> tuple[str, ...]:
        """Every hyper-parameter some group sweeps, in order of appearance (the `hp_*` columns)."""
        return tuple(dict.fromkeys(n for g in self.groups for n in g.swept))

    @property
    def num_runs(self) -> int:
        return sum(len(g.runs) for g in self.groups)


@contextlib.contextmanager
def _context(where: str) -> Iterator[None]:
    """Prefixes a `ValueError` raised inside with where in the experiment it arose."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _check_keys(table: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {list(allowed)}")


def _table(spec: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = spec.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table ([{key}]), got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _values(key: str, value: Any, kind: type | None = None,
            allowed: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """A scalar or a non-empty list of distinct values as a tuple: numbers, or of type `kind`,
    and (if given) from `allowed`."""
    items = tuple(value) if isinstance(value, list) else (value,)
    check = (lambda v: isinstance(v, kind) and not isinstance(v, bool)) if kind else _is_number
    if not items or not all(check(v) for v in items):
        what = kind.__name__ if kind else "number"
        raise ValueError(f"{key} must be a {what} or a non-empty list of them, got {value!r}")
    if len(set(items)) != len(items):
        raise ValueError(f"{key} lists a value twice: {value!r}")
    if allowed is not None:
        _check_names(key, items, allowed)
    return items


def _check_names(key: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{key}: unknown value(s) {unknown}; allowed: {', '.join(allowed)}")


def _seeds(value: Any) -> tuple[int, ...]:
    """`seeds = N` means seeds 0..N-1; a list names them."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"seeds must be a positive count or a list of integers, got {value}")
        return tuple(range(value))
    if not isinstance(value, list):
        raise ValueError(f"seeds must be a positive count or a list of integers, got {value!r}")
    return _values("seeds", value, int)


def _hparam_values(table: Mapping[str, Any],
                   testbed: Testbed) -> dict[str, float | tuple[float, ...]]:
    """`name = value` (shared by every run) or `name = [values]` (a grid axis)."""
    if "lag" in table:
        raise ValueError("lag is set by [lag] levels, not as a hyper-parameter")
    testbed.hparams.create(**{n: 0.0 for n in table})  # names only: rejects unknown ones
    return {n: tuple(float(x) for x in _values(n, v)) if isinstance(v, list) else
            float(_values(n, v)[0]) for n, v in table.items()}


def _config_values(table: Mapping[str, Any], testbed: Testbed) -> dict[str, Any]:
    elsewhere = {testbed.task_field: "tasks", **SET_ELSEWHERE}
    misplaced = {k: elsewhere[k] for k in table if k in elsewhere}
    if misplaced:
        raise ValueError("; ".join(f"{k} is set by {where}" for k, where in misplaced.items()))
    testbed.config.from_dict(table)  # rejects unknown fields, naming the allowed ones
    return dict(table)


@dataclasses.dataclass(frozen=True)
class _LagSpec:
    """One `[lag]` entry: a lag model and its levels (each level one lag value of the runs)."""

    model: str
    levels: tuple[float, ...]


def _lag_spec(table: Any) -> _LagSpec:
    if not isinstance(table, dict):
        raise ValueError(f"must be a table with keys {list(LAG_KEYS)}, got {table!r}")
    _check_keys(table, LAG_KEYS)
    if set(table) != set(LAG_KEYS):
        raise ValueError(f"needs both {list(LAG_KEYS)}")
    model = table["model"]
    if not isinstance(model, str):
        raise ValueError(f"model must be one lag model name, got {model!r}")
    _check_names("model", [model], LAG_MODELS)
    return _LagSpec(model=model, levels=_values("levels", table["levels"]))


def _lag_specs(value: Any) -> tuple[_LagSpec, ...]:
    """`[lag]`, one table, or `[[lag]]`, an array of tables of distinct models."""
    if isinstance(value, dict):
        with _context("[lag]"):
            return (_lag_spec(value),)
    if not isinstance(value, list) or not value:
        raise ValueError(f"[lag] must be a table ([lag]) or a non-empty array of tables "
                         f"([[lag]]), got {value!r}")
    specs = []
    for index, table in enumerate(value):
        with _context(f"[lag][{index}]"):
            specs.append(_lag_spec(table))
    models = [s.model for s in specs]
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        where = "; ".join(f"{m!r} in entries {[i for i, n in enumerate(models) if n == m]}"
                          for m in repeated)
        raise ValueError(f"[lag]: each lag model may appear once (list all its levels in one "
                         f"entry), got {where}")
    return tuple(specs)


def _forward_values(table: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    _check_keys(table, FORWARD_KEYS)
    return {k: _values(k, v, int) for k, v in table.items()}


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The view of one (task, algorithm) of an experiment: the shared values with the task's
    overrides applied, then the algorithm's."""

    testbed: Testbed
    config: Mapping[str, Any]
    hparams: Mapping[str, float | tuple[float, ...]]
    forward: Mapping[str, tuple[int, ...]]

    def forward_variants(self) -> list[tuple[int, int]]:
        """Every (epochs, minibatches) pair; an unset axis takes the testbed config's default."""
        defaults = self.testbed.config()
        return list(itertools.product(self.forward.get("epochs", (defaults.epochs,)),
                                      self.forward.get("minibatches", (defaults.minibatches,))))

    def overridden(self, override: Mapping[str, Any]) -> "_Settings":
        _check_keys(override, OVERRIDE_KEYS)
        config = _config_values(_table(override, "config"), self.testbed)
        hparams = _hparam_values(_table(override, "hparams"), self.testbed)
        return _Settings(testbed=self.testbed, config={**self.config, **config},
                         hparams={**self.hparams, **hparams},
                         forward={**self.forward, **_forward_values(_table(override, "forward"))})


def _group(task: str, algo: str, epochs: int, minibatches: int, lag: _LagSpec,
           lag_specs: tuple[_LagSpec, ...], seeds: tuple[int, ...], settings: _Settings) -> Group:
    """One group with its runs in the order lag level, grid point, seed (seed varies fastest).

    With several lag models (`lag_specs`) the group's name includes its model, and the shared
    `lag_probabilities` belong to the `empirical` model's groups only."""
    model_part = f"-{lag.model}" if len(lag_specs) > 1 else ""
    name = f"{task}-{algo}{model_part}-e{epochs}m{minibatches}"
    testbed = settings.testbed
    shared = dict(settings.config)
    if lag.model != "empirical" and any(s.model == "empirical" for s in lag_specs):
        shared.pop("lag_probabilities", None)
    config = testbed.config.from_dict({**shared, testbed.task_field: task, "algo": algo,
                                       "lag_model": lag.model, "epochs": epochs,
                                       "minibatches": minibatches})
    swept = tuple(n for n, v in settings.hparams.items() if isinstance(v, tuple))
    fixed = {n: v for n, v in settings.hparams.items() if n not in swept}
    grid = itertools.product(*(settings.hparams[n] for n in swept))
    points = itertools.product(lag.levels, grid, seeds)
    runs = tuple(RunSpec(run_id=f"{name}-r{i}", seed=seed, lag=float(level),
                         hparams=dict(zip(swept, point)))
                 for i, (level, point, seed) in enumerate(points))
    group = Group(name=name, config=config, fixed=fixed, swept=swept, runs=runs)
    with _context(f"group {name}"):
        testbed.validate(config, group.hparams(range(len(runs))))
    return group


def parse_experiment(text: str, name: str = "experiment") -> Experiment:
    """Parses and fully validates an experiment (no compilation); `name` is the default name.

    Raises `ValueError` naming the offending key and its allowed values.
    """
    with _context(f"experiment {name!r}"):
        try:
            spec = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"not valid TOML: {error}") from None
        _check_keys(spec, TOP_LEVEL_KEYS)
        missing = [k for k in ("tasks", "algos", "seeds", "lag") if k not in spec]
        if missing:
            raise ValueError(f"missing required key(s) {missing}")
    name = spec.get("name", name)
    with _context(f"experiment {name!r}"):
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        testbed = testbeds.named(_values("testbed", spec.get("testbed", "control"), str)[0])
        tasks = _values("tasks", spec["tasks"], str, testbed.tasks)
        algos = _values("algos", spec["algos"], str, testbed.algorithms)
        seeds = _seeds(spec["seeds"])
        focus_algo = spec.get("focus_algo", "vaco" if "vaco" in algos else algos[0])
        _values("focus_algo", focus_algo, str, algos)
        lag_specs = _lag_specs(spec["lag"])
        references = _table(spec, "reference_returns")
        with _context("[reference_returns]"):
            _check_names("task", list(references), tasks)
            reference_returns = {t: float(_values(t, v)[0]) for t, v in references.items()}
        with _context("[config]"):
            config = _config_values(_table(spec, "config"), testbed)
        with _context("[hparams]"):
            hparams = _hparam_values(_table(spec, "hparams"), testbed)
        with _context("[forward]"):
            forward = _forward_values(_table(spec, "forward"))
        shared = _Settings(testbed=testbed, config=config, hparams=hparams, forward=forward)
        overrides = _table(spec, "overrides")
        with _context("[overrides]"):
            _check_names("task or algorithm", list(overrides), tasks + algos)
        settings = {}
        for task in tasks:
            with _context(f"[overrides.{task}]"):
                per_task = shared.overridden(_table(overrides, task))
            for algo in algos:
                with _context(f"[overrides.{algo}]"):
                    settings[task, algo] = per_task.overridden(_table(overrides, algo))
        groups = tuple(_group(task, algo, epochs, minibatches, lag, lag_specs, seeds,
                              settings[task, algo])
                       for task in tasks for algo in algos for lag in lag_specs
                       for epochs, minibatches in settings[task, algo].forward_variants())
    return Experiment(name=name, description=str(spec.get("description", "")), source=text,
                      testbed=testbed, focus_algo=focus_algo,
                      reference_returns=reference_returns, groups=groups)


def load_experiment(path: str | os.PathLike) -> Experiment:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"experiment file {str(path)!r} does not exist")
    return parse_experiment(path.read_text(encoding="utf-8"), name=path.stem)


def same_experiment(a: Experiment, b: Experiment) -> bool:
    """Whether two experiment files say the same thing (parsed TOML; comments and layout aside)."""
    return tomllib.loads(a.source) == tomllib.loads(b.source)


# ---------------------------------------------------------------- parts


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


@dataclasses.dataclass(frozen=True)
class Part:
    """Part `index` of `count` (1-based) of an experiment's groups, split by `balanced_parts`
    over each group's environment steps: a split that depends on the experiment only."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Part":
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None or not 1 <= int(match[1]) <= int(match[2]):
            raise ValueError(f"--part must be K/N with integers 1 <= K <= N (e.g. 2/3), "
                             f"got {text!r}")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def groups(self, experiment: Experiment) -> tuple[Group, ...]:
        """This part's groups, in the experiment's order."""
        total = len(experiment.groups)
        if self.count > total:
            raise ValueError(f"--part {self}: experiment {experiment.name!r} has {total} "
                             f"group(s), so N must lie in 1..{total}")
        owners = balanced_parts([group_steps(g) for g in experiment.groups], self.count)
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
        """The named groups, in the experiment's order."""
        known = [g.name for g in experiment.groups]
        unknown = [name for name in self.names if name not in known]
        if unknown:
            raise ValueError(f"--groups: experiment {experiment.name!r} has no group(s) "
                             f"{unknown}; its groups are {known}")
        return tuple(g for g in experiment.groups if g.name in self.names)


def parse_part(text: str) -> Part | NamedGroups:
    """A part as `sweep.json` saves it: `K/N` or comma-separated group names."""
    return Part.parse(text) if "/" in text else NamedGroups.parse(text)


# ---------------------------------------------------------------- memory and batches


def _nbytes(tree: Any) -> int:
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def run_memory_bytes(config: Config, hparams: Any) -> int:
    """Estimated device memory of one run (`hparams` unbatched): the train state and one
    update's collected data, from their abstract shapes (traced, not compiled), times
    `SAFETY_FACTOR`."""
    testbed = testbeds.of_config(config)
    trainer = testbed.trainer(config)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    state = jax.eval_shape(trainer.init, key, hparams)
    data = jax.eval_shape(functools.partial(testbed.collect, trainer), state, key, hparams)
    return int(SAFETY_FACTOR * (_nbytes(state) + _nbytes(data)))


def _available_host_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_memory_budget(device: jax.Device) -> int:
    """Bytes one device may give to runs: `DEVICE_MEMORY_FRACTION` of an accelerator's free
    memory pool; on CPU, `HOST_MEMORY_FRACTION` of the available host memory, shared by the
    local CPU devices."""
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(DEVICE_MEMORY_FRACTION * (stats["bytes_limit"] - stats.get("bytes_in_use", 0)))
    return int(HOST_MEMORY_FRACTION * _available_host_bytes() / jax.local_device_count())


def batch_capacity(run_bytes: int, budget_bytes: int, num_devices: int,
                   max_runs_per_batch: int | None = None) -> int:
    """Most runs per batch: those fitting each device's budget, capped by `max_runs_per_batch`
    (rounded down to a multiple of `num_devices`); at least one run per device."""
    per_device = budget_bytes // max(run_bytes, 1)
    if per_device < 1:
        warnings.warn(f"one run needs about {run_bytes / 2**30:.2f} GiB, more than the budget of "
                      f"{budget_bytes / 2**30:.2f} GiB per device; running one run per device",
                      stacklevel=2)
    capacity = max(1, per_device) * num_devices
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
    part: Part | NamedGroups | None = None

    @property
    def groups(self) -> tuple[Group, ...]:
        """The groups this plan runs: the experiment's, or its part's."""
        return self.experiment.groups if self.part is None else self.part.groups(self.experiment)

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
    def from_json(cls, experiment: Experiment, saved: Mapping[str, Any]) -> "Plan":
        groups = saved["groups"]
        part = parse_part(saved["part"]) if saved.get("part") else None
        expected = experiment.groups if part is None else part.groups(experiment)
        if [g["name"] for g in groups] != [g.name for g in expected]:
            raise ValueError(f"{PLAN_FILE} does not describe the groups of experiment "
                             f"{experiment.name!r}" + (f", {part.label}" if part else ""))
        return cls(experiment=experiment, num_devices=saved["num_devices"],
                   budget_bytes=saved["budget_bytes_per_device"],
                   run_bytes={g["name"]: g["run_bytes"] for g in groups},
                   batches=tuple(Batch(name=b["name"], group=b["group"], runs=tuple(b["runs"]),
                                       size=b["size"])
                                 for g in groups for b in g["batches"]),
                   part=part)


def make_plan(experiment: Experiment, *, part: Part | NamedGroups | None = None,
              max_runs_per_batch: int | None = None, memory_budget: int | None = None,
              devices: Sequence[jax.Device] | None = None) -> Plan:
    """Estimates the run memory of each group (of `part`, if given) and splits its runs into
    equal batches that fit `memory_budget` bytes per device (default: `device_memory_budget`)
    on `devices` (default: `jax.devices()`). The estimate traces shapes; nothing compiles."""
    groups = experiment.groups if part is None else part.groups(experiment)
    devices = list(jax.devices() if devices is None else devices)
    budget = memory_budget if memory_budget is not None else device_memory_budget(devices[0])
    batches, run_bytes, estimates = [], {}, {}
    for group in groups:
        # Epochs and minibatches shape neither the train state nor the rollout.
        shape = group.config.replace(epochs=1, minibatches=1)
        if shape not in estimates:
            estimates[shape] = run_memory_bytes(shape, group.run_hparams(0))
        run_bytes[group.name] = estimates[shape]
        capacity = batch_capacity(run_bytes[group.name], budget, len(devices), max_runs_per_batch)
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
    lines = [f"{experiment.name}, {scope}, {len(plan.batches)} batches in {len(programs)} "
             f"compiled program(s); {plan.num_devices} device(s), memory budget "
             f"{plan.budget_bytes / 2**30:,.1f} GiB per device",
             f"{'group':<40} {'runs':>5} {'GiB/run':>8} {'batches':>10} {'env steps':>17}"]
    steps = executed = 0
    for group in groups:
        batches = [b for b in plan.batches if b.group == group.name]
        steps += group_steps(group)
        executed += sum(b.size for b in batches) * group_steps(group) // len(group.runs)
        lines.append(f"{group.name:<40} {len(group.runs):>5} "
                     f"{plan.run_bytes[group.name] / 2**30:>8.3f} "
                     f"{f'{len(batches)} x {batches[0].size}':>10} {_count(group_steps(group)):>17}")
    runs = sum(len(g.runs) for g in groups)
    lines.append(f"total: {_count(runs)} runs, {_count(steps)} environment steps "
                 f"({_count(executed)} executed, with batch padding)")
    if steps_per_second is None:
        lines.append("estimated time: executed steps / R, where R is the steps/s of a batch's "
                     "runs together (give --steps-per-second R)")
    else:
        lines.append(f"estimated time: {_count(executed)} executed steps / "
                     f"{_count(steps_per_second)} steps/s = "
                     f"{_duration(executed / steps_per_second)}, plus compilation (one per "
                     f"program, each but the first overlapping the previous group's training)")
    return "\n".join(lines)


# ---------------------------------------------------------------- running


def _in_background(function: Callable[..., Any], *args: Any) -> futures.Future:
    """Calls `function(*args)` in a daemon thread, which an interrupted sweep does not wait for."""
    future: futures.Future = futures.Future()

    def work() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)
    threading.Thread(target=work, daemon=True).start()
    return future


def _compiled_driver(config: Config, hparams: Any, seeds: Sequence[int]) -> Driver:
    driver = Driver(config, hparams, seeds)
    driver.compile()
    return driver


class _Programs:
    """Drivers by (config, number of runs), the last few kept: a batch of a config and size
    seen before reuses that driver's compiled programs. `prefetch` builds and compiles a later
    batch's driver in a background thread, so that compilation overlaps the current batch."""

    def __init__(self, capacity: int = 4):
        self._capacity = capacity
        self._drivers: collections.OrderedDict[tuple[Config, int], futures.Future] = (
            collections.OrderedDict())

    def prefetch(self, config: Config, hparams: Any, seeds: Sequence[int]) -> None:
        self._entry(config, hparams, seeds, background=True)

    def driver(self, config: Config, hparams: Any, seeds: Sequence[int]) -> Driver:
        """The driver of these runs; it compiles on its first run unless prefetched."""
        return self._entry(config, hparams, seeds, background=False).result().with_runs(
            hparams, seeds)

    def _entry(self, config: Config, hparams: Any, seeds: Sequence[int],
               background: bool) -> futures.Future:
        key = (config, len(seeds))
        if key not in self._drivers:
            if background:
                self._drivers[key] = _in_background(_compiled_driver, config, hparams, seeds)
            else:
                self._drivers[key] = futures.Future()
                self._drivers[key].set_result(Driver(config, hparams, seeds))
            if len(self._drivers) > self._capacity:
                self._drivers.popitem(last=False)
        self._drivers.move_to_end(key)
        return self._drivers[key]


_PROGRAMS = _Programs()


def batch_dir(out_dir: str | os.PathLike, batch: Batch) -> Path:
    return Path(out_dir) / RUNS_DIR / batch.name


def batch_finished(folder: Path) -> bool:
    """Finished: complete, or stopped early because every run diverged."""
    return _finished(read_status(folder))


def _finished(status: Mapping[str, Any] | None) -> bool:
    return status is not None and (status["complete"] or all(r["diverged"] for r in status["runs"]))


def _batch_steps(plan: Plan, batch: Batch, updates: int) -> int:
    """Environment steps of the batch's real runs after `updates` updates."""
    return updates * plan.experiment.group(batch.group).config.steps_per_update * len(batch.runs)


def start_sweep(experiment: Experiment, out_dir: str | os.PathLike, *, overwrite: bool = False,
                part: Part | NamedGroups | None = None, **plan_options: Any) -> Plan:
    """Creates the sweep folder (refusing a non-empty one unless `overwrite`, which discards
    its batches), plans the batches of the experiment or its `part` (`make_plan` options) and
    saves the plan."""
    if part is not None:
        part.groups(experiment)  # a part that does not exist is refused before any folder is made
    out = io.prepare_output_dir(out_dir, overwrite=overwrite)
    if overwrite:
        shutil.rmtree(out / RUNS_DIR, ignore_errors=True)
    plan = make_plan(experiment, part=part, **plan_options)
    io.write_text(out / EXPERIMENT_FILE, experiment.source)
    io.write_json(out / PLAN_FILE, plan.to_json())
    return plan


def load_sweep(out_dir: str | os.PathLike) -> Plan:
    """The plan saved in a sweep folder (its experiment re-parsed from `experiment.toml`)."""
    out = Path(out_dir)
    for name in (EXPERIMENT_FILE, PLAN_FILE):
        if not (out / name).is_file():
            raise FileNotFoundError(f"{str(out)!r} is not a sweep folder: {name} is missing")
    saved = io.read_json(out / PLAN_FILE, "the sweep cannot be resumed; start it again with "
                         "--overwrite")
    experiment = parse_experiment((out / EXPERIMENT_FILE).read_text(encoding="utf-8"),
                                  name=saved["experiment"])
    return Plan.from_json(experiment, saved)


def load_sweep_to_resume(out_dir: str | os.PathLike, experiment: Experiment | None = None,
                         part: Part | NamedGroups | None = None) -> Plan:
    """The plan saved in `out_dir`, refusing an `experiment` or `part` other than the saved
    ones (None: whatever is saved)."""
    plan = load_sweep(out_dir)
    if experiment is not None and not same_experiment(experiment, plan.experiment):
        raise ValueError(f"cannot resume {str(out_dir)!r}: it holds a different experiment "
                         f"({plan.experiment.name!r}); leave the experiment out to resume it")
    if part is not None and part != plan.part:
        saved = plan.part.label if plan.part else "the whole experiment, no part"
        raise ValueError(f"{part.label} disagrees with the sweep saved in {str(out_dir)!r} "
                         f"({saved}); leave --part and --groups out to resume it")
    return plan


def run_sweep(plan: Plan, out_dir: str | os.PathLike, *, progress: bool = True,
              on_chunk: Callable[[Batch, TrainingResult], None] | None = None) -> None:
    """Runs every unfinished batch of `plan` in `out_dir`, continuing a partial batch from its
    checkpoint. `on_chunk(batch, result)` runs after each chunk (written and checkpointed)."""
    steps = {b.name: _batch_steps(plan, b, plan.experiment.group(b.group).config.num_updates)
             for b in plan.batches}
    # A missing or unreadable status counts as unfinished: the batch resumes from its checkpoint.
    statuses = {b.name: read_status(batch_dir(out_dir, b)) for b in plan.batches}
    done = {b.name: steps[b.name] if _finished(statuses[b.name]) else
            _batch_steps(plan, b, (statuses[b.name] or {}).get("updates_done", 0))
            for b in plan.batches}
    pending = [b for b in plan.batches if not _finished(statuses[b.name])]
    with tqdm(total=sum(steps.values()), initial=sum(done.values()), unit="step",
              unit_scale=True, dynamic_ncols=True, disable=not progress,
              desc=f"sweep {plan.experiment.name}") as bar:
        for index, batch in enumerate(pending):
            upcoming = next((b for b in pending[index + 1:] if b.group != batch.group), None)
            if upcoming is not None:
                _PROGRAMS.prefetch(*_driver_arguments(plan, upcoming))
            driver = _PROGRAMS.driver(*_driver_arguments(plan, batch))

            def chunk_done(result: TrainingResult, batch: Batch = batch) -> None:
                now = _batch_steps(plan, batch, result.updates_done)
                bar.update(now - done[batch.name])
                done[batch.name] = now
                if on_chunk is not None:
                    on_chunk(batch, result)

            folder = batch_dir(out_dir, batch)
            resume = (folder / "config.json").is_file()
            start = time.perf_counter()
            result = driver.run(folder, resume=resume, overwrite=not resume, progress=progress,
                                on_chunk=chunk_done)
            bar.write(f"[{plan.batches.index(batch) + 1}/{len(plan.batches)}] "
                      f"{_batch_line(plan, batch, result, time.perf_counter() - start)}")


def _driver_arguments(plan: Plan, batch: Batch) -> tuple[Config, Any, list[int]]:
    group = plan.experiment.group(batch.group)
    return (group.config, group.hparams(batch.padded),
            [group.runs[i].seed for i in batch.padded])


def _batch_line(plan: Plan, batch: Batch, result: TrainingResult, seconds: float) -> str:
    testbed = plan.experiment.testbed
    evals = result.metrics[testbed.score][:len(batch.runs)]
    padding = batch.size - len(batch.runs)
    return (f"{batch.name}: {len(batch.runs)} runs{f' (+{padding} padding)' if padding else ''} "
            f"in {seconds:.0f} s; mean {testbed.score_name} {np.nanmean(evals[:, 0]):.2f} -> "
            f"{np.nanmean(evals[:, result.updates_done]):.2f}")


# ---------------------------------------------------------------- the runs table


def _coordinates(experiment: Experiment, group: Group, batch: Batch,
                 status: Mapping[str, Any]) -> pd.DataFrame:
    """One row per real run of the batch (`run` = its index in the batch's driver)."""
    cfg = group.config
    task = experiment.testbed.task(cfg)
    rows = []
    for index, run_index in enumerate(batch.runs):
        run = group.runs[run_index]
        rows.append({"run": index, "task": task, "algo": cfg.algo, "lag_model": cfg.lag_model,
                     "lag": run.lag, "epochs": cfg.epochs, "minibatches": cfg.minibatches,
                     "seed": run.seed, "run_id": run.run_id,
                     **{f"{report.HP_PREFIX}{n}": run.hparams.get(n, np.nan)
                        for n in experiment.swept_hparams},
                     "diverged": bool(status["runs"][index]["diverged"]),
                     "diverged_at": int(status["runs"][index]["diverged_at"])})
    return pd.DataFrame(rows)


def batch_table(experiment: Experiment, batch: Batch, folder: Path) -> pd.DataFrame | None:
    """The batch's rows of the runs table, or None before its first chunk finished.

    Evaluation points are update 0 (the initial policy) and every `updates_per_period`-th
    update; a diverged run keeps its later points, with NaN evaluations.
    """
    status = read_status(folder)
    if status is None:
        return None
    group = experiment.group(batch.group)
    cfg = group.config
    score, training_metrics = experiment.testbed.score, list(experiment.testbed.training_metrics)
    per_period = cfg.updates_per_period
    metrics = pd.read_parquet(folder / "metrics.parquet")
    metrics = metrics[metrics["run"] < len(batch.runs)].assign(
        period=lambda m: -(-m["update"] // per_period))
    training = (metrics[metrics["update"] > 0].groupby(["run", "period"])[training_metrics]
                .mean().reset_index())
    coordinates = _coordinates(experiment, group, batch, status)
    points = pd.DataFrame(
        [(index, update) for index, diverged in enumerate(coordinates["diverged"])
         for update in range(0, (cfg.num_updates if diverged else status["updates_done"]) + 1,
                             per_period)], columns=["run", "update"])
    table = (points.assign(period=points["update"] // per_period)
             .merge(metrics[["run", "update", score]], how="left", on=["run", "update"])
             .merge(training, how="left", on=["run", "period"])
             .merge(coordinates, how="left", on="run"))
    table["env_steps"] = table["update"] * cfg.steps_per_update
    columns = [*report.RUN_COORDINATES, "run_id",
               *(f"{report.HP_PREFIX}{n}" for n in experiment.swept_hparams),
               "update", "env_steps", score, *training_metrics, *report.PER_RUN_COLUMNS]
    return table[columns]


def finished_batches_table(experiment: Experiment,
                           batches: Sequence[tuple[Batch, Path]]) -> pd.DataFrame | None:
    """The runs table of those `(batch, results folder)` pairs whose batch finished, or None.

    An unfinished batch's runs are left out: scored where they stopped, they would enter the
    report as runs of the whole length with the final scores of shorter ones.
    """
    tables = [batch_table(experiment, batch, folder) for batch, folder in batches
              if batch_finished(folder)]
    return pd.concat(tables, ignore_index=True) if tables else None


def unfinished_groups(plan: Plan, out_dir: str | os.PathLike) -> list[str]:
    """The groups of `plan` with a batch not finished in `out_dir`, in plan order."""
    return list(dict.fromkeys(b.group for b in plan.batches
                              if not batch_finished(batch_dir(out_dir, b))))


def runs_table(plan: Plan, out_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs table of every finished batch (`report.required_columns` of the testbed's
    score, `hp_*` for the swept hyper-parameters, and the training metrics)."""
    table = finished_batches_table(plan.experiment,
                                   [(b, batch_dir(out_dir, b)) for b in plan.batches])
    if table is None:
        raise FileNotFoundError(f"no batch of the sweep in {str(out_dir)!r} has finished yet")
    return table


def write_sweep_report(plan: Plan, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Builds the runs table from the finished batches and writes the report into `out_dir` (a
    part's report covers its groups only, and an unfinished sweep's its finished batches; the
    title says so)."""
    notes = [plan.part.label] if plan.part else []
    unfinished = unfinished_groups(plan, out_dir)
    if unfinished:
        notes.append(f"unfinished: {len(unfinished)} of {len(plan.groups)} groups not finished, "
                     f"their unfinished batches left out")
    return write_experiment_report(plan.experiment, runs_table(plan, out_dir), out_dir,
                                   note="; ".join(notes) or None)


def write_experiment_report(experiment: Experiment, runs: pd.DataFrame,
                            out_dir: str | os.PathLike, note: str | None = None) -> dict[str, Any]:
    """Writes the report of `runs`, a runs table of `experiment`, into `out_dir`; `note` is
    added to the title in brackets. A task without runs yet (an unfinished or partial sweep)
    loses its reference return rather than failing the report."""
    testbed = experiment.testbed
    present = set(runs["task"])
    references = {t: r for t, r in experiment.reference_returns.items() if t in present}
    title = f"{experiment.name}: {experiment.description}" if experiment.description \
        else experiment.name
    if note:
        title = f"{title} ({note})"
    return report.write_report(runs, out_dir,
                               score=report.Score(testbed.score, testbed.score_name,
                                                  testbed.steps_name),
                               reference_returns=references or None,
                               focus_algo=experiment.focus_algo, title=title)


def sweep(out_dir: str | os.PathLike, experiment: Experiment | None = None, *,
          resume: bool = False, overwrite: bool = False, part: Part | NamedGroups | None = None,
          max_runs_per_batch: int | None = None, memory_budget: int | None = None,
          progress: bool = True,
          on_chunk: Callable[[Batch, TrainingResult], None] | None = None) -> dict[str, Any]:
    """Runs `experiment`, or only its `part`, into `out_dir` (or with `resume`, continues the
    sweep saved there; an `experiment` or `part` given then must be the saved one) and writes
    its report; returns its summary.
    """
    if resume:
        if max_runs_per_batch is not None or memory_budget is not None:
            raise ValueError("a resumed sweep keeps its batches; max_runs_per_batch and "
                             "memory_budget apply only to a new sweep")
        plan = load_sweep_to_resume(out_dir, experiment, part)
    elif experiment is None:
        raise ValueError("a new sweep needs an experiment")
    else:
        plan = start_sweep(experiment, out_dir, overwrite=overwrite, part=part,
                           max_runs_per_batch=max_runs_per_batch, memory_budget=memory_budget)
    run_sweep(plan, out_dir, progress=progress, on_chunk=on_chunk)
    return write_sweep_report(plan, out_dir)
