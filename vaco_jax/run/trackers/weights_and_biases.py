"""`--log wandb`: one Weights & Biases run per run, its files under `<out>/wandb`.

W&B's own environment variables apply (`WANDB_MODE=offline` needs no account, `WANDB_ENTITY`,
`WANDB_API_KEY`, ...); `WANDB_PROJECT` names the project, `vaco_jax` by default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vaco_jax.infra.run_folder import WANDB_DIR
from vaco_jax.run.trackers.base import LoggedRun, Tracker

PROJECT = "vaco_jax"


class WandB(Tracker):
    """Each run a W&B run in its configuration's group, tagged with its algorithm, task and
    lag, its description as its config, each update's metrics one history row at
    `step=update`. A resumed run continues its W&B run (its id is kept in the progress file); a
    run stopped before its end is finished as failed."""

    folder = WANDB_DIR

    def __init__(self, out: str | Path):
        try:
            import wandb  # imported only when a run asks for it: an optional extra
        except ImportError:
            # Refused like any input this machine cannot serve: in one line, before any work.
            raise ValueError("--log wandb needs the wandb package, which is not installed: "
                             "pip install 'vaco-jax[wandb]' (or log with --log tensorboard)"
                             ) from None
        super().__init__(out)
        self._wandb = wandb

    def _start(self, run: LoggedRun, saved: dict[str, Any]) -> Any:
        handle = self._wandb.init(
            project=os.environ.get("WANDB_PROJECT") or PROJECT, dir=self._out,
            id=saved.get("id"), resume="allow" if "id" in saved else None, name=run.name,
            group=run.group, tags=run.tags, config=dict(run.about),
            # Several runs live in this process at once; each would print a banner and a
            # summary, and would capture the program's console (its progress bars) as its own.
            reinit="create_new", settings=self._wandb.Settings(silent=True, console="off"))
        saved["id"] = handle.id
        return handle

    def _log(self, handle: Any, rows: list[tuple[int, dict[str, float]]]) -> None:
        for update, values in rows:
            handle.log(values, step=update)

    def _finish(self, handle: Any, completed: bool) -> None:
        handle.finish(exit_code=0 if completed else 1)
