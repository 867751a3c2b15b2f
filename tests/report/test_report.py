"""Tests of the sweep report on a small synthetic runs table."""

import contextlib
import dataclasses
import itertools
import json
import math
import warnings

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from vaco_jax import report as report_layer
from vaco_jax.report import Score, variant_names
from vaco_jax.report import summary as report_summary
from vaco_jax.report import figures as report_figures
from vaco_jax.report import stats
from vaco_jax.report import write as write_module
from vaco_jax.report.markdown import markdown

# Per task: initial return, and the return a perfect run gains over training.
TASKS = {"hopper": (10.0, 100.0), "walker": (-5.0, 50.0)}
# Per variant: algorithm, hp_tv_delta, and how much of the perfect gain it reaches.
VARIANTS = {
    "ppo": ("ppo", np.nan, 0.5),
    "impala": ("impala", np.nan, 0.6),
    "vaco[tv_delta=0.1]": ("vaco", 0.1, 0.9),
    "vaco[tv_delta=0.2]": ("vaco", 0.2, 0.7),
}
LAGS = (0.0, 4.0)
SEEDS = (0, 1, 2)
UPDATES = np.array([0, 10, 20, 30, 40])
ENV_STEPS = np.array([0, 250, 500, 750, 1000])
DIVERGED = ("hopper", "ppo", 4.0, 1)
DIVERGED_AT = 25
METRICS = (
    "episode_return", "tv_backward", "tv_forward", "approx_kl", "behaviour_kl", "ess_ratio",
    "version_gap_mean", "version_gap_max", "policy_loss", "value_loss", "entropy", "grad_norm",
)
FINAL_FRACTION = 0.4  # the last 2 of 5 evaluation points
REPS = 200
FIGURES = (
    "fig_kept_gain",
    "fig_kept_gain_vs_tv",
    "fig_aggregates",
    "fig_tasks",
    "fig_learning_curves",
    "fig_staleness_diagnostics",
    "fig_auc",
    "fig_filter_clip",
    "fig_score_vs_off_policy",
    "fig_probability_of_improvement",
)
RUNS = list(itertools.product(TASKS, VARIANTS, LAGS, SEEDS))


def write_report(*args, **kwargs) -> dict:
    """The summary ``write_report`` returns, as ``summary.json`` holds it: these tests check
    what the file says."""
    return report_summary.to_json(report_layer.write_report(*args, **kwargs))


def run_id(task, variant, lag, seed):
    return f"{task}/{variant}/lag{lag:g}/s{seed}"


def eval_returns(task, variant, lag, seed):
    """The run's eval returns: a noisy ramp whose slope falls with lag except for vaco."""
    start, gain = TASKS[task]
    algo, _, quality = VARIANTS[variant]
    key = [list(TASKS).index(task), list(VARIANTS).index(variant), int(lag), seed]
    rng = np.random.default_rng(key)
    slope = quality * (1.0 - 0.1 * lag * (algo != "vaco"))
    noise = rng.normal(0.0, 0.15 * gain, len(ENV_STEPS))
    returns = start + gain * slope * ENV_STEPS / ENV_STEPS[-1] + noise
    returns[0] = start + rng.normal(0.0, 1.0)
    if (task, variant, lag, seed) == DIVERGED:
        returns[UPDATES > DIVERGED_AT] = np.nan
    return returns


def run_rows(task, variant, lag, seed, rng):
    algo, tv_delta, _ = VARIANTS[variant]
    diverged = (task, variant, lag, seed) == DIVERGED
    coordinates = {
        "task": task, "algo": algo, "lag_model": "uniform", "lag": lag, "epochs": 4,
        "minibatches": 8, "seed": seed, "run_id": run_id(task, variant, lag, seed),
        "hp_tv_delta": tv_delta, "hp_learning_rate": 3e-4,
        "diverged": diverged, "diverged_at": DIVERGED_AT if diverged else -1,
    }
    returns = eval_returns(task, variant, lag, seed)
    return [
        {
            **coordinates,
            "update": int(update),
            "env_steps": int(steps),
            "eval_return": value,
            **{metric: rng.uniform() for metric in METRICS},
            "filter_fraction": rng.uniform(0.0, 0.1) * (1 + lag) if algo == "vaco" else np.nan,
            "clip_fraction": rng.uniform(0.0, 0.1) * (1 + lag) if algo == "ppo" else np.nan,
        }
        for update, steps, value in zip(UPDATES, ENV_STEPS, returns)
    ]


def make_runs():
    rng = np.random.default_rng(0)
    return pd.DataFrame([row for run in RUNS for row in run_rows(*run, rng)])


def filled(returns):
    return pd.Series(returns).ffill().to_numpy()


def hand_normalisation():
    """Per task (initial, reference) computed straight from the generated returns."""
    result = {}
    for task in TASKS:
        runs = [filled(eval_returns(*run)) for run in RUNS if run[0] == task]
        result[task] = (np.mean([r[0] for r in runs]), max(r[-2:].mean() for r in runs))
    return result


def hand_matrices(variant, lag):
    """Final-score and AUC matrices [seeds, tasks] of one cell."""
    norm = hand_normalisation()
    def curve(task, seed):
        initial, reference = norm[task]
        return (filled(eval_returns(task, variant, lag, seed)) - initial) / (reference - initial)

    curves = np.array([[curve(t, s) for t in TASKS] for s in SEEDS])
    return curves[..., -2:].mean(axis=-1), stats.area_under_curve(curves, ENV_STEPS)


@pytest.fixture(scope="module")
def runs():
    return make_runs()


@contextlib.contextmanager
def drawn_figures(into):
    """Records each figure ``write_report`` saves into the dict ``into``, by file stem."""
    save = write_module._save_figure

    def record(figure, out_dir, stem):
        into[stem] = figure
        return save(figure, out_dir, stem)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(write_module, "_save_figure", record)
        yield into


def panels(figure):
    return [ax for ax in figure.axes if ax.get_visible()]


@pytest.fixture(scope="module")
def figures():
    """The figures of the ``report`` fixture, by file stem."""
    return {}


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory, figures):
    out = tmp_path_factory.mktemp("report")
    with drawn_figures(figures):
        summary = write_report(
            runs, out, final_fraction=FINAL_FRACTION, reps=REPS, seed=0, title="Synthetic sweep"
        )
    return out, summary


