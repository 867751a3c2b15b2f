"""Tests of the share of the synchronous gain kept, on a runs table whose gains are set by hand."""

import itertools

import numpy as np
import pandas as pd
import pytest

from vaco_jax.report import figures_heatmap, kept_gain, stats

from test_report import drawn_figures, panels, write_report

# Each run: evaluations at 0, 50 and 100 steps; final_fraction 0.1 makes the last the final.
STEPS = (0, 50, 100)
INITIAL = {"task_a": 10.0, "task_b": -5.0}
SEEDS = (0, 1, 2, 3)
LAGS = (0.0, 4.0)
# Per (variant, task, lag): each seed's gain, final less first evaluation.
GAINS = {
    ("ppo", "task_a", 0.0): (2.0, 4.0, 6.0, 20.0),    # IQM 5 (its mean, 8, is not)
    ("ppo", "task_a", 4.0): (1.0, 2.0, 3.0, 10.0),    # shares 0.2 0.4 0.6 2.0: IQM 0.5
    ("ppo", "task_b", 0.0): (10.0, 20.0, 30.0, 40.0),  # IQM 25
    ("ppo", "task_b", 4.0): (5.0, 5.0, 15.0, 25.0),   # shares 0.2 0.2 0.6 1.0: IQM 0.4
    ("vaco", "task_a", 0.0): (4.0, 4.0, 4.0, 4.0),
    ("vaco", "task_a", 4.0): (3.0, 3.0, 3.0, 3.0),    # 0.75
    ("vaco", "task_b", 0.0): (8.0, 8.0, 8.0, 8.0),
    ("vaco", "task_b", 4.0): (8.0, 8.0, 8.0, 8.0),    # 1
    # Loses without lag: no synchronous gain to keep a share of.
    ("impala", "task_a", 0.0): (-1.0, -2.0, -1.0, -2.0),
    ("impala", "task_a", 4.0): (1.0, 1.0, 1.0, 1.0),
    ("impala", "task_b", 0.0): (-1.0, -2.0, -1.0, -2.0),
    ("impala", "task_b", 4.0): (1.0, 1.0, 1.0, 1.0),
    # Synchronous IQM gain 1 > 0, but a resample of -1, -1, 1, 1 has none: unbounded interval.
    ("spo", "task_a", 0.0): (-1.0, 1.0, 1.0, -1.0 + 4.0),
    ("spo", "task_a", 4.0): (0.5, 0.5, 0.5, 0.5),
    ("spo", "task_b", 0.0): (10.0, 10.0, 10.0, 10.0),
    ("spo", "task_b", 4.0): (5.0, 5.0, 5.0, 5.0),
}
REPS = 200


def evaluations(variant, task, lag, seed):
    """Synchronous runs gain half by the middle evaluation, lagged runs none (they learn late),
    so a lagged run's AUC gain is a quarter of its gain and a synchronous run's a half."""
    gain = GAINS[(variant, task, lag)][seed]
    middle = INITIAL[task] + (gain / 2 if lag == 0.0 else 0.0)
    return [INITIAL[task], middle, INITIAL[task] + gain]


def make_runs(lags=LAGS):
    rows = []
    for (variant, task, lag), seed in itertools.product(GAINS, SEEDS):
        if lag not in lags:
            continue
        rid = f"{task}/{variant}/lag{lag:g}/s{seed}"
        for update, (steps, value) in enumerate(zip(STEPS, evaluations(variant, task, lag, seed))):
            rows.append({
                "task": task, "algo": variant, "lag_model": "uniform", "lag": lag, "epochs": 1,
                "minibatches": 1, "seed": seed, "run_id": rid, "update": update,
                "env_steps": steps, "eval_return": value, "diverged": False, "diverged_at": -1,
            })
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out, figures = tmp_path_factory.mktemp("kept"), {}
    with drawn_figures(figures):
        summary = write_report(make_runs(), out, final_fraction=0.1, reps=REPS, seed=0)
    return out, summary, figures


def task_record(summary, variant, task, lag):
    (found,) = [r for r in summary["kept_gain"]["tasks"]
                if (r["variant"], r["task"], r["lag"]) == (variant, task, lag)]
    return found


