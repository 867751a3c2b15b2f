"""Tests of the evaluation statistics against hand-computed values and simulation."""

import time

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rliable import metrics as rliable_metrics

from vaco_jax.report import stats

AGGREGATES = [
    stats.aggregate_median,
    stats.aggregate_iqm,
    stats.aggregate_mean,
    stats.aggregate_optimality_gap,
]

score_matrices = hnp.arrays(
    float,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6),
    elements=st.floats(-10, 10, allow_nan=False),
)


# ---------------------------------------------------------------- aggregates


def test_iqm_of_one_to_eight_keeps_the_middle_four():
    scores = np.arange(1.0, 9.0).reshape(4, 2)  # pooled 1..8; trim two from each end
    assert stats.aggregate_iqm(scores) == pytest.approx((3 + 4 + 5 + 6) / 4)


def test_iqm_trims_outliers_of_any_task():
    scores = np.array([[-100.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 100.0]])
    assert stats.aggregate_iqm(scores) == pytest.approx((2 + 3 + 4 + 5) / 4)


def test_iqm_of_constant_matrix_is_the_constant():
    assert stats.aggregate_iqm(np.full((7, 3), 0.37)) == pytest.approx(0.37)


@settings(max_examples=50, deadline=None)
@given(score_matrices)
def test_iqm_matches_quarter_trimmed_mean(scores):
    expected = scipy.stats.trim_mean(scores, 0.25, axis=None)
    assert stats.aggregate_iqm(scores) == pytest.approx(expected)


def test_median_is_the_median_of_per_task_means():
    # Task means 7, 1.5, 0, 5: median of four averages the middle pair 1.5 and 5.
    # The pooled median of these eight scores would be 2.5 instead.
    scores = np.array([[4.0, 1.0, 0.0, 9.0], [10.0, 2.0, 0.0, 1.0]])
    assert stats.aggregate_median(scores) == pytest.approx(3.25)


def test_mean_is_the_mean_of_per_task_means():
    assert stats.aggregate_mean(np.array([[0.0, 1.0], [2.0, 5.0]])) == pytest.approx(2.0)


def test_optimality_gap_hand_value():
    # Shortfalls below 1: 1, 0.5, 0 (above target earns nothing), 0.
    scores = np.array([[0.0, 0.5], [1.5, 1.0]])
    assert stats.aggregate_optimality_gap(scores) == pytest.approx(1.5 / 4)


def test_optimality_gap_is_zero_when_every_score_reaches_gamma():
    assert stats.aggregate_optimality_gap(np.array([[1.0, 3.0], [1.2, 1.0]])) == 0.0


def test_optimality_gap_is_one_when_every_score_is_zero():
    assert stats.aggregate_optimality_gap(np.zeros((3, 4))) == pytest.approx(1.0)


def test_optimality_gap_uses_gamma():
    assert stats.aggregate_optimality_gap(np.array([[1.0, 3.0]]), gamma=2.0) == pytest.approx(0.5)


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_aggregates_evaluate_batches_like_single_matrices(aggregate):
    batch = np.random.default_rng(0).normal(size=(4, 5, 3))
    expected = [aggregate(matrix) for matrix in batch]
    np.testing.assert_allclose(aggregate(batch), expected)


@pytest.mark.parametrize("aggregate", AGGREGATES)
@pytest.mark.parametrize(
    "scores",
    [np.array([1.0, 2.0]), np.zeros((0, 3)), np.array([[1.0, np.nan]])],
    ids=["1d", "empty", "nan"],
)
def test_aggregates_reject_bad_scores(aggregate, scores):
    with pytest.raises(ValueError, match="scores"):
        aggregate(scores)


# ---------------------------------------------------------------- probability of improvement


def test_probability_of_improvement_on_separated_samples():
    x = np.array([[5.0, 7.0], [6.0, 8.0]])
    y = np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]])
    assert stats.probability_of_improvement(x, y) == 1.0
    assert stats.probability_of_improvement(y, x) == 0.0


def test_probability_of_improvement_of_identical_samples_is_half():
    x = np.random.default_rng(1).normal(size=(5, 3))
    assert stats.probability_of_improvement(x, x) == pytest.approx(0.5)


