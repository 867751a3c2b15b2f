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

import jax.numpy as jnp
import numpy as np

from vaco_jax.core import lag_presets
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
    """Base of every testbed's numeric hyper-parameters (a `flax.struct` dataclass whose
    fields all have float defaults): building them as float32 leaves and stacking runs."""

    # Values a field also takes by name, e.g. {"tv_delta": {"tvpo_lm": 0.015}}.
    named_values: ClassVar[Mapping[str, Mapping[str, float]]] = {}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def value_of(cls, name: str, value: Any) -> float:
        """`value` as a number: a number, or one of the names `named_values` gives `name`."""
        names = cls.named_values.get(name, {})
        if isinstance(value, str) and value in names:
            return float(names[value])
        try:
            return float(value)
        except (TypeError, ValueError):
            allowed = f" or one of {', '.join(names)}" if names else ""
            raise ValueError(f"hyper-parameter {name} needs a number{allowed}, "
                             f"got {value!r}") from None

    @classmethod
    def create(cls, **values: Any) -> Self:
        """The hyper-parameters with float32 leaves, defaults where `values` names none;
        unknown names are refused, naming the allowed ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"unknown hyper-parameter(s) {unknown}; allowed: "
                             f"{list(cls.field_names())}")
        merged = {**{n: getattr(cls(), n) for n in cls.field_names()}, **values}
        return cls(**{n: jnp.asarray(v, jnp.float32) for n, v in merged.items()})

    @classmethod
    def stack(cls, runs: list[Self]) -> Self:
        """Stacks per-run hyper-parameters along a new leading axis for `vmap`."""
        return cls(**{n: jnp.stack([jnp.asarray(getattr(r, n), jnp.float32) for r in runs])
                      for n in cls.field_names()})


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