def pooled_record(summary, variant, lag):
    (found,) = [r for r in summary["kept_gain"]["pooled"]
                if (r["variant"], r["lag"]) == (variant, lag)]
    return found


def gains(variant, task, lag):
    return np.array(GAINS[(variant, task, lag)])[:, None]


# ---------------------------------------------------------------- numbers


def test_kept_gain_per_task_matches_hand_computation(report):
    _, summary, _ = report
    for task, kept, sync in (("task_a", 0.5, 5.0), ("task_b", 0.4, 25.0)):
        found = task_record(summary, "ppo", task, 4.0)
        assert found["kept"]["point"] == pytest.approx(kept)
        # Lagged runs learn late: half the synchronous share of the area.
        assert found["auc_kept"]["point"] == pytest.approx(kept / 2)
        assert found["raw_sync_gain"] == pytest.approx(sync)
        assert found["raw_sync_auc_gain"] == pytest.approx(sync / 2)
        assert found["raw_initial"] == pytest.approx(INITIAL[task])
        assert found["raw_final_iqm"] == pytest.approx(
            INITIAL[task] + stats.aggregate_iqm(gains("ppo", task, 4.0)))
        assert (found["runs"], found["sync_runs"], found["undefined"]) == (4, 4, None)
    assert task_record(summary, "vaco", "task_a", 4.0)["kept"]["point"] == pytest.approx(0.75)


def test_kept_gain_pooled_over_tasks_matches_hand_computation(report):
    # Shares 0.2 0.4 0.6 2.0 and 0.2 0.2 0.6 1.0: the middle four of eight, 0.2 0.4 0.6 0.6.
    _, summary, _ = report
    found = pooled_record(summary, "ppo", 4.0)
    assert found["kept"]["point"] == pytest.approx(0.45)
    assert found["runs_per_task"] == 4


def test_kept_gain_interval_resamples_lagged_and_synchronous_runs(report):
    _, summary, _ = report
    lagged = np.hstack([gains("ppo", t, 4.0) for t in INITIAL])
    sync = np.hstack([gains("ppo", t, 0.0) for t in INITIAL])
    expected = stats.stratified_bootstrap_ci_pair(lagged, sync, stats.kept_gain, reps=REPS, seed=0)
    found = pooled_record(summary, "ppo", 4.0)["kept"]
    assert [found[k] for k in ("point", "low", "high")] == pytest.approx(expected)
    # The synchronous runs' noise widens it: with them fixed it is narrower.
    fixed = stats.stratified_bootstrap_ci(
        lagged / stats.task_iqm(sync), stats.aggregate_iqm, reps=REPS, seed=0)
    assert found["high"] - found["low"] > fixed[2] - fixed[1]


