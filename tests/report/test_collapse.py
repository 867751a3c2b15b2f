"""Tests of the ESS-versus-collapse analysis on runs whose collapses and warnings are known."""

import json

import numpy as np
import pandas as pd
import pytest

from vaco_jax.report.collapse import (
    Thresholds,
    cell_counts,
    collapse_index,
    run_events,
    summary,
    warning_indices,
)

NAN = np.nan
PERIOD = 100  # env steps between evaluations
# run -> (variant, lag, normalised scores, ESS ratios) at env steps 0, 100, ..., 500; the first
# ESS is NaN as in the token testbed's tables, where no update precedes the first evaluation.
RUNS = {
    # Peaks at 0.9 right before falling to 0.3 at index 4; the ESS halves at index 2.
    "warned": ("grpo", 4.0, [0.0, 0.5, 0.7, 0.9, 0.3, 0.3], [NAN, 0.9, 0.4, 0.35, 0.3, 0.3]),
    # Keeps learning while its ESS halves at index 3: a false alarm.
    "false_alarm": ("grpo", 4.0, [0.0, 0.3, 0.5, 0.6, 0.6, 0.7], [NAN, 0.9, 0.8, 0.4, 0.4, 0.4]),
    # Never reaches min_peak, so its fall is no collapse.
    "never_learns": (
        "grpo", 4.0, [0.0, 0.15, 0.1, 0.02, -0.3, -0.3], [NAN, 0.9, 0.9, 0.9, 0.9, 0.9]
    ),
    # Diverges after index 2, below the collapse rule's reach; its ESS is NaN from then on too.
    "diverged": ("grpo", 4.0, [0.0, 0.4, 0.5, NAN, NAN, NAN], [NAN, 0.9, 0.9, NAN, NAN, NAN]),
    # Under the floor from index 3 (0.16 < 0.2) without halving (0.16 > 0.5 x 0.3); collapses
    # at index 5 (0.2 < 0.5 x 0.6).
    "floor": ("vcpo", 4.0, [0.0, 0.4, 0.6, 0.6, 0.55, 0.2], [NAN, 0.3, 0.25, 0.16, 0.16, 0.16]),
    # Collapses at index 2; its ESS halves only at index 4: a lead of -200.
    "late": ("vcpo", 4.0, [0.0, 0.8, 0.3, 0.3, 0.3, 0.3], [NAN, 0.9, 0.9, 0.9, 0.4, 0.4]),
}
# run -> (collapse env steps, drop warning env steps, floor warning env steps)
EXPECTED = {
    "warned": (400, 200, NAN),
    "false_alarm": (NAN, 300, NAN),
    "never_learns": (NAN, NAN, NAN),
    "diverged": (300, NAN, NAN),
    "floor": (500, NAN, 300),
    "late": (200, 400, NAN),
}


def make_runs(runs=RUNS):
    rows = [
        {
            "run_id": run_id, "task": "add", "variant": variant, "lag": lag, "seed": seed,
            "env_steps": PERIOD * i, "score": score, "ess_ratio": ess,
        }
        for seed, (run_id, (variant, lag, scores, ess_ratios)) in enumerate(runs.items())
        for i, (score, ess) in enumerate(zip(scores, ess_ratios))
    ]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- one run


@pytest.mark.parametrize(("run", "expected"), [(r, e[0]) for r, e in EXPECTED.items()])
def test_collapse_index_of_each_run(run, expected):
    index = collapse_index(np.array(RUNS[run][2]))
    assert (NAN if index is None else PERIOD * index) == pytest.approx(expected, nan_ok=True)


def test_collapse_reads_the_best_of_all_earlier_scores_but_not_the_current_one():
    # The best earlier score is the one right before the fall: a running max that lags by one
    # evaluation sees only 0.1 (below min_peak) and misses the collapse.
    assert collapse_index(np.array([0.0, 0.1, 0.9, 0.3])) == 3
    # The peak two evaluations back still counts.
    assert collapse_index(np.array([0.0, 0.9, 0.6, 0.4])) == 3
    # The fall is measured from the best earlier score, not from the previous one.
    assert collapse_index(np.array([0.0, 0.9, 0.5, 0.44])) == 3
    # Exactly half of the best is not below it.
    assert collapse_index(np.array([0.0, 0.8, 0.4, 0.4])) is None


def test_min_peak_and_collapse_fraction_set_the_rule():
    never_learns = np.array(RUNS["never_learns"][2])
    # 0.02 < 0.5 x 0.15 once a best of 0.15 counts.
    assert collapse_index(never_learns, Thresholds(min_peak=0.1)) == 3
    warned = np.array(RUNS["warned"][2])
    # 0.3 is not below 0.3 x 0.9 = 0.27.
    assert collapse_index(warned, Thresholds(collapse_fraction=0.3)) is None


def test_divergence_collapses_even_before_min_peak():
    assert collapse_index(np.array([0.0, 0.05, NAN, NAN])) == 2


@pytest.mark.parametrize(("run", "expected"), [(r, e[1:]) for r, e in EXPECTED.items()])
def test_warning_indices_of_each_run(run, expected):
    found = warning_indices(np.array(RUNS[run][3]))
    steps = [NAN if found[rule] is None else PERIOD * found[rule] for rule in ("drop", "floor")]
    assert steps == pytest.approx(list(expected), nan_ok=True)