def cell(summary, variant, lag):
    (found,) = [c for c in summary["cells"] if c["variant"] == variant and c["lag"] == lag]
    return found


# ---------------------------------------------------------------- files


def test_writes_every_file(report):
    out, _ = report
    assert {"runs.parquet", "summary.json", "report.md"} <= {p.name for p in out.iterdir()}
    for stem in FIGURES:
        png = out / f"{stem}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 20_000
        height, width, _ = matplotlib.image.imread(png).shape
        assert height >= 400 and width >= 600
        assert (out / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_runs_parquet_is_the_table_as_given(report, runs):
    out, _ = report
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"), runs)


def test_summary_json_is_the_returned_summary(report):
    out, summary = report
    assert json.loads((out / "summary.json").read_text()) == summary


# ---------------------------------------------------------------- numbers


def test_normalisation_uses_initial_policy_and_best_final_score(report):
    _, summary = report
    for task, (initial, reference) in hand_normalisation().items():
        used = summary["normalisation"][task]
        assert used["initial"] == pytest.approx(initial)
        assert used["reference"] == pytest.approx(reference)
        assert used["source"] == "best final score"


def test_cell_aggregates_match_hand_computation(report):
    # ppo at lag 4 holds the diverged run, scored by its last finite evaluation.
    _, summary = report
    scores, auc = hand_matrices("ppo", 4.0)
    found = cell(summary, "ppo", 4.0)
    assert (found["num_runs"], found["runs_per_task"], found["num_diverged"]) == (6, 3, 1)
    aggregates = {
        "median": stats.aggregate_median,
        "iqm": stats.aggregate_iqm,
        "mean": stats.aggregate_mean,
        "optimality_gap": stats.aggregate_optimality_gap,
    }
    for key, aggregate in aggregates.items():
        expected = stats.stratified_bootstrap_ci(scores, aggregate, reps=REPS, seed=0)
        assert [found[key][k] for k in ("point", "low", "high")] == pytest.approx(expected), key
    expected_auc = stats.stratified_bootstrap_ci(auc, stats.aggregate_iqm, reps=REPS, seed=0)
    assert [found["auc_iqm"][k] for k in ("point", "low", "high")] == pytest.approx(expected_auc)


def task_cell(summary, variant, lag, task):
    (found,) = [
        c for c in summary["task_cells"]
        if (c["variant"], c["lag"], c["task"]) == (variant, lag, task)
    ]
    return found


def test_task_cells_match_hand_computation(report):
    _, summary = report
    assert len(summary["task_cells"]) == len(VARIANTS) * len(LAGS) * len(TASKS)
    scores, auc = hand_matrices("ppo", 4.0)
    for column, task in enumerate(TASKS):
        found = task_cell(summary, "ppo", 4.0, task)
        assert found["runs"] == len(SEEDS)
        for key, matrix, aggregate in (
            ("iqm", scores, stats.aggregate_iqm),
            ("mean", scores, stats.aggregate_mean),
            ("auc_iqm", auc, stats.aggregate_iqm),
        ):
            expected = stats.stratified_bootstrap_ci(
                matrix[:, [column]], aggregate, reps=REPS, seed=0
            )
            assert [found[key][k] for k in ("point", "low", "high")] == pytest.approx(expected)
    # The two tasks differ, so neither equals the pooled cell.
    hopper, walker = (task_cell(summary, "ppo", 4.0, task)["iqm"] for task in TASKS)
    assert hopper != walker


@pytest.mark.slow
def test_task_cells_equal_the_report_of_each_task_alone(report, runs, tmp_path):
    _, summary = report
    for task in TASKS:
        alone = write_report(
            runs[runs["task"] == task], tmp_path / task, final_fraction=FINAL_FRACTION, reps=REPS,
            seed=0,
        )
        assert alone["task_cells"] == []
        assert "fig_tasks" not in alone["figures"]
        assert "Final scores per task" not in (tmp_path / task / "report.md").read_text()
        for c in alone["cells"]:
            found = task_cell(summary, c["variant"], c["lag"], task)
            assert {k: found[k] for k in ("iqm", "mean", "auc_iqm")} == {
                k: c[k] for k in ("iqm", "mean", "auc_iqm")
            }


def test_task_figure_has_a_score_and_an_auc_panel_per_task(report, figures):
    axes = panels(figures["fig_tasks"])
    assert [ax.get_title() for ax in axes] == list(TASKS) * 2
    assert [ax.get_ylabel() for ax in axes] == (
        ["IQM of normalised final score"] * len(TASKS) + ["IQM of normalised AUC"] * len(TASKS)
    )
    _, summary = report
    walker_ppo = [task_cell(summary, "ppo", lag, "walker")["iqm"]["point"] for lag in LAGS]
    (bars,) = [b for b in axes[1].containers if b.get_label() == "ppo"]
    assert bars.lines[0].get_ydata() == pytest.approx(walker_ppo)


def test_line_figures_colour_algorithms_style_settings_on_evenly_spaced_lags(report, figures):
    """Variants of one algorithm share its colour and differ in line style; lag levels sit at
    0, 1, ..., labelled with their values, each variant's points shifted a little aside so that
    none hides another's of equal values."""
    for stem in ("fig_tasks", "fig_aggregates", "fig_auc"):
        ax = panels(figures[stem])[-1]  # a bottom panel: the others share its tick labels
        lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}
        assert set(lines) == set(VARIANTS)
        shifts = [line.get_xdata()[0] for line in lines.values()]
        for line, shift in zip(lines.values(), shifts):
            assert list(line.get_xdata()) == pytest.approx([shift, 1 + shift])
        assert len(set(shifts)) == len(shifts)
        assert max(np.abs(shifts)) <= report_figures.DODGE / 2 + 1e-12
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "4"]
        first, second = lines["vaco[tv_delta=0.1]"], lines["vaco[tv_delta=0.2]"]
        assert first.get_color() == second.get_color()
        assert first.get_linestyle() != second.get_linestyle()
        assert lines["ppo"].get_color() != lines["impala"].get_color()
        (legend,) = figures[stem].legends
        assert [t.get_text() for t in legend.get_texts()] == [
            "impala", "ppo", "vaco", "(default)", "tv_delta=0.1", "tv_delta=0.2"]


