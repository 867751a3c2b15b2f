"""The kept gain beside the lagged score and the staleness each method met: a runs table in which
the method that keeps more of its gain learns less and met less backward TV, so that the figure
and report.md must set it apart from the method that reaches more."""

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from vaco_jax.report import figures_kept_tv
from vaco_jax.report.figures import variant_styles
from vaco_jax.report.markdown import ranks

from test_kept_gain import pooled_record, task_record
from test_report import drawn_figures, panels, write_report

STEPS = (0, 50, 100)  # final_fraction 0.1: the last evaluation is the final score
INITIAL = {"task_a": 10.0, "task_b": -5.0}
SCALE = {"task_a": 1.0, "task_b": 2.0}  # task_b's returns twice task_a's gains
SEEDS = (0, 1, 2, 3)
LAGS = (0.0, 4.0, 8.0)
# Per (variant, lag): each seed's gain on task_a, final less first evaluation (IQM in comments).
GAINS = {
    ("fast", 0.0): (9.0, 10.0, 10.0, 11.0),  # 10
    ("fast", 4.0): (7.0, 8.0, 8.0, 9.0),     # 8: keeps 0.8
    ("fast", 8.0): (4.0, 5.0, 5.0, 6.0),     # 5: keeps 0.5
    ("slow", 0.0): (1.5, 2.0, 2.0, 2.5),     # 2: learns a fifth of what fast learns
    ("slow", 4.0): (1.5, 2.0, 2.0, 2.5),     # keeps 1
    ("slow", 8.0): (1.5, 2.0, 2.0, 2.5),     # keeps 1
    ("flat", 0.0): (-1.0, -1.0, -1.0, -1.0),  # loses without lag: kept gain undefined
    ("flat", 4.0): (0.0, 0.0, 0.0, 0.0),
    ("flat", 8.0): (0.0, 0.0, 0.0, 0.0),
}
REFERENCE_GAIN = 11.0  # the best final score of any run, less the initial: fast, seed 3, lag 0
# Backward TV at lag 8 per (variant, task): fast moves its policy most, slow least. At lag 4 it
# is half of it, at lag 0 none; each run's updates spread around the base plus 0.01 per seed.
TV = {("fast", "task_a"): 0.4, ("fast", "task_b"): 0.3, ("slow", "task_a"): 0.05,
      ("slow", "task_b"): 0.07, ("flat", "task_a"): 0.2, ("flat", "task_b"): 0.2}
REPS = 200


def run_tv(variant, task, lag, seed):
    return TV[(variant, task)] * lag / 8.0 + 0.01 * seed * (lag > 0)


def make_runs(with_tv=True):
    rows = []
    for (variant, lag), task, seed in itertools.product(GAINS, INITIAL, SEEDS):
        gain = GAINS[(variant, lag)][seed] * SCALE[task]
        evaluations = (INITIAL[task], INITIAL[task] + gain / 2, INITIAL[task] + gain)
        # No update precedes the first evaluation; the others' TV spread evenly about the run's.
        tvs = (np.nan, run_tv(variant, task, lag, seed) - 0.005,
               run_tv(variant, task, lag, seed) + 0.005)
        for update, (steps, value, tv) in enumerate(zip(STEPS, evaluations, tvs)):
            rows.append({
                "task": task, "algo": variant, "lag_model": "uniform", "lag": lag, "epochs": 1,
                "minibatches": 1, "seed": seed, "run_id": f"{task}/{variant}/lag{lag:g}/s{seed}",
                "update": update, "env_steps": steps, "eval_return": value, "diverged": False,
                "diverged_at": -1, **({"tv_backward": tv} if with_tv else {}),
            })
    return pd.DataFrame(rows)


def hand_tv(variant, task, lag):
    """The mean over seeds of each run's mean TV."""
    return float(np.mean([run_tv(variant, task, lag, seed) for seed in SEEDS]))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out, figures = tmp_path_factory.mktemp("kept_tv"), {}
    with drawn_figures(figures):
        summary = write_report(make_runs(), out, final_fraction=0.1, reps=REPS, seed=0)
    return out, summary, figures


def fmt_interval(interval):
    return f"{interval['point']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"


# ---------------------------------------------------------------- summary.json


