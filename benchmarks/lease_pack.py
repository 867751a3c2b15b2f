"""A sweep's batches packed into what one GPU call returns, and rebuilt from it.

`pack` writes the sweep's files, the chosen batches' folders (config, status, metrics) and each
batch's newest checkpoint as arrays (parameters, optimiser, observation normaliser and reward
scaling, the policy ring buffer, RNG keys, update counter, metrics) into `study.tar.gz.NN` parts
of at most `PART_LIMIT` bytes and a `lease_study.json` that lists them with their digests;
`read_pack` reads such a folder back as untrusted input (it came back from another machine):
the manifest through its typed reader (`LeaseManifest`), each part read once, its size and
digest checked, and the archive's members taken from those very bytes (plain files named once,
inside the folder). `write_batches` then rebuilds the checkpoints of the batches the pack holds,
each checked against a plan (`packed_batches`: the study's own where one exists), so the sweep
engine resumes the batches as it resumes any interrupted sweep. The slice planning and the
study's report are `benchmarks/lease_study.py`'s.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
import io as bytes_io
import json
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence, TypeVar

import numpy as np

from vaco_jax.infra import records
from vaco_jax.infra.run_folder import MAX_UPDATES

if TYPE_CHECKING:  # imported where used: the experiment's modules import JAX
    from vaco_jax.experiment import Batch, Experiment, Plan

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


class Episodes(enum.Enum):
    CARRIED = "carried"  # environment states packed: the continuation is exact
    RESTART = "restart"  # environment states left behind: episodes start again


# ----------------------------------------------------------------------------- state as arrays
def _leaf_name(path: tuple) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
                    for k in path)


def named_leaves(tree: Any) -> dict[str, Any]:
    import jax

    return {_leaf_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def is_episode_leaf(name: str) -> bool:
    return name.split("/", 1)[0] == "episodes"


def _driver(plan: Any, batch: Any) -> Any:
    from vaco_jax.experiment.execute import _driver_arguments
    from vaco_jax.run.driver import Driver

    return Driver(*_driver_arguments(plan, batch))


def _checkpoints(folder: Path, driver: Any) -> Any:
    """The batch's checkpoints, under the identity its `config.json` recorded, refused (as a
    resume refuses them) where that config describes other runs than the plan's batch."""
    from vaco_jax.infra import run_folder
    from vaco_jax.run.checkpoint import Checkpoints

    record = driver.record.resumed(driver.record.check_resumable(folder))
    return Checkpoints(folder / run_folder.CHECKPOINT_DIR, record.identity), record


def batch_arrays(plan: Any, batch: Any, folder: Path, episodes: Episodes
                 ) -> tuple[int, dict[str, np.ndarray]] | None:
    """The batch's newest checkpoint as named arrays (`state/...`, `metrics/...`), its
    environments' states left out if episodes restart, and its periods done; None where it has
    no readable checkpoint (not started, or stopped before its first period ended)."""
    from vaco_jax.infra.run_folder import CHECKPOINT_DIR
    from vaco_jax.run.checkpoint import committed_steps

    if not committed_steps(folder / CHECKPOINT_DIR):
        return None  # checked first: a batch not started has no folder, no config to resume
    driver = _driver(plan, batch)
    checkpoints, record = _checkpoints(folder, driver)
    like = driver.program.state_shapes(driver.seeds, driver.hparams)
    metrics = {n: np.full((driver.num_runs, driver.config.num_updates + 1), np.nan, np.float32)
               for n in driver.testbed.metrics}
    restored = record.restore(checkpoints, like, metrics)
    checkpoints.close()
    if restored is None:
        return None
    periods, state, metrics = restored
    arrays = {f"state/{n}": np.asarray(x) for n, x in named_leaves(state).items()
              if episodes is Episodes.CARRIED or not is_episode_leaf(n)}
    return periods, arrays | {f"metrics/{n}": v for n, v in metrics.items()}


def restore_batch(plan: Any, batch: Any, folder: Path, periods: int,
                  arrays: Mapping[str, np.ndarray]) -> None:
    """Writes checkpoint `periods` of the batch from `arrays` (`batch_arrays`), a state leaf
    missing there (the environments' of a restart) taken from the runs' initial state; an
    array of another shape or type than the batch's, or a metric missing, is refused."""
    import jax

    driver = _driver(plan, batch)
    fresh, initial_metrics = driver.program.initial(driver.seeds, driver.hparams)
    leaves = [_packed(batch, arrays, f"state/{n}", leaf)
              for n, leaf in named_leaves(fresh).items()]
    state = jax.tree.unflatten(jax.tree.structure(fresh), leaves)
    metrics = {n: _packed(batch, arrays, f"metrics/{n}", None, like)
               for n, like in initial_metrics.items()}
    checkpoints, _ = _checkpoints(folder, driver)
    checkpoints.save(periods, {"state": state, "metrics": metrics})
    checkpoints.close()


