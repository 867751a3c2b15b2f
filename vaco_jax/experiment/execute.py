"""Running a sweep: every unfinished batch of its plan, each group's program compiled once.

Every batch of a group reuses the group's single compilation, and the next group compiles in a
background thread while the current one trains. `sweep` starts (or resumes) a sweep folder, runs
it and writes its report.

Across processes (`vaco_jax.run.distributed`) process 0 alone locks, plans, reads and writes the
folder; the others get the plan and which batches are left from it, and run the same batches in
the same order. The next group then compiles when its turn comes, not in the background: a
background compilation runs the group's first computations, whose collectives would interleave
with the current batch's differently on each process.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from concurrent import futures
from typing import Any, Callable, Collection, Sequence

import numpy as np
from tqdm.auto import tqdm

from vaco_jax.core.config import Config, HParamsBase
from vaco_jax.experiment import tune
from vaco_jax.experiment.folder import (batch_dir, batch_finished, load_sweep_to_resume,
                                        record_sweep, replan_sweep, start_sweep)
from vaco_jax.experiment.parts import Selection
from vaco_jax.experiment.plan import Batch, Plan
from vaco_jax.experiment.results import metrics_readable, tuning_choices, write_sweep_report
from vaco_jax.experiment.spec import Experiment, parse_experiment
from vaco_jax.run.background import in_background
from vaco_jax.run.driver import Driver, TrainingResult
from vaco_jax.infra import records
from vaco_jax.infra.run_folder import CONFIG_FILE, read_status
from vaco_jax.infra.lock import folder_lock
from vaco_jax.infra.faults import fault_point
from vaco_jax.report import summary as report_summary
from vaco_jax.report.summary import Summary
from vaco_jax.run.distributed import agreed_signal, from_process_0, is_writer, several
from vaco_jax.run.signals import (Interrupted, exit_on_signals, raise_if_interrupted,
                                  requested)
from vaco_jax.run.trackers import LoggedRun, Trackers, describe, run_hparams

def _compiled_driver(config: Config, hparams: HParamsBase, seeds: Sequence[int]) -> Driver:
    fault_point("background_compile", 0)
    driver = Driver(config, hparams, seeds)
    driver.compile()
    return driver


class _Programs:
    """One sweep's drivers by (config, number of runs), the last few kept: a batch of a config
    and size seen before reuses that driver's compiled programs. `prefetch` builds and compiles
    a later batch's driver in a background thread, so that compilation overlaps the current
    batch."""

    def __init__(self, capacity: int = 4):
        self._capacity = capacity
        self._drivers: collections.OrderedDict[tuple[Config, int], futures.Future] = (
            collections.OrderedDict())

    def prefetch(self, config: Config, hparams: HParamsBase, seeds: Sequence[int]) -> None:
        self._entry(config, hparams, seeds, background=True)

    def driver(self, config: Config, hparams: HParamsBase, seeds: Sequence[int]) -> Driver:
        """The driver of these runs; it compiles on its first run unless prefetched."""
        return self._entry(config, hparams, seeds, background=False).result().with_runs(
            hparams, seeds)

    def _entry(self, config: Config, hparams: HParamsBase, seeds: Sequence[int],
               background: bool) -> futures.Future:
        key = (config, len(seeds))
        if key not in self._drivers:
            if background:
                self._drivers[key] = in_background(_compiled_driver, config, hparams, seeds)
            else:
                built = Driver(config, hparams, seeds)  # cached only once built
                self._drivers[key] = futures.Future()
                self._drivers[key].set_result(built)
            if len(self._drivers) > self._capacity:
                self._drivers.popitem(last=False)
        self._drivers.move_to_end(key)
        return self._drivers[key]


def _batch_steps(plan: Plan, batch: Batch, updates: int) -> int:
    """Environment steps of the batch's real runs after `updates` updates."""
    return updates * plan.experiment.group(batch.group).config.steps_per_update * len(batch.runs)