def test_records_carry_the_tasks_normalised_score_and_measured_tv(report):
    _, summary, _ = report
    for task, variant in itertools.product(INITIAL, ("fast", "slow")):
        found = task_record(summary, variant, task, 8.0)
        (cell,) = [c for c in summary["task_cells"]
                   if (c["variant"], c["task"], c["lag"]) == (variant, task, 8.0)]
        assert found["normalised_iqm"] == cell["iqm"]
        gain = {"fast": 5.0, "slow": 2.0}[variant]
        assert found["normalised_iqm"]["point"] == pytest.approx(gain / REFERENCE_GAIN)
        assert found["tv_backward"] == pytest.approx(hand_tv(variant, task, 8.0))
        assert task_record(summary, variant, task, 0.0)["tv_backward"] == 0.0
    assert task_record(summary, "fast", "task_a", 8.0)["kept"]["point"] == pytest.approx(0.5)
    assert task_record(summary, "slow", "task_a", 8.0)["kept"]["point"] == pytest.approx(1.0)


def test_pooled_records_carry_the_cells_score_and_the_tv_of_every_task(report):
    _, summary, _ = report
    for variant in ("fast", "slow", "flat"):
        found = pooled_record(summary, variant, 8.0)
        (cell,) = [c for c in summary["cells"] if (c["variant"], c["lag"]) == (variant, 8.0)]
        assert found["normalised_iqm"] == cell["iqm"]
        assert found["tv_backward"] == pytest.approx(
            np.mean([hand_tv(variant, task, 8.0) for task in INITIAL]))


# ---------------------------------------------------------------- figure


def scatter(ax, variant):
    (points,) = [c for c in ax.collections
                 if isinstance(c, PathCollection) and c.get_label() == variant]
    return points


def test_figure_draws_each_lagged_cell_at_its_tv_and_kept_gain(report):
    _, summary, figures = report
    axes = panels(figures["fig_kept_gain_vs_tv"])
    assert [ax.get_title() for ax in axes] == ["task_a", "task_b", "pooled over tasks"]
    for ax, task in zip(axes, ("task_a", "task_b", None)):
        for variant in ("fast", "slow"):
            records = [task_record(summary, variant, task, lag) if task
                       else pooled_record(summary, variant, lag) for lag in (4.0, 8.0)]
            points = scatter(ax, variant)
            np.testing.assert_allclose(
                points.get_offsets(), [[r["tv_backward"], r["kept"]["point"]] for r in records])
            # The larger lag has the larger marker.
            small, large = points.get_sizes()
            assert small < large
            (bars,) = [c for c in ax.containers if c.get_label() == variant]
            segments = bars.lines[2][0].get_segments()
            np.testing.assert_allclose(segments, [
                [[r["tv_backward"], r["kept"]["low"]], [r["tv_backward"], r["kept"]["high"]]]
                for r in records])
        # No undefined kept gain is drawn, nor lag 0 (kept gain 1 by definition).
        labels = {c.get_label() for c in ax.collections if isinstance(c, PathCollection)}
        assert labels == {"fast", "slow"}
        lines = {line.get_ydata()[0] for line in ax.get_lines()
                 if line.get_linestyle() in ("--", ":")}
        assert lines == {0.0, 1.0}
    # Reading it: the method that keeps all of its gain sits at the smaller TV.
    fast, slow = (scatter(axes[0], v).get_offsets()[-1] for v in ("fast", "slow"))
    assert slow[1] > fast[1] and slow[0] < fast[0]
    assert summary["figures"]["fig_kept_gain_vs_tv"]["png"] == "fig_kept_gain_vs_tv.png"
    assert list(summary["figures"])[:2] == ["fig_kept_gain", "fig_kept_gain_vs_tv"]


def test_an_unbounded_interval_has_a_hollow_marker_and_no_bar_and_no_interval_sets_the_axis():
    def record(variant, lag, point, low, high, tv):
        return {"variant": variant, "task": "t", "lag": lag, "tv_backward": tv,
                "kept": {"point": point, "low": low, "high": high}}

    kept_gain = {"pooled": [], "tasks": [
        record("a", 0.0, 1.0, 0.9, 1.1, 0.0), record("a", 4.0, 0.5, None, None, 0.3),
        record("b", 4.0, 0.2, 0.1, 6.0, 0.1)]}
    figure = figures_kept_tv.figure_kept_gain_vs_tv(
        kept_gain, variant_styles(["a", "b"]), [0.0, 4.0])
    (ax,) = panels(figure)
    assert scatter(ax, "a").get_facecolors()[:, 3].tolist() == [0.0]
    assert scatter(ax, "b").get_facecolors()[:, 3].tolist() == [1.0]
    assert [c.get_label() for c in ax.containers] == ["b"]
    # The points, 0 and 1 with a quarter of their span to spare; b's interval runs past it.
    assert ax.get_ylim() == pytest.approx((-0.25, 1.25))