def _packed(batch: Any, arrays: Mapping[str, np.ndarray], name: str, default: Any,
            like: Any = None) -> np.ndarray:
    """The packed array `name`, else `default` (None: refused as missing), of the shape and
    type of `like` (default: `default`)."""
    like = np.asarray(default if like is None else like)
    if name not in arrays and default is None:
        raise ValueError(f"batch {batch.name}: the pack holds no {records.shown(name)}")
    packed = np.asarray(arrays.get(name, default))
    if packed.shape != like.shape or packed.dtype != like.dtype:
        raise ValueError(f"batch {batch.name}: packed array {records.shown(name)} is "
                         f"{packed.dtype}{list(packed.shape)}, not {like.dtype}{list(like.shape)}")
    return packed


# ----------------------------------------------------------------------------- packing
def _batch_files(folder: Path) -> list[Path]:
    """A batch folder's files but its checkpoints (packed as arrays) and its lock."""
    from vaco_jax.infra.lock import LOCK_FILE

    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()
            and "checkpoint" not in p.relative_to(folder).parts and p.name != LOCK_FILE]


def pack(sweep_dir: Path, batches: Sequence[str], episodes: Episodes, out: Path,
         about: Mapping[str, Any]) -> dict[str, Any]:
    """Packs the sweep's files and the `batches`' folders with their state into `out`
    (`study.tar.gz.NN` parts of at most `PART_LIMIT` bytes, at most `MAX_PARTS`, and
    `lease_study.json`); refuses a pack over those limits. A batch without a checkpoint (the
    call's time ran out before its first period ended, or it never started) is left out, named
    in the manifest's `skipped_no_checkpoint` and the log: it starts again from its beginning
    when next trained. Returns the manifest."""
    from vaco_jax.experiment import load_sweep
    from vaco_jax.experiment.folder import EXPERIMENT_FILE, batch_dir
    from vaco_jax.experiment.plan import PLAN_FILE
    from vaco_jax.infra import io

    plan = load_sweep(sweep_dir)
    chosen = [b for b in plan.batches if b.name in batches]
    buffer = bytes_io.BytesIO()
    updates, skipped = {}, []
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in (EXPERIMENT_FILE, PLAN_FILE):
            tar.add(sweep_dir / name, arcname=name)
        for batch in chosen:
            folder = batch_dir(sweep_dir, batch)
            state = batch_arrays(plan, batch, folder, episodes)
            if state is None:
                skipped.append(batch.name)
                continue
            periods, arrays = state
            for path in _batch_files(folder):
                tar.add(path, arcname=str(path.relative_to(sweep_dir)))
            config = plan.experiment.group(batch.group).config
            updates[batch.name] = periods * config.updates_per_period
            npz = bytes_io.BytesIO()
            np.savez(npz, **arrays)
            _add_bytes(tar, f"state/{batch.name}.npz", npz.getvalue())
            _add_bytes(tar, f"state/{batch.name}.json", json.dumps({"periods": periods}).encode())
    if skipped:
        print(f"[study] not packed, no checkpoint yet (they start again from the beginning): "
              f"{', '.join(skipped)}", flush=True)
    data = buffer.getvalue()
    parts = [data[i:i + PART_LIMIT] for i in range(0, len(data), PART_LIMIT)]
    if len(parts) > MAX_PARTS:
        raise ValueError(f"the pack is {len(data):,} bytes: over {MAX_PARTS} files of "
                         f"{PART_LIMIT:,} bytes")
    out.mkdir(parents=True, exist_ok=True)
    listed = []
    for index, part in enumerate(parts):
        name = _part_name(index)
        io.atomic_write(out / name, lambda tmp, part=part: Path(tmp).write_bytes(part))
        listed.append({"name": name, "bytes": len(part),
                       "sha256": hashlib.sha256(part).hexdigest()})
    manifest = {**about, "parts": listed, "episodes": episodes.value, "updates": updates,
                "skipped_no_checkpoint": skipped}
    io.write_json(out / MANIFEST, manifest)
    return manifest


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, bytes_io.BytesIO(data))


def _part_name(index: int) -> str:
    return f"study.tar.gz.{index:02d}"


# ----------------------------------------------------------------------------- the records
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
        if field["name"].string(MAX_TEXT) != _part_name(index):
            raise field["name"].refuse(f"must name {_part_name(0)} onwards, at most {MAX_PARTS}")
        digest = field["sha256"].string(64)
        if not re.fullmatch("[0-9a-f]{64}", digest):
            raise field["sha256"].refuse("is not a SHA-256 digest")
        return cls(_part_name(index), field["bytes"].integer(1, PART_LIMIT), digest)


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
            raise field["parts"].refuse(f"must name {_part_name(0)} onwards, at most {MAX_PARTS}")
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


