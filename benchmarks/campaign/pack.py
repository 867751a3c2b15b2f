"""A sweep's batches packed into what one GPU call returns, and rebuilt from it.

`pack` writes the sweep's files, the chosen batches' folders (config, status, metrics) and each
batch's newest checkpoint as arrays (parameters, optimiser, observation normaliser and reward
scaling, the policy ring buffer, RNG keys, update counter, metrics) into `study.tar.gz.NN` parts
of at most `PART_LIMIT` bytes and a `lease_study.json` that lists them with their digests;
`read_pack` (`benchmarks/campaign/records.py`, with the manifest's typed records) reads such a
folder back as untrusted input (it came back from another machine). `write_batches` then
rebuilds the checkpoints of the batches the pack holds, each checked against a plan
(`packed_batches`: the study's own where one exists), so the sweep engine resumes the batches
as it resumes any interrupted sweep. The slice planning and the study's report are
`benchmarks/campaign/study.py`'s.
"""

from __future__ import annotations

import hashlib
import io as bytes_io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

import numpy as np

from benchmarks.campaign.records import (MANIFEST, MAX_PARTS, PACKED_ARRAYS, PART_LIMIT,
                                      BatchState, Episodes, LeaseManifest, Pack, part_name,
                                      read_pack)
from vaco_jax.infra import records

if TYPE_CHECKING:  # imported where used: the experiment's modules import JAX
    from vaco_jax.experiment import Batch, Plan


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
    from vaco_jax.run.driver import Driver

    return Driver(*plan.driver_arguments(batch))


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
        name = part_name(index)
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
