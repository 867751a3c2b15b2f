"""The ROC curves of the run-failure predictors (``vaco_jax.report.predictors``): a panel per
outcome and population, a curve per predictor with its area in the legend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from vaco_jax.report.figures import new_figure, wrapped_suptitle
from vaco_jax.report.predictors import OUTCOMES, POPULATIONS, PREDICTORS, format_area

LABELS = {"ess_drop": "ESS drop (1 - lowest ESS ratio)",
          "grad_norm_fall": "gradient-norm fall (log first / lowest)",
          "lag": "configured lag (baseline)"}
STYLES = {"ess_drop": ("tab:blue", "-"), "grad_norm_fall": ("tab:orange", "-"),
          "lag": ("grey", "--")}


def _label(predictor: str, record: Mapping[str, Any]) -> str:
    label = f"{LABELS[predictor]}: {format_area(record)}"
    if record["within_strata"] is not None and predictor != "lag":
        label += f"\n  within study, task and lag: {format_area(record['within_strata'])}"
    return label


def figure_roc(curves: Sequence[Mapping[str, Any]], window: float) -> Figure:
    """One panel per (outcome, population) of ``predictors.curves``' records."""
    panels = [(o, p) for o in OUTCOMES for p in POPULATIONS]
    figure, axes = new_figure(len(panels), panel_size=(4.6, 4.4), max_cols=len(POPULATIONS))
    for ax, (outcome, population) in zip(axes, panels):
        records = {r["predictor"]: r for r in curves
                   if r["outcome"] == outcome and r["population"] == population}
        first = records[PREDICTORS[0]]
        ax.plot([0, 1], [0, 1], color="lightgrey", linewidth=1)
        for predictor in PREDICTORS:
            record = records[predictor]
            if record["auc"] is None:
                continue
            colour, linestyle = STYLES[predictor]
            # Straight segments between thresholds: runs tied at a score are alarmed together,
            # and the area under these segments is the one with ties counted half.
            ax.plot(record["fpr"], record["tpr"], color=colour,
                    linestyle=linestyle, label=_label(predictor, record))
        if all(records[p]["auc"] is None for p in PREDICTORS):
            ax.text(0.5, 0.5, f"no ROC: {first['positives']} of {first['runs']} runs {outcome}",
                    ha="center", va="center", transform=ax.transAxes, wrap=True)
        else:
            ax.legend(loc="lower right", fontsize="small", title="area [95% CI]",
                      title_fontsize="small")
        ax.set_title(f"{outcome}: {first['positives']} of {first['runs']} {population}",
                     fontsize="medium")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("share of the other runs alarmed")
        ax.set_ylabel(f"share of the {outcome} runs alarmed")
        ax.grid(alpha=0.3)
    wrapped_suptitle(figure, (
        f"Do the ESS and the gradient norm, read over the first {window:.0%} of a run, "
        "predict its failure?",
        "Each curve: every alarm threshold; grey diagonal: no better than chance (an area below "
        "0.5: the signal points the other way); the lag itself is the baseline a live signal "
        "must beat"))
    return figure
