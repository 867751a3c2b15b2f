"""`--log tensorboard`: one event folder per run, `<out>/tensorboard/<run>`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vaco_jax.infra.run_folder import TENSORBOARD_DIR
from vaco_jax.run.trackers.base import LoggedRun, Tracker


class TensorBoard(Tracker):
    """Each metric under its own name at its update. A run's first session also writes its
    description as the text `run` and its columns (`LoggedRun.columns`: algorithm, task, lag,
    seed, hyper-parameters) as the run's HParams session, by which TensorBoard's HParams
    dashboard tables and filters the runs; a resumed session adds an event file beside the
    earlier ones, `...from<first update it logs>`."""

    folder = TENSORBOARD_DIR

    def __init__(self, out: str | Path):
        from tensorboardX import SummaryWriter  # imported only when a run asks for it
        from tensorboardX.summary import hparams

        super().__init__(out)
        self._summary_writer, self._hparams = SummaryWriter, hparams

    def _start(self, run: LoggedRun, saved: dict[str, Any]) -> Any:
        # Event files are named by the second they are opened in: a resumed session that opens
        # in the same second as the one before would overwrite its file without a suffix of its
        # own, which also sorts the sessions as TensorBoard must read them.
        writer = self._summary_writer(str(self._out / self.folder / run.name),
                                      filename_suffix=f".from{saved['logged_until'] + 1:010d}")
        if saved["logged_until"] < 0:
            text = json.dumps(dict(run.about), indent=1, default=str)
            writer.add_text("run", f"```\n{text}\n```", 0)
            _, session_start, _ = self._hparams(run.columns, {})
            writer.file_writer.add_summary(session_start, 0)
        return writer

    def _log(self, handle: Any, rows: list[tuple[int, dict[str, float]]]) -> None:
        for update, values in rows:
            for name, value in values.items():
                handle.add_scalar(name, value, update)
        handle.flush()

    def _finish(self, handle: Any, completed: bool) -> None:
        handle.close()
