"""Token methods of one file each: a module here holds a method whole (its knobs, its surrogate
and its registry entry, `ENTRY`), and the registry (`vaco_jax.tokens.algorithms`) takes every
module's entry, so adding a method is adding a file (`docs/development.md`)."""

from __future__ import annotations

import importlib
import pkgutil

from vaco_jax.tokens.entry import TokenAlgorithm


def entries() -> tuple[TokenAlgorithm, ...]:
    """The `ENTRY` of every module of this package, in the order of the modules' names."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg)
    return tuple(importlib.import_module(f"{__name__}.{name}").ENTRY for name in names)
