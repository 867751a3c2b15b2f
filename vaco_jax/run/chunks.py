"""The chunk loop: a run's chunks one after another, each recorded in its folder and then shown
to the loop's observers (`ChunkObserver`): the progress bar, the divergence messages and the
caller's `on_chunk` (trackers, a sweep's bar).

After each chunk the loop writes the metrics so far and saves an Orbax checkpoint of the
complete state, so a resume continues exactly where it stopped. A run whose every seed diverged
is finished: it stops, and a resume trains it no further. A stop request (`StopRequests`) ends
the loop after the current chunk and its checkpoint; across processes a request that reaches
any of them stops all after the same chunk (`agreed_signal`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from vaco_jax.core.config import Config
from vaco_jax.core.trainer import RunState
from vaco_jax.infra.faults import fault_point
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.run.distributed import agreed_signal
from vaco_jax.run.program import Program
from vaco_jax.infra.run_folder import latest_finite
from vaco_jax.run.run_record import RunRecord, TrainingResult, savable
from vaco_jax.run.signals import StopRequests
from vaco_jax.testbeds import AnyTestbed


class ChunkObserver:
    """What the chunk loop tells of the runs, each method doing nothing unless overridden."""

    def start(self, result: TrainingResult) -> None:
        """Before the first chunk: the runs fresh, or as resumed."""

    def chunk(self, result: TrainingResult) -> None:
        """After each chunk, its results written and checkpointed."""

    def close(self) -> None:
        """After the last chunk, or on the way out of an error."""


class ProgressBar(ChunkObserver):
    """One run's steps (per seed, as the summary counts them: runs advance together), their rate
    and ETA, and the latest mean score; nothing unless `shown`."""

    def __init__(self, testbed: AnyTestbed, config: Config, shown: bool):
        self._testbed, self._config, self._shown = testbed, config, shown
        self._bar: tqdm | None = None
        self._updates = 0

    def start(self, result: TrainingResult) -> None:
        cfg, steps_name = self._config, self._testbed.steps_name
        steps_per_period = cfg.updates_per_period * cfg.steps_per_update
        self._updates = result.updates_done
        self._bar = tqdm(total=cfg.num_periods * steps_per_period,
                         initial=result.updates_done * cfg.steps_per_update, unit="",
                         unit_scale=True, disable=not self._shown, dynamic_ncols=True,
                         desc=f"{cfg.algo} on {self._testbed.task(cfg)}",
                         bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} " + steps_name
                                    + " per seed [{elapsed}<{remaining}, {rate_fmt}{postfix}]")

    def chunk(self, result: TrainingResult) -> None:
        self._bar.update((result.updates_done - self._updates) * self._config.steps_per_update)
        self._updates = result.updates_done
        score = latest_finite(result.metrics[self._testbed.score])
        self._bar.set_postfix({self._testbed.score_name: f"{np.nanmean(score):.2f}"})

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class DivergenceMessages(ChunkObserver):
    """Says on stdout each run that diverged, once, and when every run has: the run is then
    finished."""

    def __init__(self, seeds: Sequence[int]):
        self._seeds = seeds
        self._reported: set[int] = set()

    def start(self, result: TrainingResult) -> None:
        if result.finished and not result.complete:
            tqdm.write("every run diverged before this resume: the run is finished")

    def chunk(self, result: TrainingResult) -> None:
        for run in np.flatnonzero(result.diverged):
            if run not in self._reported:
                self._reported.add(run)
                tqdm.write(f"run {run} (seed {self._seeds[run]}) diverged: non-finite loss or "
                           f"parameters at update {result.diverged_at[run]}; it is stopped, "
                           f"the other runs continue")
        if result.finished and not result.complete:
            tqdm.write("every run diverged: the run is finished")


class ChunkCallback(ChunkObserver):
    """Calls `on_chunk(result)` after each chunk."""

    def __init__(self, on_chunk: Callable[[TrainingResult], None]):
        self._on_chunk = on_chunk

    def chunk(self, result: TrainingResult) -> None:
        self._on_chunk(result)


@dataclasses.dataclass(frozen=True)
class Session:
    """What one `Driver.run` call fixes for its chunks: where results go and when to stop."""

    out: Path | None
    checkpoints: Checkpoints | None
    stop: StopRequests
    per_chunk: int  # evaluation periods per compiled call
    max_chunks: int | None


def train_chunks(program: Program, record: RunRecord, state: RunState,
                 metrics: dict[str, np.ndarray], periods_done: int, session: Session,
                 observers: Sequence[ChunkObserver]) -> TrainingResult:
    """Trains the runs of `record` from `state` (`periods_done` periods done, `metrics` filled
    so far) until they finish, `session.max_chunks` chunks ran or a stop is requested."""
    cfg, score = record.config, record.testbed.score
    hparams = program.place(record.hparams)
    result = record.result(metrics, state, periods_done)
    chunks = 0
    for observer in observers:
        observer.start(result)
    try:
        while (not result.finished
               and (session.max_chunks is None or chunks < session.max_chunks)
               and agreed_signal(session.stop.signum) is None):
            # The last chunk stops at the run's end (a resumed run's chunk length need not
            # divide the periods left).
            periods = min(session.per_chunk, cfg.num_periods - periods_done)
            state, per_update, scores = program.run_chunk(state, hparams, periods)
            first = periods_done * cfg.updates_per_period + 1
            for name, values in per_update.items():
                metrics[name][:, first:first + periods * cfg.updates_per_period] = values
            for p, values in enumerate(scores):
                metrics[score][:, first + (p + 1) * cfg.updates_per_period - 1] = values
            # The chunk's collectives all come before its files: a process lost while
            # process 0 writes them is noticed at the next chunk, after its checkpoint.
            saved_state = savable(state) if session.out is not None else None
            periods_done += periods
            chunks += 1
            fault_point("chunk", periods_done)
            result = record.result(metrics, state, periods_done)
            if session.out is not None:
                record.write(session.out, result)
                session.checkpoints.save(
                    periods_done, {"state": saved_state, "metrics": metrics},
                    before_commit=lambda step=periods_done: fault_point("checkpoint", step))
            for observer in observers:
                observer.chunk(result)
    finally:
        for observer in observers:
            observer.close()
        if session.checkpoints is not None:
            session.checkpoints.close()
    result = record.result(metrics, state, periods_done)
    if session.out is not None:
        record.write(session.out, result)
    return result
