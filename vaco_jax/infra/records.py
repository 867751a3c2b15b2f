"""The one place a record's bytes are parsed: every file vaco_jax or `benchmarks/` reads from a
folder (plans, manifests, statuses, summaries, parts, lease packs, experiment TOML, tables) is
read here, under the bounds of its record type, and its fields are taken through `Field`, which
refuses in one line naming the file and the field anything vaco_jax never writes: a path where
a plain name belongs, an index out of range, a count that contradicts another, a non-finite or
out-of-range number, nesting or size beyond the record's bound.

A folder vaco_jax did not just write is untrusted input (`docs/security.md`); the typed readers
of each record type (`Plan.from_json`, `manifest.recorded`, `summary.loads`, ...) build on this
module, and `tests/infra/test_records.py` walks the source of `vaco_jax` and `benchmarks` to
refuse any parse of a file's bytes outside it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import stat
import tomllib
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MAX_NAME = 255
"""The longest plain name a record may hold: a file name's limit on the usual file systems."""
MAX_COUNT = 1 << 53
"""The largest count (of updates, steps, bytes) a record may hold: beyond it a JSON number is
no longer an exact integer."""
MAX_INTEGER = 1 << 63
"""No record vaco_jax writes holds an integer beyond this magnitude (a 64-bit integer): a larger
one is refused where it is parsed, before any arithmetic can overflow on it."""


class RecordError(ValueError):
    """A record that vaco_jax never writes: one line naming the file, the field and what is
    wrong (a ValueError, so every command refuses it as bad input)."""

    def __init__(self, source: str, field: str, problem: str):
        if field:  # a field's value refused
            super().__init__(": ".join(part for part in (source, field, problem) if part))
        else:  # the file itself unreadable, past its bounds or not of its format
            super().__init__(f"cannot read {source}: {problem}" if source else problem)


@dataclasses.dataclass(frozen=True)
class Kind:
    """A record type's bounds: its largest file, deepest nesting of lists and tables, and
    whether its numbers are all finite (a record vaco_jax writes without NaN or infinity)."""

    name: str
    max_bytes: int
    max_depth: int = 16
    finite: bool = False


MANIFEST = Kind("manifest", 64 << 20, 4)
SWEEP_PLAN = Kind("sweep plan", 256 << 20, 12)
RUN_CONFIG = Kind("run config", 64 << 20, 12)
RUN_STATUS = Kind("run status", 64 << 20, 8)
SUMMARY = Kind("summary", 256 << 20, 16, finite=True)
# A merge of merged reports nests each earlier `parts.json` under `merged_from`.
PARTS = Kind("parts list", 16 << 20, 64)
EXPERIMENT = Kind("experiment", 4 << 20, 8)
BOARD_TABLE = Kind("board table", 4 << 20, 8)
LOCK_RECORD = Kind("lock record", 1 << 16, 2)
TRACKER_PROGRESS = Kind("tracker progress", 64 << 20, 4)
PROCESS_MESSAGE = Kind("message between processes", 256 << 20, 16)
COMMAND_LINE = Kind("command-line value", 1 << 20, 16)
STUDY_FILE = Kind("study file", 256 << 20)
CHECKPOINT_IDENTITY = Kind("checkpoint identity", 1 << 20, 8)
LEASE_MANIFEST = Kind("lease manifest", 16 << 20, 8)
LEASE_STATE = Kind("lease batch state", 1 << 20, 4)
LEASE_PART = Kind("lease pack part", 16 << 20, 0)  # a slice of a compressed archive
BENCHMARK_RESULT = Kind("benchmark result", 256 << 20, 16)
PROJECT = Kind("project file", 1 << 20, 8)  # pyproject.toml
TABLE = Kind("table", 4 << 30)


def shown(text: object, limit: int = 120) -> str:
    """`text` as one line of printable characters, at most about `limit` long: how a name or
    value from an untrusted record is printed (a terminal escape or a newline in it is shown
    escaped, never acted on; a huge value is cut, its length stated)."""
    text = str(text)
    printable = text if text.isprintable() else repr(text)[1:-1]
    if len(printable) <= limit:
        return printable
    return f"{printable[:limit]}... ({len(text):,} characters)"


def plain_name(name: str, what: str) -> str:
    """`name`, refused (ValueError naming `what`) unless it is one printable path component,
    never `.` or `..`: what a folder or file a record names is called, so that nothing a record
    holds can point elsewhere."""
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or len(name) > MAX_NAME or not name.isprintable()):
        raise ValueError(f"{what + ' ' if what else ''}{shown(name)!r} is not a plain name (one "
                         f"path component)")
    return name


def read_text(path: str | os.PathLike, kind: Kind) -> str:
    """The UTF-8 text of `path`, bounded by `kind`, for a reader that parses it (a TOML
    record's text is kept verbatim beside its parse)."""
    try:
        return read_bytes(path, kind).decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(_source(Path(path)), "", f"not UTF-8 text ({error})") from None


