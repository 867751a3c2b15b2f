"""The checks every table of an experiment's TOML shares: known keys, numbers and names, each
refused with one line that names the field, prefixed with where in the experiment it arose."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any


@contextlib.contextmanager
def context(where: str) -> Iterator[None]:
    """Prefixes a `ValueError` raised inside with where in the experiment it arose."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def check_keys(keys: Iterable[str], allowed: Sequence[str]) -> None:
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {list(allowed)}")


def table(spec: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = spec.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table ([{key}]), got {value!r}")
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
        raise ValueError(f"{key} must be a {what} or a non-empty list of them, got {value!r}")
    if len(set(items)) != len(items):
        raise ValueError(f"{key} lists a value twice: {value!r}")
    if allowed is not None:
        check_names(key, items, allowed)
    return items


def check_names(key: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{key}: unknown value(s) {unknown}; allowed: {', '.join(allowed)}")


def bounded_number(key: str, value: Any, low: float, high: float, closed: bool) -> float:
    """A number above `low` and up to `high` (`closed`) or below it."""
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    if value <= low or value > high or (value == high and not closed):
        raise ValueError(f"{key} must lie in ({low:g}, {high:g}{']' if closed else ')'}, "
                         f"got {value!r}")
    return float(value)
