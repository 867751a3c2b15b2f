"""A testbed's config flags, generated from its config's fields.

Each field is one flag named after it (`--field-name`), parsed and defaulted as the field's type
and default say, its help from the testbed's one table of `Flag`s; a command builds its config
from the parsed flags without naming them again (`config_values`). A field the table leaves out
must be one the command composes from flags of its own (`--lag` gives the lag model), and the
parser refuses to build otherwise, so a new field cannot go without a flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Collection, Mapping, Sequence

from vaco_jax.core.config import Config

_CONFIG_DEFAULT = object()
"""A `Flag`'s default where the command's default is the config's own."""


@dataclasses.dataclass(frozen=True)
class Flag:
    """What the command line says of one config field beyond its name, type and default."""

    help: str
    choices: Sequence[str] | None = None
    # The command's own default where it differs from the config's; None leaves the field to
    # the config or the task (`config_values`), and the help then says what it is.
    default: object = _CONFIG_DEFAULT
    name: str | None = None  # the flag where it is not `--field-name`


def flag_of(field: str, flag: Flag) -> str:
    return flag.name or "--" + field.replace("_", "-")


def int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def check_flags_cover(config_type: type[Config], flags: Mapping[str, Flag],
                      composed: Collection[str]) -> None:
    """Refuses a field that has neither a flag nor a composing flag, and a flag of no field."""
    fields = {f.name for f in dataclasses.fields(config_type)}
    missing = sorted(fields - set(flags) - set(composed))
    unknown = sorted((set(flags) | set(composed)) - fields)
    if missing or unknown:
        raise ValueError(f"{config_type.__name__}'s flags must match its fields: without a flag "
                         f"{missing}, without a field {unknown}")


def add_config_flags(p: argparse.ArgumentParser, config_type: type[Config],
                     flags: Mapping[str, Flag], composed: Collection[str]) -> None:
    """One flag per field of `config_type` but those in `composed`, in the fields' order."""
    check_flags_cover(config_type, flags, composed)
    types = typing.get_type_hints(config_type)
    defaults = config_type()
    for field in dataclasses.fields(config_type):
        if field.name in composed:
            continue
        flag = flags[field.name]
        default = (getattr(defaults, field.name) if flag.default is _CONFIG_DEFAULT
                   else flag.default)
        p.add_argument(flag_of(field.name, flag), dest=field.name, help=flag.help,
                       choices=flag.choices, **_parsing(types[field.name], default))


def _parsing(annotation: Any, default: object) -> dict[str, Any]:
    """How argparse reads a field of type `annotation`: a bool as `--flag`/`--no-flag`, a tuple
    of integers comma-separated (its default shown so), an optional field as its type."""
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction, "default": default}
    if annotation == tuple[int, ...]:
        return {"type": int_tuple, "default": ",".join(map(str, default))}
    members = [t for t in typing.get_args(annotation) if t is not type(None)]
    return {"type": members[0] if members else annotation, "default": default}


def config_values(args: argparse.Namespace, config_type: type[Config],
                  composed: Collection[str]) -> dict[str, Any]:
    """The fields the flags of `add_config_flags` give; one left at None is left to the config
    (or to the task, by the caller)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_type)
              if f.name not in composed}
    return {name: value for name, value in values.items() if value is not None}
