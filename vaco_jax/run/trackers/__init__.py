"""Experiment tracking: every per-update metric of every run, written between compiled chunks
(never inside the compiled program) to the tools users read runs with, `--log NAME`
(repeatable):
- `tensorboard` (`TensorBoard`): `<out>/tensorboard/<run>` event folders;
- `wandb` (`WandB`, the optional extra `vaco-jax[wandb]`): one W&B run per run.

A run of `vaco-jax train` or `tokens` is one seed, named `seed=S`, grouped by its run folder's
name; a sweep's run is named by its run id and grouped by its configuration (`base.LoggedRun`).
Each tool's folder is recorded in the output folder's manifest, and a resumed run or sweep
logs each update once (`base.Tracker`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import jax

from vaco_jax.run.trackers.base import LoggedRun, Tracker, describe, run_hparams, seed_runs
from vaco_jax.run.trackers.tensorboard import TensorBoard
from vaco_jax.run.trackers.weights_and_biases import WandB

if TYPE_CHECKING:
    from vaco_jax.run.driver import TrainingResult

TRACKERS: dict[str, type[Tracker]] = {"tensorboard": TensorBoard, "wandb": WandB}
FOLDERS = tuple(tracker.folder for tracker in TRACKERS.values())
"""The folders trackers write in an output folder."""


class Trackers(contextlib.AbstractContextManager):
    """The trackers of one output folder, `names` from `TRACKERS` (repeats ignored), each made
    at once so that a missing optional package is reported before anything compiles; closing
    them (leaving the context) finishes the runs still open."""

    def __init__(self, names: Sequence[str], out: str | Path):
        unknown = [name for name in names if name not in TRACKERS]
        if unknown:
            raise ValueError(f"--log must be one of {', '.join(TRACKERS)}, got {unknown[0]!r}")
        self._trackers = [TRACKERS[name](out) for name in dict.fromkeys(names)]

    def log(self, runs: Sequence[LoggedRun], result: TrainingResult) -> None:
        if jax.process_index() != 0:  # every process of a multi-host run holds every run's
            return                    # metrics; the one that writes files logs them
        for tracker in self._trackers:
            tracker.log(runs, result)

    def __exit__(self, *error: object) -> None:
        with contextlib.ExitStack() as closing:  # each is closed, whichever fails
            for tracker in self._trackers:
                closing.callback(tracker.close)


__all__ = ["FOLDERS", "TRACKERS", "LoggedRun", "TensorBoard", "Tracker", "Trackers", "WandB",
           "describe", "run_hparams", "seed_runs"]
