"""The report's figures of summaries against lag, and the drawing helpers every figure shares.

Each figure function returns a matplotlib ``Figure``, built without pyplot so that no figure
stays registered once the report is written, or a ``Skipped`` saying why the runs table has no
data for it. A variant keeps one ``LineStyle`` across every figure of a report: its algorithm's
colour and its swept setting's line style and marker, so that twenty variants read as ten
colours in two styles rather than twenty shades. Lag levels sit at evenly spaced positions
labelled with their values: a linear lag axis crowds 0, 1 and 2 against 32. Around each, the
variants' points stand a little apart (`DODGE`), so that two variants of equal values both show.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, MaxNLocator

from vaco_jax.report.cells import AGGREGATES, CONFIDENCE
from vaco_jax.report.metrics import FRACTION_METRICS
from vaco_jax.report.runs_table import Score


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A figure that was not drawn, and why."""

    reason: str


def variant_colours(labels: Sequence[str]) -> dict[str, Any]:
    """One colour per label (a variant, a line), in order, from a palette with enough distinct
    colours."""
    palette = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {v: palette(i % palette.N) for i, v in enumerate(labels)}


LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = "osD^v<>XP*h"
"""Settings take (line style, marker) pairs in turn; as 4 and 11 share no factor, the first 44
settings each get their own pair, and the first 11 their own marker, all a scatter of points
shows of a setting."""


@dataclasses.dataclass(frozen=True)
class LineStyle:
    """How a variant is drawn: ``colour`` its algorithm's, ``linestyle`` and ``marker`` its
    ``setting``'s (the bracketed part of its name, the values it sweeps; empty for none)."""

    algo: str
    setting: str
    colour: Any
    linestyle: str
    marker: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``Axes.plot`` and ``Axes.errorbar``."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker}

    def curve(self) -> dict[str, Any]:
        """The same for a curve of many points: a marker on every fifth, small."""
        return {**self.line(), "markevery": 5, "markersize": 4}


def split_variant(variant: str) -> tuple[str, str]:
    """``("vaco", "learning_rate=0.0003")`` of ``vaco[learning_rate=0.0003]``."""
    algo, _, setting = variant.partition("[")
    return algo, setting.removesuffix("]")


def variant_styles(variants: Sequence[str]) -> dict[str, LineStyle]:
    """Each variant's style: one colour per algorithm, one line style and marker per setting."""
    parts = {v: split_variant(v) for v in variants}
    colours = variant_colours(sorted({algo for algo, _ in parts.values()}))
    settings = sorted({setting for _, setting in parts.values()})
    index = {setting: i for i, setting in enumerate(settings)}
    return {
        v: LineStyle(algo, setting, colours[algo], LINE_STYLES[index[setting] % len(LINE_STYLES)],
                     MARKERS[index[setting] % len(MARKERS)])
        for v, (algo, setting) in parts.items()
    }


def style_legend(
    figure: Figure, styles: Mapping[str, LineStyle], *, settings: bool = True,
    extra: Sequence[tuple[Any, str]] = (),
) -> None:
    """One legend below all panels: each variant where no algorithm has two, else each
    algorithm's colour and (with ``settings``) each setting's line style, then ``extra``
    (handle, label) entries such as event markers."""
    def proxy(colour: Any, linestyle: str = "-", marker: str = "") -> Line2D:
        return Line2D([], [], color=colour, linestyle=linestyle, marker=marker)

    algos = {s.algo for s in styles.values()}
    if len(algos) == len(styles):
        entries = [(proxy(s.colour, s.linestyle, s.marker), v) for v, s in styles.items()]
    else:
        colours = {s.algo: s.colour for s in styles.values()}
        entries = [(proxy(colours[a]), a) for a in sorted(colours)]
        if settings:
            kinds = {s.setting: s for s in styles.values()}
            entries += [(proxy("dimgrey", kinds[k].linestyle, kinds[k].marker), k or "(default)")
                        for k in sorted(kinds)]
    entries += list(extra)
    if entries:
        handles, labels = zip(*entries)
        _legend_below(figure, list(handles), list(labels))


def new_figure(
    panels: int,
    *,
    panel_size: tuple[float, float] = (5.0, 3.6),
    max_cols: int = 3,
    sharex: bool = False,
    sharey: bool | str = False,
) -> tuple[Figure, list[Axes]]:
    """A figure of ``panels`` axes in rows of at most ``max_cols``, with room for a legend."""
    cols = min(panels, max_cols)
    rows = math.ceil(panels / cols)
    size = (panel_size[0] * cols, panel_size[1] * rows + 0.8)
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False, sharex=sharex, sharey=sharey).ravel().tolist()
    for unused in axes[panels:]:
        unused.set_visible(False)
    return figure, axes[:panels]