def test_probability_of_improvement_counts_ties_as_half():
    # Task 0: pairs (1,1) tie, (1,2) loss, (3,1) win, (3,2) win -> (0.5 + 0 + 1 + 1) / 4 = 0.625.
    # Task 1: all four pairs tie -> 0.5.
    x = np.array([[1.0, 0.0], [3.0, 0.0]])
    y = np.array([[1.0, 0.0], [2.0, 0.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx((0.625 + 0.5) / 2)


def test_probability_of_improvement_matches_mann_whitney_per_task():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, size=(6, 3)).astype(float)  # small integers: many ties
    y = rng.integers(0, 4, size=(4, 3)).astype(float)
    u = [scipy.stats.mannwhitneyu(x[:, m], y[:, m]).statistic for m in range(3)]
    expected = np.mean(u) / (6 * 4)
    assert stats.probability_of_improvement(x, y) == pytest.approx(expected)


@settings(max_examples=50, deadline=None)
@given(score_matrices, st.integers(1, 5), st.integers(0, 1000))
def test_probability_of_improvement_is_complementary(x, n_y, seed):
    y = np.random.default_rng(seed).normal(size=(n_y, x.shape[1]))
    both_ways = stats.probability_of_improvement(x, y) + stats.probability_of_improvement(y, x)
    assert both_ways == pytest.approx(1.0)


def test_probability_of_improvement_rejects_mismatched_tasks():
    with pytest.raises(ValueError, match="num_tasks"):
        stats.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 3)))


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_interval_covers_the_true_mean_at_about_the_nominal_rate():
    rng = np.random.default_rng(3)
    true_mean, trials = 0.4, 200
    covered = 0
    for trial in range(trials):
        scores = rng.normal(true_mean, 1.0, size=(20, 5))
        _, low, high = stats.stratified_bootstrap_ci(scores, stats.aggregate_mean, seed=trial)
        covered += low <= true_mean <= high
    assert 0.88 <= covered / trials <= 0.99


def test_bootstrap_point_is_the_aggregate_and_inside_the_interval():
    scores = np.random.default_rng(4).normal(size=(8, 3))
    point, low, high = stats.stratified_bootstrap_ci(scores, stats.aggregate_iqm, reps=500)
    assert point == stats.aggregate_iqm(scores)
    assert low < point < high


def test_bootstrap_is_reproducible_with_a_seed_and_varies_across_seeds():
    scores = np.random.default_rng(5).normal(size=(10, 5))
    first = stats.stratified_bootstrap_ci(scores, stats.aggregate_median, seed=7)
    assert stats.stratified_bootstrap_ci(scores, stats.aggregate_median, seed=7) == first
    assert stats.stratified_bootstrap_ci(scores, stats.aggregate_median, seed=8)[1:] != first[1:]


def test_bootstrap_resamples_within_tasks_only():
    # Any resample drawing across columns would move the mean away from 0.5.
    scores = np.column_stack([np.zeros(6), np.ones(6)])
    point, low, high = stats.stratified_bootstrap_ci(scores, stats.aggregate_mean, reps=500)
    assert point == low == high == 0.5


def test_bootstrap_resamples_each_task_independently():
    # Two identical tasks: drawing the same runs for both would keep the single-task width;
    # independent draws average two independent means, narrowing it by about sqrt(2).
    column = np.arange(10.0)[:, None]
    _, low1, high1 = stats.stratified_bootstrap_ci(column, stats.aggregate_mean)
    twice = np.hstack([column, column])
    _, low2, high2 = stats.stratified_bootstrap_ci(twice, stats.aggregate_mean)
    assert (high2 - low2) / (high1 - low1) == pytest.approx(1 / np.sqrt(2), abs=0.1)


def test_bootstrap_interval_narrows_with_lower_confidence():
    scores = np.random.default_rng(6).normal(size=(10, 5))
    _, low95, high95 = stats.stratified_bootstrap_ci(scores, stats.aggregate_mean, confidence=0.95)
    _, low50, high50 = stats.stratified_bootstrap_ci(scores, stats.aggregate_mean, confidence=0.5)
    assert low95 < low50 < high50 < high95


