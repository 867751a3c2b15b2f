"""A sweep's batches packed into what one GPU call returns, and rebuilt from it.

`pack` writes the sweep's files, the chosen batches' folders (config, status, metrics) and each
batch's newest checkpoint as arrays (parameters, optimiser, observation normaliser and reward
scaling, the policy ring buffer, RNG keys, update counter, metrics) into `study.tar.gz.NN` parts
of at most `PART_LIMIT` bytes and a `lease_study.json` that lists them with their digests;
`unpack` validates such a folder (it came back from another machine: names, sizes, digests, no
archive member outside its folder) and rebuilds the checkpoints, so the sweep engine resumes the
batches as it resumes any interrupted sweep. The slice planning and the study's report are
`benchmarks/lease_study.py`'s.
"""

from __future__ import annotations

import enum
import hashlib
import io as bytes_io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

PART_LIMIT = 16 * 2 ** 20  # bytes of one returned file
MAX_PARTS = 7  # of the call's 8 files: the eighth is the campaign's own campaign.tar.gz
MANIFEST = "lease_study.json"


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
    from vaco_jax.infra import run_folder
    from vaco_jax.run.checkpoint import Checkpoints

    record = driver.record.resumed(run_folder.saved_config(folder))
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
    missing there (the environments' of a restart) taken from the runs' initial state."""
    import jax

    driver = _driver(plan, batch)
    fresh, metrics = driver.program.initial(driver.seeds, driver.hparams)
    leaves = []
    for n, leaf in named_leaves(fresh).items():
        packed = np.asarray(arrays.get(f"state/{n}", leaf))
        if packed.shape != np.shape(leaf):
            raise ValueError(f"batch {batch.name}: packed leaf {n} has shape {packed.shape}, "
                             f"not {np.shape(leaf)}")
        leaves.append(packed)
    state = jax.tree.unflatten(jax.tree.structure(fresh), leaves)
    metrics = {n: np.asarray(arrays[f"metrics/{n}"], np.float32) for n in metrics}
    checkpoints, _ = _checkpoints(folder, driver)
    checkpoints.save(periods, {"state": state, "metrics": metrics})
    checkpoints.close()


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
        name = f"study.tar.gz.{index:02d}"
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


def read_manifest(returned: Path) -> dict[str, Any]:
    """`lease_study.json` of a folder that vaco_jax did not just write: its parts named as `pack`
    names them, each present, of its size and digest."""
    try:
        manifest = json.loads((returned / MANIFEST).read_text())
        parts = manifest["parts"]
        names = [p["name"] for p in parts]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{returned / MANIFEST}: not a study manifest ({error})") from None
    if not 0 < len(names) <= MAX_PARTS or names != [f"study.tar.gz.{i:02d}" for i in
                                                     range(len(names))]:
        raise ValueError(f"{returned / MANIFEST}: `parts` must name study.tar.gz.00 onwards, "
                         f"at most {MAX_PARTS}")
    for part in parts:
        path = returned / part["name"]
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{path}: missing or not a plain file")
        if path.stat().st_size > PART_LIMIT or hashlib.sha256(
                path.read_bytes()).hexdigest() != part["sha256"]:
            raise ValueError(f"{path}: not the part {MANIFEST} lists (size or digest)")
    return manifest


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's members, refused unless each is a plain file or folder whose name stays
    inside the folder it is extracted to."""
    members = tar.getmembers()
    for member in members:
        parts = Path(member.name).parts
        if (not (member.isfile() or member.isdir()) or member.name.startswith(("/", "\\"))
                or not parts or any(p in ("..", "") for p in parts) or "\\" in member.name):
            raise ValueError(f"study archive: member {member.name!r} is not a plain file "
                             f"inside the folder: refused")
    return members


def unpack(returned: Path, target: Path, *, overwrite: bool = False) -> dict[str, Any]:
    """Rebuilds the sweep folder `target` from a pack in `returned` (validated first; nothing
    is written outside `target`, which must not exist unless `overwrite`): the files, then each
    batch's checkpoint. Written into a temporary folder beside `target`, renamed into place.
    Returns the manifest."""
    from vaco_jax.experiment import load_sweep
    from vaco_jax.experiment.folder import batch_dir

    manifest = read_manifest(returned)
    if target.exists() and not overwrite:
        raise ValueError(f"{target} exists: pass overwrite to replace it")
    data = b"".join((returned / p["name"]).read_bytes() for p in manifest["parts"])
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as temporary:
        folder = Path(temporary) / "sweep"
        try:
            with tarfile.open(fileobj=bytes_io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(folder, members=_safe_members(tar), filter="data")
        except tarfile.TarError as error:
            raise ValueError(f"{returned}: not a readable study archive ({error})") from None
        plan = load_sweep(folder)
        for batch in plan.batches:
            npz = folder / "state" / f"{batch.name}.npz"
            if npz.is_file():
                periods = json.loads((folder / "state" / f"{batch.name}.json").read_text())[
                    "periods"]
                with np.load(npz, allow_pickle=False) as arrays:
                    restore_batch(plan, batch, batch_dir(folder, batch), int(periods),
                                  dict(arrays))
        if (folder / "state").is_dir():  # absent where every batch was left out
            shutil.rmtree(folder / "state")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    return manifest
