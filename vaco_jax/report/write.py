"""``write_report``: scores a runs table and writes its report, from ``summary.json`` (every
number) to ``report.md`` and the figures.

The steps are the other modules' (``scoring``, ``cells``, ``metrics``, ``figures``,
``figures_runs``, ``markdown``); this module runs them in order and assembles their results.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vaco_jax.report import (
    cell_rule as rule_verdict,
    cells,
    collapse,
    compat,
    figures,
    figures_heatmap,
    figures_kept_tv,
    figures_runs,
    kept_gain,
    metrics,
    scoring,
)
from vaco_jax.report import markdown as report_markdown
from vaco_jax.report import summary as report_summary
from vaco_jax.report.summary_fields import parsed
from vaco_jax.report.rule_records import CellRule
from vaco_jax.report.summary import (CellSummary, DivergedRun, EssCollapse, FigureRecord,
                                     Improvement, IncompleteCell, KeptGain, Normalisation,
                                     RunOverview, Stabilisers, Summary, TaskCell, Variant)
from vaco_jax.report.runs_table import RUNS_FILE, Score, assignments, setting_columns
from vaco_jax.infra import io
from vaco_jax.infra.provenance import provenance

DEFAULT_TITLE = "Policy-lag benchmark report"

@dataclasses.dataclass(frozen=True)
class ReportData:
    """What the figures of one report draw, computed once by ``write_report``.

    ``table`` is the scored evaluations (``scoring.with_scores``), ``run_table`` one row per run
    with its off-policy summaries and its stabilisers' mean fractions and acted shares,
    ``events`` each run's collapse and ESS warnings (None without ``ess_ratio``), ``curves`` the
    learning curve of each (variant, lag, task), ``styles`` each variant's line style, the
    same in every figure, and ``kept_gain`` the summary of ``kept_gain.summary``.
    """

    score: Score
    focus_algo: str
    tasks: Sequence[str]
    lags: Sequence[float]
    styles: Mapping[str, figures.LineStyle]
    table: pd.DataFrame
    run_table: pd.DataFrame
    events: pd.DataFrame | None
    cell_summaries: Sequence[Mapping[str, Any]]
    task_summaries: Sequence[Mapping[str, Any]]
    improvements: Sequence[Mapping[str, Any]]
    curves: Mapping[tuple[str, float, str], Mapping[str, np.ndarray]]
    fraction_means: pd.DataFrame
    kept_gain: Mapping[str, Any]


Draw = Callable[[], Figure | figures.Skipped]
"""Draws one figure of a report, or says why it has none."""


def _figure_builders(data: ReportData) -> dict[str, tuple[str, Draw]]:
    """File stem -> (caption, drawing function) of every figure, in report order.

    The per-task figure is drawn only for several tasks: with one, it is the aggregate figure.
    The kept-gain heatmap comes first: it is the study's answer; the kept gain against the
    staleness each method met follows, as methods at one lag level need not have met equally
    stale data. The figures against lag are skipped at a single lag level, where they would
    stack every variant at one point.
    """
    styles, lags, score, focus_algo = data.styles, data.lags, data.score, data.focus_algo

    def against_lag(draw: Draw) -> Draw:
        if len(lags) > 1:
            return draw
        return lambda: figures.Skipped(
            f"the study has a single lag level ({lags[0]:g}), so nothing varies along a lag "
            "axis; the tables give these numbers"
        )

    per_task = {
        "fig_tasks": (
            "Final score and AUC against lag, per task",
            against_lag(
                lambda: figures.figure_tasks(data.task_summaries, data.tasks, styles, lags)
            ),
        ),
    } if len(data.tasks) > 1 else {}
    return {
        "fig_kept_gain": (
            "Share of the synchronous gain each method keeps, per task and lag",
            lambda: figures_heatmap.figure_kept_gain(data.kept_gain, lags),
        ),
        "fig_kept_gain_vs_tv": (
            "Kept gain against the backward TV each method's runs measured, per task",
            lambda: figures_kept_tv.figure_kept_gain_vs_tv(data.kept_gain, styles, lags),
        ),
        "fig_aggregates": (
            "Aggregate final scores against lag",
            against_lag(lambda: figures.figure_aggregates(data.cell_summaries, styles, lags)),
        ),
        **per_task,
        "fig_learning_curves": (
            "IQM learning curves per task and lag level",
            lambda: figures.figure_curves(data.curves, data.tasks, styles, lags, score),
        ),
        "fig_staleness_diagnostics": (
            f"Normalised {score.name}, ESS ratio and gradient norm over training, per run and "
            "median per task, with each run's collapse and ESS warning marked",
            lambda: figures_runs.figure_staleness(data.table, data.events, styles, lags, score),
        ),
        "fig_auc": (
            "IQM of the area under the learning curve against lag",
            against_lag(lambda: figures.figure_auc(data.cell_summaries, styles, lags)),
        ),
        "fig_filter_clip": (
            "Filtered, clipped, truncated, masked and dropped fractions against lag",
            against_lag(lambda: figures.figure_fractions(data.fraction_means, styles, lags)),
        ),
        "fig_forward_lag": (
            "Final score, clip and filter fractions and forward TV against epochs x minibatches",
            lambda: figures_runs.figure_forward_lag(
                data.cell_summaries, data.fraction_means, data.run_table, lags
            ),
        ),
        "fig_score_vs_off_policy": (
            "Final score per run against measured backward TV, behaviour KL and mean version gap",
            lambda: figures_runs.figure_off_policy(data.run_table, styles, lags),
        ),
        "fig_probability_of_improvement": (
            f"Probability of improvement of {focus_algo} over each baseline",
            lambda: figures.figure_improvement(data.improvements, focus_algo, styles, lags),
        ),
    }


def _save_figure(figure: Figure, out_dir: Path, stem: str) -> dict[str, str]:
    """Writes ``stem.png`` and ``stem.pdf``; returns their names by format."""
    files = {}
    for fmt in ("png", "pdf"):
        files[fmt] = f"{stem}.{fmt}"
        io.atomic_write(
            out_dir / files[fmt], lambda temporary: figure.savefig(temporary, format=fmt, dpi=150)
        )
        # The first save fixed the layout; solving it again for every format doubles the cost.
        figure.set_layout_engine("none")
    return files


def _variant_records(run_table: pd.DataFrame) -> tuple[Variant, ...]:
    """Per variant: what defines it (algorithm, lag models, forward setting, the
    hyper-parameters and config axes it sets) and its number of runs."""
    settings = setting_columns(run_table)
    records = []
    for variant, rows in run_table.groupby("variant", sort=True):
        first = rows.iloc[0]
        set_hps = [c for c in settings if pd.notna(first[c])]
        records.append(
            Variant(
                variant=variant,
                algo=str(first["algo"]),
                lag_models=tuple(sorted(rows["lag_model"].astype(str).unique())),
                epochs=int(first["epochs"]),
                minibatches=int(first["minibatches"]),
                hyperparameters=assignments(set_hps, [first[c] for c in set_hps]),
                num_runs=len(rows),
            )
        )
    return tuple(records)


def _run_overview(table: pd.DataFrame, run_table: pd.DataFrame) -> RunOverview:
    """What was run: tasks, lag models and levels, seeds, run counts, lengths and variants."""
    return RunOverview(
        tasks=tuple(sorted(run_table["task"].astype(str).unique())),
        lag_models=tuple(sorted(run_table["lag_model"].astype(str).unique())),
        lags=tuple(sorted(float(lag) for lag in run_table["lag"].unique())),
        seeds=tuple(sorted(int(seed) for seed in run_table["seed"].unique())),
        num_runs=len(run_table),
        num_diverged=int(run_table["diverged"].sum()),
        final_env_steps=tuple(sorted({int(s) for s in run_table["env_steps"]})),
        eval_points=tuple(sorted({int(n) for n in table.groupby("run_id").size()})),
        variants=_variant_records(run_table),
    )


def _diverged_runs(run_table: pd.DataFrame) -> tuple[DivergedRun, ...]:
    """Each diverged run, where it diverged and the last score it reached before."""
    diverged = run_table[run_table["diverged"]].sort_values(["variant", "lag", "task", "seed"])
    return tuple(
        DivergedRun(
            run_id=str(r.run_id),
            task=str(r.task),
            variant=r.variant,
            lag=float(r.lag),
            seed=int(r.seed),
            diverged_at=int(r.diverged_at),
            last_finite_score=float(r.filled_score),
        )
        for r in diverged.itertuples()
    )


def write_report(
    runs: pd.DataFrame,
    out_dir: str | os.PathLike[str],
    *,
    score: Score = Score(),
    reference_scores: dict[str, float] | None = None,
    focus_algo: str = "vaco",
    final_fraction: float = 0.1,
    reps: int = 2000,
    seed: int = 0,
    title: str | None = None,
    collapse_thresholds: collapse.Thresholds = collapse.Thresholds(),
    mechanisms: Callable[[str], Collection[str]] | None = None,
    cell_rule: CellRule | None = None,
) -> Summary:
    """Scores a sweep's runs table and writes the report into ``out_dir``.

    Args:
      runs: the runs table, one row per run per evaluation point: the columns
        of ``required_columns(score)``, any ``hp_*`` and ``cfg_*`` columns (swept
        hyper-parameters and config axes), and training metrics of
        which those of ``metrics.FRACTION_METRICS`` are plotted against lag and those of
        ``figures_runs.STALENESS_METRICS`` over training per run, if present; the off-policy
        metrics of ``metrics.OFF_POLICY_METRICS`` (with any ``*_median``/``*_p90``
        per-update summaries of them) are summarised per run and per (variant,
        lag), as are the stabilisers' fractions and the shares of gradient steps at
        which they acted (``phase.ACTED_METRICS``; without the latter, whether a
        stabiliser ever acted is read from its fractions), and the final score plotted
        against the run means of ``tv_backward``, ``behaviour_kl`` and
        ``version_gap_mean``, if present;
        ``ess_ratio``, if present, is set against each run's collapse
        (``vaco_jax.report.collapse``).
      out_dir: folder of the report, created if needed; report files already
        there are replaced, each atomically.
      score: what the evaluations measure (default: returns in ``eval_return``
        at environment steps).
      reference_scores: per-task evaluation that normalises to 1; tasks left out
        use the best final score of any of their runs.
      focus_algo: algorithm whose probability of improvement over the variants
        of every other algorithm is reported.
      final_fraction: share of each run's last evaluation points averaged into
        its final score, in (0, 1].
      reps: bootstrap resamples per confidence interval.
      seed: seed of every bootstrap.
      title: heading of ``report.md``.
      collapse_thresholds: when a run collapses and when its ESS warns, for the
        ESS-versus-collapse table (``vaco_jax.report.collapse``).
      mechanisms: the stabilisers each algorithm has (``algo`` -> its fraction metrics); the
        fractions of the others count as absent whatever the table holds
        (``compat.without_absent_mechanisms``). None: read from the table alone (NaN: absent).
      cell_rule: an experiment's ``[cell_rule]``, judged on the runs (``cell_rule.verdict``)
        into ``summary.json``'s ``cell_rule`` and its section of ``report.md``; None: none.

    Writes ``runs.parquet`` (``runs`` as given), ``summary.json``, ``report.md``
    and each figure as ``fig_*.png`` and ``fig_*.pdf``; a figure without data
    is skipped and the report says why. Returns the summary written to
    ``summary.json`` (``vaco_jax.report.summary``).
    """
    tasks, table, final, references = scoring.scored(runs, score, reference_scores,
                                                     final_fraction)
    if mechanisms is not None:
        table = compat.without_absent_mechanisms(table, mechanisms)
    off_policy_columns = metrics.off_policy_columns(table)
    run_table = (
        scoring.run_table(table, final, references)
        .join(metrics.run_off_policy(table), on="run_id")
        .join(metrics.run_mechanisms(table), on="run_id")
    )
    complete, incomplete = cells.cells(run_table, tasks)
    cell_summaries = [cells.cell_summary(cell, tasks, reps, seed) for cell in complete]
    task_summaries = cells.task_summaries(run_table, tasks, reps, seed)
    improvements = cells.improvements(complete, focus_algo, reps, seed)
    overview = _run_overview(table, run_table)
    lags = list(overview.lags)
    kept = kept_gain.summary(run_table, complete, tasks, lags, reps, seed,
                             cell_summaries=cell_summaries, task_summaries=task_summaries)
    events = scoring.collapse_events(table, references, score, collapse_thresholds)
    data = ReportData(
        score=score,
        focus_algo=focus_algo,
        tasks=tasks,
        lags=lags,
        styles=figures.variant_styles(sorted(run_table["variant"].unique())),
        table=table,
        run_table=run_table,
        events=events,
        cell_summaries=cell_summaries,
        task_summaries=task_summaries,
        improvements=improvements,
        curves=cells.task_learning_curves(run_table, table, reps, seed),
        fraction_means=metrics.fraction_means(table),
        kept_gain=kept,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawn_figures: dict[str, FigureRecord] = {}
    for stem, (caption, draw) in _figure_builders(data).items():
        drawn = draw() if complete else figures.Skipped(
            "no variant has runs on every task at any lag"
        )
        if isinstance(drawn, figures.Skipped):
            drawn_figures[stem] = FigureRecord(caption, skipped=drawn.reason)
        else:
            drawn_figures[stem] = FigureRecord(caption, **_save_figure(drawn, out, stem))

    summary = Summary(
        title=title or DEFAULT_TITLE,
        score=score,
        focus_algo=focus_algo,
        final_fraction=final_fraction,
        confidence=cells.CONFIDENCE,
        reps=reps,
        seed=seed,
        run=overview,
        normalisation={
            str(task): Normalisation(
                initial=float(row.initial),
                reference=float(row.reference),
                source=str(row.source),
            )
            for task, row in references.iterrows()
        },
        kept_gain=parsed(KeptGain, kept),
        cells=tuple(parsed(CellSummary, c) for c in cell_summaries),
        task_cells=tuple(parsed(TaskCell, c) for c in task_summaries),
        incomplete_cells=tuple(parsed(IncompleteCell, c) for c in incomplete),
        probability_of_improvement=tuple(parsed(Improvement, r) for r in improvements),
        off_policy_metrics=tuple(off_policy_columns),
        off_policy=tuple(metrics.off_policy_summaries(run_table, off_policy_columns)),
        mechanisms=tuple(parsed(Stabilisers, r) for r in metrics.mechanism_summaries(run_table)),
        diverged_runs=_diverged_runs(run_table),
        ess_collapse=parsed(EssCollapse, collapse.summary(events, collapse_thresholds)),
        figures=drawn_figures,
        provenance=provenance(),
        cell_rule=None if cell_rule is None else rule_verdict.verdict(
            table, run_table, cell_rule, reference_scores, reps, seed),
    )
    io.write_table(out / RUNS_FILE, runs)
    io.write_text(out / "summary.json", report_summary.dumps(summary))
    io.write_text(out / "report.md", report_markdown.markdown(summary))
    return summary