def test_bootstrap_of_two_thousand_reps_is_fast():
    scores = np.random.default_rng(7).normal(size=(10, 5))
    start = time.perf_counter()
    for aggregate in AGGREGATES:
        stats.stratified_bootstrap_ci(scores, aggregate, reps=2000)
    assert (time.perf_counter() - start) / len(AGGREGATES) < 0.5


def test_pair_bootstrap_of_probability_of_improvement():
    rng = np.random.default_rng(8)
    x = rng.normal(1.0, 1.0, size=(10, 3))
    y = rng.normal(0.0, 1.0, size=(12, 3))
    interval = stats.stratified_bootstrap_ci_pair(x, y, stats.probability_of_improvement, reps=500)
    point, low, high = interval
    assert point == stats.probability_of_improvement(x, y)
    assert 0.5 < low < point < high <= 1.0
    again = stats.stratified_bootstrap_ci_pair(x, y, stats.probability_of_improvement, reps=500)
    assert again == interval


def test_pair_bootstrap_of_separated_samples_is_degenerate_at_one():
    x = np.full((4, 2), 2.0) + np.arange(4)[:, None]
    y = np.zeros((5, 2)) - np.arange(5)[:, None]
    interval = stats.stratified_bootstrap_ci_pair(x, y, stats.probability_of_improvement, reps=200)
    assert interval == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reps": 0}, "reps"),
        ({"reps": 2.5}, "reps"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": 0.0}, "confidence"),
    ],
)
def test_bootstrap_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        stats.stratified_bootstrap_ci(np.zeros((3, 2)), stats.aggregate_mean, **options)


def test_bootstrap_rejects_batched_scores_and_unbatched_aggregates():
    with pytest.raises(ValueError, match=r"scores must have shape \[num_runs, num_tasks\]"):
        stats.stratified_bootstrap_ci(np.zeros((2, 3, 2)), stats.aggregate_mean)
    with pytest.raises(ValueError, match="aggregate_fn"):
        stats.stratified_bootstrap_ci(np.zeros((3, 2)), lambda s: float(np.mean(s)))


# ---------------------------------------------------------------- normalisation and AUC


def test_normalize_scores_per_task():
    returns = np.array([[10.0, -5.0], [110.0, 45.0], [60.0, 20.0]])
    normalised = stats.normalize_scores(
        returns, initial=np.array([10.0, -5.0]), reference=np.array([110.0, 45.0])
    )
    np.testing.assert_allclose(normalised, [[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])


def test_normalize_scores_rejects_reference_equal_to_initial():
    with pytest.raises(ValueError, match="reference must differ from initial"):
        stats.normalize_scores(np.ones((2, 2)), initial=np.zeros(2), reference=np.array([1.0, 0.0]))


def test_normalize_scores_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="must broadcast"):
        stats.normalize_scores(np.ones((2, 3)), initial=np.zeros(2), reference=np.ones(2))


def test_auc_of_constant_curve_is_the_constant():
    assert stats.area_under_curve(np.ones(4), np.array([0, 10, 50, 1000])) == pytest.approx(1.0)


def test_auc_hand_value_with_uneven_steps():
    # Progress 0, 0.25, 1; trapezoids: 0.25 * (0 + 1) / 2 + 0.75 * (1 + 1) / 2 = 0.875.
    auc = stats.area_under_curve(np.array([0.0, 1.0, 1.0]), np.array([0, 250, 1000]))
    assert auc == pytest.approx(0.875)


def test_auc_of_linear_ramp_is_half_and_batches():
    curves = np.array([[0.0, 0.5, 1.0], [2.0, 2.0, 2.0]])
    auc = stats.area_under_curve(curves, np.array([100, 200, 300]))
    np.testing.assert_allclose(auc, [0.5, 2.0])


@pytest.mark.parametrize(
    ("curve", "steps", "message"),
    [
        (np.ones(1), np.array([0]), "at least 2"),
        (np.ones(3), np.array([0, 5, 5]), "strictly increasing"),
        (np.ones(2), np.array([0, 5, 9]), "normalized_curve"),
    ],
)
def test_auc_rejects_bad_input(curve, steps, message):
    with pytest.raises(ValueError, match=message):
        stats.area_under_curve(curve, steps)