def read_bytes(path: str | os.PathLike, kind: Kind) -> bytes:
    """The bytes of `path`, refusing a file larger than `kind` allows before reading it."""
    path = Path(path)
    try:
        # Not blocking: a named pipe standing where a record belongs is refused, never waited on.
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise RecordError(_source(path), "", "not a plain file")
            size = info.st_size
            if size > kind.max_bytes:
                raise RecordError(_source(path), "", f"{size:,} bytes, over the "
                                  f"{kind.max_bytes:,} bytes allowed in a {kind.name} record")
            data = f.read(kind.max_bytes + 1)
    except OSError as error:
        raise RecordError(_source(path), "", error.strerror or str(error)) from None
    if len(data) > kind.max_bytes:  # grown since fstat
        raise RecordError(_source(path), "", f"over the {kind.max_bytes:,} bytes allowed in a "
                          f"{kind.name} record")
    return data


def _source(path: Path) -> str:
    return f"'{shown(path, 300)}'"


def load_json(path: str | os.PathLike, kind: Kind, remedy: str = "") -> Field:
    """The JSON record in `path` (bounded by `kind`), its top level as a `Field`."""
    return parse_json(read_bytes(path, kind), _source(Path(path)), kind, remedy)


def parse_json(data: bytes | str, source: str, kind: Kind, remedy: str = "") -> Field:
    """The JSON text `data` of a `kind` record read from `source`, as a `Field`: a duplicate key
    (which JSON readers settle differently) and nesting beyond the bound are refused."""
    if len(data) > kind.max_bytes:
        raise RecordError(source, "", f"over the {kind.max_bytes:,} bytes allowed in a "
                                      f"{kind.name} record")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except ValueError as error:  # JSON, UTF-8, a key twice, an integer too long to convert
        raise RecordError(source, "", f"not valid JSON ({shown(error, 200)})"
                          f"{'; ' + remedy if remedy else ''}") from None
    except RecursionError:
        value = _too_deep(source, kind)
    return Field(source, "", _within_bounds(value, source, kind))