def test_drop_rule_is_relative_to_the_first_finite_period():
    # Measured from 0.6 (not 0.9) the fall to 0.35 is no halving; from the NaN it is nothing.
    assert warning_indices(np.array([NAN, 0.6, 0.9, 0.35, 0.29]))["drop"] == 4
    # A finite first evaluation (as in the control testbed's tables) is the reference.
    assert warning_indices(np.array([0.9, 0.6, 0.44]))["drop"] == 2
    # The floor rule can warn from the first period on; the drop rule cannot.
    assert warning_indices(np.array([NAN, 0.1, 0.1])) == {"drop": None, "floor": 1}
    assert warning_indices(np.array([NAN, NAN])) == {"drop": None, "floor": None}


@pytest.mark.parametrize(
    ("field", "value"),
    [("collapse_fraction", 1.0), ("collapse_fraction", 0.0), ("min_peak", 0.0),
     ("min_peak", np.inf), ("ess_drop", 1.5), ("ess_floor", -0.1), ("ess_floor", NAN)],
)
def test_thresholds_refuse_values_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        Thresholds(**{field: value})


# ---------------------------------------------------------------- tables


def test_run_events_give_collapse_warnings_and_leads():
    events = run_events(make_runs().sample(frac=1.0, random_state=0))  # in any row order
    for run, (collapse, drop, floor) in EXPECTED.items():
        row = events.loc[run]
        assert row["collapsed"] == (not np.isnan(collapse))
        assert row[["collapse_env_steps", "drop_warning_env_steps", "floor_warning_env_steps"]
                   ].to_list() == pytest.approx([collapse, drop, floor], nan_ok=True)
        assert row[["drop_lead", "floor_lead"]].to_list() == pytest.approx(
            [collapse - drop, collapse - floor], nan_ok=True
        )
    assert events.loc["warned", "drop_lead"] == 2 * PERIOD
    assert events.loc["late", "drop_lead"] == -2 * PERIOD
    coordinates = events.loc["floor", ["task", "variant", "lag", "seed"]].to_list()
    assert coordinates == ["add", "vcpo", 4.0, 4]


def test_cell_counts_of_each_variant_and_lag():
    assert cell_counts(run_events(make_runs())) == [
        {
            "variant": "grpo", "lag": 4.0, "runs": 4, "collapsed": 2,  # warned, diverged
            "drop": {"warned_in_time": 1, "median_lead": 200.0, "false_alarms": 1},
            "floor": {"warned_in_time": 0, "median_lead": None, "false_alarms": 0},
        },
        {
            "variant": "vcpo", "lag": 4.0, "runs": 2, "collapsed": 2,
            # late's warning comes after its collapse: in the median lead, not in time.
            "drop": {"warned_in_time": 0, "median_lead": -200.0, "false_alarms": 0},
            "floor": {"warned_in_time": 1, "median_lead": 200.0, "false_alarms": 0},
        },
    ]


def test_median_lead_is_over_warned_collapses_and_a_warning_at_the_collapse_is_in_time():
    runs = {
        "a": ("grpo", 0.0, [0.0, 0.9, 0.9, 0.9, 0.1], [NAN, 0.9, 0.4, 0.4, 0.4]),  # lead 200
        "b": ("grpo", 0.0, [0.0, 0.9, 0.9, 0.1, 0.1], [NAN, 0.9, 0.9, 0.4, 0.4]),  # lead 0
        "c": ("grpo", 0.0, [0.0, 0.9, 0.9, 0.1, 0.1], [NAN, 0.9, 0.9, 0.4, 0.4]),  # lead 0
        "d": ("grpo", 0.0, [0.0, 0.9, 0.1, 0.1, 0.1], [NAN, 0.9, 0.9, 0.9, 0.9]),  # no warning
    }
    (cell,) = cell_counts(run_events(make_runs(runs)))
    assert cell["collapsed"] == 4
    assert cell["drop"] == {"warned_in_time": 3, "median_lead": 0.0, "false_alarms": 0}


def test_summary_records_thresholds_cells_and_runs_as_json():
    thresholds = Thresholds(ess_floor=0.1)
    found = summary(run_events(make_runs(), thresholds=thresholds), thresholds)
    assert found["thresholds"] == {
        "collapse_fraction": 0.5, "min_peak": 0.2, "ess_drop": 0.5, "ess_floor": 0.1
    }
    assert [c["floor"]["warned_in_time"] for c in found["cells"]] == [0, 0]
    assert [r["run_id"] for r in found["runs"]] == [
        "warned", "false_alarm", "never_learns", "diverged", "floor", "late"
    ]
    (warned,) = [r for r in found["runs"] if r["run_id"] == "warned"]
    assert warned == {
        "run_id": "warned", "task": "add", "variant": "grpo", "lag": 4.0, "seed": 0,
        "collapsed": True, "collapse_env_steps": 400.0,
        "drop": {"warning_env_steps": 200.0, "lead": 200.0},
        "floor": {"warning_env_steps": None, "lead": None},
    }
    assert json.loads(json.dumps(found, allow_nan=False)) == found


@pytest.mark.parametrize(
    "change", [lambda r: r.drop(columns=["ess_ratio"]), lambda r: r.assign(ess_ratio=NAN)]
)
def test_without_a_finite_ess_ratio_there_is_nothing_to_analyse(change):
    events = run_events(change(make_runs()))
    assert events is None
    defaults = {"collapse_fraction": 0.5, "min_peak": 0.2, "ess_drop": 0.5, "ess_floor": 0.2}
    assert summary(events, Thresholds()) == {
        "thresholds": defaults, "skipped": "the runs table has no finite ess_ratio"
    }


def test_score_column_is_selectable():
    runs = make_runs().rename(columns={"score": "evaluated_score"})
    events = run_events(runs, score_column="evaluated_score")
    assert events.loc["warned", "collapse_env_steps"] == 400