def wrapped_suptitle(figure: Figure, sentences: Sequence[str]) -> None:
    """The figure's title, each sentence on lines of its own wrapped to the figure's width, so
    that a title longer than a narrow figure does not run past its edges."""
    # About 8.5 characters of the title's font to an inch.
    width = int(8.5 * figure.get_figwidth())
    figure.suptitle("\n".join(line for sentence in sentences
                              for line in textwrap.wrap(sentence, width)))


def shared_legend(figure: Figure, axes: Sequence[Axes], order: Sequence[str]) -> None:
    """One legend below all panels, each label once, in ``order``."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    labels = [label for label in order if label in entries]
    if labels:
        _legend_below(figure, [entries[label] for label in labels], labels)


def _legend_below(figure: Figure, handles: Sequence[Any], labels: Sequence[str]) -> None:
    # As many columns as fit the figure's width (about 0.09 in a character at this size).
    column_width = 0.6 + 0.09 * max(len(label) for label in labels)
    columns = min(len(labels), 6, max(1, int(figure.get_figwidth() // column_width)))
    # The figure leaves room for two rows of entries; a longer legend adds its own height
    # rather than squashing the panels.
    rows = math.ceil(len(labels) / columns)
    figure.set_figheight(figure.get_figheight() + 0.25 * max(0, rows - 2))
    figure.legend(handles, labels, loc="outside lower center", ncols=columns)


AXIS_PERCENTILES = (1.0, 99.0)
"""Where a heavy-tailed axis ends: one diverging run must not squash every other."""


def percentile_limits(values: pd.Series, *, log: bool) -> tuple[float, float] | None:
    """Axis limits a little beyond the finite values' 1st to 99th percentile (the positive
    ones, on a log axis); None without such values."""
    finite = values[np.isfinite(values) & ((values > 0) if log else True)]
    if finite.empty:
        return None
    low, high = np.percentile(finite, AXIS_PERCENTILES)
    if log:
        return low / 1.5, high * 1.5
    margin = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return low - margin, high + margin


def error_bars(intervals: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Points ``[n]`` and matplotlib's asymmetric error bars ``[2, n]``."""
    point, low, high = (np.array([i[k] for i in intervals]) for k in ("point", "low", "high"))
    return point, np.stack([point - low, high - point])


DODGE = 0.24
"""The width, in lag positions (1 apart), over which the variants' points at one lag level
spread sideways: drawn at the same place, a variant's line and interval would hide another's of
equal values (two algorithms that both fail at a lag)."""


def dodge(count: int) -> np.ndarray:
    """The sideways shifts of ``count`` variants' points, evenly spread and centred on 0."""
    return np.linspace(-DODGE / 2, DODGE / 2, count) if count > 1 else np.zeros(count)


def _lag_positions(lags: Sequence[float]) -> dict[float, int]:
    """Each lag level's x position: evenly spaced categories, in order."""
    return {lag: i for i, lag in enumerate(lags)}


def _lag_axis(ax: Axes, lags: Sequence[float]) -> None:
    """Categorical lag levels labelled with their values."""
    ax.set_xticks(range(len(lags)), [f"{lag:g}" for lag in lags])
    ax.set_xlim(-0.4, len(lags) - 0.6)
    ax.set_xlabel("lag level")
    ax.grid(alpha=0.3)


def _plot_against_lag(
    ax: Axes,
    summaries: Sequence[Mapping[str, Any]],
    key: str,
    styles: Mapping[str, LineStyle],
    lags: Sequence[float],
) -> None:
    """One line per variant of ``summary[key]`` with its interval as error bars, each variant
    shifted sideways by its own ``dodge``, the same in every panel."""
    position = _lag_positions(lags)
    for shift, (variant, style) in zip(dodge(len(styles)), styles.items()):
        rows = sorted((s for s in summaries if s["variant"] == variant), key=lambda s: s["lag"])
        if not rows:
            continue
        point, error = error_bars([s[key] for s in rows])
        x = [position[s["lag"]] + shift for s in rows]
        ax.errorbar(x, point, yerr=error, capsize=2, markersize=4, linewidth=1.2,
                    elinewidth=0.8, alpha=0.85, label=variant, **style.line())
    _lag_axis(ax, lags)


