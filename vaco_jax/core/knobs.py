"""The hyper-parameters ("knobs") and metrics an algorithm declares, and the refusal of a setting
of a knob it ignores: a sweep over such a knob runs groups that differ in nothing but their
names, and a value given for it on the command line changes nothing the user meant to change.

A `Knob` is declared once, beside the loss that reads it, with its default, its allowed range
and what it does; an algorithm entry lists the knobs its loss reads and the `Metric`s it reports.
A testbed adds the knobs every run of it reads (`Testbed.knobs`), so a run's hyper-parameters
(`vaco_jax.core.config.HParamsBase`) hold exactly its own knobs, each a leaf `vmap` sweeps, and
one check (`check_values`) validates them on both testbeds. `read_by` traces a function once to
see which knobs it reads, which the tests hold equal to each entry's declaration.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

_INTERVAL = re.compile(r"^([\[(])\s*(-inf|[-+0-9.e]+)\s*,\s*(inf|[-+0-9.e]+)\s*([\])])$")


@dataclasses.dataclass(frozen=True)
class Knob:
    """One numeric hyper-parameter: a float leaf of every run that reads it.

    `within` is its allowed interval in the usual notation, `"(0, inf)"` or `"[0, 1]"` (a
    round bracket leaves the end out); `at_most` names another knob of the same run it may not
    exceed; `named` gives values it also takes by name (`tv_delta = "tvpo_lm"`).
    """

    name: str
    default: float
    description: str
    within: str = "(-inf, inf)"
    at_most: str | None = None
    named: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Knob: a knob's name must be an identifier, got {self.name!r}")
        if _INTERVAL.match(self.within) is None:
            raise ValueError(f"Knob {self.name}: within={self.within!r} is not an interval "
                             f"such as '(0, inf)' or '[0, 1]'")
        if not math.isfinite(self.default) or not self.contains(np.asarray(self.default)):
            raise ValueError(f"Knob {self.name}: its default {self.default!r} lies outside "
                             f"{self.within}")

    @property
    def bounds(self) -> tuple[float, float, bool, bool]:
        """`(low, high, low included, high included)`."""
        opening, low, high, closing = _INTERVAL.match(self.within).groups()
        return float(low), float(high), opening == "[", closing == "]"

    def contains(self, values: np.ndarray) -> bool:
        """Whether every value is finite and inside `within`."""
        low, high, low_in, high_in = self.bounds
        above = values >= low if low_in else values > low
        below = values <= high if high_in else values < high
        return bool(np.all(np.isfinite(values) & above & below))

    def value_of(self, value: Any) -> float:
        """`value` as a number: a number, or one of the names `named` gives."""
        if isinstance(value, str) and value in self.named:
            return float(self.named[value])
        try:
            return float(value)
        except (TypeError, ValueError):
            allowed = f" or one of {', '.join(self.named)}" if self.named else ""
            raise ValueError(f"hyper-parameter {self.name} needs a number{allowed}, "
                             f"got {value!r}") from None


@dataclasses.dataclass(frozen=True)
class Metric:
    """A quantity an algorithm's loss reports per update, e.g. the share of tokens a clip
    bounds; NaN in the runs of an algorithm that does not report it."""

    name: str
    description: str


def columns(metrics: Iterable[Metric], first: Sequence[str]) -> tuple[str, ...]:
    """The names of `metrics` as a table's columns: those of `first` in its order (a testbed's
    columns as its tables listed them before each entry declared its metrics), then the others,
    sorted, so that a metric a new entry declares adds a column and moves none."""
    names = {m.name for m in metrics}
    return tuple(n for n in first if n in names) + tuple(sorted(names - set(first)))


def by_name(knobs: Iterable[Knob]) -> dict[str, Knob]:
    """Name -> knob, refusing two different knobs under one name (two declarations that would
    disagree on a default or a range)."""
    by_name: dict[str, Knob] = {}
    for knob in knobs:
        if by_name.setdefault(knob.name, knob) != knob:
            raise ValueError(f"two different knobs are declared as {knob.name!r}: "
                             f"{by_name[knob.name]} and {knob}")
    return by_name


def check_values(knobs: Mapping[str, Knob], values: Mapping[str, Any]) -> None:
    """Refuses (ValueError naming the knob) a value outside its knob's range, or above the knob
    it may not exceed, as the driver and the command line check them before compiling; the
    trainer itself takes any values, so a non-finite one can still be run on purpose."""
    arrays = {name: np.asarray(value, np.float64) for name, value in values.items()}
    for name, array in arrays.items():
        knob = knobs[name]
        if not np.all(np.isfinite(array)):
            raise ValueError(f"hyper-parameter {name} must be finite, got {array.tolist()}")
        if not knob.contains(array):
            raise ValueError(f"hyper-parameter {name} must lie in {knob.within}, got "
                             f"{array.tolist()}")
    for name, array in arrays.items():
        upper = knobs[name].at_most
        if upper is not None and upper in arrays and np.any(array > arrays[upper]):
            raise ValueError(f"hyper-parameter {name} must be <= {upper}, got {name}="
                             f"{array.tolist()} and {upper}={arrays[upper].tolist()}")


class _Recording:
    """Hyper-parameters that answer each knob with `defaults`' value and remember its name
    (their methods, such as `replace`, answered as `defaults`' own)."""

    def __init__(self, defaults: Any):
        self._defaults = defaults
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._defaults, name)  # AttributeError for a knob it does not hold
        if name in self._defaults.values:
            self.read.add(name)
        return value


def read_by(fn: Callable[..., Any], defaults: Any, *shapes: Any) -> frozenset[str]:
    """The knobs of the hyper-parameters `defaults` that `fn(*arrays, hparams)` reads, traced
    once without computing (`jax.eval_shape`) on arrays of `shapes`."""
    recording = _Recording(defaults)
    jax.eval_shape(lambda *arrays: fn(*arrays, recording), *shapes)
    return frozenset(recording.read)


def refuse_unread(names: Iterable[str], read: Iterable[str], algo: str, where: str) -> None:
    """Refuses (ValueError, naming them and `where` they were set) the `names` among the knobs
    `read` that the run of `algo` does not read."""
    read = frozenset(read)
    ignored = [name for name in names if name not in read]
    if ignored:
        raise ValueError(f"{where}: algo={algo!r} does not read hyper-parameter(s) "
                         f"{', '.join(ignored)}, so its runs would differ in nothing; it reads "
                         f"{', '.join(sorted(read))}")
