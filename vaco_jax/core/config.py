"""The bases every testbed's settings build on, and the checks they share.

A testbed's config is a frozen dataclass deriving from `Config`: its fields are structural
(static under `jit`), so changing one compiles a new program. Its hyper-parameters are a
`flax.struct` dataclass deriving from `HParamsBase`: every field is a pytree leaf, so one
compiled program is `jax.vmap`-ed over seeds and hyper-parameter values alike.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Callable, ClassVar, Iterable, Mapping, Self, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core import knobs, lag_presets
from vaco_jax.core.knobs import Knob
from vaco_jax.core.lag_models import LAG_MODELS, LAG_WARMUPS, RECORD_NAMES, LagModel, named
from vaco_jax.core.lag_presets import LAG_PRESETS, LagPreset

MAX_SEED = 2**32 - 1
"""The largest seed: a PRNG key's seed is an unsigned 32-bit integer."""


@dataclasses.dataclass(frozen=True)
class ConfigAxis:
    """A config field an experiment may sweep beside the lag: `[config] FIELD = [v, ...]` gives
    each value groups of their own (a config field shapes the compiled program), named by the
    value's label."""

    field: str
    labels: tuple[tuple[Any, str], ...]  # each value the field takes, and its groups' label

    def check(self, value: Any) -> None:
        """Refuses a value the axis does not take (`1` is not `true`)."""
        if not any(type(value) is type(v) and value == v for v, _ in self.labels):
            allowed = ", ".join(json.dumps(v) for v, _ in self.labels)
            raise ValueError(f"{self.field} must be one of {allowed}, or a list of them (groups "
                             f"of their own each), got {value!r}")

    def label(self, value: Any) -> str:
        return next(label for v, label in self.labels if type(value) is type(v) and value == v)


def axis_labels(config_type: type[Config], values: Mapping[str, Any]) -> list[str]:
    """The labels of a group's axis values (`values`: field -> value), in the config's order
    of axes."""
    return [axis.label(values[axis.field]) for axis in config_type.axes if axis.field in values]