def test_lag_zero_keeps_exactly_one_per_task(report):
    _, summary, _ = report
    for variant in ("ppo", "vaco", "spo"):
        for task in INITIAL:
            assert task_record(summary, variant, task, 0.0)["kept"]["point"] == pytest.approx(
                1.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_kept_gain_of_identical_samples_is_one(seed):
    g = np.random.default_rng(seed).uniform(0.1, 5.0, size=(7, 1))
    assert stats.kept_gain(g, g) == pytest.approx(1.0, abs=1e-12)
    # Per task it commutes with the trimming: the IQM gain over the synchronous IQM gain.
    y = np.random.default_rng(seed + 10).uniform(0.1, 5.0, size=(5, 1))
    assert stats.kept_gain(g, y) == pytest.approx(
        stats.aggregate_iqm(g) / stats.aggregate_iqm(y))


def test_kept_gain_is_nan_without_a_synchronous_gain_and_batches():
    g = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert np.isnan(stats.kept_gain(g, np.array([[1.0, -1.0], [1.0, -2.0]])))
    batch = np.stack([g, g, -g])
    assert stats.kept_gain(batch, batch)[:2] == pytest.approx([1.0, 1.0])
    assert np.isnan(stats.kept_gain(batch, batch)[2])


def test_without_a_synchronous_gain_the_share_is_undefined(report):
    _, summary, _ = report
    for task in INITIAL:
        found = task_record(summary, "impala", task, 4.0)
        assert found["kept"] is None and found["auc_kept"] is None
        assert found["undefined"] == ("no synchronous gain in the final score and the AUC "
                                      "(IQM gain at lag 0 not positive)")
        assert found["raw_sync_gain"] == pytest.approx(-1.5)
    assert pooled_record(summary, "impala", 4.0)["kept"] is None


def test_a_resampled_synchronous_gain_of_zero_leaves_the_interval_unbounded(report):
    _, summary, _ = report
    found = task_record(summary, "spo", "task_a", 4.0)["kept"]
    assert found["point"] == pytest.approx(0.5)
    assert found["low"] is None and found["high"] is None


# ---------------------------------------------------------------- report.md and figure


def test_report_md_opens_with_the_kept_gain_and_its_raw_numbers(report):
    out, summary, _ = report
    text = (out / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Share of the synchronous gain kept", "## What was run"]
    assert text.index("](fig_kept_gain.png)") < text.index("## What was run")
    assert ("| task | variant | lag | runs | raw initial return | raw final return IQM | "
            "raw synchronous gain | kept gain [95% CI] | AUC kept gain [95% CI] |") in text
    kept, auc = (task_record(summary, "ppo", "task_a", 4.0)[k] for k in ("kept", "auc_kept"))
    assert (f"| task_a | ppo | 4 | 4 | 10.000 | 12.500 | 5.000 | {kept['point']:.3f} "
            f"[{kept['low']:.3f}, {kept['high']:.3f}] | {auc['point']:.3f} "
            f"[{auc['low']:.3f}, {auc['high']:.3f}] |") in text
    assert ("| task_a | impala | 4 | 4 | 10.000 | 11.000 | -1.500 | "
            "undefined (no synchronous gain) | undefined (no synchronous gain) |") in text
    assert "| task_a | spo | 4 | 4 | 10.000 | 10.500 | 1.000 | 0.500 [unbounded] |" in text
    assert "Pooled over tasks" in text


def test_final_score_tables_carry_raw_scores(report):
    out, summary, _ = report
    ppo = next(c for c in summary["cells"] if (c["variant"], c["lag"]) == ("ppo", 4.0))
    assert ppo["raw"]["task_a"]["initial"] == pytest.approx(10.0)
    assert ppo["raw"]["task_a"]["iqm"]["point"] == pytest.approx(12.5)
    assert ppo["raw"]["task_b"]["iqm"]["point"] == pytest.approx(5.0)
    text = (out / "report.md").read_text()
    assert ("| optimality gap | AUC IQM [95% CI] | raw initial return (task_a / task_b) | "
            "raw final return IQM (task_a / task_b) |") in text
    iqm = ppo["iqm"]
    assert f"| ppo | 4 | 4 | {iqm['point']:.3f} [" in text
    assert "| 10.000 / -5.000 | 12.500 / 5.000 |" in text
    task_cell = next(c for c in summary["task_cells"]
                     if (c["variant"], c["lag"], c["task"]) == ("ppo", 4.0, "task_b"))
    assert task_cell["raw_initial"] == pytest.approx(-5.0)
    assert task_cell["raw_iqm"]["point"] == pytest.approx(5.0)


def test_heatmap_has_a_panel_per_task_with_rows_sorted_by_mean_kept_gain(report):
    _, summary, figures = report
    figure = figures["fig_kept_gain"]
    task_a, task_a_auc, task_b, task_b_auc = (ax for ax in panels(figure) if ax.get_title())
    assert [ax.get_title() for ax in (task_a, task_a_auc, task_b, task_b_auc)] == [
        f"{task}: {measure}" for task in ("task_a", "task_b")
        for measure in ("final score", "AUC")]
    # task_a at lag 4: vaco 0.75, ppo 0.5, spo 0.5 (ties by name); impala undefined, last.
    rows = [t.get_text() for t in task_a.get_yticklabels()]
    assert rows == ["vaco", "ppo", "spo", "impala"]
    assert [t.get_text() for t in task_b.get_yticklabels()] == ["vaco", "spo", "ppo", "impala"]
    assert [t.get_text() for t in task_a.get_xticklabels()] == ["0", "4"]
    texts = [t.get_text() for t in task_a.texts]
    kept = task_record(summary, "ppo", "task_a", 4.0)["kept"]
    assert f"{kept['point']:.2f}\n[{kept['low']:.2f}, {kept['high']:.2f}]" in texts
    assert "undefined:\nno sync gain" in texts and "0.50\n[unbounded]" in texts
    # The AUC panel keeps the final score's row order and writes the AUC's shares.
    auc = task_record(summary, "ppo", "task_a", 4.0)["auc_kept"]
    ppo_row = [t.get_text() for t in task_a_auc.texts][2:4]  # texts by row, then lag
    assert ppo_row[0].startswith("1.00\n")
    assert ppo_row[1] == f"{auc['point']:.2f}\n[{auc['low']:.2f}, {auc['high']:.2f}]"
    assert auc["point"] == pytest.approx(0.25)
    # The colour bar is labelled.
    assert any(ax.get_ylabel() == "share of the synchronous gain kept (IQM)"
               for ax in figure.axes)
    assert summary["figures"]["fig_kept_gain"]["png"] == "fig_kept_gain.png"
    assert list(summary["figures"])[0] == "fig_kept_gain"


def test_row_order_puts_the_best_mean_over_lagged_levels_first():
    def record(variant, lag, point, auc=0.5):
        def share(value):
            return None if value is None else {"point": value, "low": 0.0, "high": 1.0}
        return {"variant": variant, "lag": lag, "kept": share(point), "auc_kept": share(auc)}

    records = [
        record("a", 0.0, 1.0), record("a", 4.0, 0.2), record("a", 8.0, 0.9),   # mean 0.55
        record("b", 0.0, 1.0), record("b", 4.0, 0.8), record("b", 8.0, 0.4),   # mean 0.6
        record("c", 0.0, None), record("c", 4.0, None, None),
        record("d", 0.0, 1.0), record("d", 4.0, 1.2),
        # Tied with d on the final score; keeps less of its AUC gain, so it comes after d.
        record("e", 0.0, 1.0, 1.0), record("e", 4.0, 1.2, 0.3),
        # Lag 0 does not count: 1 there by construction.
        record("f", 0.0, 9.0), record("f", 4.0, 0.1),
    ]
    assert figures_heatmap.row_order(records) == ["d", "e", "b", "a", "f", "c"]


def test_without_lag_zero_the_kept_gain_is_skipped_and_says_why(tmp_path):
    runs = make_runs()
    lagged = runs[runs["lag"] == 4.0]
    summary = write_report(lagged, tmp_path / "lagged", final_fraction=0.1, reps=20)
    reason = "the study has no synchronous (lag 0) runs to measure the kept gain against"
    assert summary["kept_gain"] == {"skipped": reason}
    assert summary["figures"]["fig_kept_gain"]["skipped"] == reason
    assert not (tmp_path / "lagged" / "fig_kept_gain.png").exists()
    assert f"Not computed: {reason}." in (tmp_path / "lagged" / "report.md").read_text()
    assert kept_gain.skip_reason([0.0]) == "the study has no lag level besides lag 0"
    assert kept_gain.skip_reason([0.0, 2.0]) is None


def test_the_heatmaps_title_lies_inside_the_figure_however_few_the_lags(report):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    _, summary, figures = report
    narrow = figures_heatmap.figure_kept_gain(summary["kept_gain"], [0.0, 4.0])
    for figure in (figures["fig_kept_gain"], narrow):
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        extent = figure._suptitle.get_window_extent(canvas.get_renderer())  # its Text's
        assert extent.x0 >= 0 and extent.x1 <= figure.bbox.x1
    assert "hatched grey: undefined or not run" in narrow.get_suptitle().replace("\n", " ")


def test_shares_are_drawn_on_one_graded_scale_never_in_the_undefined_grey():
    """The one scale: a panel of cells all at 0 (every method kept nothing) is white, the colour
    bar's 0, never a grey that reads as the hatched grey of undefined cells; 1 (kept everything)
    is the scale's blue end, and below 0 the red is graded, so -0.3 and -63 differ."""
    from matplotlib.colors import to_rgba

    def record(task, variant, lag, point):
        share = None if point is None else {"point": point, "low": point, "high": point}
        return {"task": task, "variant": variant, "lag": lag, "kept": share, "auc_kept": share}

    records = [record("flat", v, lag, 0.0) for v in ("ppo", "vaco") for lag in (0.0, 4.0)]
    records += [record("spread", "ppo", 0.0, 1.0), record("spread", "ppo", 4.0, -0.3),
                record("spread", "impala", 4.0, None),
                record("spread", "vaco", 0.0, 1.0), record("spread", "vaco", 4.0, -63.0)]
    figure = figures_heatmap.figure_kept_gain({"tasks": records}, [0.0, 4.0])
    flat, _, spread, _ = (ax for ax in panels(figure) if ax.get_title())
    (image,) = flat.images
    colours = image.to_rgba(image.get_array())
    assert np.array_equal(colours, np.ones((2, 2, 4)))
    assert not np.allclose(colours[0, 0], to_rgba(figures_heatmap.UNDEFINED_COLOUR))
    (image,) = spread.images
    rows = list(figures_heatmap.row_order([r for r in records if r["task"] == "spread"]))
    colours = image.to_rgba(image.get_array())
    ppo, vaco = colours[rows.index("ppo")], colours[rows.index("vaco")]
    blue = colours[rows.index("ppo"), 0]
    assert blue[2] > blue[0] and np.allclose(blue, vaco[0])  # 1: the blue end, alike
    light, deep = ppo[1], vaco[1]
    assert light[0] > light[2] and deep[0] > deep[2]  # both red
    assert light[:3].sum() > deep[:3].sum() + 0.5  # -0.3 far lighter than -63
    # Undefined (impala at lag 4) and not run (impala at lag 0): transparent over the hatching.
    assert colours[rows.index("impala"), :, 3].tolist() == [0.0, 0.0]
    assert spread.patch.get_hatch() == figures_heatmap.UNDEFINED_HATCH
    assert spread.patch.get_facecolor() == to_rgba(figures_heatmap.UNDEFINED_COLOUR)


def test_a_lag_model_run_only_above_lag_0_keeps_the_gain_of_the_fixed_lag_synchronous_runs(
    tmp_path,
):
    """A study of lag models runs the synchronous runs once, under `fixed`: the `uniform`
    variant of the same algorithm is measured against them."""
    runs = make_runs()
    runs = runs[runs["algo"].isin(["ppo", "vaco"])].assign(lag_model="fixed")
    uniform = runs[(runs["algo"] == "ppo") & (runs["lag"] == 4.0)].assign(
        lag_model="uniform", lag=8.0, run_id=lambda r: r["run_id"] + "/uniform")
    summary = write_report(pd.concat([runs, uniform]), tmp_path, final_fraction=0.1,
                           reps=REPS, seed=0)
    found = task_record(summary, "ppo[lag_model=uniform]", "task_a", 8.0)
    assert found["sync_variant"] == "ppo[lag_model=fixed]" and found["sync_runs"] == 4
    own = task_record(summary, "ppo[lag_model=fixed]", "task_a", 4.0)
    assert found["kept"] == own["kept"]  # the same gains against the same synchronous runs
    assert found["raw_sync_gain"] == pytest.approx(5.0)
    assert pooled_record(summary, "ppo[lag_model=uniform]", 8.0)["kept"] == \
        pooled_record(summary, "ppo[lag_model=fixed]", 4.0)["kept"]
    assert found["sync_variant"] == pooled_record(summary, "ppo[lag_model=uniform]",
                                                  8.0)["sync_variant"]
    assert task_record(summary, "vaco", "task_a", 4.0)["sync_variant"] == "vaco"
    # A variant with lag-0 runs of its own keeps them, whatever its lag model.
    own_sync = uniform.assign(lag=0.0, run_id=lambda r: r["run_id"] + "/sync")
    summary = write_report(pd.concat([runs, uniform, own_sync]), tmp_path / "own",
                           final_fraction=0.1, reps=REPS, seed=0)
    found = task_record(summary, "ppo[lag_model=uniform]", "task_a", 8.0)
    assert found["sync_variant"] == "ppo[lag_model=uniform]"
    # Without fixed-lag synchronous runs there is nothing to measure against.
    alone = pd.concat([runs[runs["algo"] == "vaco"], uniform])
    summary = write_report(alone, tmp_path / "alone", final_fraction=0.1, reps=REPS, seed=0)
    assert not [r for r in summary["kept_gain"]["tasks"] if r["algo"] == "ppo"]
