"""A sweep continued one GPU lease at a time: `experiments/gpu_lag_study.toml` in slices.

A lease gives one call of under 10 minutes to the study, and a call returns at most 8 files of
16 MiB (64 MiB in all); what the next lease needs travels up with the checkout beside the 20 MB
of wheels. So a *slice* is the batches whose state fits `PACK_BUDGET`, trained from where they
stand to a common number of updates that the call's time allows (`next_slice`, pure). After
training, `benchmarks/campaign/pack.py` packs the batches' folders and newest checkpoints into the
call's returned files and rebuilds them at the next lease, so the sweep engine resumes the
batches as it resumes any interrupted sweep (`run_sweep(..., batches, until_updates)`). Back
home, `merge` puts a returned slice into the whole study's folder, `write_report` renders its
report and `prepare` packs the next slice for the next lease to carry.

Episodes: when the slice's state with its environments' states fits, they are carried and a
continuation equals an uninterrupted run bit for bit (`tests/benchmarks/test_lease_study.py`).
At the paper's sizes they do not fit (an `ant` run's MJX states are 1.7 MB of its 3.1 MB), so
episodes restart: every environment starts again from the initial state it was first reset to
(the run's seed), an episode truncated once per lease.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from benchmarks.campaign.pack import (is_episode_leaf, named_leaves, pack, packed_batches, unpack,
                                   write_batches, write_sweep_files)
from benchmarks.campaign.records import (MANIFEST, BatchState, Episodes, Lease, LeaseManifest, Pack,
                                      Slice, read_manifest)
from vaco_jax.infra import records

if TYPE_CHECKING:  # imported where used: the experiment's modules import JAX
    from vaco_jax.experiment import Batch

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "experiments" / "gpu_lag_study.toml"
LOCAL = ROOT / ".lease" / "gpu_lag_study"  # the whole study's sweep folder, kept here (ignored)
UPLOAD = ROOT / ".lease" / "upload"  # what the next call carries up: the next slice's pack
REPORT = ROOT / "experiments" / "results" / "gpu_lag_study"
# The slice's state before compression: under the 64 MiB returned less the campaign's archive
# and slack, and what carries up with the 20 MB of wheels.
PACK_BUDGET = 42 * 2 ** 20
# Steps/s of one batch of the study's runs before a lease measured one: `ant` from synchronous
# ppo at 16,384 environments (2.18M on an H100), `humanoid` from 0.74M at 4,096 (both with a
# 64x64 critic; the study's is 256x256, and vaco does more per update), rounded down.
PRIOR_RATES = {"ant": 1.6e6, "humanoid": 0.8e6}
PRIOR_RATE = 1e5  # any other task (the dry run's toy)
# A slice is sized on this share of the call's training seconds: the first group's compilation
# (25 to 40 s on an H100) and the unpacking come out of them.
SIZING_SHARE = 0.8


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


def run_bytes(config: Any, hparams: Any) -> tuple[int, int]:
    """Packed bytes of one run of `config`, (with, without) its environments' states: its
    training state's abstract shapes (nothing computed) and its float32 metrics."""
    import jax
    import jax.numpy as jnp

    from vaco_jax import testbeds

    testbed = testbeds.named(config.testbed)
    state = testbed.trainer(config).state_shapes(jax.ShapeDtypeStruct((2,), jnp.uint32), hparams)
    sizes = {n: math.prod(x.shape) * np.dtype(x.dtype).itemsize
             for n, x in named_leaves(state).items()}
    metrics = len(testbed.metrics) * (config.num_updates + 1) * 4
    restart = sum(v for n, v in sizes.items() if not is_episode_leaf(n)) + metrics
    return sum(sizes.values()) + metrics, restart


# ----------------------------------------------------------------------------- the slice
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
                               status.updates_done if status else 0, cfg.num_updates,
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
        piece = unpack(upload, sweep_dir, overwrite=True).next
        if piece is None:
            raise ValueError(f"{upload / MANIFEST}: names no slice to train (`next`)")
        plan = load_sweep(sweep_dir)
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
    return {k: manifest[k] for k in ("slice", "device", "rates", "episodes", "updates",
                                     "skipped_no_checkpoint", "parts")}


# ----------------------------------------------------------------------------- back home
def merge(returned: Pack, local: Path, study: Path) -> LeaseManifest:
    """Puts the batches of a returned pack (`read_pack`) into the whole study's folder `local`,
    each batch folder replaced by a rename. The pack came back from another machine, so the
    study decides what it holds, never the pack: its batches must be batches of the study's own
    plan (`local`'s; the first time, the plan the pack carries read against the study's own
    experiment file `study`), its experiment the study's, and each batch ahead of the study's
    (a pack collected twice, or out of order, is refused). Every refusal is one line and comes
    before anything is written. Returns the pack's manifest."""
    from vaco_jax.experiment import (batch_dir, load_experiment, load_sweep_to_resume,
                                     same_experiment)

    plan = load_sweep_to_resume(local) if local.exists() else returned.plan(
        load_experiment(study))
    batches = packed_batches(returned, plan)
    if not same_experiment(returned.experiment(), plan.experiment):
        raise ValueError(f"{returned.source}: the pack holds another experiment than the study "
                         f"{plan.experiment.name!r}: not merged")
    if local.exists():
        _check_ahead(batches, local)
    local.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=local.parent, prefix=".collect.") as temporary:
        fresh = Path(temporary) / "sweep"
        write_batches(returned, plan, fresh, batches)
        if not local.exists():
            write_sweep_files(returned, fresh, plan.experiment.source.encode("utf-8"))
            fresh.rename(local)
            return returned.manifest
        for batch, _ in batches:
            new, old = batch_dir(fresh, batch), batch_dir(local, batch)
            if old.exists():
                old.rename(Path(temporary) / f"old-{batch.name}")
            old.parent.mkdir(exist_ok=True)
            new.rename(old)
    return returned.manifest


