"""Tests of the failure-predictor analysis: the ROC and its area against hand-computed cases,
the early window, the failure outcome, and the command over study folders."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vaco_jax.cli import main
from vaco_jax.experiment.predictor_study import WRITES, write_predictors
from vaco_jax.report import predictors
from vaco_jax.report.predictors import Options, area_under_roc, roc_curve

NAN = np.nan
RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"


def test_area_counts_ordered_pairs_and_half_ties():
    # Positives 0.9, 0.5; negatives 0.5, 0.1: of 4 pairs, 3 ordered right and 1 tied.
    scores = np.array([0.9, 0.5, 0.5, 0.1])
    labels = np.array([True, True, False, False])
    assert area_under_roc(scores, labels) == pytest.approx(3.5 / 4)
    assert area_under_roc(-scores, labels) == pytest.approx(0.5 / 4)
    assert np.isnan(area_under_roc(scores, np.ones(4, bool)))
    # Within strata only pairs of one stratum count: stratum 0 holds (0.9+, 0.5-), stratum 1
    # (0.5+, 0.1-, 0.7-): 1 + 1 of 3 pairs won.
    scores = np.array([0.9, 0.5, 0.5, 0.1, 0.7])
    labels = np.array([True, False, True, False, False])
    assert area_under_roc(scores, labels, strata=np.array([0, 0, 1, 1, 1])) == pytest.approx(2 / 3)


@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=30))
def test_the_rank_area_equals_counting_every_pair(runs):
    scores = np.array([float(s) for s, _ in runs])
    labels = np.array([label for _, label in runs])
    positive, negative = scores[labels], scores[~labels]
    if not positive.size or not negative.size:
        assert np.isnan(area_under_roc(scores, labels))
        return
    pairs = positive[:, None] - negative[None, :]
    assert area_under_roc(scores, labels) == pytest.approx(
        (pairs > 0).mean() + 0.5 * (pairs == 0).mean())


def test_roc_runs_from_no_alarm_to_every_run_and_its_trapezoids_are_the_area():
    scores = np.array([0.9, 0.5, 0.5, 0.1, 0.7])
    labels = np.array([True, True, False, False, False])
    fpr, tpr = roc_curve(scores, labels)
    # Thresholds 0.9, 0.7, 0.5, 0.1: the tied pair is alarmed together.
    np.testing.assert_allclose(fpr, [0, 0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 0.5, 1, 1])
    assert np.trapezoid(tpr, fpr) == pytest.approx(area_under_roc(scores, labels))


def _run(run_id, lag, scores, ess, grad, task="t", algo="grpo"):
    steps = np.arange(len(scores)) * 100.0
    return pd.DataFrame({"run_id": run_id, "task": task, "variant": algo, "lag": float(lag),
                         "seed": 0, "env_steps": steps, "eval_accuracy": scores,
                         "ess_ratio": ess, "grad_norm": grad})


def test_signals_read_only_the_early_window_and_stop_before_a_collapse():
    references = pd.DataFrame({"reference": [1.0]}, index=["t"])
    table = pd.concat([
        # Window 0.25 of 800 steps: periods at 100 and 200 only; the later ESS and gradient
        # values must not count.
        _run("quiet", 8, [0.5] * 9, [NAN, 0.9, 0.8, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
             [NAN, 2.0, 1.0, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]),
        # Collapses at 200 (0.2 < 0.5 x 0.6): only the period at 100 is read.
        _run("collapses", 8, [0.5, 0.6, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],
             [NAN, 0.7, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05],
             [NAN, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]),
    ])
    signals = predictors.run_signals(table, references, "eval_accuracy")
    assert signals.loc["quiet", "ess_drop"] == pytest.approx(0.2)
    assert signals.loc["quiet", "grad_norm_fall"] == pytest.approx(np.log(2.0))
    assert signals.loc["quiet", "collapsed"] == 0.0
    assert signals.loc["collapses", "collapsed"] == 1.0
    # On a task without a positive reference no collapse is judged, and the window is whole.
    unjudged = predictors.run_signals(
        table, pd.DataFrame({"reference": [0.0]}, index=["t"]), "eval_accuracy")
    assert unjudged["collapsed"].isna().all()
    assert unjudged.loc["collapses", "ess_drop"] == pytest.approx(0.95)
    assert signals.loc["collapses", "ess_drop"] == pytest.approx(0.3)
    assert signals.loc["collapses", "grad_norm_fall"] == pytest.approx(0.0)
    assert (signals["predictor_lag"] == 8.0).all()


def test_a_run_fails_below_half_of_its_methods_synchronous_median():
    signals = pd.DataFrame({"task": "t", "variant": ["a", "a", "a", "a", "b", "c", "c", "a[u]"],
                            "lag": [0.0, 0.0, 8.0, 8.0, 8.0, 0.0, 8.0, 8.0]},
                           index=[f"r{i}" for i in range(8)])
    final = pd.Series([0.8, 0.6, 0.36, 0.34, 0.9, 0.2, 0.05, 0.3], index=signals.index)
    # "a[u]" (a under another lag model) has no lag-0 runs of its own: it is judged against
    # a's; b has no synchronous runs at all.
    synchronous = {"a": "a", "a[u]": "a", "c": "c"}
    failed = predictors.with_failures(signals, final, synchronous)["failed"]
    # a's synchronous median is 0.7: 0.36 keeps over half, 0.34 does not, nor a[u]'s 0.3; b
    # has no synchronous runs and c's median (0.2) is below min_sync_gain, so neither is judged.
    assert failed[["r0", "r1", "r2", "r3", "r7"]].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert failed[["r4", "r5", "r6"]].isna().all()


def test_options_refuse_a_window_or_share_outside_the_unit_interval():
    for field in ("window", "kept_share", "min_sync_gain", "confidence"):
        with pytest.raises(ValueError, match=field):
            Options(**{field: 0.0})
    assert Options(window=1.0).window == 1.0  # the whole run
    with pytest.raises(ValueError, match="reps"):
        Options(reps=0)


def test_the_command_writes_the_analysis_and_refuses_to_overwrite(tmp_path, capsys):
    study = tmp_path / "tokens_long_lag_scan"
    study.mkdir()
    for name in ("experiment.toml", "runs.parquet"):
        shutil.copy(RESULTS / "tokens_long_lag_scan" / name, study / name)
    out = tmp_path / "predictors"
    assert main(["report", str(out), "--predictors", str(study)]) == 0
    analysis = json.loads((out / "predictors.json").read_text())
    assert analysis["studies"] == {"tokens_long_lag_scan": 90}
    printed = capsys.readouterr().out
    assert "failure predictors over 90 runs" in printed
    # Every run at lag 32 learns nothing (the scan's README), so each fails.
    runs = pd.read_csv(out / "predictor_runs.csv")
    assert runs.loc[runs["lag"] == 32, "failed"].eq(1.0).all()
    for name in WRITES:
        assert (out / name).is_file()
    assert main(["report", str(out), "--predictors", str(study)]) == 2
    # An analysis is written again, never continued: the refusal offers only what it has.
    assert capsys.readouterr().err.endswith(
        "already exists and is not empty; pass overwrite (--overwrite) to replace its results\n")
    assert main(["report", str(out), "--predictors", str(study), "--overwrite"]) == 0


def test_the_output_may_not_be_a_study_or_a_sweep_folder(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    for out in (study, study / "inside", tmp_path):
        with pytest.raises(ValueError, match="is, holds or lies in the study folder"):
            write_predictors([study], out)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    with pytest.raises(ValueError, match="is a sweep folder"):
        write_predictors([study], sweep, overwrite=True)
    assert (sweep / "sweep.json").read_text() == "{}"


def test_a_folder_without_a_runs_table_is_refused_by_name(tmp_path):
    (tmp_path / "study").mkdir()
    with pytest.raises(FileNotFoundError, match="has no experiment.toml"):
        write_predictors([tmp_path / "study"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_every_predictor_is_judged_on_the_same_runs():
    # r3 has no ESS: it leaves every curve, the lag's included, so the areas compare alike, and
    # is counted as a run without a signal.
    signals = pd.DataFrame({
        "study": "s", "task": "t", "variant": ["a", "b", "c", "d"],
        "lag": [8.0, 8.0, 8.0, 0.0], "predictor_lag": [8.0, 8.0, 8.0, 0.0],
        "ess_drop": [0.9, 0.1, NAN, 0.0], "grad_norm_fall": [0.0, 0.5, 0.2, 0.1],
        "failed": [1.0, 0.0, 1.0, 0.0], "collapsed": [0.0, 0.0, 1.0, 0.0]})
    records = {(r["outcome"], r["population"], r["predictor"]): r
               for r in predictors.curves(signals, Options(reps=50))}
    for predictor in predictors.PREDICTORS:
        record = records[("failed", "all runs", predictor)]
        assert (record["runs"], record["positives"]) == (3, 1)
        assert (record["without_signal"], record["positives_without_signal"]) == (1, 1)
    assert records[("failed", "all runs", "ess_drop")]["auc"] == 1.0
    assert records[("failed", "all runs", "grad_norm_fall")]["auc"] == 0.0
    assert records[("failed", "all runs", "lag")]["auc"] == 0.75
    # Among the stale runs (one stratum: lag 8) the lag ties every pair.
    stale = records[("failed", "stale runs (lag > 0)", "lag")]
    assert stale["auc"] == 0.5 and stale["within_strata"]["auc"] == 0.5
    assert records[("collapsed", "all runs", "ess_drop")]["auc"] is None  # r3 was the only one


def test_the_interval_resamples_whole_cells_and_holds_the_point():
    # Two cells of 3 seeds each: a cell's runs are drawn together, so every resample holds
    # whole cells; an area that one class's absence leaves undefined gets no interval.
    signals = pd.DataFrame({
        "study": "s", "task": "t", "variant": ["a"] * 3 + ["b"] * 3 + ["c"] * 2,
        "lag": 8.0, "predictor_lag": 8.0,
        "ess_drop": [0.9, 0.8, 0.2, 0.1, 0.3, 0.2, 0.5, 0.6], "grad_norm_fall": 0.0,
        "failed": [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], "collapsed": 0.0})
    record = next(r for r in predictors.curves(signals, Options(reps=200, seed=3))
                  if r["outcome"] == "failed" and r["predictor"] == "ess_drop"
                  and r["population"] == "all runs")
    low, high = record["auc_ci"]
    assert low <= record["auc"] <= high
    again = next(r for r in predictors.curves(signals, Options(reps=200, seed=3))
                 if r["outcome"] == "failed" and r["predictor"] == "ess_drop"
                 and r["population"] == "all runs")
    assert again["auc_ci"] == record["auc_ci"]  # seeded
    lone = signals.iloc[:3]  # one cell: a resample can hold it only whole
    record = next(r for r in predictors.curves(lone, Options(reps=20))
                  if r["outcome"] == "failed" and r["predictor"] == "ess_drop"
                  and r["population"] == "all runs")
    assert record["auc"] == 1.0 and record["auc_ci"] == [1.0, 1.0]