def test_two_algorithms_of_equal_values_both_show_against_lag():
    from vaco_jax.report.cells import AGGREGATES

    summaries = [{"variant": variant, "lag": lag,
                  **{key: {"point": 0.5, "low": 0.4, "high": 0.6} for key in AGGREGATES}}
                 for variant in ("ppo", "ppo_recompute") for lag in (0.0, 4.0)]
    styles = report_figures.variant_styles(["ppo", "ppo_recompute"])
    figure = report_figures.figure_aggregates(summaries, styles, [0.0, 4.0])
    for ax in panels(figure):
        ppo, recompute = (bars.lines[0] for bars in ax.containers)
        assert list(ppo.get_ydata()) == list(recompute.get_ydata())
        assert np.all(np.abs(ppo.get_xdata() - recompute.get_xdata()) >= 0.1)


def test_probability_of_improvement_figure_has_short_labels_and_rows_as_tall_as_their_bars(
    report, figures,
):
    figure = figures["fig_probability_of_improvement"]
    axes = panels(figure)
    assert [ax.get_title() for ax in axes] == [
        f"vaco[tv_delta={delta}]\nlag {lag:g}" for delta in ("0.1", "0.2") for lag in LAGS]
    for ax in axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["impala", "ppo"]  # top down
    # Two rows of two bars: under four inches, not a fixed page.
    assert figure.get_figheight() == pytest.approx(2 * (0.9 + 0.27 * 2) + 0.6)
    # Every title lies inside the figure, the last column's included.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    for ax in axes:
        extent = ax.title.get_window_extent(canvas.get_renderer())
        assert extent.x0 >= 0 and extent.x1 <= figure.bbox.x1


def test_probability_of_improvement_matches_hand_computation(report):
    _, summary = report
    focus, _ = hand_matrices("vaco[tv_delta=0.2]", 4.0)
    baseline, _ = hand_matrices("ppo", 4.0)
    expected = stats.stratified_bootstrap_ci_pair(
        focus, baseline, stats.probability_of_improvement, reps=REPS, seed=0
    )
    (found,) = [
        r
        for r in summary["probability_of_improvement"]
        if (r["variant"], r["baseline"], r["lag"]) == ("vaco[tv_delta=0.2]", "ppo", 4.0)
    ]
    assert [found["probability"][k] for k in ("point", "low", "high")] == pytest.approx(expected)


def test_probability_of_improvement_covers_each_vaco_variant_against_each_baseline(report):
    _, summary = report
    pairs = {(r["lag"], r["variant"], r["baseline"]) for r in summary["probability_of_improvement"]}
    focus = ("vaco[tv_delta=0.1]", "vaco[tv_delta=0.2]")
    assert pairs == {(lag, f, b) for lag in LAGS for f in focus for b in ("impala", "ppo")}


@pytest.mark.slow
def test_probability_of_improvement_pairs_equal_values_of_a_hyper_parameter_both_sweep(
    runs, tmp_path
):
    """A learning rate swept for every algorithm pairs like with like; the threshold that only
    vaco sweeps pairs with every baseline."""
    faster = runs.assign(hp_learning_rate=3e-3, run_id=runs["run_id"] + "/lr3e-3")
    summary = write_report(pd.concat([runs, faster], ignore_index=True), tmp_path,
                           final_fraction=FINAL_FRACTION, reps=20)
    pairs = {(r["lag"], r["variant"], r["baseline"]) for r in summary["probability_of_improvement"]}
    assert pairs == {
        (lag, f"vaco[learning_rate={lr},tv_delta={delta}]", f"{baseline}[learning_rate={lr}]")
        for lag in LAGS for lr in ("0.0003", "0.003") for delta in ("0.1", "0.2")
        for baseline in ("ppo", "impala")
    }


def test_diverged_run_is_listed_with_its_last_finite_score(report):
    _, summary = report
    task, variant, lag, seed = DIVERGED
    assert summary["diverged_runs"] == [
        {
            "run_id": run_id(*DIVERGED),
            "task": task,
            "variant": variant,
            "lag": lag,
            "seed": seed,
            "diverged_at": DIVERGED_AT,
            "last_finite_score": pytest.approx(eval_returns(*DIVERGED)[2]),
        }
    ]


# ---------------------------------------------------------------- report.md


def test_a_task_whose_scale_is_not_finite_is_said_not_normalised(report):
    _, summary = report
    parsed = report_summary.from_json(summary)
    # Only a summary from someone else's folder holds these: the report writer makes none.
    unscaled = {**parsed.normalisation,
                "hopper": report_summary.Normalisation(math.nan, math.inf, "given")}
    text = markdown(dataclasses.replace(parsed, normalisation=unscaled))
    assert "| hopper | - | - | not normalised |" in text and "nan" not in text
    walker = parsed.normalisation["walker"]
    assert (f"| walker | {walker.initial:.3f} | {walker.reference:.3f} | best final score |"
            in text)


def test_report_md_has_title_table_rows_and_figure_links(report):
    out, summary = report
    text = (out / "report.md").read_text()
    assert text.startswith("# Synthetic sweep\n")
    for c in summary["cells"]:
        iqm = f"{c['iqm']['point']:.3f} [{c['iqm']['low']:.3f}, {c['iqm']['high']:.3f}]"
        assert f"| {c['variant']} | {c['lag']:g} | 3 | {iqm} | {c['median']['point']:.3f} |" in text
    assert len(summary["cells"]) == len(VARIANTS) * len(LAGS)
    for stem in FIGURES:
        assert f"]({stem}.png)" in text and f"]({stem}.pdf)" in text
    assert run_id(*DIVERGED) in text
    assert "| 4 | vaco[tv_delta=0.1] | ppo |" in text
    assert (
        "| variant | lag | runs per task | hopper IQM [95% CI] | hopper AUC IQM [95% CI] | "
        "hopper raw final return IQM [95% CI] | walker IQM [95% CI] | walker AUC IQM [95% CI] | "
        "walker raw final return IQM [95% CI] |"
    ) in text
    for c in summary["task_cells"]:
        if c["task"] == "hopper":
            iqm = f"{c['iqm']['point']:.3f} [{c['iqm']['low']:.3f}, {c['iqm']['high']:.3f}]"
            assert f"| {c['variant']} | {c['lag']:g} | 3 | {iqm} |" in text