def run_sweep(plan: Plan, out_dir: str | os.PathLike, *, progress: bool = True,
              on_chunk: Callable[[Batch, TrainingResult], None] | None = None,
              trackers: Trackers | None = None, groups: Collection[str] | None = None,
              batches: Collection[str] | None = None, until_updates: int | None = None) -> None:
    """Runs every unfinished batch of `plan` (of its `groups` and `batches`, if given) in
    `out_dir`, each only to `until_updates` updates if given (a slice of the sweep, continued by
    a later call),
    continuing a partial batch from its checkpoint and rebuilding the results of a finished one
    that cannot be read from its checkpoint. `on_chunk(batch, result)` runs after each chunk (written and checkpointed), and
    so do `trackers` (of `out_dir`), which log each real run of the batch (`logged_runs`).
    A SIGTERM/SIGINT stops the sweep after the current chunk (`Interrupted`), or at once
    between chunks (`vaco_jax.run.signals`)."""
    with _writer_lock(out_dir):
        if is_writer():
            record_sweep(out_dir, plan, new=False)
        _run_batches(plan, out_dir, _Programs(), progress=progress, on_chunk=on_chunk,
                     trackers=trackers, groups=groups, batches=batches,
                     until_updates=until_updates)


def _writer_lock(out_dir: str | os.PathLike) -> contextlib.AbstractContextManager:
    """The folder's lock, held by the process that writes it (process 0)."""
    return folder_lock(out_dir) if is_writer() else contextlib.nullcontext()


def logged_runs(plan: Plan, batch: Batch) -> list[LoggedRun]:
    """The batch's real runs (its padding aside) as trackers log them: named by run id,
    grouped by configuration (experiment, group, lag and grid point: the seeds of one
    configuration share it)."""
    experiment = plan.experiment
    group = experiment.group(batch.group)
    hparams = group.hparams(batch.runs)
    logged = []
    for row, index in enumerate(batch.runs):
        run = group.runs[index]
        point = "".join(f"/{name}={value:g}" for name, value in run.hparams.items())
        logged.append(LoggedRun(
            name=run.run_id, row=row,
            group=f"{experiment.name}/{group.name}/lag={run.lag:g}{point}",
            about=describe(group.config, run_hparams(hparams, row), run.seed,
                           experiment=experiment.name, run_id=run.run_id)))
    return logged


def _progress_so_far(plan: Plan, out_dir: str | os.PathLike) -> dict[str, Any]:
    """From the batch folders: each batch's environment steps done, the names of those left to
    run, and of those whose folder holds a run to resume."""
    steps = {b.name: _batch_steps(plan, b, plan.experiment.group(b.group).config.num_updates)
             for b in plan.batches}
    # A missing or unreadable status counts as unfinished: the batch resumes from its checkpoint.
    statuses = {b.name: read_status(batch_dir(out_dir, b)) for b in plan.batches}
    finished = {name: status is not None and status.finished for name, status in statuses.items()}
    return {"done": {b.name: steps[b.name] if finished[b.name] else
                     _batch_steps(plan, b, statuses[b.name].updates_done if statuses[b.name] else 0)
                     for b in plan.batches},
            "pending": [b.name for b in plan.batches if not finished[b.name]
                        or not metrics_readable(batch_dir(out_dir, b))],
            "resume": [b.name for b in plan.batches
                       if (batch_dir(out_dir, b) / CONFIG_FILE).is_file()]}


