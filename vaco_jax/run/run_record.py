"""What a driver's runs are and what they leave in their folder: their identity, the checks of a
folder to resume, the checkpoint to resume from, and the result files.

Files written to the output folder:
- `config.json`: the testbed, its resolved config, each run's seed and hyper-parameters, and
  the provenance (package versions, code version, devices: `vaco_jax.infra.provenance`);
- `metrics.csv` and `metrics.parquet`: one row per run per update, plus an update-0 row holding
  the initial policy's evaluation;
- `status.json`: progress and, per run, whether and when it diverged;
- `checkpoint/`: the newest checkpoints (`vaco_jax.run.checkpoint`).

Config, status and every checkpoint carry the run's identity, a hash of its testbed, config,
seeds and hyper-parameters; `config.json` also holds the run options a resume needs (the chunk
length and the number of checkpoints kept), so a resume needs nothing but the folder. Resuming
restores the newest intact checkpoint of this run (skipping damaged ones with a warning) and
cuts the metrics back to it. Across processes only process 0 reads and writes the folder: it
saves the state gathered to it (so a checkpoint is the same whatever the number of processes
that wrote it, and resumes on any number), and on a resume it restores the newest checkpoint
and sends it to the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from vaco_jax.core.config import Config, HParamsBase
from vaco_jax.core.trainer import RunState
from vaco_jax.infra import io, manifest, records, run_folder
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.run.distributed import (from_process_0, host_copy, is_writer, several,
                                      shared_from_process_0)
from vaco_jax.infra.provenance import provenance
from vaco_jax.infra.run_folder import latest_finite, warn
from vaco_jax.core import config_compat as compat
from vaco_jax.testbeds import AnyTestbed


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock time of one `Driver.run` call."""

    # Compiling its programs, and computing the initial state and its first evaluation with
    # them (a warm start's training excluded).
    compile_seconds: float
    train_seconds: float  # its chunks, with their result files and checkpoints
    updates: int  # updates it trained (0 for a finished run resumed)