def test_absent_data_skips_figures_and_says_so(runs, tmp_path):
    no_fractions = runs.drop(columns=["filter_fraction", "clip_fraction"])
    summary = write_report(
        no_fractions, tmp_path, focus_algo="spo", final_fraction=FINAL_FRACTION, reps=20
    )
    names = {p.name for p in tmp_path.iterdir()}
    for stem in ("fig_filter_clip", "fig_forward_lag", "fig_probability_of_improvement"):
        assert f"{stem}.png" not in names
        assert "skipped" in summary["figures"][stem]
    assert {"fig_aggregates.png", "fig_learning_curves.png", "fig_auc.png"} <= names
    assert summary["probability_of_improvement"] == []
    text = (tmp_path / "report.md").read_text()
    assert text.count("Skipped:") == 3
    assert "fig_probability_of_improvement" not in text
    assert "Not computed: 'spo'" in text


@pytest.mark.slow
def test_given_references_unequal_counts_and_rewrites(runs, tmp_path):
    (tmp_path / "report.md").write_text("stale")
    fewer = runs[
        (runs["run_id"] != run_id("walker", "impala", 0.0, 2))
        & ~runs["run_id"].str.startswith("walker/impala/lag4/")
    ]
    summary = write_report(
        fewer, tmp_path, reference_scores={"hopper": 200.0}, final_fraction=FINAL_FRACTION, reps=20
    )
    assert summary["normalisation"]["hopper"]["reference"] == 200.0
    assert summary["normalisation"]["hopper"]["source"] == "given"
    assert summary["normalisation"]["walker"]["source"] == "best final score"
    assert cell(summary, "impala", 0.0)["runs_per_task"] == 2
    assert summary["incomplete_cells"] == [
        {"variant": "impala", "lag": 4.0, "missing_tasks": ["walker"]}
    ]
    assert not [c for c in summary["cells"] if (c["variant"], c["lag"]) == ("impala", 4.0)]
    # Each task alone keeps every run it has, with or without the other task.
    assert task_cell(summary, "impala", 0.0, "hopper")["runs"] == 3
    assert task_cell(summary, "impala", 0.0, "walker")["runs"] == 2
    assert task_cell(summary, "impala", 4.0, "hopper")["runs"] == 3
    assert not [c for c in summary["task_cells"]
                if (c["variant"], c["lag"], c["task"]) == ("impala", 4.0, "walker")]
    text = (tmp_path / "report.md").read_text()
    assert text != "stale" and "impala at lag 4 has no run on walker" in text
    iqm, auc, raw = (task_cell(summary, "impala", 4.0, "hopper")[key]
                     for key in ("iqm", "auc_iqm", "raw_iqm"))
    assert (f"| impala | 4 | 3 / 0 | {iqm['point']:.3f} [{iqm['low']:.3f}, {iqm['high']:.3f}] | "
            f"{auc['point']:.3f} [{auc['low']:.3f}, {auc['high']:.3f}] | "
            f"{raw['point']:.3f} [{raw['low']:.3f}, {raw['high']:.3f}] | - | - | - |") in text
    assert "| impala | 0 | 3 / 2 |" in text
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_mean_version_gap_is_an_off_policy_axis_only_when_measured(runs, tmp_path):
    """Without ``version_gap_mean`` the figure keeps its two panels in one row; with it (finite)
    a third panel takes a second row."""
    heights = {}
    for name, table in {
        "absent": runs.drop(columns=["version_gap_mean"]),
        "not finite": runs.assign(version_gap_mean=np.nan),
        "measured": runs,
    }.items():
        summary = write_report(table, tmp_path / name, final_fraction=FINAL_FRACTION, reps=20)
        assert ("version_gap_mean" in summary["off_policy_metrics"]) == (name != "absent")
        heights[name] = matplotlib.image.imread(tmp_path / name / "fig_score_vs_off_policy.png").shape[0]
    assert heights["absent"] == heights["not finite"]
    assert heights["measured"] > 1.5 * heights["absent"]


# Per lag model: its lag levels, chosen as at equal mean staleness (in_flight also at 8, the
# fixed level, where a level means another distribution).
LAG_LEVELS = {"fixed": (0.0, 8.0), "uniform": (16.0,), "in_flight": (8.0, 23.0)}


@pytest.fixture(scope="module")
def lag_model_runs():
    """Two algorithms, each under three lag models at different levels, on one task."""
    rng = np.random.default_rng(1)
    rows = []
    for algo, model, seed in itertools.product(("grpo", "tis"), LAG_LEVELS, SEEDS):
        for lag in LAG_LEVELS[model]:
            quality = rng.uniform(0.2, 1.0)
            rows += [
                {
                    "task": "add", "algo": algo, "lag_model": model, "lag": lag, "epochs": 1,
                    "minibatches": 1, "seed": seed, "run_id": f"{algo}/{model}/{lag:g}/{seed}",
                    "diverged": False, "diverged_at": -1, "update": int(update),
                    "env_steps": int(steps),
                    "eval_accuracy": quality * steps / ENV_STEPS[-1] + rng.normal(0.0, 0.05),
                    "tv_backward": rng.uniform(), "version_gap_mean": lag / 2 + rng.uniform(),
                    "clip_fraction": rng.uniform(0.0, 0.1),
                }
                for update, steps in zip(UPDATES, ENV_STEPS)
            ]
    return pd.DataFrame(rows)


def test_variants_of_one_algorithm_at_different_lags_and_models(lag_model_runs, tmp_path):
    summary = write_report(
        lag_model_runs, tmp_path, score=Score("eval_accuracy", "accuracy", "responses"),
        focus_algo="tis", final_fraction=FINAL_FRACTION, reps=20,
    )
    assert {(c["variant"], c["lag"]) for c in summary["cells"]} == {
        (f"{algo}[lag_model={model}]", lag)
        for algo in ("grpo", "tis") for model, lags in LAG_LEVELS.items() for lag in lags
    }
    skipped = {stem for stem, figure in summary["figures"].items() if "skipped" in figure}
    # The table has no ess_ratio or grad_norm, and one forward setting.
    assert skipped == {"fig_staleness_diagnostics", "fig_forward_lag"}
    assert summary["run"]["lags"] == [0.0, 8.0, 16.0, 23.0]
    # A lag level is compared with the baseline under the same lag model only.
    assert sorted(
        (r["lag"], r["variant"], r["baseline"]) for r in summary["probability_of_improvement"]
    ) == sorted(
        (lag, f"tis[lag_model={model}]", f"grpo[lag_model={model}]")
        for model, lags in LAG_LEVELS.items() for lag in lags
    )
    text = (tmp_path / "report.md").read_text()
    assert "| 8 | tis[lag_model=in_flight] | grpo[lag_model=in_flight] |" in text
    assert "| 8 | tis[lag_model=in_flight] | grpo[lag_model=fixed] |" not in text


