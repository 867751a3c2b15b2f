"""What every record of a report's summary is made of: an interval, a field left out of its
JSON object when None, and the one way records go to and from JSON (``parsed``, ``as_json``):
each class's fields are its JSON object's keys in their written order, so the same results
write the same bytes."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar, Union

from vaco_jax.infra import records

T = TypeVar("T")

JsonObject = Mapping[str, Any]
"""A section kept as JSON: its keys are data (column or stabiliser names), not a schema."""


def absent_when_none() -> Any:
    """A field left out of its JSON object when None (not written as null)."""
    return dataclasses.field(default=None, metadata={"absent_when_none": True})


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; None where it is undefined (NaN)."""

    point: float | None
    low: float | None
    high: float | None


def parsed(cls: type[T], value: JsonObject) -> T:
    """A JSON object (a step's record, or loaded JSON) as ``cls``, one of these classes."""
    return _from_json(cls, value)


def as_json(value: Any) -> Any:
    """The JSON value of a record (a dataclass of these fields), its containers and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("absent_when_none") and getattr(value, f.name) is None)}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: as_json(v) for k, v in value.items()}
    return value


def _from_json(annotation: Any, value: Any) -> Any:
    """``value`` (loaded JSON) as ``annotation`` says: dataclasses by their fields, containers
    by their items, anything else (numbers, strings, ``JsonObject``) as loaded, so that writing
    it again gives the same text."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _from_json(inner, value)
    if origin is tuple:
        _check_type(value, list, "a list")
        return tuple(_from_json(typing.get_args(annotation)[0], v) for v in value)
    if origin is dict:
        _check_type(value, dict, "a table")
        item = typing.get_args(annotation)[1]
        return {k: _from_json(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        _check_type(value, dict, "a table")
        return _dataclass_from_json(annotation, value)
    if annotation in _SCALARS and not _SCALARS[annotation](value):
        raise ValueError(f"{records.shown(value, 60)!r} is not a {annotation.__name__}")
    return value


def _check_type(value: Any, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise ValueError(f"{records.shown(value, 60)!r} is not {what}")


_SCALARS = {float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            int: lambda v: isinstance(v, int) and not isinstance(v, bool),
            str: lambda v: isinstance(v, str), bool: lambda v: isinstance(v, bool)}
"""The checks of the scalar annotations of a summary's classes."""


def _dataclass_from_json(cls: type, value: JsonObject) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ValueError(f"{cls.__name__}: keys {unknown} are not part of a summary this "
                         f"version writes")
    # Named here: the constructor's own error would not say it is the summary's key.
    missing = [name for name, f in fields.items()
               if name not in value and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{cls.__name__}: keys {missing} are missing")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _from_json(hints[name], v) for name, v in value.items()})
