"""What a lease's pack is made of, and reading one back as untrusted input: the manifest
(`lease_study.json`: the lease, its slice, its parts with their digests, each batch's state)
through its typed reader (`LeaseManifest`), and the pack (`read_pack`): each part read once,
its size and digest checked, the archive's members taken from those very bytes (plain files
named once, inside the folder). Writing a pack and rebuilding batches from one are
`benchmarks/campaign/pack.py`'s.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
import io as bytes_io
import re
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

from vaco_jax.infra import records
from vaco_jax.infra.run_folder import MAX_UPDATES

if TYPE_CHECKING:  # imported where used: the experiment's modules import JAX
    from vaco_jax.experiment import Experiment, Plan

PART_LIMIT = records.LEASE_PART.max_bytes  # bytes of one returned file
MAX_PARTS = 7  # of the call's 8 files: the eighth is the campaign's own campaign.tar.gz
MANIFEST = "lease_study.json"
# What a pack may unpack to: far above the state of any slice (`lease_study.PACK_BUDGET`, some
# 42 MiB before compression), far below what would exhaust the memory it is read into.
MAX_UNPACKED = 1 << 30
PACKED_ARRAYS = records.Kind("packed arrays", MAX_UNPACKED)
MAX_MEMBERS = 1 << 16  # an archive's members: a slice's batches' files, many times over
MAX_BATCHES = 1 << 16  # named by one slice or pack
MAX_TEXT = 200  # characters of a short string of a manifest: a device, a part, an enum value
T = TypeVar("T")


def part_name(index: int) -> str:
    """The file name of a pack's part `index`."""
    return f"study.tar.gz.{index:02d}"


class Episodes(enum.Enum):
    CARRIED = "carried"  # environment states packed: the continuation is exact
    RESTART = "restart"  # environment states left behind: episodes start again


def episodes_of(field: records.Field) -> Episodes:
    value = field.string(MAX_TEXT)
    try:
        return Episodes(value)
    except ValueError:
        raise field.refuse(f"{records.shown(value)!r} is none of "
                           f"{', '.join(e.value for e in Episodes)}") from None


def _optional(field: records.Field | None, read: Callable[[records.Field], T]) -> T | None:
    return None if field is None else read(field)


def _named_entries(field: records.Field, max_len: int) -> list[tuple[str, records.Field]]:
    """A table's entries, each key a plain name (a batch's or a task's), refused on the table
    itself: a key is never printed but through `records.shown`."""
    entries = list(field.entries(max_len))
    for key, _ in entries:
        try:
            records.plain_name(key, "the key")
        except ValueError as error:
            raise field.refuse(str(error)) from None
    return entries


@dataclasses.dataclass(frozen=True)
class Slice:
    """Batches trained together from where they stand to `until_updates` (`lease_study`)."""

    batches: tuple[str, ...]
    until_updates: int
    episodes: Episodes

    def to_json(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "until_updates": self.until_updates,
                "episodes": self.episodes.value}

    @classmethod
    def from_json(cls, field: records.Field) -> Slice:
        field.table(("batches", "until_updates", "episodes"))
        return cls(tuple(b.name() for b in field["batches"].items(MAX_BATCHES)),
                   field["until_updates"].integer(0, MAX_UPDATES), episodes_of(field["episodes"]))


@dataclasses.dataclass(frozen=True)
class Lease:
    """What a call reports of its lease (the top of its pack's manifest), and what the study's
    history keeps of it: the device, the slice trained, the steps/s measured per task, the
    episodes carried or restarted, the call's wall seconds."""

    device: str | None
    trained: Slice | None
    rates: Mapping[str, float]
    episodes: Episodes | None
    wall_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "slice": self.trained and self.trained.to_json(),
                "rates": dict(self.rates), "episodes": self.episodes and self.episodes.value,
                "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, field: records.Field) -> Lease:
        return cls(device=_optional(field.get("device"), lambda f: f.string(MAX_TEXT)),
                   trained=_optional(field.get("slice"), Slice.from_json),
                   rates=_optional(field.get("rates"), lambda rates: {
                       task: rate.number(0) for task, rate in _named_entries(rates, MAX_BATCHES)})
                   or {},
                   episodes=_optional(field.get("episodes"), episodes_of),
                   wall_s=_optional(field.get("wall_s"), lambda f: f.number(0)))


@dataclasses.dataclass(frozen=True)
class Part:
    """One returned file of the pack's archive, as the manifest lists it."""

    name: str
    size: int
    sha256: str

    @classmethod
    def from_json(cls, field: records.Field, index: int) -> Part:
        field.table(("name", "bytes", "sha256"))
        if field["name"].string(MAX_TEXT) != part_name(index):
            raise field["name"].refuse(f"must name {part_name(0)} onwards, at most {MAX_PARTS}")
        digest = field["sha256"].string(64)
        if not re.fullmatch("[0-9a-f]{64}", digest):
            raise field["sha256"].refuse("is not a SHA-256 digest")
        return cls(part_name(index), field["bytes"].integer(1, PART_LIMIT), digest)


@dataclasses.dataclass(frozen=True)
class LeaseManifest:
    """`lease_study.json` read back: the parts, the updates the state of each batch packed
    holds, the slice the next call trains (an upload's) and the lease (a returned pack's)."""

    parts: tuple[Part, ...]
    updates: Mapping[str, int]
    next: Slice | None
    lease: Lease

    @classmethod
    def from_json(cls, field: records.Field) -> LeaseManifest:
        parts = field["parts"].items(MAX_PARTS)
        if not parts:
            raise field["parts"].refuse(f"must name {part_name(0)} onwards, at most {MAX_PARTS}")
        return cls(parts=tuple(Part.from_json(part, i) for i, part in enumerate(parts)),
                   updates={name: count.integer(0, MAX_UPDATES) for name, count in
                            _named_entries(field["updates"], MAX_BATCHES)},
                   next=_optional(field.get("next"), Slice.from_json),
                   lease=Lease.from_json(field))


