"""A testbed's algorithm registry: the built-in algorithms, and those installed packages register
through entry points of group `vaco_jax.algorithms` (`ENTRY_POINT_GROUP`).

An entry point of that group is a callable taking no arguments that calls the `register` of
either testbed's registry, or of both: `vaco_jax.control.algorithms.ALGORITHMS.register(...)`
with a `vaco_jax.control.algorithms.Algorithm`, `vaco_jax.tokens.algorithms.ALGORITHMS.register(
...)` with a `vaco_jax.tokens.algorithms.TokenAlgorithm`. Declared in a plugin's
`pyproject.toml` as
`[project.entry-points."vaco_jax.algorithms"] my_losses = "my_package.losses:register_all"`,
the algorithm then trains in `vaco-jax train`, `tokens` and `sweep` like a built-in one
(`docs/algorithms.md`, "Your own algorithm").
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from vaco_jax.core.knobs import Metric
from vaco_jax.infra.entry_points import call_entry_points, calling, describe

ENTRY_POINT_GROUP = "vaco_jax.algorithms"


@dataclasses.dataclass(frozen=True)
class Superseded:
    """Marks an entry as an older variant of a method: how vaco_jax ran method `by` before
    `until` (a date), kept registered so that results committed before then reproduce. The
    fidelity card lists it apart from the methods' defaults, and its page says the same."""

    by: str
    until: str


class Entry(Protocol):
    """What the registry reads of an algorithm entry."""

    name: str
    metrics: tuple[Metric, ...]
    superseded: Superseded | None


EntryT = TypeVar("EntryT", bound=Entry)


class AlgorithmRegistry(Mapping[str, EntryT], Generic[EntryT]):
    """Algorithm name -> entry, read like a dict; every read first calls the installed plugins'
    entry points (once per process), so a plugin's algorithms are there wherever names are
    checked or listed."""

    def __init__(self, testbed: str, entry_type: type[EntryT], builtins: Iterable[EntryT],
                 columns: Collection[str]):
        self._testbed, self._entry_type = testbed, entry_type
        # The metrics its trainer writes a column for: an entry may declare no other.
        self._columns = tuple(columns)
        self._entries: dict[str, EntryT] = {}
        # The entry point that registered each name; None for one registered outside any.
        self._sources: dict[str, importlib.metadata.EntryPoint | None] = {}
        for entry in builtins:
            self.register(entry)

    def register(self, entry: EntryT, *, replace: bool = False) -> EntryT:
        """Adds `entry` under `entry.name`; `replace=True` overrides an existing one."""
        if not isinstance(entry, self._entry_type):
            raise TypeError(f"register: the {self._testbed} testbed's algorithms are "
                            f"{self._entry_type.__name__} objects, got {type(entry).__name__}")
        if not isinstance(entry.name, str) or not entry.name.isidentifier():
            raise ValueError(f"register: an algorithm's name must be an identifier, "
                             f"got {entry.name!r}")
        unknown = [m.name for m in entry.metrics if m.name not in self._columns]
        if unknown:
            raise ValueError(f"register: algo={entry.name!r} declares metric(s) {unknown} the "
                             f"{self._testbed} testbed's trainer has no column for; its "
                             f"columns: {', '.join(self._columns)}")
        self._check_superseded(entry)
        if entry.name in self._entries and not replace:
            raise ValueError(f"register: algo={entry.name!r} is already registered on the "
                             f"{self._testbed} testbed; pass replace=True to override it")
        self._entries[entry.name] = entry
        self._sources[entry.name] = calling()
        return entry

    def _check_superseded(self, entry: EntryT) -> None:
        """An older variant names a default registered before it (not itself, not another older
        variant, with the date it was replaced), and a default that older variants name is not
        replaced by an older variant."""
        older = entry.superseded
        if older is not None:
            if not isinstance(older, Superseded):
                raise TypeError(f"register: algo={entry.name!r}: superseded must be a "
                                f"Superseded, got {type(older).__name__}")
            if (older.by == entry.name or older.by not in self._entries
                    or self._entries[older.by].superseded is not None):
                raise ValueError(f"register: algo={entry.name!r} is superseded by "
                                 f"{older.by!r}, which must be another method registered before "
                                 f"it on the {self._testbed} testbed and not itself superseded")
            try:
                datetime.date.fromisoformat(older.until)
            except (TypeError, ValueError):
                raise ValueError(f"register: algo={entry.name!r}: superseded until "
                                 f"{older.until!r}, which is not a date (YYYY-MM-DD)") from None
            naming = [name for name, other in self._entries.items()
                      if other.superseded is not None and other.superseded.by == entry.name]
            if naming:
                raise ValueError(f"register: algo={entry.name!r} is the default that "
                                 f"{', '.join(naming)} name; it cannot become an older variant")

    def registered_by(self, name: str) -> str | None:
        """The plugin entry point that registered `name`, described; None for an algorithm
        registered outside one (a built-in). KeyError for a name not registered."""
        call_entry_points(ENTRY_POINT_GROUP, "algorithms")
        point = self._sources[name]
        return None if point is None else describe(point)

    def __getitem__(self, name: str) -> EntryT:
        call_entry_points(ENTRY_POINT_GROUP, "algorithms")
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        call_entry_points(ENTRY_POINT_GROUP, "algorithms")
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        call_entry_points(ENTRY_POINT_GROUP, "algorithms")
        return len(self._entries)
