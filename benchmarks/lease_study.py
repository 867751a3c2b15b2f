"""A sweep continued one GPU lease at a time: `experiments/gpu_lag_study.toml` in slices.

A lease gives one call of under 10 minutes to the study, and a call returns at most 8 files of
16 MiB (64 MiB in all); what the next lease needs travels up with the checkout beside the 20 MB
of wheels. So a *slice* is the batches whose state fits `PACK_BUDGET`, trained from where they
stand to a common number of updates that the call's time allows (`next_slice`, pure). After
training, `pack` writes the batches' folders (config, status, metrics) and each batch's newest
checkpoint as arrays (parameters, optimiser, observation normaliser and reward scaling, the
policy ring buffer, RNG keys, update counter, metrics) into `study.tar.gz.NN` parts and a
`lease_study.json` that lists them with their digests; `unpack` rebuilds the checkpoints there, so the
sweep engine resumes the batches as it resumes any interrupted sweep (`run_sweep(..., batches,
until_updates)`).

Episodes: when the slice's state with its environments' states fits, they are carried and a
continuation equals an uninterrupted run bit for bit (`tests/test_lease_study.py`). At the
paper's sizes they do not fit (an `ant` run's MJX states are 1.7 MB of its 3.1 MB), so
episodes restart: every environment starts again from the initial state it was first reset to
(the run's seed), an episode truncated once per lease.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io as bytes_io
import json
import math
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "experiments" / "gpu_lag_study.toml"
LOCAL = ROOT / ".lease" / "gpu_lag_study"  # the whole study's sweep folder, kept here (ignored)
UPLOAD = ROOT / ".lease" / "upload"  # what the next call carries up: the next slice's pack
REPORT = ROOT / "experiments" / "results" / "gpu_lag_study"
PART_LIMIT = 16 * 2 ** 20  # bytes of one returned file
MAX_PARTS = 7  # of the call's 8 files: the eighth is the campaign's own campaign.tar.gz
# The slice's state before compression: under the 64 MiB returned less the campaign's archive
# and slack, and what carries up with the 20 MB of wheels.
PACK_BUDGET = 42 * 2 ** 20
MANIFEST = "lease_study.json"
PART_NAME = re.compile(r"study\.tar\.gz\.(\d{2})")
# Steps/s of one batch of the study's runs before a lease measured one: `ant` from synchronous
# ppo at 16,384 environments (2.18M on an H100), `humanoid` from 0.74M at 4,096 (both with a
# 64x64 critic; the study's is 256x256, and vaco does more per update), rounded down.
PRIOR_RATES = {"ant": 1.6e6, "humanoid": 0.8e6}
PRIOR_RATE = 1e5  # any other task (the dry run's toy)
# A slice is sized on this share of the call's training seconds: the first group's compilation
# (25 to 40 s on an H100) and the unpacking come out of them.
SIZING_SHARE = 0.8


class Episodes(enum.Enum):
    CARRIED = "carried"  # environment states packed: the continuation is exact
    RESTART = "restart"  # environment states left behind: episodes start again


@dataclasses.dataclass(frozen=True)
class BatchInfo:
    """What planning a slice needs of one batch of the study's plan."""

    name: str
    task: str
    runs: int  # padding included: padding runs train and are packed too
    updates_done: int
    num_updates: int
    updates_per_period: int
    steps_per_update: int  # of one run
    bytes_carried: int  # packed bytes of one run, environments included
    bytes_restart: int  # ... without them