@dataclasses.dataclass(frozen=True)
class BatchState:
    """`state/<batch>.json`: the checkpoint period a batch's packed state was taken at."""

    periods: int

    @classmethod
    def from_json(cls, field: records.Field, num_periods: int) -> BatchState:
        field.table(("periods",))
        return cls(field["periods"].integer(0, num_periods))


# ----------------------------------------------------------------------------- reading back
def _plain_file(path: Path) -> Path:
    """`path`, refused unless it is a plain file: a link or a pipe in a returned folder is
    neither followed nor opened."""
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{records.shown(path, 300)}: missing or not a plain file")
    return path


def read_manifest(returned: Path) -> LeaseManifest:
    """`lease_study.json` of a folder that vaco_jax did not just write, through its reader."""
    return LeaseManifest.from_json(records.load_json(_plain_file(returned / MANIFEST),
                                                     records.LEASE_MANIFEST))


@dataclasses.dataclass(frozen=True)
class Pack:
    """A pack read back: its manifest and its archive's files by name, the very bytes whose
    digests were checked (each part is read once: a part replaced after its check is never
    the one unpacked)."""

    source: str  # the folder, as a message names it
    manifest: LeaseManifest
    files: Mapping[str, bytes]

    def member(self, name: str) -> bytes:
        if name not in self.files:
            raise ValueError(f"{self.source}: the archive holds no {name}")
        return self.files[name]

    def record(self, name: str, kind: records.Kind) -> records.Field:
        data, source = self.member(name), f"{self.source}: {name}"
        if len(data) > kind.max_bytes:
            raise records.RecordError(source, "", f"over the {kind.max_bytes:,} bytes allowed "
                                                  f"in a {kind.name} record")
        return records.parse_json(data, source, kind)

    def experiment(self) -> Experiment:
        """The experiment the pack's `experiment.toml` holds."""
        from vaco_jax.experiment import EXPERIMENT_FILE, parse_experiment

        try:  # bounded as an experiment record by the parse
            return parse_experiment(self.member(EXPERIMENT_FILE).decode("utf-8"))
        except ValueError as error:  # UnicodeDecodeError too
            raise ValueError(f"{self.source}: {EXPERIMENT_FILE}: {error}") from None

    def plan(self, experiment: Experiment) -> Plan:
        """The pack's `sweep.json` read as a plan of `experiment` (`Plan.from_json` refuses one
        that is not the plan the experiment derives)."""
        from vaco_jax.experiment import PLAN_FILE, Plan

        return Plan.from_json(experiment, self.record(PLAN_FILE, records.SWEEP_PLAN))


def read_pack(returned: Path) -> Pack:
    """The pack in `returned`, validated: its manifest, each part present, a plain file of the
    size and digest listed, and the archive they make up (`_archive_files`)."""
    source = records.shown(returned, 300)
    manifest = read_manifest(returned)
    data = b"".join(_read_part(returned, part) for part in manifest.parts)
    return Pack(source, manifest, _archive_files(data, source))


def _read_part(returned: Path, part: Part) -> bytes:
    path = _plain_file(returned / part.name)
    data = records.read_bytes(path, records.LEASE_PART)
    if len(data) != part.size or hashlib.sha256(data).hexdigest() != part.sha256:
        raise ValueError(f"{records.shown(path, 300)}: not the part {MANIFEST} lists (size or "
                         f"digest)")
    return data


def _archive_files(data: bytes, source: str) -> dict[str, bytes]:
    """The files of the gzipped archive `data` by name (`_check_members`)."""
    try:
        with tarfile.open(fileobj=bytes_io.BytesIO(data), mode="r:gz") as tar:
            members = []
            for member in tar:  # counted as read: a forged archive cannot list without end
                members.append(member)
                if len(members) > MAX_MEMBERS:
                    raise ValueError(f"{source}: the archive holds over {MAX_MEMBERS:,} "
                                     f"members: refused")
            _check_members(members, source)
            return {m.name: tar.extractfile(m).read() for m in members if m.isfile()}
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise ValueError(f"{source}: not a readable study archive "
                         f"({records.shown(error, 200)})") from None


def _check_members(members: Sequence[tarfile.TarInfo], source: str) -> None:
    """Refuses an archive member that is not a plain file or folder named by plain names (so
    none lands outside the folder), a file named twice or also a folder (one would override
    the other), and files larger than `MAX_UNPACKED` together."""
    for member in members:
        try:
            if not (member.isfile() or member.isdir()):
                raise ValueError("a link or a device")
            for part in member.name.split("/"):
                records.plain_name(part, "")
        except ValueError:
            raise ValueError(f"{source}: archive member {records.shown(member.name)!r} is not a "
                             f"plain file inside the folder: refused") from None
    names = [m.name for m in members if m.isfile()]
    # Compared as sets, in whatever order the archive lists them.
    folders = {str(folder) for name in names for folder in PurePosixPath(name).parents}
    counts = collections.Counter(names)
    twice = [name for name in names if counts[name] > 1 or name in folders]
    if twice:
        raise ValueError(f"{source}: archive member {records.shown(twice[0])!r} is written twice "
                         f"(or as a file and a folder): refused")
    if sum(m.size for m in members if m.isfile()) > MAX_UNPACKED:
        raise ValueError(f"{source}: the archive unpacks to over {MAX_UNPACKED:,} bytes: refused")
