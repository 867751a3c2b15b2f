"""What every tracker shares: the runs it logs and what it has logged of them.

A tracker logs the runs of one output folder `out` (a run folder, or a sweep folder whose runs
are logged across its batches) into `<out>/<folder>`, recorded in the folder's manifest as a
tree so that an overwrite removes it. After each compiled chunk it logs, per run, every update
not logged yet, and keeps in `<out>/<folder>/logged.json` each run's last update logged (and
what its tool needs to continue the run, a W&B run's id): a resumed run, or a sweep's resumed
batch, logs each update once, whichever checkpoint it restored, and a tracker first asked for
on the resume of a run that still trains logs its whole history at its next chunk. Runs and
sweep batches that had finished before the resume train no chunk, so nothing of theirs is
logged.
"""

from __future__ import annotations

import abc
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from vaco_jax import testbeds
from vaco_jax.core.config import Config
from vaco_jax.infra import io, manifest, records

if TYPE_CHECKING:
    from vaco_jax.run.driver import Driver, TrainingResult

PROGRESS_FILE = "logged.json"
MAX_TOOL_ID = 256
"""The longest id of a run in a tracking tool that `logged.json` may hold."""


@dataclasses.dataclass(frozen=True)
class LoggedRun:
    """One run as trackers log it: `name` (its event folder, its W&B run's name; unique in the
    output folder), `row` (its row of the driver's metrics), `group` (the runs of one
    configuration, seeds aside) and `about` (`describe`: what tools show and filter it by)."""

    name: str
    row: int
    group: str
    about: Mapping[str, Any]

    @property
    def tags(self) -> list[str]:
        about = self.about
        return [about["algo"], about["task"], f"lag={about['lag_model']}:{about['lag']:g}"]

    @property
    def columns(self) -> dict[str, str | float]:
        """The scalars of `about`, its hyper-parameters among them: the columns of a tool's
        table of runs."""
        return {**{k: v for k, v in self.about.items() if isinstance(v, (str, int, float))},
                **self.about["hparams"]}


def describe(config: Config, hparams: Mapping[str, float], seed: int,
             **extra: Any) -> dict[str, Any]:
    """A run's description: testbed, task, algorithm, lag, seed, `extra`, its hyper-parameters
    and its whole config."""
    testbed = testbeds.named(config.testbed)
    return {"testbed": testbed.name, "task": testbed.task(config), "algo": config.algo,
            "lag_model": config.lag_model.name, "lag": hparams["lag"], "seed": seed, **extra,
            "hparams": dict(hparams), "config": config.to_dict()}


def run_hparams(hparams: Any, row: int) -> dict[str, float]:
    """Run `row`'s values of stacked hyper-parameters (leaves `[R]`), each float32 as its
    shortest decimal (0.0003, not 0.0003000000142), as it was given."""
    return {name: float(str(np.asarray(values)[row])) for name, values in hparams.values.items()}


def seed_runs(driver: Driver, group: str) -> list[LoggedRun]:
    """The runs of a driver of one configuration over seeds (`vaco-jax train`, `tokens`),
    named `seed=S`, all in `group`."""
    return [LoggedRun(name=f"seed={seed}", row=row, group=group,
                      about=describe(driver.config, run_hparams(driver.hparams, row), seed))
            for row, seed in enumerate(driver.seeds)]


class Tracker(abc.ABC):
    """Logs runs' per-update metrics to one tool, into `<out>/<folder>`. The base decides what
    to log and when a run is finished; a tool opens a run (`_start`), logs updates to it
    (`_log`) and finishes it (`_finish`)."""

    folder: str

    def __init__(self, out: str | Path):
        self._out = Path(out)
        self._open: dict[str, Any] = {}  # run name -> the tool's handle of the run
        self._progress: dict[str, dict[str, Any]] | None = None  # read at the first chunk

    @property
    def _progress_path(self) -> Path:
        return self._out / self.folder / PROGRESS_FILE

    def _read_progress(self) -> dict[str, dict[str, Any]]:
        """What an earlier process logged: per run, the last update logged and, where its tool
        keeps one, the id it continues under (a W&B run's)."""
        saved = records.load_json(self._progress_path, records.TRACKER_PROGRESS,
                                  "remove it to log every update again")["runs"]
        progress = {}
        for name, run in saved.entries():
            progress[name] = {"logged_until": run["logged_until"].integer(-1, records.MAX_COUNT)}
            if run.get("id") is not None:
                progress[name]["id"] = run["id"].string(MAX_TOOL_ID)
        return progress

    def log(self, runs: Sequence[LoggedRun], result: TrainingResult) -> None:
        """Logs the updates of `runs` in `result` not logged yet; finishes the runs when the
        result is finished."""
        if self._progress is None:  # at the first chunk: the run now holds its folder
            manifest.extend(self._out, {self.folder: manifest.TREE})
            self._progress = (self._read_progress() if self._progress_path.is_file() else {})
        names = list(result.metrics)
        for run in runs:
            saved = self._progress.setdefault(run.name, {"logged_until": -1})
            first, last = saved["logged_until"] + 1, result.updates_done
            if first <= last:
                if run.name not in self._open:
                    self._open[run.name] = self._start(run, saved)
                values = np.stack([result.metrics[n][run.row, first:last + 1] for n in names])
                rows = [(update, {n: float(v) for n, v in zip(names, column) if np.isfinite(v)})
                        for update, column in zip(range(first, last + 1), values.T)]
                self._log(self._open[run.name], [(update, row) for update, row in rows if row])
                saved["logged_until"] = last
            if result.finished and run.name in self._open:
                self._finish(self._open.pop(run.name), completed=True)
        io.write_json(self._progress_path, {"runs": self._progress})

    def close(self) -> None:
        """Finishes the runs still open: they stopped before their end (an error, an
        interruption)."""
        while self._open:
            self._finish(self._open.popitem()[1], completed=False)

    @abc.abstractmethod
    def _start(self, run: LoggedRun, saved: dict[str, Any]) -> Any:
        """Opens `run` in the tool, continuing it where `saved` (its entry of the progress file,
        which the tool may add to) says something was logged before."""

    @abc.abstractmethod
    def _log(self, handle: Any, rows: list[tuple[int, dict[str, float]]]) -> None:
        """Logs each update's finite metrics."""

    @abc.abstractmethod
    def _finish(self, handle: Any, completed: bool) -> None:
        """Closes the run, `completed` or stopped before its end."""