def _run_batches(plan: Plan, out_dir: str | os.PathLike, programs: _Programs, *, progress: bool,
                 on_chunk: Callable[[Batch, TrainingResult], None] | None,
                 trackers: Trackers | None, groups: Collection[str] | None,
                 batches: Collection[str] | None = None,
                 until_updates: int | None = None) -> None:
    steps = {b.name: _batch_steps(plan, b, plan.experiment.group(b.group).config.num_updates)
             for b in plan.batches}
    so_far = from_process_0(lambda: _progress_so_far(plan, out_dir))
    done = so_far["done"]
    pending = [b for b in plan.batches if b.name in so_far["pending"]
               and (groups is None or b.group in groups)
               and (batches is None or b.name in batches)]
    # The sweep's bar counts every run's steps together (a run's own bar counts per seed).
    with tqdm(total=sum(steps.values()), initial=sum(done.values()),
              unit=f" {plan.experiment.testbed.steps_name}", unit_scale=True, dynamic_ncols=True,
              disable=not progress, desc=f"sweep {plan.experiment.name}, all runs") as bar, \
            exit_on_signals():
        for index, batch in enumerate(pending):
            raise_if_interrupted()
            signum = agreed_signal(requested())
            if signum is not None:  # it arrived during the previous batch's last chunk
                raise Interrupted(signum, _sweep_saved(plan, out_dir, batch))
            upcoming = next((b for b in pending[index + 1:] if b.group != batch.group), None)
            if upcoming is not None and not several():
                programs.prefetch(*plan.driver_arguments(upcoming))
            driver = programs.driver(*plan.driver_arguments(batch))
            logged = logged_runs(plan, batch) if trackers is not None else []

            def chunk_done(result: TrainingResult, batch: Batch = batch,
                           logged: list[LoggedRun] = logged) -> None:
                now = _batch_steps(plan, batch, result.updates_done)
                bar.update(now - done[batch.name])
                done[batch.name] = now
                if on_chunk is not None:
                    on_chunk(batch, result)
                if trackers is not None:
                    trackers.log(logged, result)

            folder = batch_dir(out_dir, batch)
            resume = batch.name in so_far["resume"]
            start = time.perf_counter()
            try:
                result = driver.run(folder, resume=resume, overwrite=not resume,
                                    until_updates=until_updates, progress=progress,
                                    on_chunk=chunk_done)
            except Interrupted as stopped:
                raise Interrupted(stopped.signum, f"{_finished_count(plan, out_dir)} of "
                                  f"{len(plan.batches)} batches finished; batch {batch.name} "
                                  f"{stopped.saved}") from None
            bar.write(f"[{plan.batches.index(batch) + 1}/{len(plan.batches)}] "
                      f"{_batch_line(plan, batch, result, time.perf_counter() - start)}")
            fault_point("batch_end", index)


def _finished_count(plan: Plan, out_dir: str | os.PathLike) -> int:
    return sum(batch_finished(batch_dir(out_dir, b)) for b in plan.batches)


def _sweep_saved(plan: Plan, out_dir: str | os.PathLike, following: Batch) -> str:
    return (f"{_finished_count(plan, out_dir)} of {len(plan.batches)} batches finished and "
            f"saved; the sweep stopped before batch {following.name}")


def _batch_line(plan: Plan, batch: Batch, result: TrainingResult, seconds: float) -> str:
    testbed = plan.experiment.testbed
    evals = result.metrics[testbed.score][:len(batch.runs)]
    padding = batch.size - len(batch.runs)
    return (f"{batch.name}: {len(batch.runs)} runs{f' (+{padding} padding)' if padding else ''} "
            f"in {seconds:.0f} s; mean {testbed.score_name} {np.nanmean(evals[:, 0]):.2f} -> "
            f"{np.nanmean(evals[:, result.updates_done]):.2f}")