def _check_ahead(batches: Sequence[tuple[Batch, BatchState]], local: Path) -> None:
    """Refuses a packed batch whose state is not ahead of the newest checkpoint the study holds
    of it (what a resume continues from: its status may lag behind, or be lost)."""
    from vaco_jax.experiment import batch_dir
    from vaco_jax.infra.run_folder import CHECKPOINT_DIR
    from vaco_jax.run.checkpoint import committed_steps

    for batch, state in batches:
        held = max(committed_steps(batch_dir(local, batch) / CHECKPOINT_DIR), default=-1)
        if state.periods <= held:
            raise ValueError(f"batch {batch.name}: the pack holds period {state.periods}, the "
                             f"study period {held} already: collected before, or out of order: "
                             f"not merged")


@dataclasses.dataclass(frozen=True)
class History:
    """The study's `lease_study.json` beside its report: each lease, the steps each run has
    done, and that as one line (`progress_note`)."""

    leases: tuple[Lease, ...]
    steps_per_run: Mapping[str, int]
    progress: str

    def to_json(self) -> dict[str, Any]:
        return {"leases": [lease.to_json() for lease in self.leases],
                "steps_per_run": dict(self.steps_per_run), "progress": self.progress}


def read_leases(path: Path) -> tuple[Lease, ...]:
    """The leases of the study's history in `path` (none before the first)."""
    if not path.exists():
        return ()
    history = records.load_json(path, records.LEASE_MANIFEST)
    return tuple(Lease.from_json(lease) for lease in history["leases"].items())


def write_report(local: Path = LOCAL, out: Path = REPORT, lease: Lease | None = None) -> History:
    """The study's report of every batch as far as it has trained (`batch_table` reads a
    partial batch up to its updates done), its title naming the leases' devices and the steps
    done (`progress_note`); and `lease_study.json`: each lease's device, slice and rates, and
    the steps done per batch. Returns that history."""
    import pandas as pd

    from vaco_jax.experiment import batch_dir, load_sweep
    from vaco_jax.experiment.results import batch_table, write_experiment_report
    from vaco_jax.infra import io

    plan = load_sweep(local)
    leases = read_leases(out / MANIFEST) + ((lease,) if lease is not None else ())
    infos = batch_infos(plan, local)
    history = History(leases, {i.name: i.updates_done * i.steps_per_update for i in infos},
                      progress_note(leases, infos))
    tables = [t for t in (batch_table(plan.experiment, b, batch_dir(local, b))
                          for b in plan.batches if batch_dir(local, b).is_dir()) if t is not None]
    if tables:
        write_experiment_report(plan.experiment, pd.concat(tables, ignore_index=True), out,
                                history.progress)
    else:  # every batch's first period is still to come: the report says so, nothing else
        io.write_text(out / "report.md", f"# {plan.experiment.name}\n\n{history.progress}: "
                                         f"no batch has finished a period yet.\n")
    io.write_json(out / MANIFEST, history.to_json())
    return history


def progress_note(leases: Sequence[Lease], infos: Sequence[BatchInfo]) -> str:
    """The devices the leases ran on and the steps each run has done of its length."""
    devices = sorted({str(lease.device) for lease in leases})
    done = [i.updates_done * i.steps_per_update for i in infos]
    full = max(i.num_updates * i.steps_per_update for i in infos)
    return (f"{len(leases)} lease(s) on {', '.join(devices) or 'no device yet'}: "
            f"{min(done):,} to {max(done):,} of {full:,} steps per run so far")


def measured_rates(leases: Sequence[Lease]) -> dict[str, float]:
    """The newest rate measured per task, else the prior."""
    rates = dict(PRIOR_RATES)
    for lease in leases:
        rates.update(lease.rates)
    return rates


def upload_refusal(upload: Path, returned: LeaseManifest) -> str | None:
    """Why `upload` may not be replaced unasked, or None: it is absent, or it named the slice
    that `returned` (a returned pack's manifest) trained, so the lease it was carried to has
    used it. Anything else (a slice no lease has run yet, an unreadable manifest) is refused."""
    if not upload.exists():
        return None
    try:
        named = read_manifest(upload).next
    except ValueError:
        named = None
    trained = returned.lease.trained
    if named is not None and named == trained:
        return None
    return (f"{upload} holds the slice {named and named.to_json()} that this pack did not "
            f"train ({trained and trained.to_json()}): pass --overwrite to replace it")


def prepare(local: Path, upload: Path, seconds: float, rates: Mapping[str, float],
            budget: int = PACK_BUDGET) -> Slice | None:
    """Writes into `upload` what the next call carries: the next slice, and its batches'
    state where they have any (a batch not started yet starts on the GPU; `pack` leaves it
    out). Packed beside `upload` and renamed into place, so a failed pack keeps the old one."""
    from vaco_jax.experiment import load_sweep

    plan = load_sweep(local)
    piece = next_slice(batch_infos(plan, local), seconds, rates, budget)
    upload.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=upload.parent, prefix=f".{upload.name}.") as temporary:
        fresh = Path(temporary) / "upload"
        if piece is not None:
            pack(local, piece.batches, piece.episodes, fresh, {"next": piece.to_json()})
        if upload.exists():
            upload.rename(Path(temporary) / "old")
        if piece is not None:
            fresh.rename(upload)
    return piece