@dataclasses.dataclass
class TrainingResult:
    config: Config
    seeds: list[int]
    hparams: HParamsBase  # the testbed's hyper-parameters, leaves [R]
    metrics: dict[str, np.ndarray]  # [R, num_updates + 1]; row 0 is the initial evaluation
    diverged: np.ndarray  # [R] bool
    diverged_at: np.ndarray  # [R] int, -1 where the run stayed finite
    updates_done: int
    state: RunState | None = None  # the trainer's state, leaves [R, ...]
    timing: Timing | None = None  # set on the result `Driver.run` returns

    @property
    def complete(self) -> bool:
        return self.updates_done == self.config.num_updates

    @property
    def finished(self) -> bool:
        """Complete, or stopped early because every run diverged: nothing is left to train."""
        return self.complete or bool(self.diverged.all())

    def table(self) -> pd.DataFrame:
        """One row per run per update (update 0 = initial evaluation)."""
        num_runs, rows = len(self.seeds), self.updates_done + 1
        frame = {"run": np.repeat(np.arange(num_runs), rows),
                 "seed": np.repeat(np.asarray(self.seeds), rows),
                 "update": np.tile(np.arange(rows), num_runs)}
        for name, values in self.metrics.items():
            frame[name] = values[:, :rows].reshape(-1)
        return pd.DataFrame(frame)


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """Runs of one config on its testbed (`seeds[i]` with `hparams[i]`, leaves `[R]`), as their
    folder records them."""

    testbed: AnyTestbed
    config: Config
    seeds: list[int]
    hparams: HParamsBase
    # The identity a resumed run's folder recorded, which a record older than one of today's
    # config fields hashed without that field; None: the one `describe` hashes to.
    recorded_identity: str | None = None

    @property
    def identity(self) -> str:
        """A hash of `describe()`: testbed, config, seeds and hyper-parameters, whatever fields
        they have; for a resumed run, the identity its folder recorded."""
        if self.recorded_identity is not None:
            return self.recorded_identity
        text = json.dumps(self.describe(), sort_keys=True, default=io.jsonable)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        hparams = {name: values.tolist() for name, values in self.hparams.record().items()}
        return {"testbed": self.testbed.name, "config": cfg.to_dict(), "seeds": self.seeds,
                "hparams": hparams, "num_updates": cfg.num_updates,
                "steps_per_update": cfg.steps_per_update,
                "updates_per_period": cfg.updates_per_period}

    def check_resumable(self, out: Path) -> dict[str, Any]:
        """The saved `config.json`, if it describes these runs. Its config is compared as
        `from_dict` reads it today (`compat.config_as_now`)."""
        run_folder.check_to_resume(out)
        saved = run_folder.saved_config(out)
        current = json.loads(json.dumps(self.describe(), default=io.jsonable))
        recorded = {k: saved.get(k) for k in current}
        # A knob these runs do not read decides nothing: records list every built-in one.
        held = set(self.hparams.names)
        for record in (recorded, current):
            if isinstance(record.get("hparams"), dict):
                record["hparams"] = {k: v for k, v in record["hparams"].items() if k in held}
        try:
            recorded["config"] = compat.config_as_now(type(self.config), recorded["config"])
        except (TypeError, AttributeError, KeyError) as error:  # a forged config's shape
            raise ValueError(f"cannot resume {str(out)!r}: its config.json does not describe a "
                             f"run ({type(error).__name__}: {records.shown(error, 200)}); start "
                             f"the run again with --overwrite") from None
        if recorded != current:
            raise ValueError(f"cannot resume {str(out)!r}: its config.json describes a different run")
        return saved

    def resumed(self, saved: dict[str, Any]) -> RunRecord:
        """This record under the identity its saved `config.json` recorded."""
        return dataclasses.replace(self, recorded_identity=saved.get("run_identity"))

    def start_folder(self, out: Path, run_options: dict[str, Any]) -> None:
        """Records a fresh run's files in the folder's manifest and writes its `config.json`."""
        manifest.record(out, run_folder.RUN_FILES)
        io.write_json(out / run_folder.CONFIG_FILE, {
            **self.describe(), "run_identity": self.identity, "run_options": run_options,
            "provenance": provenance()})

    def result(self, metrics: dict[str, np.ndarray], state: RunState,
               periods_done: int) -> TrainingResult:
        updates_done = periods_done * self.config.updates_per_period
        diverged, diverged_at = _divergence(metrics, updates_done)
        return TrainingResult(config=self.config, seeds=self.seeds, hparams=self.hparams,
                              metrics=metrics, diverged=diverged, diverged_at=diverged_at,
                              updates_done=updates_done, state=state)

    def write(self, out: Path, result: TrainingResult) -> None:
        """The metrics table and the status (process 0 only)."""
        if not is_writer():
            return
        score = self.testbed.score
        run_folder.write_results(out, result.table(), {
            "run_identity": self.identity, "updates_done": result.updates_done,
            "num_updates": self.config.num_updates, "complete": result.complete,
            "finished": result.finished,
            "runs": [{"run": i, "seed": s, "diverged": bool(result.diverged[i]),
                      "diverged_at": int(result.diverged_at[i]),
                      f"final_{score}": float(latest_finite(result.metrics[score])[i])}
                     for i, s in enumerate(self.seeds)]})

    def saved(self, result: TrainingResult, checkpoints: Checkpoints | None) -> str:
        """What an interrupted run has saved, for its message."""
        done = f"stopped after update {result.updates_done} of {self.config.num_updates}"
        if checkpoints is None:
            return f"{done}; nothing is saved (no output folder)"
        steps = checkpoints.steps()
        if not steps:
            return (f"{done}, before its first checkpoint: its config and its initial evaluation "
                    f"are saved, and resuming starts the run from the beginning")
        return (f"{done}; its results and its checkpoint at update "
                f"{steps[0] * self.config.updates_per_period} are saved")

    def restore(self, checkpoints: Checkpoints, state: RunState, metrics: dict[str, np.ndarray]
                ) -> tuple[int, RunState, dict[str, np.ndarray]] | None:
        """`(periods done, state, metrics)` of the newest readable checkpoint, the state as NumPy
        arrays shaped like `state` and the metrics cut back to it; None if there is none."""
        restored = _restore(checkpoints, {"state": state, "metrics": metrics})
        if restored is None:
            return None
        periods_done, tree = restored
        # In the testbed's order of metrics (the restored tree's keys are sorted).
        return periods_done, tree["state"], _cut_back(
            {k: np.asarray(tree["metrics"][k]) for k in metrics},
            periods_done * self.config.updates_per_period)


def savable(state: RunState) -> RunState:
    """The state as process 0 saves it: across processes gathered to it (every process takes
    part), else as it is (Orbax saves sharded arrays of one process itself)."""
    return jax.tree.map(host_copy, state) if several() else state


def _divergence(metrics: dict[str, np.ndarray],
                updates_done: int) -> tuple[np.ndarray, np.ndarray]:
    """Per run, whether it diverged by `updates_done` and the (1-based) update at which it did
    (-1 if not), read from the per-update `diverged` metric; a testbed without it marks none."""
    num_runs = next(iter(metrics.values())).shape[0]
    if "diverged" not in metrics:
        return np.zeros(num_runs, bool), np.full(num_runs, -1)
    flags = metrics["diverged"][:, :updates_done + 1] == 1  # row 0, the initial policy: never
    diverged = flags.any(axis=1)
    return diverged, np.where(diverged, np.argmax(flags, axis=1), -1)


def _cut_back(metrics: dict[str, np.ndarray], updates_done: int) -> dict[str, np.ndarray]:
    """The metrics with every update after `updates_done` blanked (NaN)."""
    for values in metrics.values():
        values[:, updates_done + 1:] = np.nan
    return metrics


def _restore(checkpoints: Checkpoints, like: dict[str, Any]) -> tuple[int, Any] | None:
    """The newest readable checkpoint as `(periods done, tree)` of NumPy arrays shaped like
    `like`, restored by process 0 (which warns about the damaged ones it skips) and sent to the
    others; None if there is none."""
    host = {"state": jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), like["state"]),
            "metrics": like["metrics"]}
    found: list[tuple[int, Any] | None] = []

    def newest() -> int | None:
        found.append(checkpoints.restore_latest(host, warn))
        return None if found[0] is None else found[0][0]
    step = from_process_0(newest)
    if step is None:
        return None
    tree = found[0][1] if found else host
    return step, shared_from_process_0(jax.tree.map(np.asarray, tree))
