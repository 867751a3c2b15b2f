"""The runs table of a sweep and its report.

The runs table has one row per run per evaluation point, with the training metrics averaged
over the updates since the previous evaluation point, scored by the testbed's score metric
(`eval_return`, `eval_accuracy`); `report.write_report` turns it into `runs.parquet`,
`summary.json`, `report.md` and the figures. Only finished batches enter it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from vaco_jax import report
from vaco_jax.experiment import tune, tune_report
from vaco_jax.report.summary import Summary
from vaco_jax.experiment.folder import batch_dir, batch_finished
from vaco_jax.experiment.plan import Batch, Plan
from vaco_jax.experiment.groups import Group, RunSpec
from vaco_jax.experiment.spec import Experiment
from vaco_jax.infra import records
from vaco_jax.infra.run_folder import METRICS_FILE, METRICS_INDEX, RunStatus, read_status
from vaco_jax.infra.lock import folder_lock


def _coordinates(experiment: Experiment, group: Group, batch: Batch,
                 status: RunStatus) -> pd.DataFrame:
    """One row per real run of the batch (`run` = its index in the batch's driver)."""
    cfg = group.config
    task = experiment.testbed.task(cfg)
    epochs, minibatches = cfg.phase_shape
    rows = []
    for index, run_index in enumerate(batch.runs):
        run = group.runs[run_index]
        rows.append({"run": index, "task": task, "algo": cfg.algo,
                     "lag_model": cfg.lag_model.name, "lag": run.lag, "epochs": epochs,
                     "minibatches": minibatches, "seed": run.seed, "run_id": run.run_id,
                     **{f"{report.HP_PREFIX}{n}": run.hparams.get(n, np.nan)
                        for n in experiment.swept_hparams},
                     **{f"{report.CONFIG_PREFIX}{n}": getattr(cfg, n)
                        for n in experiment.swept_config},
                     **_tuned_value(experiment, run),
                     "diverged": status.runs[index].diverged,
                     "diverged_at": status.runs[index].diverged_at})
    return pd.DataFrame(rows)


def _tuned_value(experiment: Experiment, run: RunSpec) -> dict[str, float]:
    """The value of the tuned hyper-parameter the run used, under `Tune.column`."""
    if experiment.tune is None:
        return {}
    return {experiment.tune.column: run.hparams.get(experiment.tune.hparam, np.nan)}


def _tuned_columns(experiment: Experiment) -> list[str]:
    return [experiment.tune.column] if experiment.tune else []


def batch_table(experiment: Experiment, batch: Batch, folder: Path) -> pd.DataFrame | None:
    """The batch's rows of the runs table, or None before its first chunk finished.

    Evaluation points are update 0 (the initial policy) and every `updates_per_period`-th
    update; a diverged run keeps its later points, with NaN evaluations.
    """
    group = experiment.group(batch.group)
    cfg = group.config
    status = read_status(folder, runs=batch.size, num_updates=cfg.num_updates)
    if status is None:
        return None
    score, training_metrics = experiment.testbed.score, list(experiment.testbed.training_metrics)
    per_period = cfg.updates_per_period
    metrics = _read_metrics(folder)
    # A batch written before a metric was recorded lacks its column: NaN, as for an algorithm
    # without the quantity, so a sweep or part run before it still reports and merges.
    missing = [m for m in training_metrics if m not in metrics.columns]
    metrics = metrics.reindex(columns=[*metrics.columns, *missing])
    metrics = metrics[metrics["run"] < len(batch.runs)].assign(
        period=lambda m: -(-m["update"] // per_period))
    training = (metrics[metrics["update"] > 0].groupby(["run", "period"])[training_metrics]
                .mean().reset_index())
    coordinates = _coordinates(experiment, group, batch, status)
    points = pd.DataFrame(
        [(index, update) for index, diverged in enumerate(coordinates["diverged"])
         for update in range(0, (cfg.num_updates if diverged else status.updates_done) + 1,
                             per_period)], columns=["run", "update"])
    table = (points.assign(period=points["update"] // per_period)
             .merge(metrics[["run", "update", score]], how="left", on=["run", "update"])
             .merge(training, how="left", on=["run", "period"])
             .merge(coordinates, how="left", on="run"))
    table["env_steps"] = table["update"] * cfg.steps_per_update
    columns = [*report.RUN_COORDINATES, "run_id",
               *(f"{report.HP_PREFIX}{n}" for n in experiment.swept_hparams),
               *(f"{report.CONFIG_PREFIX}{n}" for n in experiment.swept_config),
               *_tuned_columns(experiment), "update", "env_steps", score, *training_metrics,
               *report.PER_RUN_COLUMNS]
    return table[columns]


def _read_metrics(folder: Path) -> pd.DataFrame:
    return records.read_parquet(folder / METRICS_FILE,
                                f"its batch's checkpoint holds its metrics: `vaco-jax sweep "
                                f"--resume --out {shlex.quote(str(folder.parent.parent))}` "
                                f"rewrites them", numeric=METRICS_INDEX)


def metrics_readable(folder: Path) -> bool:
    """Whether a batch folder's metrics table can be read (a finished batch's that cannot is
    rewritten from its checkpoint when the sweep resumes)."""
    try:
        _read_metrics(folder)
    except ValueError:
        return False
    return True


def finished_batches_table(experiment: Experiment,
                           batches: Sequence[tuple[Batch, Path]]) -> pd.DataFrame | None:
    """The runs table of those `(batch, results folder)` pairs whose batch finished, or None.

    An unfinished batch's runs are left out: scored where they stopped, they would enter the
    report as runs of the whole length with the final scores of shorter ones.
    """
    tables = [batch_table(experiment, batch, folder) for batch, folder in batches
              if batch_finished(folder)]
    return pd.concat(tables, ignore_index=True) if tables else None


def unfinished_groups(plan: Plan, out_dir: str | os.PathLike) -> list[str]:
    """The groups of `plan` with a batch not finished in `out_dir`, in plan order."""
    return list(dict.fromkeys(b.group for b in plan.batches
                              if not batch_finished(batch_dir(out_dir, b))))


def tuning_choices(plan: Plan, out_dir: str | os.PathLike) -> list[tune.Choice]:
    """The rule's choices from the finished tuning batches of `plan` in `out_dir`: no other
    batch is read, so no stale run can sway them."""
    experiment = plan.experiment
    tuning = {g.name for g in experiment.tuning_groups}
    table = finished_batches_table(experiment, [(b, batch_dir(out_dir, b))
                                                for b in plan.batches if b.group in tuning])
    return [] if table is None else tune.choices(experiment, table, experiment.testbed.score)


def resolved_plan(plan: Plan, out_dir: str | os.PathLike) -> Plan:
    """The plan with its tuned groups at the values chosen in `out_dir` (`tune.resolved`) and
    without the batches of the extensions no choice needs; a plan without `[tune]` as it is."""
    if plan.experiment.tune is None:
        return plan
    made = tuning_choices(plan, out_dir)
    unrun = tune.unneeded_extensions(plan.experiment, made)
    return dataclasses.replace(
        plan, experiment=tune.resolved(plan.experiment, {c.key: c.chosen for c in made}),
        batches=tuple(b for b in plan.batches if b.group not in unrun))


def runs_table(plan: Plan, out_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs table of every finished batch (`report.required_columns` of the testbed's
    score, `hp_*` for the swept hyper-parameters, `cfg_*` for the swept config axes, the tuned
    one's value with `[tune]`, and the training metrics)."""
    plan = resolved_plan(plan, out_dir)
    table = finished_batches_table(plan.experiment,
                                   [(b, batch_dir(out_dir, b)) for b in plan.batches])
    if table is None:
        raise FileNotFoundError(f"no batch of the sweep in {str(out_dir)!r} has finished yet")
    return table


def write_sweep_report(plan: Plan, out_dir: str | os.PathLike) -> Summary:
    """Builds the runs table from the finished batches and writes the report into `out_dir` (a
    part's report covers its groups only, and an unfinished sweep's its finished batches; the
    title says so), holding the folder's lock."""
    with folder_lock(out_dir):
        notes = [plan.part.label] if plan.part else []
        unfinished = unfinished_groups(resolved_plan(plan, out_dir), out_dir)
        if unfinished:
            notes.append(f"unfinished: {len(unfinished)} of {len(plan.groups)} groups not "
                         f"finished, their unfinished batches left out")
        return write_experiment_report(plan.experiment, runs_table(plan, out_dir), out_dir,
                                       note="; ".join(notes) or None)


def write_experiment_report(experiment: Experiment, runs: pd.DataFrame,
                            out_dir: str | os.PathLike, note: str | None = None) -> Summary:
    """Writes the report of `runs`, a runs table of `experiment`, into `out_dir`; `note` is
    added to the title in brackets. A task without runs yet (an unfinished or partial sweep)
    loses its reference score rather than failing the report. With `[cell_rule]` the report
    judges the study's runs by it (the tuning runs are not the study's cells)."""
    testbed = experiment.testbed
    present = set(runs["task"])
    references = {t: r for t, r in experiment.reference_scores.items() if t in present}
    title = f"{experiment.name}: {experiment.description}" if experiment.description \
        else experiment.name
    if note:
        title = f"{title} ({note})"
    tuning_ids = {r.run_id for g in experiment.tuning_groups for r in g.runs}
    studied = runs[~runs["run_id"].isin(tuning_ids)]
    if studied.empty:
        raise FileNotFoundError("only tuning batches have finished; the report needs a finished "
                                "batch of the study's own runs (vaco-jax sweep --resume)")
    summary = report.write_report(studied, out_dir,
                                  score=report.Score(testbed.score, testbed.score_name,
                                                     testbed.steps_name),
                                  reference_scores=references or None,
                                  focus_algo=experiment.focus_algo, title=title,
                                  mechanisms=testbed.mechanisms,
                                  cell_rule=experiment.cell_rule)
    if experiment.tune is None:
        return summary
    return tune_report.add_tuning(experiment, runs, out_dir, summary)