# ---------------------------------------------------------------- variants and bad input


def test_variant_names_of_the_synthetic_table(runs):
    names = variant_names(runs)
    assert names.index.equals(runs.index)
    assert set(names) == set(VARIANTS)
    assert (names[runs["algo"] == "ppo"] == "ppo").all()


def test_variant_names_list_every_varying_coordinate_but_lag_and_seed():
    base = {"task": "hopper", "lag_model": "uniform", "lag": 1.0, "seed": 0, "hp_lr": 3e-4}
    rows = [
        {**base, "algo": "ppo", "run_id": "a", "epochs": 8, "minibatches": 4},
        {**base, "algo": "ppo", "run_id": "b", "epochs": 2, "minibatches": 32, "lag": 2.0},
        {**base, "algo": "spo", "run_id": "c", "epochs": 8, "minibatches": 4, "lag_model": "fixed"},
        {**base, "algo": "spo", "run_id": "d", "epochs": 8, "minibatches": 4},
    ]
    assert variant_names(pd.DataFrame(rows)).tolist() == [
        "ppo[epochs=8,minibatches=4]",
        "ppo[epochs=2,minibatches=32]",
        "spo[lag_model=fixed]",
        "spo[lag_model=uniform]",
    ]


@pytest.mark.parametrize(
    ("change", "options", "message"),
    [
        (lambda r: r.drop(columns=["eval_return"]), {}, r"missing columns \['eval_return'\]"),
        (lambda r: r, {"final_fraction": 0.0}, "final_fraction"),
        (lambda r: r, {"reference_scores": {"ant": 1.0}}, r"names tasks \['ant'\]"),
        (lambda r: r[r["env_steps"] > 0], {}, "env_steps 0"),
        (lambda r: r.assign(seed=np.arange(len(r))), {}, r"\['seed'\] must be constant"),
        (lambda r: r.assign(eval_return=np.nan), {}, "eval_return must be finite"),
        (lambda r: r.iloc[0:0], {}, "non-empty"),
    ],
)
def test_rejects_bad_input(runs, tmp_path, change, options, message):
    with pytest.raises(ValueError, match=message):
        write_report(change(runs), tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- off-policyness


def test_off_policy_summaries_match_hand_computation(report, runs):
    _, summary = report
    measured = ["tv_backward", "tv_forward", "behaviour_kl", "approx_kl", "version_gap_mean"]
    assert summary["off_policy_metrics"] == measured
    (record,) = [
        r for r in summary["off_policy"] if r["variant"] == "vaco[tv_delta=0.2]" and r["lag"] == 4.0
    ]
    for metric in summary["off_policy_metrics"]:
        per_run = [
            runs.loc[runs["run_id"] == run_id(task, "vaco[tv_delta=0.2]", 4.0, seed), metric]
            for task in TASKS
            for seed in SEEDS
        ]
        expected = {
            "mean": np.mean([np.mean(v) for v in per_run]),
            "median": np.mean([np.median(v) for v in per_run]),
            "p90": np.mean([np.percentile(v, 90) for v in per_run]),
        }
        assert record[metric] == pytest.approx(expected)


def test_the_initial_policy_share_is_summarised_per_run_as_an_off_policy_metric():
    """Both trainers' `initial_policy_share` joins the off-policy table, after the mean version
    gap, so the report states how much of each run's data the initial policy produced."""
    from vaco_jax.report import metrics

    table = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "version_gap_mean": [0.0, 1.0, 0, 0],
                          "initial_policy_share": [1.0, 0.5, 1.0, 0.0]})
    assert metrics.off_policy_columns(table) == ["version_gap_mean", "initial_policy_share"]
    assert metrics.OFF_POLICY_METRICS["initial_policy_share"] == "Initial-policy data share"
    per_run = metrics.run_off_policy(table)
    assert per_run.loc["a", "initial_policy_share[mean]"] == 0.75
    assert per_run.loc["b", "initial_policy_share[mean]"] == 0.5


def test_off_policy_table_in_report_md(report):
    out, summary = report
    text = (out / "report.md").read_text()
    assert "## Off-policyness" in text
    assert "| variant | lag | tv_backward | tv_forward | behaviour_kl | approx_kl |" in text
    first = summary["off_policy"][0]
    entry = " / ".join(f"{first['tv_backward'][s]:.3f}" for s in ("mean", "median", "p90"))
    assert f"| {first['variant']} | {first['lag']:g} | {entry} |" in text


@pytest.mark.slow
def test_off_policy_uses_robust_columns_when_present_and_none_when_absent(runs, tmp_path):
    measured = runs.drop(columns=["behaviour_kl", "approx_kl", "version_gap_mean"]).assign(
        tv_forward_p90=runs["tv_forward"] + 1.0
    )
    summary = write_report(measured, tmp_path / "robust", final_fraction=FINAL_FRACTION, reps=20)
    assert summary["off_policy_metrics"] == ["tv_backward", "tv_forward", "tv_forward_p90"]
    for record in summary["off_policy"]:
        assert record["tv_forward_p90"]["mean"] == pytest.approx(record["tv_forward"]["mean"] + 1.0)
    assert "skipped" not in summary["figures"]["fig_score_vs_off_policy"]

    unmeasured = runs.drop(
        columns=["tv_backward", "tv_forward", "behaviour_kl", "approx_kl", "version_gap_mean"]
    )
    summary = write_report(unmeasured, tmp_path / "none", final_fraction=FINAL_FRACTION, reps=20)
    assert summary["off_policy_metrics"] == []
    assert "skipped" in summary["figures"]["fig_score_vs_off_policy"]
    assert "Not measured" in (tmp_path / "none" / "report.md").read_text()


# ---------------------------------------------------------------- stabilisers and staleness


