"""A sweep continued one GPU lease at a time: `experiments/gpu_lag_study.toml` in slices.

A lease gives one call of under 10 minutes to the study, and a call returns at most 8 files of
16 MiB (64 MiB in all); what the next lease needs travels up with the checkout beside the 20 MB
of wheels. So a *slice* is the batches whose state fits `PACK_BUDGET`, trained from where they
stand to a common number of updates that the call's time allows (`next_slice`, pure). After
training, `benchmarks/lease_pack.py` packs the batches' folders and newest checkpoints into the
call's returned files and rebuilds them at the next lease, so the sweep engine resumes the
batches as it resumes any interrupted sweep (`run_sweep(..., batches, until_updates)`). Back
home, `merge` puts a returned slice into the whole study's folder, `write_report` renders its
report and `prepare` packs the next slice for the next lease to carry.

Episodes: when the slice's state with its environments' states fits, they are carried and a
continuation equals an uninterrupted run bit for bit (`tests/test_lease_study.py`). At the
paper's sizes they do not fit (an `ant` run's MJX states are 1.7 MB of its 3.1 MB), so
episodes restart: every environment starts again from the initial state it was first reset to
(the run's seed), an episode truncated once per lease.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.lease_pack import MANIFEST, Episodes, is_episode_leaf, named_leaves, pack, unpack

ROOT = Path(__file__).resolve().parent.parent
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
    return {k: manifest[k] for k in ("slice", "device", "rates", "episodes", "updates",
                                     "skipped_no_checkpoint", "parts")}


# ----------------------------------------------------------------------------- back home
def merge(returned: Path, local: Path = LOCAL) -> dict[str, Any]:
    """Unpacks a returned pack and puts its batches into the whole study's folder `local`
    (made from it the first time), each batch folder replaced by a rename; refuses a batch that
    went backwards (a pack collected twice, or out of order). Returns the pack's manifest."""
    from vaco_jax.experiment import load_sweep
    from vaco_jax.infra.run_folder import read_status

    local.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=local.parent, prefix=".collect.") as temporary:
        fresh = Path(temporary) / "sweep"
        manifest = unpack(returned, fresh)
        # The manifest came back from another machine: the folders it names are renamed here,
        # so each must be a batch of the study (a name like `../x` would reach outside it).
        unknown = sorted(set(manifest["updates"]) - {b.name for b in load_sweep(fresh).batches})
        if unknown:
            raise ValueError(f"{returned / MANIFEST}: `updates` names {unknown}, not batches of "
                             f"the study: not merged")
        if not local.exists():
            fresh.rename(local)
            return manifest
        for name in manifest["updates"]:
            new, old = fresh / "runs" / name, local / "runs" / name
            before = (read_status(old) or {}).get("updates_done", -1) if old.is_dir() else -1
            done = read_status(new)["updates_done"]
            if done <= before:
                raise ValueError(f"batch {name}: the pack holds {done} updates, the study "
                                 f"{before} already: not merged")
        for name in manifest["updates"]:
            new, old = fresh / "runs" / name, local / "runs" / name
            if old.exists():
                old.rename(Path(temporary) / f"old-{name}")
            new.rename(old)
    return manifest


def write_report(local: Path = LOCAL, out: Path = REPORT, lease: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """The study's report of every batch as far as it has trained (`batch_table` reads a
    partial batch up to its updates done), its title naming the leases' devices and the steps
    done (`progress_note`); and `lease_study.json`: each lease's device, slice and rates, and
    the steps done per batch. Returns that history."""
    import pandas as pd

    from vaco_jax.experiment import load_sweep
    from vaco_jax.experiment.folder import batch_dir
    from vaco_jax.experiment.results import batch_table, write_experiment_report
    from vaco_jax.infra import io

    plan = load_sweep(local)
    history = io.read_json(out / MANIFEST, "") if (out / MANIFEST).is_file() else {"leases": []}
    if lease is not None:
        history["leases"].append({k: lease.get(k) for k in ("device", "slice", "rates",
                                                             "episodes", "wall_s")})
    infos = batch_infos(plan, local)
    history["steps_per_run"] = {i.name: i.updates_done * i.steps_per_update for i in infos}
    history["progress"] = progress_note(history, infos)
    tables = [t for t in (batch_table(plan.experiment, b, batch_dir(local, b))
                          for b in plan.batches if batch_dir(local, b).is_dir()) if t is not None]
    if tables:
        write_experiment_report(plan.experiment, pd.concat(tables, ignore_index=True), out,
                                history["progress"])
    else:  # every batch's first period is still to come: the report says so, nothing else
        io.write_text(out / "report.md", f"# {plan.experiment.name}\n\n{history['progress']}: "
                                         f"no batch has finished a period yet.\n")
    io.write_json(out / MANIFEST, history)
    return history


def progress_note(history: Mapping[str, Any], infos: Sequence[BatchInfo]) -> str:
    """The devices the leases ran on and the steps each run has done of its length."""
    devices = sorted({str(lease.get("device")) for lease in history["leases"]})
    done = [i.updates_done * i.steps_per_update for i in infos]
    full = max(i.num_updates * i.steps_per_update for i in infos)
    return (f"{len(history['leases'])} lease(s) on {', '.join(devices) or 'no device yet'}: "
            f"{min(done):,} to {max(done):,} of {full:,} steps per run so far")


def measured_rates(history: Mapping[str, Any]) -> dict[str, float]:
    """The newest rate measured per task, else the prior."""
    rates = dict(PRIOR_RATES)
    for lease in history.get("leases", []):
        rates.update(lease.get("rates") or {})
    return rates


def upload_refusal(upload: Path, returned: Mapping[str, Any]) -> str | None:
    """Why `upload` may not be replaced unasked, or None: it is absent, or it named the slice
    that `returned` (a returned pack's manifest) trained, so the lease it was carried to has
    used it. Anything else (a slice no lease has run yet, an unreadable manifest) is refused."""
    if not upload.exists():
        return None
    try:
        named = json.loads((upload / MANIFEST).read_text()).get("next")
    except (OSError, ValueError, AttributeError):
        named = None
    if named is not None and named == returned.get("slice"):
        return None
    return (f"{upload} holds the slice {named} that this pack did not train "
            f"({returned.get('slice')}): pass --overwrite to replace it")


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