class Config:
    """Base of every testbed's structural settings (a frozen dataclass): `replace`, and the
    `to_dict`/`from_dict` round trip through the `config.json` of a run.

    Besides its fields, a testbed's config provides `algo`, `lag_model` (a
    `vaco_jax.core.lag_models.LagModel`), `lag_preset` (the `lag_presets.LagPreset` that named
    it, or None), `lag_warmup`, `buffer_capacity`, `epochs`,
    `minibatches`, `phase_shape` (the epochs and minibatches its algorithm takes), `num_updates`,
    `num_periods` (evaluations), `updates_per_period` and `steps_per_update` (its unit of
    training progress). Its record keeps the lag model as its
    name, `lag_model`, and its histogram, `lag_probabilities` (`LagModel.record`), and the
    preset as its name, `lag_preset`.
    """

    # The testbed whose runs this config describes (`vaco_jax.testbeds.named`); a class
    # attribute, not a field, so that neither `config.json` nor an experiment file sets it.
    testbed: ClassVar[str]
    # The fields an experiment may sweep as axes of groups (`ConfigAxis`).
    axes: ClassVar[tuple[ConfigAxis, ...]] = ()

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    @property
    def phase_shape(self) -> tuple[int, int]:
        """`(epochs, minibatches)` of each optimisation phase as the run takes them."""
        return self.epochs, self.minibatches  # type: ignore[attr-defined]

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, value in dataclasses.asdict(self).items():
            field = getattr(self, name)
            recorded = isinstance(field, (LagModel, LagPreset))
            values.update(field.record() if recorded else {name: value})
        return values

    @classmethod
    def record_names(cls) -> list[str]:
        """The names of `to_dict`'s entries, which `from_dict` reads."""
        return sorted({f.name for f in dataclasses.fields(cls)} | set(RECORD_NAMES))

    @classmethod
    def check_record_names(cls, names: Iterable[str]) -> None:
        """Refuses names `from_dict` does not read, naming the allowed ones."""
        unknown = sorted(set(names) - set(cls.record_names()))
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; allowed: "
                             f"{cls.record_names()}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """The config of `to_dict`'s output (JSON lists read back as tuples, nested dataclass
        fields from their dicts, the lag model from its name and histogram, the preset from its
        name); unknown names are refused, naming the allowed ones."""
        cls.check_record_names(values)
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}

        def converted(name: str, value: Any) -> Any:
            default = defaults.get(name)
            if dataclasses.is_dataclass(default) and isinstance(value, Mapping):
                kind = type(default)  # a nested dataclass may read old records its own way
                return kind.from_dict(value) if hasattr(kind, "from_dict") else kind(**value)
            return tuple(value) if isinstance(value, list) else value
        fields = {name: converted(name, value) for name, value in values.items()}
        lag = {name: fields.pop(name) for name in RECORD_NAMES if name in fields}
        if lag:
            fields["lag_model"] = named(lag.get("lag_model", defaults["lag_model"].name),
                                        lag.get("lag_probabilities", ()))
        if "lag_preset" in fields:
            fields["lag_preset"] = lag_presets.named(fields["lag_preset"])
        return cls(**fields)


class HParamsBase:
    """Base of every testbed's numeric hyper-parameters: a run's knobs (`knobs.Knob`), name ->
    leaf, a pytree, so one compiled program is `jax.vmap`-ed over seeds and values alike.

    A run holds exactly the knobs it reads (`Testbed.knobs`, `create(knobs=...)`, `only`): a
    loss that reads another fails while tracing, naming it. Built with no arguments they hold
    every knob the testbed declares at its default (`knob_table`), as read-only tracing wants.
    Each is read as an attribute (`hp.clip_eps`).
    """

    # The knobs every record (`config.json`) lists, read or not, as records did while every run
    # held every knob: their identities and resume checks stay as they were.
    recorded: ClassVar[tuple[str, ...]] = ()

    def __init__(self, values: Mapping[str, Any] | None = None):
        if values is None:
            values = {n: k.default for n, k in self.knob_table().items()}
        object.__setattr__(self, "values", dict(values))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        jax.tree_util.register_pytree_with_keys(
            cls, lambda hp: (tuple((jax.tree_util.DictKey(n), v) for n, v in hp.values.items()),
                             tuple(hp.values)),
            lambda names, leaves: cls(dict(zip(names, leaves))),
            lambda hp: (tuple(hp.values.values()), tuple(hp.values)))

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values")
        if values is None or name.startswith("__"):
            raise AttributeError(name)
        if name in values:
            return values[name]
        raise AttributeError(f"these hyper-parameters hold no knob {name!r} (they hold "
                             f"{', '.join(values)}): a loss reads only the knobs its "
                             f"algorithm's entry declares")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"hyper-parameters are immutable: hp.replace({name}=...)")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.values!r})"

    @classmethod
    def knob_table(cls) -> Mapping[str, Knob]:
        """Every knob the testbed declares, by name: every run's and each registered
        algorithm's, plugins' included."""
        raise NotImplementedError

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls.knob_table())

    @classmethod
    def value_of(cls, name: str, value: Any) -> float:
        """`value` as a number: a number, or one of the names its knob takes (`Knob.named`)."""
        return cls.knob_table()[name].value_of(value)

    @classmethod
    def create(cls, knobs: Iterable[str] | None = None, **values: Any) -> Self:
        """The hyper-parameters of `knobs` (every knob where None) with float32 leaves, defaults
        where `values` names none; a name outside them is refused, naming the allowed ones."""
        table = cls.knob_table()
        wanted = set(table) if knobs is None else set(knobs)
        names = tuple(n for n in table if n in wanted)
        unknown = sorted(set(values) - set(names) | wanted - set(table))
        if unknown:
            raise ValueError(f"unknown hyper-parameter(s) {unknown}; allowed: {list(names)}")
        merged = {**{n: table[n].default for n in names}, **values}
        return cls({n: jnp.asarray(merged[n], jnp.float32) for n in names})

    @classmethod
    def stack(cls, runs: list[Self]) -> Self:
        """Stacks per-run hyper-parameters along a new leading axis for `vmap`."""
        return cls({n: jnp.stack([jnp.asarray(r.values[n], jnp.float32) for r in runs])
                    for n in runs[0].values})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.values)

    def only(self, names: Iterable[str]) -> Self:
        """The hyper-parameters of the knobs `names`: the values held, defaults for the others
        (float32 leaves)."""
        names = set(names)
        return self.create(names, **{n: v for n, v in self.values.items() if n in names})

    def replace(self, **changes: Any) -> Self:
        """These hyper-parameters with `changes` to knobs they hold."""
        unknown = sorted(set(changes) - set(self.values))
        if unknown:
            raise ValueError(f"these hyper-parameters hold no knob(s) {unknown}")
        return type(self)({**self.values, **changes})

    def check(self) -> None:
        """Refuses a value outside its knob's range (`knobs.check_values`)."""
        knobs.check_values(self.knob_table(), self.values)

    def record(self) -> dict[str, np.ndarray]:
        """Name -> values as a run's record lists them: the knobs held, and those of `recorded`
        it does not hold at their defaults (float32, one per run)."""
        table = self.knob_table()
        shape = np.shape(next(iter(self.values.values()))) if self.values else ()
        held = {n: np.asarray(v) for n, v in self.values.items()}
        listed = {n: held.pop(n) if n in held else np.full(shape, table[n].default, np.float32)
                  for n in self.recorded}
        return {**listed, **held}