# ----------------------------------------------------------------------------- rebuilding
def packed_batches(pack: Pack, plan: Plan) -> list[tuple[Batch, BatchState]]:
    """The batches of `plan` that `pack` holds, with the state each is rebuilt at. Refused, in
    one line, unless each batch the manifest names is one of `plan`, its state an integer period
    within the batch's whose updates are those the manifest lists, and the archive holds its
    files, state and `config.json`, and nothing but them and the sweep's own files."""
    from vaco_jax.experiment import EXPERIMENT_FILE, PLAN_FILE, RUNS_DIR

    batches = {b.name: b for b in plan.batches}
    packed = pack.manifest.updates
    unknown = sorted(set(packed) - set(batches))
    if unknown:
        raise ValueError(f"{pack.source}: {MANIFEST} names {records.shown(unknown[0])!r}, not a "
                         f"batch of the study: refused")
    required = {member for name in packed for member in (
        f"state/{name}.npz", f"state/{name}.json", f"{RUNS_DIR}/{name}/config.json")}
    missing = sorted(required - set(pack.files))
    foreign = sorted(n for n in pack.files if n not in required | {EXPERIMENT_FILE, PLAN_FILE}
                     and not _batch_file(n, packed))
    if missing or foreign:
        which, name = ("lacks", missing[0]) if missing else ("holds", foreign[0])
        raise ValueError(f"{pack.source}: the archive {which} {records.shown(name)!r}, which a "
                         f"pack of its batches does not: refused")
    return [(batches[name], _batch_state(pack, plan, batches[name], updates))
            for name, updates in packed.items()]


def _batch_file(member: str, batches: Collection[str]) -> bool:
    """Whether `member` is one of a batch's files `pack` packs (its checkpoints travel as
    arrays, its lock never)."""
    from vaco_jax.experiment import RUNS_DIR
    from vaco_jax.infra.lock import LOCK_FILE
    from vaco_jax.infra.run_folder import CHECKPOINT_DIR

    parts = member.split("/")
    return (len(parts) > 2 and parts[0] == RUNS_DIR and parts[1] in batches
            and parts[2] != CHECKPOINT_DIR and parts[-1] != LOCK_FILE)


def _batch_state(pack: Pack, plan: Plan, batch: Batch, updates: int) -> BatchState:
    config = plan.experiment.group(batch.group).config
    state = BatchState.from_json(pack.record(f"state/{batch.name}.json", records.LEASE_STATE),
                                 config.num_periods)
    if state.periods * config.updates_per_period != updates:
        raise ValueError(f"{pack.source}: {MANIFEST} lists {updates} updates of batch "
                         f"{batch.name}, its state {state.periods} periods of "
                         f"{config.updates_per_period}: refused")
    return state


def write_sweep_files(pack: Pack, folder: Path, experiment: bytes) -> None:
    """A sweep folder's own files in `folder`: `experiment` (the text of its experiment) and
    the pack's plan."""
    from vaco_jax.experiment import EXPERIMENT_FILE, PLAN_FILE

    _write(folder / EXPERIMENT_FILE, experiment)
    _write(folder / PLAN_FILE, pack.member(PLAN_FILE))


def write_batches(pack: Pack, plan: Plan, folder: Path,
                  batches: Sequence[tuple[Batch, BatchState]]) -> None:
    """Writes `batches` (`packed_batches`) into the sweep folder `folder`: their files, then
    their checkpoints."""
    from vaco_jax.experiment import batch_dir

    names = {batch.name for batch, _ in batches}
    for member, data in pack.files.items():
        if _batch_file(member, names):
            _write(folder / member, data)
    for batch, state in batches:
        try:
            restore_batch(plan, batch, batch_dir(folder, batch), state.periods,
                          _arrays(pack, f"state/{batch.name}.npz"))
        except ValueError as error:  # arrays or config not the batch's: named with the pack
            raise ValueError(f"{pack.source}: {error}") from None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _arrays(pack: Pack, name: str) -> dict[str, np.ndarray]:
    """The arrays of the archive's `.npz` member `name` (no pickled objects, at most
    `MAX_UNPACKED` bytes)."""
    return records.parse_arrays(pack.member(name), name, PACKED_ARRAYS)


def unpack(returned: Path, target: Path, *, overwrite: bool = False) -> LeaseManifest:
    """Rebuilds the sweep folder `target` from the pack in `returned` (validated first; nothing
    is written outside `target`, which must not exist unless `overwrite`) with the pack's own
    experiment and plan: the call's side, where the upload it carried is all the study there
    is (back home, `lease_study.merge` checks a pack against the study's own plan instead).
    Written into a temporary folder beside `target`, renamed into place. Returns the
    manifest."""
    from vaco_jax.experiment import EXPERIMENT_FILE, load_sweep

    pack = read_pack(returned)
    if target.exists() and not overwrite:
        raise ValueError(f"{target} exists: pass overwrite to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as temporary:
        folder = Path(temporary) / "sweep"
        write_sweep_files(pack, folder, pack.member(EXPERIMENT_FILE))
        plan = load_sweep(folder)
        write_batches(pack, plan, folder, packed_batches(pack, plan))
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    return pack.manifest