def figure_aggregates(
    summaries: Sequence[Mapping[str, Any]], styles: Mapping[str, LineStyle], lags: Sequence[float]
) -> Figure:
    figure, axes = new_figure(len(AGGREGATES), max_cols=2)
    for ax, (key, (label, _)) in zip(axes, AGGREGATES.items()):
        _plot_against_lag(ax, summaries, key, styles, lags)
        ax.set_title(label + (" (lower is better)" if key == "optimality_gap" else ""))
        ax.set_ylabel(f"{label} of normalised final score")
    figure.suptitle(f"Final scores against lag ({CONFIDENCE:.0%} stratified bootstrap CIs)")
    style_legend(figure, styles)
    return figure


def steps_axis(ax: Axes, label: str) -> None:
    """An axis of environment steps or samples, ticks short enough not to run together."""
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel(label)


def figure_curves(
    curves: Mapping[tuple[str, float, str], Mapping[str, np.ndarray]],
    tasks: Sequence[str],
    styles: Mapping[str, LineStyle],
    lags: Sequence[float],
    score: Score,
) -> Figure:
    """A block of panels per task, one per lag level, in rows of at most three."""
    cols = min(len(lags), 3)
    block = math.ceil(len(lags) / cols) * cols
    # One normalised score axis for every panel, so that lag levels and tasks compare at a
    # glance; a task's lags wrap into rows of three rather than one unreadably wide row.
    figure, axes = new_figure(len(tasks) * block, max_cols=cols, sharey=True)
    grid = np.array(axes, dtype=object).reshape(len(tasks), block)
    for row_axes, task in zip(grid, tasks):
        for unused in row_axes[len(lags):]:
            unused.set_visible(False)
        for column, (ax, lag) in enumerate(zip(row_axes, lags)):
            if column % cols == 0:
                ax.set_ylabel(f"IQM normalised {score.name}")
            for variant, style in styles.items():
                curve = curves.get((variant, lag, task))
                if curve is None:
                    continue
                steps = curve["env_steps"]
                ax.plot(steps, curve["point"], label=variant, **style.curve())
                ax.fill_between(steps, curve["low"], curve["high"], color=style.colour,
                                alpha=0.12, lw=0)
            ax.set_title(f"lag {lag:g}" if len(tasks) == 1 else f"{task}, lag {lag:g}")
            steps_axis(ax, score.steps)
            ax.grid(alpha=0.3)
    figure.suptitle(f"Learning curves per task (IQM over runs, shaded {CONFIDENCE:.0%} CI)")
    style_legend(figure, styles)
    return figure


def figure_auc(
    summaries: Sequence[Mapping[str, Any]], styles: Mapping[str, LineStyle], lags: Sequence[float]
) -> Figure:
    figure, (ax,) = new_figure(1, panel_size=(6.5, 4.2))
    _plot_against_lag(ax, summaries, "auc_iqm", styles, lags)
    ax.set_ylabel("IQM of normalised AUC")
    ax.set_title(f"Area under the learning curve ({CONFIDENCE:.0%} CIs)")
    style_legend(figure, styles)
    return figure


def figure_tasks(
    task_summaries: Sequence[Mapping[str, Any]],
    tasks: Sequence[str],
    styles: Mapping[str, LineStyle],
    lags: Sequence[float],
) -> Figure:
    figure, axes = new_figure(
        2 * len(tasks), panel_size=(4.4, 3.4), max_cols=len(tasks), sharex=True
    )
    rows = (("iqm", "IQM of normalised final score"), ("auc_iqm", "IQM of normalised AUC"))
    for row, (key, label) in enumerate(rows):
        for column, task in enumerate(tasks):
            ax = axes[row * len(tasks) + column]
            summaries = [s for s in task_summaries if s["task"] == task]
            _plot_against_lag(ax, summaries, key, styles, lags)
            ax.set_title(task)
            ax.set_ylabel(label)
            if row == 0:
                ax.set_xlabel("")
    figure.suptitle(f"Final score and AUC against lag, per task ({CONFIDENCE:.0%} bootstrap CIs)")
    style_legend(figure, styles)
    return figure


def figure_fractions(
    means: pd.DataFrame, styles: Mapping[str, LineStyle], lags: Sequence[float]
) -> Figure | Skipped:
    drawn = [m for m in means.columns if means[m].notna().any()]
    if not drawn:
        return Skipped(f"the runs table has no finite {' or '.join(FRACTION_METRICS)}")
    figure, axes = new_figure(len(drawn), max_cols=2)
    position = _lag_positions(lags)
    for ax, metric in zip(axes, drawn):
        by_variant = means[metric].dropna()
        for variant, style in styles.items():
            if variant in by_variant.index.get_level_values("variant"):
                series = by_variant.loc[variant]
                ax.plot([position[lag] for lag in series.index], series.to_numpy(),
                        label=variant, **style.line())
        _lag_axis(ax, lags)
        ax.set_ylabel(f"{FRACTION_METRICS[metric].lower()} (mean over runs and training)")
        ax.set_title(FRACTION_METRICS[metric])
    figure.suptitle("Share of samples filtered, clipped, truncated, masked or dropped against lag")
    # Only the variants drawn: an algorithm without these stabilisers has no line to find.
    drawn_variants = set(means[drawn].dropna(how="all").index.get_level_values("variant"))
    style_legend(figure, {v: s for v, s in styles.items() if v in drawn_variants})
    return figure