@dataclasses.dataclass(frozen=True)
class Slice:
    batches: tuple[str, ...]
    until_updates: int
    episodes: Episodes

    def to_json(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "until_updates": self.until_updates,
                "episodes": self.episodes.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Slice:
        try:
            return cls(tuple(str(b) for b in data["batches"]), int(data["until_updates"]),
                       Episodes(data["episodes"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{MANIFEST}: its `slice` is not a slice ({error})") from None


def next_slice(batches: Sequence[BatchInfo], seconds: float, rates: Mapping[str, float],
               budget: int = PACK_BUDGET) -> Slice | None:
    """The next slice: of the first task with unfinished batches (the experiment's order), its
    batches furthest behind that fit `budget` together, taken to the updates `seconds` of
    training allow at `rates[task]` steps/s (whole evaluation periods, at least one). None when
    every batch is done. Episodes are carried when the environments fit too."""
    left = [b for b in batches if b.updates_done < b.num_updates]
    if not left:
        return None
    task = left[0].task
    behind = min(b.updates_done for b in left if b.task == task)
    chosen, used = [], 0
    for batch in (b for b in left if b.task == task and b.updates_done == behind):
        if used + batch.runs * batch.bytes_restart > budget:
            break
        chosen.append(batch)
        used += batch.runs * batch.bytes_restart
    if not chosen:
        raise ValueError(f"batch {left[0].name}: one batch's state ({left[0].runs} runs of "
                         f"{left[0].bytes_restart:,} bytes) is over the pack budget of {budget:,} "
                         f"bytes: lower max_runs_per_batch")
    first = chosen[0]
    period_steps = sum(b.runs for b in chosen) * first.steps_per_update * first.updates_per_period
    periods = max(1, math.floor(seconds * rates.get(task, PRIOR_RATE) / period_steps))
    until = min(first.num_updates, behind + periods * first.updates_per_period)
    carried = sum(b.runs * b.bytes_carried for b in chosen) <= budget
    return Slice(tuple(b.name for b in chosen), until,
                 Episodes.CARRIED if carried else Episodes.RESTART)


# ----------------------------------------------------------------------------- state as arrays
def _leaf_name(path: tuple) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
                    for k in path)


def _named(tree: Any) -> dict[str, Any]:
    import jax

    return {_leaf_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def is_episode_leaf(name: str) -> bool:
    return name.split("/", 1)[0] == "episodes"


def run_bytes(config: Any, hparams: Any) -> tuple[int, int]:
    """Packed bytes of one run of `config`, (with, without) its environments' states: its
    training state's abstract shapes (nothing computed) and its float32 metrics."""
    import jax
    import jax.numpy as jnp

    from vaco_jax import testbeds

    testbed = testbeds.named(config.testbed)
    state = testbed.trainer(config).state_shapes(jax.ShapeDtypeStruct((2,), jnp.uint32), hparams)
    sizes = {n: math.prod(x.shape) * np.dtype(x.dtype).itemsize for n, x in _named(state).items()}
    metrics = len(testbed.metrics) * (config.num_updates + 1) * 4
    restart = sum(v for n, v in sizes.items() if not is_episode_leaf(n)) + metrics
    return sum(sizes.values()) + metrics, restart


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
                 ) -> tuple[int, dict[str, np.ndarray]]:
    """The batch's newest checkpoint as named arrays (`state/...`, `metrics/...`), its
    environments' states left out if episodes restart; and its periods done."""
    driver = _driver(plan, batch)
    checkpoints, record = _checkpoints(folder, driver)
    like = driver.program.state_shapes(driver.seeds, driver.hparams)
    metrics = {n: np.full((driver.num_runs, driver.config.num_updates + 1), np.nan, np.float32)
               for n in driver.testbed.metrics}
    restored = record.restore(checkpoints, like, metrics)
    checkpoints.close()
    if restored is None:
        raise RuntimeError(f"batch {batch.name} has no checkpoint to pack")
    periods, state, metrics = restored
    arrays = {f"state/{n}": np.asarray(x) for n, x in _named(state).items()
              if episodes is Episodes.CARRIED or not is_episode_leaf(n)}
    return periods, arrays | {f"metrics/{n}": v for n, v in metrics.items()}


def restore_batch(plan: Any, batch: Any, folder: Path, periods: int,
                  arrays: Mapping[str, np.ndarray]) -> None:
    """Writes checkpoint `periods` of the batch from `arrays` (`batch_arrays`), a state leaf
    missing there (the environments' of a restart) taken from the runs' initial state."""
    import jax

    driver = _driver(plan, batch)
    fresh, metrics = driver.program.initial(driver.seeds, driver.hparams)
    names = list(_named(fresh))
    leaves = [np.asarray(arrays.get(f"state/{n}", leaf)) for n, leaf in _named(fresh).items()]
    for n, leaf in zip(names, leaves):
        want = np.shape(_named(fresh)[n])
        if leaf.shape != want:
            raise ValueError(f"batch {batch.name}: packed leaf {n} has shape {leaf.shape}, "
                             f"not {want}")
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
    `lease_study.json`); refuses a pack over those limits. Returns the manifest."""
    from vaco_jax.experiment import load_sweep
    from vaco_jax.experiment.folder import EXPERIMENT_FILE, batch_dir
    from vaco_jax.experiment.plan import PLAN_FILE
    from vaco_jax.infra import io

    plan = load_sweep(sweep_dir)
    chosen = [b for b in plan.batches if b.name in batches]
    buffer = bytes_io.BytesIO()
    updates = {}
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in (EXPERIMENT_FILE, PLAN_FILE):
            tar.add(sweep_dir / name, arcname=name)
        for batch in chosen:
            folder = batch_dir(sweep_dir, batch)
            for path in _batch_files(folder):
                tar.add(path, arcname=str(path.relative_to(sweep_dir)))
            periods, arrays = batch_arrays(plan, batch, folder, episodes)
            updates[batch.name] = periods * plan.experiment.group(batch.group).config.updates_per_period
            npz = bytes_io.BytesIO()
            np.savez(npz, **arrays)
            _add_bytes(tar, f"state/{batch.name}.npz", npz.getvalue())
            _add_bytes(tar, f"state/{batch.name}.json", json.dumps({"periods": periods}).encode())
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
    manifest = {**about, "parts": listed, "episodes": episodes.value, "updates": updates}
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
        shutil.rmtree(folder / "state")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    return manifest


# ----------------------------------------------------------------------------- the slice
def with_values(text: str, overrides: Mapping[str, str], name: str) -> str:
    """An experiment file's TOML with `overrides` put in place of its `key = ...` lines."""
    for key, value in overrides.items():
        text, count = re.subn(rf"^{key}\s*=.*$", f"{key} = {value}", text, count=1,
                              flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"{name} has no line `{key} = ...` to override")
    return text


def max_runs_per_batch(experiment: Any, budget: int = PACK_BUDGET) -> int:
    """The most runs a batch may hold so that any group's batch packs within `budget`, its
    environments left out."""
    largest = max(run_bytes(g.config, _one_run(g))[1] for g in experiment.groups)
    if largest > budget:
        raise ValueError(f"one run's state ({largest:,} bytes) is over the pack budget "
                         f"({budget:,}): lower num_envs or the networks' sizes")
    return budget // largest


def _one_run(group: Any) -> Any:
    import jax

    return jax.tree.map(lambda x: x[0], group.hparams([0]))


def batch_infos(plan: Any, sweep_dir: Path) -> list[BatchInfo]:
    """Each batch of `plan` with its updates done in `sweep_dir` (0 where it has no folder)."""
    from vaco_jax.experiment.folder import batch_dir
    from vaco_jax.infra.run_folder import read_status

    infos, sizes = [], {}
    for batch in plan.batches:
        group = plan.experiment.group(batch.group)
        if group.name not in sizes:
            sizes[group.name] = run_bytes(group.config, _one_run(group))
        cfg = group.config
        status = read_status(batch_dir(sweep_dir, batch)) if sweep_dir.is_dir() else None
        infos.append(BatchInfo(batch.name, plan.experiment.testbed.task(cfg), batch.size,
                               int((status or {}).get("updates_done", 0)), cfg.num_updates,
                               cfg.updates_per_period, cfg.steps_per_update,
                               *sizes[group.name]))
    return infos


def train_slice(sweep_dir: Path, plan: Any, piece: Slice, seconds: float) -> dict[str, float]:
    """Trains the slice's batches in `sweep_dir` to its updates, stopped after the chunk under
    way once `seconds` have passed (a SIGINT to this process: the engine's own stop, which
    checkpoints first); returns the steps/s measured per task (chunks after a batch's first)."""
    import os
    import signal
    import threading
    import time

    from vaco_jax.experiment import run_sweep
    from vaco_jax.run.signals import Interrupted

    marks: dict[str, list[tuple[float, int]]] = {}
    tasks = {b.name: plan.experiment.testbed.task(plan.experiment.group(b.group).config)
             for b in plan.batches}

    def on_chunk(batch, result) -> None:
        steps = result.updates_done * plan.experiment.group(batch.group).config.steps_per_update
        marks.setdefault(batch.name, []).append((time.perf_counter(), steps * batch.size))

    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        run_sweep(plan, sweep_dir, progress=False, on_chunk=on_chunk,
                  batches=set(piece.batches), until_updates=piece.until_updates)
    except (Interrupted, KeyboardInterrupt) as stopped:
        # The time ran out (after a chunk: Interrupted; before the first: KeyboardInterrupt):
        # what the checkpoints hold is packed.
        print(f"[study] stopped at the call's limit: {stopped!r}", flush=True)
    finally:
        timer.cancel()
    rates: dict[str, list[float]] = {}
    for name, m in marks.items():
        if len(m) >= 2:
            rates.setdefault(tasks[name], []).append((m[-1][1] - m[0][1]) / (m[-1][0] - m[0][0]))
    return {task: float(np.mean(r)) for task, r in rates.items()}


def run_slice(experiment: Any, upload: Path, out: Path, work: Path, seconds: float,
              budget: int = PACK_BUDGET) -> dict[str, Any]:
    """The campaign step: continues the study from `upload` (a pack and the slice it names; a
    new study without one), trains the slice for at most `seconds`, packs it into `out`."""
    import time

    import jax

    from vaco_jax.experiment import load_sweep, start_sweep

    began = time.perf_counter()
    sweep_dir = work / "sweep"
    if (upload / MANIFEST).is_file():
        manifest = unpack(upload, sweep_dir, overwrite=True)
        plan = load_sweep(sweep_dir)
        piece = Slice.from_json(manifest["next"])
    else:
        plan = start_sweep(experiment, sweep_dir, overwrite=True,
                           max_runs_per_batch=max_runs_per_batch(experiment, budget))
        piece = next_slice(batch_infos(plan, sweep_dir), SIZING_SHARE * seconds, PRIOR_RATES,
                           budget)
    if piece is None:
        return {"done": True, "note": "every batch of the study has reached its length"}
    rates = train_slice(sweep_dir, plan, piece, seconds - (time.perf_counter() - began))
    device = jax.devices()[0].device_kind
    about = {"experiment": plan.experiment.name, "slice": piece.to_json(), "device": device,
             "rates": rates, "wall_s": round(time.perf_counter() - began, 1)}
    manifest = pack(sweep_dir, piece.batches, piece.episodes, out, about)
    return {k: manifest[k] for k in ("slice", "device", "rates", "episodes", "updates", "parts")}


# ----------------------------------------------------------------------------- back home
def merge(returned: Path, local: Path = LOCAL) -> dict[str, Any]:
    """Unpacks a returned pack and puts its batches into the whole study's folder `local`
    (made from it the first time), each batch folder replaced by a rename; refuses a batch that
    went backwards (a pack collected twice, or out of order). Returns the pack's manifest."""
    from vaco_jax.infra.run_folder import read_status

    local.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=local.parent, prefix=".collect.") as temporary:
        fresh = Path(temporary) / "sweep"
        manifest = unpack(returned, fresh)
        if not local.exists():
            fresh.rename(local)
            return manifest
        for name in manifest["updates"]:
            new, old = fresh / "runs" / name, local / "runs" / name
            before = (read_status(old) or {}).get("updates_done", -1) if old.is_dir() else -1
            if read_status(new)["updates_done"] <= before:
                raise ValueError(f"batch {name}: the pack holds {read_status(new)['updates_done']}"
                                 f" updates, the study {before} already: not merged")
        for name in manifest["updates"]:
            new, old = fresh / "runs" / name, local / "runs" / name
            if old.exists():
                old.rename(Path(temporary) / f"old-{name}")
            new.rename(old)
    return manifest


def write_report(local: Path = LOCAL, out: Path = REPORT, lease: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """The study's report of every batch as far as it has trained (`batch_table` reads a
    partial batch up to its updates done), its title naming the steps done; and `lease_study.json`:
    each lease's device, slice and rates, and the steps done per batch."""
    import pandas as pd

    from vaco_jax.experiment import load_sweep
    from vaco_jax.experiment.folder import batch_dir
    from vaco_jax.experiment.results import batch_table, write_experiment_report
    from vaco_jax.infra import io

    plan = load_sweep(local)
    tables = [t for t in (batch_table(plan.experiment, b, batch_dir(local, b))
                          for b in plan.batches if batch_dir(local, b).is_dir()) if t is not None]
    steps = {i.name: i.updates_done * i.steps_per_update for i in batch_infos(plan, local)}
    full = plan.experiment.groups[0].config.num_updates * plan.experiment.groups[0].config.steps_per_update
    note = (f"{min(steps.values()) / 1e6:.1f}M to {max(steps.values()) / 1e6:.1f}M of "
            f"{full / 1e6:.1f}M steps per run so far")
    write_experiment_report(plan.experiment, pd.concat(tables, ignore_index=True), out, note)
    history = io.read_json(out / MANIFEST, "") if (out / MANIFEST).is_file() else {"leases": []}
    if lease is not None:
        history["leases"].append({k: lease.get(k) for k in ("device", "slice", "rates",
                                                             "episodes", "wall_s")})
    history["steps_per_run"] = steps
    io.write_json(out / MANIFEST, history)
    return history


def measured_rates(history: Mapping[str, Any]) -> dict[str, float]:
    """The newest rate measured per task, else the prior."""
    rates = dict(PRIOR_RATES)
    for lease in history.get("leases", []):
        rates.update(lease.get("rates") or {})
    return rates


def prepare(local: Path, upload: Path, seconds: float, rates: Mapping[str, float],
            budget: int = PACK_BUDGET) -> Slice | None:
    """Writes into `upload` what the next call carries: the next slice, and its batches'
    state where they have any (a batch not started yet starts on the GPU)."""
    from vaco_jax.experiment import load_sweep

    plan = load_sweep(local)
    piece = next_slice(batch_infos(plan, local), seconds, rates, budget)
    if upload.exists():
        shutil.rmtree(upload)
    if piece is None:
        return None
    started = [b for b in piece.batches if (local / "runs" / b / "checkpoint").is_dir()]
    pack(local, started, piece.episodes, upload, {"next": piece.to_json()})
    return piece
