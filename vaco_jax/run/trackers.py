"""Experiment tracking: every per-update metric of every run, written between compiled chunks
(never inside the compiled program) to the tools users read runs with.

`TensorBoard` writes one event folder per run, `<out>/tensorboard/seed=<seed>`, the run's
config and hyper-parameters as its text, each metric under its own name at its update. A
resumed run logs from the update its checkpoint restored, so no update is logged twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vaco_jax.run import manifest
from vaco_jax.run.run_folder import TENSORBOARD_DIR

TRACKERS = ("tensorboard",)


class TensorBoard:
    """Logs the runs of one driver (`seeds`, `described`: `Driver.describe()`) into
    `<out>/tensorboard/`, from the update after `logged_until` on. The event folders are made
    at the first chunk, when the run holds its folder, and recorded in its manifest."""

    def __init__(self, out: str | Path, seeds: Sequence[int], described: dict[str, Any],
                 logged_until: int = -1):
        self._out, self._seeds, self._described = Path(out), list(seeds), described
        self._logged_until = logged_until  # the last update already logged
        self._writers: list = []

    def _open(self) -> None:
        from tensorboardX import SummaryWriter  # imported only when a run asks for it

        manifest.record(self._out, {TENSORBOARD_DIR: manifest.TREE})
        for index, seed in enumerate(self._seeds):
            writer = SummaryWriter(str(self._out / TENSORBOARD_DIR / f"seed={seed}"))
            run = {**{k: v for k, v in self._described.items() if k != "seeds"}, "seed": seed,
                   "hparams": {k: v[index] for k, v in self._described["hparams"].items()}}
            writer.add_text("run", f"```\n{json.dumps(run, indent=1, default=str)}\n```", 0)
            self._writers.append(writer)

    def __call__(self, result: Any) -> None:
        """Logs the updates of `result` (a `TrainingResult`) not logged yet."""
        if not self._writers:
            self._open()
        first, last = self._logged_until + 1, result.updates_done
        for name, values in result.metrics.items():
            for index, writer in enumerate(self._writers):
                for update in range(first, last + 1):
                    value = float(values[index, update])
                    if np.isfinite(value):
                        writer.add_scalar(name, value, update)
        for writer in self._writers:
            writer.flush()
        self._logged_until = last

    def close(self) -> None:
        for writer in self._writers:
            writer.close()