def test_the_figure_says_why_it_is_not_drawn():
    styles = variant_styles(["a"])
    assert figures_kept_tv.figure_kept_gain_vs_tv(
        {"skipped": "no lag 0"}, styles, [4.0]).reason == "no lag 0"
    undefined = {"variant": "a", "task": "t", "lag": 4.0, "kept": None, "tv_backward": 0.3}
    assert figures_kept_tv.figure_kept_gain_vs_tv(
        {"tasks": [undefined], "pooled": []}, styles, [0.0, 4.0]).reason == figures_kept_tv.NO_KEPT
    unmeasured = {**undefined, "kept": {"point": 0.5, "low": 0.4, "high": 0.6}}
    del unmeasured["tv_backward"]
    assert figures_kept_tv.figure_kept_gain_vs_tv(
        {"tasks": [unmeasured], "pooled": []}, styles, [0.0, 4.0]).reason == figures_kept_tv.NO_TV


# ---------------------------------------------------------------- report.md


def test_report_md_ranks_the_largest_lag_by_score_beside_the_kept_gain(report):
    out, summary, _ = report
    text = (out / "report.md").read_text()
    section = text[text.index("### Ranked at lag 8"):text.index("## What was run")]
    assert "![Kept gain against the backward TV" in section
    assert ("| score rank | method | normalised return at lag 8 [95% CI] | "
            "kept gain at lag 8 [95% CI] | kept-gain rank | backward TV at lag 8 |") in section
    tables = section.split("On task_b:")[0], section.split("On task_b:")[1].split("Pooled")[0]
    for table, task in zip(tables, INITIAL):
        fast, slow, flat = (task_record(summary, v, task, 8.0) for v in ("fast", "slow", "flat"))
        rows = [
            f"| 1 | fast | {fmt_interval(fast['normalised_iqm'])} | {fmt_interval(fast['kept'])} "
            f"| 2 | {fast['tv_backward']:.3f} |",
            f"| 2 | slow | {fmt_interval(slow['normalised_iqm'])} | {fmt_interval(slow['kept'])} "
            f"| 1 | {slow['tv_backward']:.3f} |",
            f"| 3 | flat | {fmt_interval(flat['normalised_iqm'])} | undefined (no synchronous "
            f"gain) | - | {flat['tv_backward']:.3f} |",
        ]
        assert [table.index(row) for row in rows] == sorted(table.index(row) for row in rows)
    pooled = section.split("Pooled over tasks")[1]
    fast = pooled_record(summary, "fast", 8.0)
    assert (f"| 1 | fast | {fmt_interval(fast['normalised_iqm'])} | "
            f"{fmt_interval(fast['kept'])} | 2 | {fast['tv_backward']:.3f} |") in pooled


def test_without_backward_tv_the_figure_is_skipped_and_the_ranking_says_so(tmp_path):
    summary = write_report(make_runs(with_tv=False), tmp_path, final_fraction=0.1, reps=20)
    assert summary["figures"]["fig_kept_gain_vs_tv"]["skipped"] == figures_kept_tv.NO_TV
    assert "tv_backward" not in task_record(summary, "fast", "task_a", 8.0)
    text = (tmp_path / "report.md").read_text()
    section = text[text.index("### Ranked at lag 8"):text.index("## What was run")]
    assert "| 2 | slow |" in section and " | 1 | n/a |" in section
    assert "![Kept gain against the backward TV" not in section


def test_without_a_kept_gain_there_is_no_ranking_and_the_figure_says_why(tmp_path):
    runs = make_runs()
    summary = write_report(runs[runs["lag"] > 0], tmp_path, final_fraction=0.1, reps=20)
    reason = summary["kept_gain"]["skipped"]
    assert summary["figures"]["fig_kept_gain_vs_tv"]["skipped"] == reason
    assert "### Ranked" not in (tmp_path / "report.md").read_text()


def test_ranks_put_the_largest_first_and_share_ties():
    assert ranks([0.5, 1.0, 0.5, None, 0.2]) == [2, 1, 2, None, 4]
