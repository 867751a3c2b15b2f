"""The figures of one run folder (`vaco-jax train`, `vaco-jax tokens`, a sweep's batch): each
seed's learning curve, and the staleness diagnostics its per-update metrics hold.

A sweep's report compares variants against lag; a single run has no lag axis to summarise over,
so its figures show each seed over training instead. They are written into the run folder (PNG,
each atomically and recorded in its manifest) while the process holds the folder's lock.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vaco_jax import testbeds
from vaco_jax.core.config import Config
from vaco_jax.report.figures import new_figure, shared_legend, variant_colours
from vaco_jax.report.metrics import FRACTION_METRICS
from vaco_jax.infra import io, records, run_folder
from vaco_jax.infra.lock import folder_lock
from vaco_jax.core import config_compat as compat


TRAINING_SCORES = {"reward_mean": ("Mean reward of each update's sampled responses", "reward")}
"""Per-update metric -> (panel title, y-axis label) of the score of the data a run trained on
(the behaviour policies'), drawn where the run has it. Not the control testbed's
`episode_return`: until the time limit is first reached only failed episodes end, so early on
it reads as a policy far worse than it is."""
STALENESS_PANELS = {
    "version_gap_mean": ("Behaviour lag (mean; max dashed)", "versions behind the learner", 1.0),
    "tv_backward": (r"Backward TV($\pi_T$, $\beta$): staleness", "total variation", 0.05),
    "tv_forward": (r"Forward TV($\pi_\theta$, $\pi_T$): drift in a phase", "total variation",
                   0.05),
    "behaviour_kl": (r"Behaviour KL($\beta$ ‖ $\pi_\theta$)", "nats", 0.01),
    "approx_kl": (r"KL($\pi_T$ ‖ $\pi_\theta$)", "nats", 0.01),
    "ess_ratio": ("Effective sample size ratio", "ESS / samples (1: on-policy)", 1.05),
    **{m: (name, "share of samples", 0.05) for m, name in FRACTION_METRICS.items()},
    "grad_norm": ("Gradient norm", "global L2 norm (log scale)", None),
}
"""Per-update metric -> (panel title, y-axis label, least top of its y axis) of the staleness
figure, each drawn where the run has finite values; `version_gap_max` joins the lag panel. The
y axes of these non-negative metrics start at 0 and reach at least the given top, so that a
synchronous run's rounding noise (a TV of 1e-7) draws as the flat zero it is; the gradient
norm's is logarithmic."""
FIGURES = {
    "fig_learning_curves": "each seed's score at every evaluation, their mean and the reference "
                           "(tokens: and each update's mean reward)",
    "fig_staleness_diagnostics": "behaviour lag, TV, KL, ESS, filtered or clipped shares and "
                                 "gradient norm per update, per seed",
}
"""File stem -> what it shows."""


@dataclasses.dataclass(frozen=True)
class RunData:
    """What the figures of a run folder draw, read from its files."""

    testbed: testbeds.Testbed
    config: Config
    table: pd.DataFrame  # metrics.parquet, with `steps`: the run's steps at each update
    labels: Mapping[int, str]  # run index -> legend label
    lag: str  # e.g. "fixed 0"


def read_run(folder: Path) -> RunData:
    """The run saved in `folder`, refusing (ValueError) an unreadable `config.json` or
    `metrics.parquet`, naming it."""
    remedy = "it is written by the run; a run that did not start has nothing to draw"
    saved = records.load_json(folder / run_folder.CONFIG_FILE, records.RUN_CONFIG, remedy).value
    try:
        testbed = testbeds.named(saved["testbed"])
        config = compat.recorded_config(testbed.config, saved["config"])
        hparams = {name: list(values) for name, values in saved["hparams"].items()}
        seeds = list(saved["seeds"])
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ValueError(f"{str(folder / run_folder.CONFIG_FILE)!r} does not describe a run "
                         f"({type(error).__name__}: {error})") from None
    table = records.read_parquet(folder / run_folder.METRICS_FILE,
                                 f"`vaco-jax train --resume {folder}` rewrites it from the run's "
                                 f"checkpoint", numeric=run_folder.METRICS_INDEX)
    # Seeds label the runs; hyper-parameters too where the runs differ in them (a sweep batch).
    varying = [n for n, values in hparams.items() if len(set(values)) > 1]
    labels = {run: f"seed {seed}" + "".join(f", {n}={hparams[n][run]:g}" for n in varying)
              for run, seed in enumerate(seeds)}
    lag = "lag " + ("varies" if "lag" in varying
                    else f"{config.lag_model.name} {hparams['lag'][0]:g}")
    return RunData(testbed, config, table.assign(steps=table["update"] * config.steps_per_update),
                labels, lag)


def _per_run(ax: Axes, run: RunData, column: str, colours: Mapping[str, Any], *,
             marker: str | None = None, linestyle: str = "-", label: bool = True) -> None:
    """One line per run of `column` against steps, its NaN rows left out."""
    for index, rows in run.table.groupby("run", sort=True):
        rows = rows[np.isfinite(rows[column].to_numpy(dtype=float))]
        name = run.labels[int(index)]
        ax.plot(rows["steps"], rows[column], color=colours[name], marker=marker, ms=3, lw=1.2,
                linestyle=linestyle, label=name if label else None)


def _steps_axis(ax: Axes, run: RunData) -> None:
    ax.set_xlabel(f"{run.testbed.steps_name} per seed")
    ax.grid(alpha=0.3)


def figure_learning_curves(run: RunData, colours: Mapping[str, Any]) -> tuple[Figure, list[str]]:
    """The score of every seed at each evaluation, their mean and the reference; beside it the
    score of the data each update trained on, where the testbed reports one. Returns the figure
    and its legend's order."""
    training = [m for m in TRAINING_SCORES if m in run.table and run.table[m].notna().any()]
    figure, axes = new_figure(1 + len(training), panel_size=(6.0, 4.0), max_cols=2)
    score, name = run.testbed.score, run.testbed.score_name
    ax = axes[0]
    _per_run(ax, run, score, colours, marker="o")
    evaluated = run.table[run.table[score].notna()]
    mean = evaluated.groupby("steps")[score].mean()
    ax.plot(mean.index, mean.to_numpy(), color="black", lw=2.2, label="mean over seeds")
    order = [*colours, "mean over seeds"]
    ref = run.testbed.reference(run.config)
    if ref is not None:
        key = f"reference {ref.score:g}: {ref.meaning}"
        ax.axhline(ref.score, color="grey", linestyle="--", lw=1.2, label=key)
        order.append(key)
    ax.set_title(f"{name.capitalize()} of the learner at each evaluation")
    ax.set_ylabel(name)
    _steps_axis(ax, run)
    for ax, metric in zip(axes[1:], training):
        _per_run(ax, run, metric, colours, marker=".")
        title, unit = TRAINING_SCORES[metric]
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(unit)
        _steps_axis(ax, run)
    figure.suptitle(f"{_title(run)}: learning curves")
    return figure, order


def figure_staleness(run: RunData, colours: Mapping[str, Any]) -> tuple[Figure, list[str]] | None:
    """One panel per staleness metric the run has finite values of (None if it has none)."""
    drawn = [m for m in STALENESS_PANELS
             if m in run.table and np.isfinite(run.table[m].to_numpy(dtype=float)).any()]
    if not drawn:
        return None
    columns = min(len(drawn), 3)
    figure, axes = new_figure(len(drawn), panel_size=(4.4, 3.0), max_cols=columns,
                              sharex=True)
    for index, (ax, metric) in enumerate(zip(axes, drawn)):
        title, unit, least_top = STALENESS_PANELS[metric]
        _per_run(ax, run, metric, colours)
        if metric == "version_gap_mean" and "version_gap_max" in run.table:
            _per_run(ax, run, "version_gap_max", colours, linestyle="--", label=False)
        if least_top is None:
            ax.set_yscale("log")
            # Plain numbers at 1, 2 and 5 of each decade: a norm often spans less than one.
            ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        else:
            top = max(ax.get_ylim()[1], least_top)
            ax.set_ylim(-0.03 * top, top)  # a line at 0 stays clear of the frame
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if index + columns >= len(drawn):  # the lowest panel of its column: the steps axis
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel(f"{run.testbed.steps_name} per seed")
    figure.suptitle(f"{_title(run)}: staleness diagnostics per update")
    return figure, list(colours)


def _title(run: RunData) -> str:
    return f"{run.config.algo} on {run.testbed.task(run.config)}, {run.lag}"


def write_run_figures(folder: str | os.PathLike) -> dict[Path, str]:
    """Draws the figures of the run in `folder` (`FIGURES`) into it as PNG files, holding its
    lock; returns each written file with what it shows. Refuses (ValueError) a folder whose
    `config.json` or `metrics.parquet` cannot be read, naming the file."""
    folder = Path(folder)
    with folder_lock(folder):
        run = read_run(folder)
        colours = variant_colours(list(run.labels.values()))
        drawn = {"fig_learning_curves": figure_learning_curves(run, colours),
                 "fig_staleness_diagnostics": figure_staleness(run, colours)}
        written = {}
        for stem, figure_and_order in drawn.items():
            if figure_and_order is None:
                continue
            figure, order = figure_and_order
            shared_legend(figure, figure.axes, order)
            path = io.atomic_write(folder / f"{stem}.png",
                                   lambda temporary: figure.savefig(temporary, format="png",
                                                                    dpi=150))
            written[path] = FIGURES[stem]
    return written