def check_choice(field: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Raises a `ValueError` naming `field` and the allowed values unless `value` is one."""
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not supported; allowed values: "
                         f"{', '.join(allowed)}")


def check_lag_settings(config: Config) -> None:
    """The lag settings every testbed's config holds: `lag_model`, its own settings against
    `buffer_capacity`, `lag_warmup`, and `lag_preset`, which must name the same model."""
    if not isinstance(config.lag_model, LagModel):
        check_choice("lag_model", config.lag_model, tuple(LAG_MODELS))
        raise ValueError(f"lag_model={config.lag_model!r} must be a lag model object: "
                         f"vaco_jax.core.lag_models.named({config.lag_model!r})")
    check_choice("lag_warmup", config.lag_warmup, LAG_WARMUPS)
    config.lag_model.check(config.buffer_capacity)
    preset = config.lag_preset
    if preset is None:
        return
    if not isinstance(preset, LagPreset):
        check_choice("lag_preset", preset, tuple(LAG_PRESETS))
        raise ValueError(f"lag_preset={preset!r} must be a lag preset object: "
                         f"vaco_jax.core.lag_presets.LAG_PRESETS[{preset!r}]")
    preset.check_model(config.lag_model)


def check_positive_int(field: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{field} must be a positive integer, got {value!r}")


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds as integers, refusing none at all and any outside 0..2**32-1 (a PRNG key's
    seed is a uint32), before anything is compiled or written."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed (--seeds is a positive count)")
    outside = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if outside:
        raise ValueError(f"seeds must lie in 0..{MAX_SEED} (a PRNG seed is an unsigned 32-bit "
                         f"integer), got {outside[0]}")
    return seeds


def once_per_config(check: Callable[[Any], None]) -> Callable[[Any], None]:
    """`check(config)`, run once per distinct config: a config is validated once per process,
    however many layers (parser, planner, driver, trainer) ask. An unhashable config (a list
    where a tuple belongs) is checked every time, so that the check names the field."""
    cached = functools.cache(check)

    @functools.wraps(check)
    def checked(config: Any) -> None:
        try:
            hash(config)
        except TypeError:
            return check(config)
        return cached(config)
    return checked
