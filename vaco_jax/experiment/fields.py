"""The checks every table of an experiment's TOML shares: known keys, numbers and names, each
refused with one line that names the field, prefixed with where in the experiment it arose."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from vaco_jax.core.config import check_seeds


@contextlib.contextmanager
def context(where: str) -> Iterator[None]:
    """Prefixes a `ValueError` raised inside with where in the experiment it arose."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


QUOTED_LIMIT = 200
"""The most characters of a value that an error message quotes."""


def quoted(value: Any) -> str:
    """`value` as an error message quotes it, its repr: a huge list, table or string of the file
    (a million lag levels) is cut to `QUOTED_LIMIT` characters and its size stated, so that the
    message stays a line to read."""
    text = repr(value)
    if len(text) <= QUOTED_LIMIT:
        return text
    if isinstance(value, (list, tuple, dict)):
        size = f"{len(value):,} items"
    else:
        size = f"{len(value) if isinstance(value, str) else len(text):,} characters"
    return f"{text[:QUOTED_LIMIT]}... ({size})"


def check_keys(keys: Iterable[str], allowed: Sequence[str]) -> None:
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {quoted(unknown)}; allowed: {list(allowed)}")


def table(spec: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = spec.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table ([{key}]), got {quoted(value)}")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values(key: str, value: Any, kind: type | None = None,
            allowed: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """A scalar or a non-empty list of distinct values as a tuple: numbers, or of type `kind`,
    and (if given) from `allowed`."""
    items = tuple(value) if isinstance(value, list) else (value,)
    check = (lambda v: isinstance(v, kind) and not isinstance(v, bool)) if kind else is_number
    if not items or not all(check(v) for v in items):
        what = kind.__name__ if kind else "number"
        raise ValueError(f"{key} must be a {what} or a non-empty list of them, got "
                         f"{quoted(value)}")
    if len(set(items)) != len(items):
        raise ValueError(f"{key} lists a value twice: {quoted(value)}")
    if allowed is not None:
        check_names(key, items, allowed)
    return items


def check_names(key: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{key}: unknown value(s) {quoted(unknown)}; allowed: "
                         f"{', '.join(allowed)}")


def bounded_number(key: str, value: Any, low: float, high: float, closed: bool) -> float:
    """A number above `low` and up to `high` (`closed`) or below it."""
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number, got {quoted(value)}")
    if value <= low or value > high or (value == high and not closed):
        raise ValueError(f"{key} must lie in ({low:g}, {high:g}{']' if closed else ')'}, "
                         f"got {value!r}")
    return float(value)


MAX_RUNS = 100_000
"""The most runs an experiment may expand into, checked on the counts before any run is built:
every run is a Python object in the plan, a row of each batch's table and a vmapped row of its
batch, so a typo such as `seeds = 100_000_000` would exhaust memory while merely planning. The
paper's sweep is 1,600 runs and the largest committed experiment 3,400, so the limit leaves
room for sweeps some thirty times larger."""


def seeds(value: Any) -> tuple[int, ...]:
    """`seeds = N` means seeds 0..N-1; a list names them."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"seeds must be a positive count or a list of integers, got {value}")
        if value > MAX_RUNS:
            raise ValueError(f"seeds = {value:,} is more than an experiment's limit of "
                             f"{MAX_RUNS:,} runs (MAX_RUNS); give fewer seeds")
        return tuple(range(value))
    if not isinstance(value, list):
        raise ValueError(f"seeds must be a positive count or a list of integers, got "
                         f"{quoted(value)}")
    return tuple(check_seeds(values("seeds", value, int)))