def sweep(out_dir: str | os.PathLike, experiment: Experiment | None = None, *,
          resume: bool = False, replan: bool = False, overwrite: bool = False,
          keep: Sequence[str] = (), part: Selection = None,
          max_runs_per_batch: int | None = None, memory_budget: int | None = None,
          progress: bool = True,
          on_chunk: Callable[[Batch, TrainingResult], None] | None = None,
          trackers: Trackers | None = None) -> Summary:
    """Runs `experiment`, or only its `part`, into `out_dir` (or with `resume`, continues the
    sweep saved there; an `experiment` or `part` given then must be the saved one; with
    `replan` too, plans it again first, `replan_sweep`) and writes its report; returns its
    summary. The process holds the folder's lock throughout; `overwrite` and `keep` are
    `start_sweep`'s; `on_chunk` and `trackers` are `run_sweep`'s.
    """
    if replan and not resume:
        raise ValueError("replan (--replan) applies only with resume (--resume)")
    if resume and not replan:
        if max_runs_per_batch is not None or memory_budget is not None:
            raise ValueError("a resumed sweep keeps its batches; max_runs_per_batch and "
                             "memory_budget apply only to a new or replanned sweep")
        def refuse_another() -> None:  # before the folder is locked
            load_sweep_to_resume(out_dir, experiment, part)
        from_process_0(refuse_another)
    elif not resume and experiment is None:
        raise ValueError("a new sweep needs an experiment")
    plan_options = {"max_runs_per_batch": max_runs_per_batch, "memory_budget": memory_budget}

    def planned() -> Plan:
        if replan:
            return replan_sweep(out_dir, experiment, part, **plan_options)
        if resume:
            return load_sweep_to_resume(out_dir, experiment, part)
        return start_sweep(experiment, out_dir, overwrite=overwrite, keep=keep, part=part,
                           **plan_options)
    with _writer_lock(out_dir):
        plan = _plan_from_process_0(planned)
        if plan.experiment.tune is not None:
            plan = _tuned(plan, out_dir, progress=progress, on_chunk=on_chunk, trackers=trackers)
        run_sweep(plan, out_dir, progress=progress, on_chunk=on_chunk, trackers=trackers)
        fault_point("report", 0)
        # Across processes the summary travels as JSON, so every process reads it back alike.
        return report_summary.from_json(from_process_0(
            lambda: report_summary.to_json(write_sweep_report(plan, out_dir))))


def _tuned(plan: Plan, out_dir: str | os.PathLike, **options: Any) -> Plan:
    """Runs the plan's tuning batches, then those of the extensions its choices at the grid's
    end need, and returns the plan with its other groups at the values the rule chose and
    without the extensions no choice needs (the same on every process: process 0's)."""
    experiment = plan.experiment
    extensions = set(experiment.extended)
    run_sweep(plan, out_dir, groups={g.name for g in experiment.tuning_groups} - extensions,
              **options)
    pending = from_process_0(lambda: sorted({c.extension for c in tuning_choices(plan, out_dir)
                                             if c.pending}))
    if pending:
        run_sweep(plan, out_dir, groups=set(pending), **options)

    def decided() -> dict[str, Any]:  # the choices read once, with the extensions they leave
        made = tuning_choices(plan, out_dir)
        return {"chosen": [[*c.key, c.chosen] for c in made],
                "unrun": sorted(tune.unneeded_extensions(experiment, made))}
    shared = from_process_0(decided)
    chosen = {(group, tuple(point)): value for group, point, value in shared["chosen"]}
    unrun = set(shared["unrun"])
    return dataclasses.replace(plan, experiment=tune.resolved(experiment, chosen),
                               batches=tuple(b for b in plan.batches if b.group not in unrun))


def _plan_from_process_0(planned: Callable[[], Plan]) -> Plan:
    """The plan process 0 makes or reads (and saves in the folder), on every process: read back
    as a resume reads it, so that all run the same batches. A single process keeps its own."""
    if not several():
        return planned()

    def saved() -> dict[str, Any]:
        plan = planned()
        return {"source": plan.experiment.source, "plan": plan.to_json()}
    shared = from_process_0(saved)
    experiment = parse_experiment(shared["source"], name=shared["plan"]["experiment"])
    return Plan.from_json(experiment, records.Field("process 0's plan", "", shared["plan"]))