def test_fraction_figure_of_the_control_table_draws_filter_and_clip(report, figures):
    figure = figures["fig_filter_clip"]
    assert [ax.get_title() for ax in panels(figure)] == ["Filter fraction", "Clip fraction"]
    assert figure.get_suptitle().startswith("Share of samples filtered, clipped")


def test_staleness_figure_of_the_control_table_has_score_ess_and_grad_norm_rows_per_task(
    report, figures
):
    axes = panels(figures["fig_staleness_diagnostics"])
    assert len(axes) == 3 * len(TASKS) * len(LAGS)
    assert [ax.get_ylabel() for ax in axes[:: len(LAGS)]] == [
        f"{task}\n{row}" for task in TASKS
        for row in ("normalised return", "ESS ratio", "gradient norm (log)")
    ]
    assert [ax.get_yscale() for ax in axes] == (["linear"] * 4 + ["log"] * 2) * len(TASKS)
    _, summary = report
    assert len(summary["ess_collapse"]["runs"]) == len(RUNS)


def test_staleness_medians_are_per_task(report, figures, runs):
    """The thick line of ppo at lag 4 in walker's score row is the median of walker's runs
    alone, not of every task's."""
    axes = panels(figures["fig_staleness_diagnostics"])
    walker_score_at_4 = axes[3 * len(LAGS) + 1]
    (median,) = [line for line in walker_score_at_4.lines if line.get_label() == "ppo"]
    _, summary = report
    initial, reference = hand_normalisation()["walker"]
    walker = np.array([filled(eval_returns("walker", "ppo", 4.0, s)) for s in SEEDS])
    expected = np.median((walker - initial) / (reference - initial), axis=0)
    assert median.get_ydata() == pytest.approx(expected)


def test_gradient_norm_axis_is_clipped_to_its_1st_to_99th_percentile(runs, tmp_path):
    """One run's gradient norm diverging to 1e9 at its last evaluation (under 1% of the
    task's points) leaves the axis at the other runs' scale."""
    last = (runs["run_id"] == run_id(*DIVERGED)) & (runs["update"] == UPDATES[-1])
    exploding = runs.assign(grad_norm=np.where(last, 1e9, 1.0 + runs["grad_norm"]))
    figures = {}
    with drawn_figures(figures):
        write_report(exploding[exploding["task"] == "hopper"], tmp_path,
                     final_fraction=FINAL_FRACTION, reps=20)
    axes = panels(figures["fig_staleness_diagnostics"])
    low, high = axes[-1].get_ylim()
    values = exploding.loc[exploding["task"] == "hopper", "grad_norm"]
    assert (low, high) == pytest.approx(
        (np.percentile(values, 1) / 1.5, np.percentile(values, 99) * 1.5))
    assert high < 10


def test_gradient_norm_axis_over_many_decades_labels_few_ticks(runs, tmp_path):
    """Gradient norms over seven decades (a collapsing run's steps of 1e-6) label decades, not
    1, 2 and 5 of each (21 labels that ran into each other); within one decade they label 1,
    2 and 5."""
    hopper = runs[runs["task"] == "hopper"]
    spread = hopper.assign(grad_norm=np.logspace(-6, 1, len(hopper)))
    narrow = hopper.assign(grad_norm=np.linspace(1.1, 9.0, len(hopper)))
    for table, expected in ((spread, None), (narrow, {2.0, 5.0})):
        figures = {}
        with drawn_figures(figures):
            write_report(table, tmp_path / str(len(figures)), final_fraction=FINAL_FRACTION,
                         reps=20)
        axis = panels(figures["fig_staleness_diagnostics"])[-1]
        low, high = axis.get_ylim()
        ticks = [t for t in axis.yaxis.get_majorticklocs() if low <= t <= high]
        if expected is None:
            assert 3 <= len(ticks) <= 8
            assert all(np.log10(t) == pytest.approx(round(np.log10(t))) for t in ticks)
        else:
            assert expected <= {float(t) for t in ticks}


def test_learning_curves_wrap_many_lag_levels_into_rows_of_three():
    lags = (0.0, 2.0, 4.0, 8.0, 16.0)
    styles = report_figures.variant_styles(["grpo"])
    curve = {key: np.array([0.0, 0.5]) for key in ("point", "low", "high")}
    curves = {("grpo", lag, "add"): {**curve, "env_steps": np.array([0.0, 64.0])}
              for lag in lags}
    figure = report_figures.figure_curves(curves, ["add"], styles, lags, Score())
    axes = panels(figure)
    assert [ax.get_title() for ax in axes] == [f"lag {lag:g}" for lag in lags]
    rows = sorted({round(ax.get_position().y0, 3) for ax in axes})
    assert len(rows) == 2
    assert len({round(ax.get_position().x0, 3) for ax in axes}) == 3
    assert [ax.get_ylabel() != "" for ax in axes] == [True, False, False, True, False]


# A token-testbed-like table: held-out accuracy at sampled responses, the ESS ratio NaN at the
# first evaluation (no update precedes it), token stabilisers' fractions.
TOKEN_STEPS = np.arange(6) * 64
TOKEN_UPDATES = np.arange(6) * 10
TOKEN_SEEDS = (0, 1, 2)
TOKEN_ALGOS = ("grpo", "vcpo")
# Falls from its warm start without gaining first: below half its best earlier accuracy (0.5) at
# 256 steps. Judged on normalised scores (0 at the warm start) it would never count as collapsed.
COLLAPSING = ("grpo", 4.0, 0)
COLLAPSING_ACCURACY = [0.5, 0.5, 0.45, 0.4, 0.2, 0.1]
COLLAPSING_ESS = [np.nan, 0.6, 0.6, 0.25, 0.1, 0.1]  # halves at 192 steps, under 0.2 at 256
TOKEN_DIVERGED = ("vcpo", 4.0, 1)  # NaN after update 25: collapses at 192 steps


