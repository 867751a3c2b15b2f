"""Plugins: the entry points through which installed packages register their own tasks
(`vaco_jax.envs`) and algorithms (`vaco_jax.algorithms`) without editing vaco_jax.

Each entry point of a group is a callable taking no arguments that calls the registries'
`register`. A group's entry points are called once per process, on the first use of a registry
that reads them (not at import, so importing vaco_jax stays cheap and a plugin may import
vaco_jax); a plugin that fails is reported and skipped, so one broken package stops no command.
"""

from __future__ import annotations

import importlib.metadata
import warnings

_called: set[str] = set()
_calling: importlib.metadata.EntryPoint | None = None


def describe(point: importlib.metadata.EntryPoint) -> str:
    """An entry point as messages and pages name it: its name, object and group, and the
    package that declares it where it is installed as one."""
    package = "" if point.dist is None else f", package {point.dist.name} {point.dist.version}"
    return f"entry point {point.name!r} ({point.value}) of group {point.group!r}{package}"


def calling() -> importlib.metadata.EntryPoint | None:
    """The entry point being called, None outside one: a registry records which plugin
    registered what."""
    return _calling


def call_entry_points(group: str, registers: str) -> None:
    """Calls every entry point of `group` unless this process already did; `registers` names
    what they register, for the warning a failing one gets."""
    global _calling
    if group in _called:
        return
    # Marked before the calls: a plugin's `register` reads the registry it fills.
    _called.add(group)
    for point in importlib.metadata.entry_points(group=group):
        _calling = point
        try:
            point.load()()
        except Exception as error:  # noqa: BLE001  (any failure of foreign code)
            warnings.warn(f"{describe(point)} failed to register its {registers}: "
                          f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=3)
        finally:
            _calling = None