def _short_label(baseline: str, focus: str) -> str:
    """The baseline's name without the setting it shares with the focus variant: ``ppo_kl``
    against ``vaco[learning_rate=0.0003]`` for ``ppo_kl[learning_rate=0.0003]``."""
    algo, setting = split_variant(baseline)
    shared = set(split_variant(focus)[1].split(","))
    own = [part for part in setting.split(",") if part and part not in shared]
    return f"{algo}[{','.join(own)}]" if own else algo


def figure_improvement(
    improvements: Sequence[Mapping[str, Any]],
    focus_algo: str,
    styles: Mapping[str, LineStyle],
    lags: Sequence[float],
) -> Figure | Skipped:
    """One column of panels per lag and a bar per (focus variant, baseline), coloured by the
    baseline's algorithm and labelled with what tells the baseline apart from the focus
    variant; a row of panels per focus variant where each has several baselines (else one row,
    each bar labelled with its focus variant's setting too); each row as tall as its bars."""
    if not improvements:
        return Skipped(
            f"no lag has complete cells of both {focus_algo!r} and another algorithm"
        )
    panel_lags = [lag for lag in lags if any(r["lag"] == lag for r in improvements)]
    focus_variants = sorted({r["variant"] for r in improvements})

    def bar_count(focus: str | None) -> int:
        return max(sum(focus in (None, r["variant"]) and r["lag"] == lag for r in improvements)
                   for lag in panel_lags)

    per_focus = min(bar_count(focus) for focus in focus_variants) > 1
    rows: list[str | None] = list(focus_variants) if per_focus else [None]
    labels = [
        _short_label(r["baseline"], r["variant"]) if per_focus
        else f"{split_variant(r['variant'])[1] or r['variant']}: "
             f"{_short_label(r['baseline'], r['variant'])}"
        for r in improvements
    ]
    # The variant on a line of its own above the lag, so that no title hides the lag.
    titles = {(focus, lag): f"{focus}\nlag {lag:g}" if focus else f"lag {lag:g}"
              for focus in rows for lag in panel_lags}
    suptitle = (f"Probability of improvement P({focus_algo} > baseline) at the same setting "
                f"({CONFIDENCE:.0%} CIs)")
    # About 0.08 inch a label character beside a plot of 2.6 inches, or as wide as its title,
    # which is centred over the plot and must not run past the figure's edge; about 0.27 inch a
    # bar.
    title_width = 0.08 * max(len(line) for title in titles.values()
                             for line in title.splitlines())
    width = max((0.08 * max(len(label) for label in labels) + max(2.6, title_width))
                * len(panel_lags), 0.1 * len(suptitle))
    heights = [0.9 + 0.27 * bar_count(focus) for focus in rows]
    figure = Figure(figsize=(width, sum(heights) + 0.6), layout="constrained")
    grid = figure.subplots(len(rows), len(panel_lags), squeeze=False, sharex=True,
                           gridspec_kw={"height_ratios": heights})
    for row, focus in enumerate(rows):
        for ax, lag in zip(grid[row], panel_lags):
            at_lag = [i for i, r in enumerate(improvements)
                      if r["lag"] == lag and focus in (None, r["variant"])]
            point, error = error_bars([improvements[i]["probability"] for i in at_lag])
            positions = np.arange(len(at_lag))[::-1]
            colours = [styles[improvements[i]["baseline"]].colour for i in at_lag]
            ax.barh(positions, point, xerr=error, capsize=2, color=colours, alpha=0.8)
            # A dot at each estimate: a probability of 0 has no bar to show it.
            ax.scatter(point, positions, color=colours, s=14, zorder=3)
            ax.set_yticks(positions, [labels[i] for i in at_lag])
            ax.set_ylim(-0.6, bar_count(focus) - 0.4)
            ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
            ax.set_xlim(-0.03, 1.03)
            ax.set_title(titles[focus, lag], fontsize="medium")
    for ax in grid[-1]:
        ax.set_xlabel(f"P({focus_algo} > baseline)")
    figure.suptitle(suptitle)
    return figure
