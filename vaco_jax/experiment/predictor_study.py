"""The failure-predictor analysis over committed studies: `vaco-jax report OUT --predictors DIR
...` reads each study folder's `experiment.toml` and `runs.parquet` (a sweep's or a merged
report's), pools their runs (the tuning runs left out) and writes into OUT the ROC analysis of
`vaco_jax.report.predictors`: `predictors.json`, `predictor_runs.csv` (each run's outcomes and
predictors), `fig_predictor_roc.png`/`.pdf` and `report.md`.

The study folders are only read: nothing in them decides what is written or removed, which is
OUT alone (refused if it holds results, unless `overwrite`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from vaco_jax.experiment.folder import EXPERIMENT_FILE
from vaco_jax.experiment.plan import PLAN_FILE
from vaco_jax.experiment.spec import load_experiment
from vaco_jax.experiment.tune_spec import FINAL_FRACTION
from vaco_jax.infra import io, manifest
from vaco_jax.infra.lock import folder_lock
from vaco_jax.infra.records import read_parquet
from vaco_jax.report import kept_gain, predictors, scoring, stats
from vaco_jax.report.figures_predictors import figure_roc
from vaco_jax.report.runs_table import RUNS_FILE, Score

WRITES = ("predictors.json", "predictor_runs.csv", "fig_predictor_roc.png",
          "fig_predictor_roc.pdf", "report.md")


def study_signals(folder: str | os.PathLike, options: predictors.Options) -> pd.DataFrame:
    """The per-run outcomes and predictors of one study folder's runs, its tuning runs left out."""
    folder = Path(folder)
    for name in (EXPERIMENT_FILE, RUNS_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"--predictors: {str(folder)!r} has no {name}; give study "
                                    f"folders (a sweep's or a merged report's)")
    experiment = load_experiment(folder / EXPERIMENT_FILE)
    runs = read_parquet(folder / RUNS_FILE, "rebuild it with vaco-jax report")
    tuning = {r.run_id for g in experiment.tuning_groups for r in g.runs}
    runs = runs[~runs["run_id"].isin(tuning)]
    missing = [c for c in ("ess_ratio", "grad_norm") if c not in runs.columns]
    if missing:
        raise ValueError(f"--predictors: the runs of {str(folder)!r} record no {missing}")
    testbed = experiment.testbed
    score = Score(testbed.score, testbed.score_name, testbed.steps_name)
    present = set(runs["task"])
    references = {t: r for t, r in experiment.reference_scores.items() if t in present}
    _, table, final, normalisation = scoring.scored(runs, score, references or None,
                                                    FINAL_FRACTION)
    run_task = table.drop_duplicates("run_id").set_index("run_id")["task"]
    task_norms = normalisation.loc[run_task.reindex(final.index)]
    normalised = pd.Series(stats.normalize_scores(final.to_numpy(),
                                                  task_norms["initial"].to_numpy(),
                                                  task_norms["reference"].to_numpy()),
                           index=final.index)
    signals = predictors.run_signals(table, normalisation, score.column, options)
    return predictors.with_failures(signals, normalised,
                                    kept_gain.synchronous_variants(table), options)