def token_run_rows(algo, lag, seed):
    accuracy = np.array([0.5, 0.6, 0.7, 0.8, 0.85, 0.9]) + 0.01 * seed * (TOKEN_STEPS > 0)
    ess = np.where(TOKEN_STEPS > 0, 1.0 if lag == 0 else 0.6, np.nan)
    if (algo, lag, seed) == COLLAPSING:
        accuracy, ess = np.array(COLLAPSING_ACCURACY), np.array(COLLAPSING_ESS)
    diverged = (algo, lag, seed) == TOKEN_DIVERGED
    if diverged:
        accuracy = np.where(TOKEN_UPDATES > 25, np.nan, accuracy)
        ess = np.where(TOKEN_UPDATES > 25, np.nan, ess)
    coordinates = {
        "task": "add", "algo": algo, "lag_model": "fixed", "lag": lag, "epochs": 1,
        "minibatches": 1, "seed": seed, "run_id": f"add-{algo}-lag{lag:g}-r{seed}",
        "diverged": diverged, "diverged_at": 25 if diverged else -1,
    }
    return [
        {
            **coordinates, "update": int(update), "env_steps": int(steps),
            "eval_accuracy": accuracy[i], "ess_ratio": ess[i],
            "grad_norm": np.nan if steps == 0 else 1.0 + i,
            "clip_fraction": 0.1 * lag if algo == "grpo" else np.nan,
            "is_truncated_fraction": 0.05 * lag if algo == "vcpo" else np.nan,
            "is_masked_fraction": np.nan,
        }
        for i, (update, steps) in enumerate(zip(TOKEN_UPDATES, TOKEN_STEPS))
    ]


def make_token_runs():
    runs = itertools.product(TOKEN_ALGOS, LAGS, TOKEN_SEEDS)
    return pd.DataFrame([row for run in runs for row in token_run_rows(*run)])


def write_token_report(runs, out):
    return write_report(
        runs, out, score=Score("eval_accuracy", "held-out accuracy", "sampled responses"),
        reference_scores={"add": 1.0}, focus_algo="vcpo", reps=20,
    )


@pytest.fixture(scope="module")
def token_report(tmp_path_factory):
    out, figures = tmp_path_factory.mktemp("tokens"), {}
    with drawn_figures(figures):
        summary = write_token_report(make_token_runs(), out)
    return out, summary, figures


def test_token_report_finds_the_collapse_and_its_warnings(token_report):
    _, summary, _ = token_report
    analysis = summary["ess_collapse"]
    assert analysis["thresholds"] == {
        "collapse_fraction": 0.5, "min_peak": 0.2, "ess_drop": 0.5, "ess_floor": 0.2
    }
    calm = {"warned_in_time": 0, "median_lead": None, "false_alarms": 0}
    assert analysis["cells"] == [
        {"variant": "grpo", "lag": 0.0, "runs": 3, "collapsed": 0, "drop": calm, "floor": calm},
        {
            "variant": "grpo", "lag": 4.0, "runs": 3, "collapsed": 1,
            "drop": {"warned_in_time": 1, "median_lead": 64.0, "false_alarms": 0},
            "floor": {"warned_in_time": 1, "median_lead": 0.0, "false_alarms": 0},
        },
        {"variant": "vcpo", "lag": 0.0, "runs": 3, "collapsed": 0, "drop": calm, "floor": calm},
        {"variant": "vcpo", "lag": 4.0, "runs": 3, "collapsed": 1, "drop": calm, "floor": calm},
    ]
    collapses = {r["run_id"]: r["collapse_env_steps"] for r in analysis["runs"] if r["collapsed"]}
    assert collapses == {"add-grpo-lag4-r0": 256.0, "add-vcpo-lag4-r1": 192.0}


def test_token_report_md_has_the_ess_collapse_table(token_report):
    out, _, _ = token_report
    text = (out / "report.md").read_text()
    assert "## Does the ESS fall before the score collapses?" in text
    assert "below 0.5 x its best earlier score (once that best is at least 0.2)" in text
    assert "| grpo | 4 | 3 | 1 | 1 | 64 | 0 | 1 | 0 | 0 |" in text
    assert "| vcpo | 4 | 3 | 1 | 0 | n/a | 0 | 0 | n/a | 0 |" in text
    assert "](fig_staleness_diagnostics.png)" in text


def offsets(ax):
    """The points of every scatter of ``ax``, rounded."""
    return {tuple(np.round(p, 6)) for c in ax.collections for p in c.get_offsets()}


def test_token_staleness_figure_draws_runs_medians_and_marks_events(token_report):
    _, _, figures = token_report
    axes = panels(figures["fig_staleness_diagnostics"])
    score_at_4, ess_at_4, grad_norm_at_4 = axes[1], axes[3], axes[5]
    assert axes[0].get_ylabel() == "normalised held-out accuracy"
    # Collapses at their score (the diverged run at its last finite one, 0.71 accuracy).
    assert offsets(score_at_4) == {(256.0, -0.6), (192.0, 0.42)}
    assert offsets(ess_at_4) == {(192.0, 0.25)}
    assert offsets(axes[0]) == offsets(axes[2]) == set()
    runs_line, median_line = score_at_4.lines[:2]  # grpo's
    assert np.isnan(runs_line.get_xdata()).sum() == len(TOKEN_SEEDS)
    # Median over seeds at 256 steps of 0.2, 0.72 and 0.74.
    assert median_line.get_ydata()[4] == pytest.approx(0.72)
    assert grad_norm_at_4.get_yscale() == "log"


def test_token_fraction_figure_draws_the_stabilisers_fractions(token_report):
    _, summary, figures = token_report
    titles = [ax.get_title() for ax in panels(figures["fig_filter_clip"])]
    assert titles == ["Clip fraction", "Truncated fraction"]  # is_masked_fraction is all NaN
    (truncated,) = [ax for ax in panels(figures["fig_filter_clip"]) if ax.get_title() == titles[1]]
    (line,) = truncated.lines
    assert line.get_ydata() == pytest.approx([0.0, 0.2])
    assert summary["figures"]["fig_filter_clip"]["caption"].startswith("Filtered, clipped")