class _DuplicateKey(ValueError):
    """A key written twice in one JSON object, which JSON readers settle differently."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(f"a key is written twice: {shown(key)}")
        seen.add(key)
    return dict(pairs)


def load_toml(path: str | os.PathLike, kind: Kind = EXPERIMENT) -> Field:
    """The TOML record in `path` (bounded by `kind`), its top table as a `Field`."""
    return parse_toml(read_text(path, kind), _source(Path(path)), kind)


def parse_toml(text: str, source: str, kind: Kind = EXPERIMENT) -> Field:
    """The TOML text of a `kind` record read from `source`, as a `Field`."""
    if len(text.encode("utf-8", "surrogatepass")) > kind.max_bytes:
        raise RecordError(source, "", f"over the {kind.max_bytes:,} bytes allowed in a "
                                      f"{kind.name} record")
    try:
        value = tomllib.loads(text)
    except ValueError as error:  # TOML, or an integer too long to convert
        raise RecordError(source, "", f"not valid TOML: {shown(error, 200)}") from None
    except RecursionError:
        value = _too_deep(source, kind)
    return Field(source, "", _within_bounds(value, source, kind))


def _too_deep(source: str, kind: Kind) -> Any:
    raise RecordError(source, "", f"nested deeper than the {kind.max_depth} levels allowed "
                                  f"in a {kind.name} record")


def _within_bounds(value: Any, source: str, kind: Kind) -> Any:
    """`value`, refusing lists and tables nested deeper than `kind` allows, an integer beyond
    `MAX_INTEGER`, and a number that is not finite where `kind` holds finite numbers only
    (walked without recursion, so a deep record cannot exhaust the stack here)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, int) and not -MAX_INTEGER <= item <= MAX_INTEGER:
            raise RecordError(source, "", f"holds an integer of {len(str(abs(item))):,} digits, "
                                          f"which no {kind.name} record holds")
        if kind.finite and isinstance(item, float) and not math.isfinite(item):
            raise RecordError(source, "", f"holds the number {item}, which a {kind.name} "
                                          f"record never holds")
        if isinstance(item, (dict, list)):
            if depth >= kind.max_depth:
                _too_deep(source, kind)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def read_parquet(path: str | os.PathLike, remedy: str, kind: Kind = TABLE, *,
                 numeric: tuple[str, ...] = (), present: tuple[str, ...] = ()) -> pd.DataFrame:
    """The table in the Parquet file `path`, with the `numeric` columns of numbers and the
    `present` columns of any type its readers index it by; an unreadable, oversized or other
    table raises a RecordError naming it, the column and `remedy`."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        raise RecordError(_source(path), "", f"{error.strerror or error}; {remedy}") from None
    if size > kind.max_bytes:
        raise RecordError(_source(path), "", f"{size:,} bytes, over the {kind.max_bytes:,} "
                                             f"bytes allowed in a {kind.name} record; {remedy}")
    try:
        table = pd.read_parquet(path)
    except Exception as error:  # pyarrow raises many types for a missing or damaged file
        raise RecordError(_source(path), "", f"{type(error).__name__}: {shown(error, 200)}; "
                                             f"{remedy}") from None
    for column in (*numeric, *present):
        if column not in table.columns:
            raise RecordError(_source(path), f"column {shown(column)}", f"missing; {remedy}")
        if column in numeric and not pd.api.types.is_numeric_dtype(table[column]):
            raise RecordError(_source(path), f"column {shown(column)}",
                              f"holds {table[column].dtype}, not numbers; {remedy}")
    return table


def parse_arrays(data: bytes, source: str, kind: Kind) -> dict[str, np.ndarray]:
    """The arrays of the `.npz` bytes `data` read from `source`: never pickled objects, and
    unpacking to at most the bytes `kind` allows (checked on the archive's listing first)."""
    damaged = (ValueError, OSError, EOFError, MemoryError, zipfile.BadZipFile)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except damaged as error:
        raise RecordError(source, "", f"not {kind.name} ({shown(error, 200)})") from None
    if unpacked > kind.max_bytes:
        raise RecordError(source, "", f"unpacks to {unpacked:,} bytes, over the "
                                      f"{kind.max_bytes:,} allowed in {kind.name}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            return dict(arrays)
    except damaged as error:
        raise RecordError(source, "", f"not {kind.name} ({shown(error, 200)})") from None


@dataclasses.dataclass(frozen=True)
class Field:
    """A value at `path` in the record read from `source`; each accessor returns the value
    checked for its type and bounds, or raises a RecordError naming the file and the path."""

    source: str
    path: str
    value: Any

    def refuse(self, problem: str) -> RecordError:
        return RecordError(self.source, self.path or "the record", problem)

    def _child(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        key = shown(key, 60)  # a key is the record's text: never a second line
        return f"{self.path}.{key}" if self.path else key

    def __getitem__(self, key: str) -> Field:
        table = self.table()
        if key not in table:
            raise RecordError(self.source, self._child(key), "missing")
        return Field(self.source, self._child(key), table[key])

    def get(self, key: str) -> Field | None:
        """The field `key` of this table, or None where it is absent or null."""
        table = self.table()
        return None if table.get(key) is None else self[key]

    def table(self, keys: tuple[str, ...] | None = None) -> Mapping[str, Any]:
        """This value as a table (a JSON object), with string keys (only `keys`, if given)."""
        if not isinstance(self.value, dict):
            raise self.refuse(f"must be a table, not {type(self.value).__name__}")
        if keys is not None:
            unknown = sorted(set(self.value) - set(keys))
            if unknown:
                raise self.refuse(f"holds the unknown key {shown(unknown[0])}")
        return self.value

    def entries(self, max_len: int = 1 << 20) -> Iterator[tuple[str, Field]]:
        """A table's keys and their fields, at most `max_len` of them."""
        table = self.table()
        if len(table) > max_len:
            raise self.refuse(f"holds {len(table):,} entries, over the {max_len:,} allowed")
        return ((k, Field(self.source, self._child(k), v)) for k, v in table.items())

    def items(self, max_len: int = 1 << 20, *, length: int | None = None) -> list[Field]:
        """This value as a list of fields, at most `max_len` long (exactly `length`, if given)."""
        if not isinstance(self.value, list):
            raise self.refuse(f"must be a list, not {type(self.value).__name__}")
        if length is not None and len(self.value) != length:
            raise self.refuse(f"holds {len(self.value):,} items where {length:,} belong")
        if len(self.value) > max_len:
            raise self.refuse(f"holds {len(self.value):,} items, over the {max_len:,} allowed")
        return [Field(self.source, self._child(i), v) for i, v in enumerate(self.value)]

    def string(self, max_len: int = 1 << 16) -> str:
        if not isinstance(self.value, str):
            raise self.refuse(f"must be a string, not {shown(self.value, 60)}")
        if len(self.value) > max_len:
            raise self.refuse(f"is {len(self.value):,} characters, over the {max_len:,} allowed")
        return self.value

    def name(self) -> str:
        """A plain name (`plain_name`)."""
        text = self.string()
        try:
            return plain_name(text, "")
        except ValueError as error:
            raise self.refuse(str(error)) from None

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.refuse(f"must be true or false, not {shown(self.value, 60)}")
        return self.value

    def integer(self, low: int | None = None, high: int | None = None) -> int:
        """An integer in `[low, high]`."""
        value = self.value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.refuse(f"must be an integer, not {shown(self.value, 60)}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.refuse(f"{shown(value, 40)} is out of range [{'' if low is None else low}, "
                              f"{'' if high is None else high}]")
        return value

    def number(self, low: float = -math.inf, high: float = math.inf, *,
               finite: bool = True) -> float:
        """A number in `[low, high]`, finite unless `finite` is off (NaN then allowed too: a
        diverged run's score)."""
        value = self.value
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.refuse(f"must be a number, not {shown(value, 60)}")
        value = float(value)
        if finite and not math.isfinite(value):
            raise self.refuse(f"must be a finite number, not {value}")
        if not math.isnan(value) and not low <= value <= high:
            raise self.refuse(f"{value:g} is out of range [{low:g}, {high:g}]")
        return value