def _markdown(analysis: dict[str, Any], folders: Sequence[str]) -> str:
    options = analysis["options"]
    lines = ["# Do the ESS and the gradient norm predict a run's failure?", "",
             f"Runs pooled from {len(folders)} studies: "
             + ", ".join(f"`{f}` ({analysis['studies'][Path(f).name]} runs)" for f in folders)
             + ".", "",
             f"Predictors read over the first {options['window']:.0%} of each run (before its "
             "collapse, if it collapses). A run *failed* when its final normalised score is "
             f"below {options['kept_share']:g} x the median of its method's synchronous runs on "
             f"its task, judged only where that median is at least {options['min_sync_gain']:g}; "
             "*collapsed* as the report's ESS-versus-collapse table judges it. Area under the "
             f"ROC with its {options['confidence']:.0%} bootstrap interval ({options['reps']} "
             "resamples of whole cells: a study's method at one lag on one task); 0.5 is chance, "
             "below it the signal points the other way. The lag is the baseline a live signal "
             "must beat; *within strata* compares only runs of the same study, task and lag, "
             "where the lag's own area is 0.5. Runs with the outcome but no signal (a collapse "
             "before the first period read) are counted apart.", "",
             "| outcome | population | runs (positives) | without a signal (positives) | "
             "ESS drop | gradient-norm fall | lag |",
             "|---|---|---|---|---|---|---|"]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in analysis["curves"]:
        rows.setdefault((record["outcome"], record["population"]), {})[
            record["predictor"]] = record
    for (outcome, population), records in rows.items():
        first = records[predictors.PREDICTORS[0]]
        counts = (f"{first['runs']} ({first['positives']}) | {first['without_signal']} "
                  f"({first['positives_without_signal']})")
        areas = [predictors.format_area(records[p]) for p in predictors.PREDICTORS]
        lines.append(f"| {outcome} | {population} | {counts} | {' | '.join(areas)} |")
        if first["within_strata"] is not None:
            areas = [predictors.format_area(records[p]["within_strata"])
                     for p in predictors.PREDICTORS]
            lines.append(f"| {outcome} | {population}, within strata | {counts} | "
                         f"{' | '.join(areas)} |")
    lines += ["", "![ROC curves](fig_predictor_roc.png)", "",
              "Each run's outcomes and predictors: `predictor_runs.csv`; the curves' points: "
              "`predictors.json`."]
    return "\n".join(lines) + "\n"


def _check_out(out: Path, folders: Sequence[Path]) -> None:
    """Refuses an output folder that is, holds or lies inside a study folder, or is a sweep's:
    the studies are only read, and a sweep's results are not this command's to replace."""
    io.check_output_dir(out)
    target = out.resolve()
    for folder in folders:
        study = folder.resolve()
        if target == study or study in target.parents or target in study.parents:
            raise ValueError(f"--predictors: the output folder {str(out)!r} is, holds or lies "
                             f"in the study folder {str(folder)!r}; choose another folder")
    if (out / PLAN_FILE).is_file():
        raise ValueError(f"--predictors: {str(out)!r} is a sweep folder; choose another folder")


def write_predictors(folders: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                     overwrite: bool = False, keep: Sequence[str] = (),
                     options: predictors.Options = predictors.Options()) -> dict[str, Any]:
    """Writes the analysis of the studies in `folders` into `out`, holding its lock; returns its
    JSON. `overwrite` and `keep` are `io.prepare_output_dir`'s: nothing there is removed before
    the analysis and its figure are ready."""
    folders = [Path(f) for f in folders]
    out = Path(out)
    if not folders:
        raise ValueError("--predictors needs at least one study folder")
    names = [f.name for f in folders]
    if len(set(names)) != len(names):
        raise ValueError(f"--predictors: study folders must have distinct names, got {names}")
    _check_out(out, folders)
    studies = {f.name: study_signals(f, options) for f in folders}
    analysis = predictors.summary(studies, options)
    figure = figure_roc(analysis["curves"], options.window)
    with folder_lock(out):
        _check_out(out, folders)  # again: another process may have made it a sweep's
        io.prepare_output_dir(out, overwrite=overwrite, keep=keep, writes=WRITES,
                              resumable=False)
        manifest.record(out, {})  # a manifest, so that each file written is recorded in it
        io.write_table(out / "predictor_runs.csv", predictors.pooled(studies))
        io.write_json(out / "predictors.json", analysis)
        for fmt in ("png", "pdf"):
            io.atomic_write(out / f"fig_predictor_roc.{fmt}",
                            lambda temporary, fmt=fmt: figure.savefig(temporary, format=fmt,
                                                                      dpi=150))
        io.write_text(out / "report.md", _markdown(analysis, [str(f) for f in folders]))
    return analysis