# ------------------------------------------------------- agreement with rliable
# rliable.metrics imports on its own; rliable.library needs the `arch` package,
# whose 7.2 release does not import under pandas 3, so the bootstrap is checked
# against a loop that follows rliable's StratifiedBootstrap.update_indices
# (every (run, task) slot draws a run index of its own task) with its aggregates.

RLIABLE_AGGREGATES = [
    (stats.aggregate_median, rliable_metrics.aggregate_median),
    (stats.aggregate_iqm, rliable_metrics.aggregate_iqm),
    (stats.aggregate_mean, rliable_metrics.aggregate_mean),
    (stats.aggregate_optimality_gap, rliable_metrics.aggregate_optimality_gap),
]


def _tasks_on_different_scales(seed, num_runs=7, num_tasks=5):
    rng = np.random.default_rng(seed)
    spread = np.linspace(0.05, 1.0, num_tasks)
    centre = np.linspace(-0.5, 2.0, num_tasks)
    return centre + spread * rng.standard_normal((num_runs, num_tasks))


@pytest.mark.parametrize("ours, theirs", RLIABLE_AGGREGATES)
@pytest.mark.parametrize("seed", range(5))
def test_aggregates_equal_rliable_on_multi_task_matrices(ours, theirs, seed):
    scores = _tasks_on_different_scales(seed)
    assert ours(scores) == pytest.approx(theirs(scores), rel=1e-12, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(score_matrices)
def test_aggregates_equal_rliable_on_any_matrix(scores):
    for ours, theirs in RLIABLE_AGGREGATES:
        assert ours(scores) == pytest.approx(theirs(scores), rel=1e-9, abs=1e-9)


def test_optimality_gap_equals_rliable_with_gamma():
    scores = _tasks_on_different_scales(11)
    assert stats.aggregate_optimality_gap(scores, gamma=0.5) == pytest.approx(
        rliable_metrics.aggregate_optimality_gap(scores, gamma=0.5)
    )


@pytest.mark.parametrize("seed", range(4))
def test_probability_of_improvement_equals_rliable(seed):
    rng = np.random.default_rng(seed)
    x = np.round(_tasks_on_different_scales(seed, num_runs=6), 1)  # rounding makes ties
    y = np.round(_tasks_on_different_scales(seed + 100, num_runs=4) + rng.normal(size=5), 1)
    y[:, 0] = x[:4, 0]
    assert stats.probability_of_improvement(x, y) == pytest.approx(
        rliable_metrics.probability_of_improvement(x, y)
    )


def _rliable_stratified_percentile_interval(scores, aggregate, reps, seed):
    """rliable's StratifiedBootstrap + percentile method, one resample at a time."""
    legacy = np.random.RandomState(seed)
    num_runs, num_tasks = scores.shape
    replicates = []
    for _ in range(reps):
        runs = legacy.choice(num_runs, scores.shape, replace=True)
        replicates.append(aggregate(scores[runs, np.arange(num_tasks)]))
    return np.percentile(replicates, [2.5, 97.5])


@pytest.mark.parametrize("ours, theirs", RLIABLE_AGGREGATES[:2])
def test_bootstrap_interval_agrees_with_rliable_within_monte_carlo_error(ours, theirs):
    scores = _tasks_on_different_scales(5, num_runs=6, num_tasks=4)
    reps = 2000
    expected = _rliable_stratified_percentile_interval(scores, theirs, reps, seed=1)
    # Monte-Carlo spread of each endpoint at this many resamples, from 10 seeds;
    # both sides are estimates with that spread, so their difference has sqrt(2) times it.
    endpoints = np.array(
        [stats.stratified_bootstrap_ci(scores, ours, reps=reps, seed=s)[1:] for s in range(10)]
    )
    spread = endpoints.std(axis=0, ddof=1)
    tolerance = 4.0 * np.sqrt(2.0) * spread
    assert np.all(np.abs(endpoints[0] - expected) <= tolerance)
    # The check has teeth: pooling runs across tasks moves the endpoints well past it.
    pooled = np.random.default_rng(0).choice(scores.ravel(), (reps, *scores.shape))
    pooled_interval = np.percentile(ours(pooled), [2.5, 97.5])
    assert np.any(np.abs(pooled_interval - expected) > tolerance)