@pytest.mark.slow
def test_without_ess_ratio_the_analysis_is_skipped_and_without_grad_norm_the_figure(tmp_path):
    runs = make_token_runs().drop(columns=["ess_ratio"])
    figures = {}
    with drawn_figures(figures):
        summary = write_token_report(runs, tmp_path / "grad_norm_only")
    reason = "the runs table has no finite ess_ratio"
    assert summary["ess_collapse"] == {"thresholds": summary["ess_collapse"]["thresholds"],
                                       "skipped": reason}
    axes = panels(figures["fig_staleness_diagnostics"])
    assert [ax.get_ylabel() for ax in axes[:: len(LAGS)]] == [
        "normalised held-out accuracy", "gradient norm (log)"
    ]
    assert f"Not analysed: {reason}." in (tmp_path / "grad_norm_only" / "report.md").read_text()

    summary = write_token_report(runs.assign(grad_norm=np.nan), tmp_path / "none")
    skipped = summary["figures"]["fig_staleness_diagnostics"]["skipped"]
    assert skipped == "the runs table has no finite ess_ratio or grad_norm"
    assert not (tmp_path / "none" / "fig_staleness_diagnostics.png").exists()
    assert f"Skipped: {skipped}." in (tmp_path / "none" / "report.md").read_text()


# ---------------------------------------------------------------- forward lag

# Gradient steps per batch (epochs, minibatches), as the forward-lag figure orders them.
FORWARD_SETTINGS = ((1, 1), (1, 4), (4, 1), (4, 4))


def forward_run_rows(algo, epochs, minibatches, seed):
    """A run whose accuracy gain, clip fraction and forward TV depend on the steps per batch."""
    steps_per_batch = epochs * minibatches
    gain = 0.5 / steps_per_batch + 0.01 * seed
    coordinates = {
        "task": "add", "algo": algo, "lag_model": "fixed", "lag": 0.0, "epochs": epochs,
        "minibatches": minibatches, "seed": seed,
        "run_id": f"{algo}/e{epochs}m{minibatches}/{seed}", "diverged": False, "diverged_at": -1,
    }
    return [
        {
            **coordinates, "update": int(update), "env_steps": int(steps),
            "eval_accuracy": 0.4 + gain * steps / ENV_STEPS[-1],
            "clip_fraction": 0.01 * steps_per_batch + 0.001 * i + 0.0001 * seed,
            "filter_fraction": 0.002 * epochs if algo == "vaco" else np.nan,
            "tv_forward": 0.003 * steps_per_batch + 0.001 * seed,
        }
        for i, (update, steps) in enumerate(zip(UPDATES, ENV_STEPS))
    ]


@pytest.fixture(scope="module")
def forward_report(tmp_path_factory):
    runs = pd.DataFrame([
        row for algo, (epochs, minibatches), seed in itertools.product(
            ("grpo", "vaco"), FORWARD_SETTINGS, SEEDS
        ) for row in forward_run_rows(algo, epochs, minibatches, seed)
    ])
    figures = {}
    with drawn_figures(figures), warnings.catch_warnings():
        # Long variant names must not squeeze a panel to nothing.
        warnings.filterwarnings("error", message="constrained_layout not applied")
        summary = write_report(
            runs, tmp_path_factory.mktemp("forward"),
            score=Score("eval_accuracy", "accuracy", "responses"), reference_scores={"add": 1.0},
            focus_algo="vaco", final_fraction=FINAL_FRACTION, reps=20,
        )
    return summary, figures["fig_forward_lag"]


def forward_lines(ax):
    """Per error-bar line's label: (x, y) of its points."""
    return {
        bars.get_label(): (bars.lines[0].get_xdata(), bars.lines[0].get_ydata())
        for bars in ax.containers
    }


def test_forward_lag_figure_orders_settings_by_steps_per_batch(forward_report):
    _, figure = forward_report
    axes = panels(figure)
    assert [ax.get_title() for ax in axes] == [
        "IQM of normalised final score",
        "Clip fraction (mean over runs and training)",
        "Filter fraction (mean over runs and training)",
        "Forward TV (mean over runs and updates)",
    ]
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == [
            "1x1 (1)", "1x4 (4)", "4x1 (4)", "4x4 (16)"
        ]
    # One line per algorithm: its variants differ only in epochs and minibatches.
    assert set(forward_lines(axes[0])) == {"grpo", "vaco"}
    assert set(forward_lines(axes[2])) == {"vaco"}


def test_forward_lag_figure_draws_the_hand_computed_means(forward_report):
    summary, figure = forward_report
    score, clip, filtered, tv = panels(figure)
    steps = np.array([e * m for e, m in FORWARD_SETTINGS])
    seed_mean = np.mean(SEEDS)
    # Per run, clip fraction averaged over 5 evaluation rows: 0.01 s + 0.001 * 2 + 0.0001 seed.
    x, y = forward_lines(clip)["grpo"]
    assert y == pytest.approx(0.01 * steps + 0.002 + 0.0001 * seed_mean)
    assert np.diff(x) == pytest.approx([1.0, 1.0, 1.0])  # one position per setting
    x, y = forward_lines(filtered)["vaco"]
    assert y == pytest.approx([0.002, 0.002, 0.008, 0.008])
    _, y = forward_lines(tv)["vaco"]
    assert y == pytest.approx(0.003 * steps + 0.001 * seed_mean)
    _, y = forward_lines(score)["grpo"]
    iqm = {c["variant"]: c["iqm"]["point"] for c in summary["cells"]}
    assert y == pytest.approx([iqm[f"grpo[epochs={e},minibatches={m}]"] for e, m in FORWARD_SETTINGS])
    assert y[0] > y[1] > y[3]


def test_figures_against_lag_are_skipped_at_a_single_lag_level(forward_report):
    summary, _ = forward_report
    reason = ("the study has a single lag level (0), so nothing varies along a lag axis; the "
              "tables give these numbers")
    for stem in ("fig_aggregates", "fig_auc", "fig_filter_clip"):
        assert summary["figures"][stem]["skipped"] == reason
    assert "png" in summary["figures"]["fig_learning_curves"]
    assert summary["kept_gain"] == {
        "skipped": "the study has no lag level besides lag 0"}


def test_forward_lag_figure_is_skipped_at_one_setting(report):
    _, summary = report
    assert summary["figures"]["fig_forward_lag"]["skipped"] == (
        "every run takes the same epochs x minibatches"
    )


def test_probability_of_improvement_pairs_runs_of_one_forward_setting(forward_report):
    summary, _ = forward_report
    pairs = {(r["variant"], r["baseline"]) for r in summary["probability_of_improvement"]}
    assert pairs == {
        (f"vaco[epochs={e},minibatches={m}]", f"grpo[epochs={e},minibatches={m}]")
        for e, m in FORWARD_SETTINGS
    }
