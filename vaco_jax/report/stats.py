"""Evaluation statistics: normalisation, aggregates, bootstrap intervals, AUC.

Definitions follow Agarwal et al. (2021), "Deep RL at the edge of the
statistical precipice", and give the same numbers as its library ``rliable``
(``rliable.metrics`` and ``rliable.library.StratifiedBootstrap``, percentile
intervals) on the same score matrix; ``tests/report/test_stats.py`` checks this.
The one deliberate difference: the bootstrap draws all resamples at once and
evaluates the aggregate on the batch (vectorised), with its own seeded
generator, so its interval equals rliable's up to Monte-Carlo error, not bit for
bit (rliable draws its indices from numpy's global random state).

Conventions:
- A score matrix is a numpy array ``[num_runs, num_tasks]`` of normalised
  scores: column ``m`` holds the independent runs of task ``m``.
- Every aggregate also accepts a batch ``[..., num_runs, num_tasks]`` and then
  returns an array ``[...]``; the bootstrap relies on this to evaluate all of
  its resamples in one call. For a single matrix it returns a numpy float.
- Two-sample statistics (``probability_of_improvement``) take ``x`` of shape
  ``[..., n_x, num_tasks]`` and ``y`` of shape ``[..., n_y, num_tasks]``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Aggregate = Callable[..., np.ndarray | np.floating]
"""A statistic of one or more score matrices, batched over leading axes."""

IQM_TRIM = 0.25
"""Fraction of the pooled scores cut from each end by the interquartile mean."""


def _score_matrix(scores: np.ndarray, name: str = "scores") -> np.ndarray:
    """Checks a (possibly batched) score matrix and returns it as floats."""
    array = np.asarray(scores, dtype=float)
    if array.ndim < 2 or array.shape[-2] == 0 or array.shape[-1] == 0:
        raise ValueError(
            f"{name} must have shape [..., num_runs, num_tasks] with num_runs >= 1 "
            f"and num_tasks >= 1, got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return array


def _single_matrix(scores: np.ndarray, name: str) -> np.ndarray:
    """Checks an unbatched score matrix ``[num_runs, num_tasks]``."""
    array = _score_matrix(scores, name)
    if array.ndim != 2:
        raise ValueError(f"{name} must have shape [num_runs, num_tasks], got shape {array.shape}")
    return array


def _pooled(scores: np.ndarray) -> np.ndarray:
    """Flattens the runs and tasks axes: ``[..., runs, tasks] -> [..., runs * tasks]``."""
    return scores.reshape(*scores.shape[:-2], -1)


def _task_means(scores: np.ndarray) -> np.ndarray:
    """Mean over runs of each task: ``[..., runs, tasks] -> [..., tasks]``."""
    return _score_matrix(scores).mean(axis=-2)


def aggregate_median(scores: np.ndarray) -> np.ndarray | np.floating:
    """Median over tasks of the per-task mean scores (``rliable.metrics.aggregate_median``)."""
    return np.median(_task_means(scores), axis=-1)


def _interquartile_mean(values: np.ndarray, axis: int) -> np.ndarray:
    """Mean along ``axis`` of the values left once ``floor(0.25 * n)`` of the ``n`` sorted values
    are cut from each end."""
    ordered = np.moveaxis(np.sort(values, axis=axis), axis, -1)
    count = ordered.shape[-1]
    cut = int(IQM_TRIM * count)
    return ordered[..., cut : count - cut].mean(axis=-1)


def aggregate_iqm(scores: np.ndarray) -> np.ndarray | np.floating:
    """Interquartile mean: mean of the middle 50% of all pooled scores (runs and tasks).

    ``floor(0.25 * n)`` scores are cut from each end of the ``n`` sorted pooled
    scores, the same count as ``scipy.stats.trim_mean(scores, 0.25, axis=None)``,
    which is ``rliable.metrics.aggregate_iqm``.
    """
    return _interquartile_mean(_pooled(_score_matrix(scores)), axis=-1)


def task_iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean over the runs of each task: ``[..., runs, tasks] -> [..., tasks]``."""
    return _interquartile_mean(_score_matrix(scores), axis=-2)


def kept_gain(gains: np.ndarray, sync_gains: np.ndarray) -> np.ndarray | np.floating:
    """IQM over runs and tasks of each run's share of the synchronous gain it kept.

    ``gains`` ``[..., n, num_tasks]`` are the runs' improvements over their initial score and
    ``sync_gains`` ``[..., n_sync, num_tasks]`` those of the synchronous runs of the same method;
    each gain is divided by its task's ``task_iqm`` of ``sync_gains``. Dividing every run of a
    task by one positive number commutes with the trimming, so a task's kept gain is exactly
    ``task_iqm(gains) / task_iqm(sync_gains)`` and identical samples keep exactly 1. A share of
    a gain that is not positive means nothing: the result is NaN wherever some task's
    synchronous IQM gain is 0 or below (a bootstrap interval with such a resample is NaN too).
    Shapes as ``probability_of_improvement``'s, so ``stratified_bootstrap_ci_pair`` resamples
    both samples.
    """
    gains = _score_matrix(gains, "gains")
    denominator = task_iqm(sync_gains)
    if gains.shape[-1] != denominator.shape[-1]:
        raise ValueError(
            f"gains and sync_gains must have the same num_tasks (last axis), got "
            f"{gains.shape[-1]} and {denominator.shape[-1]}"
        )
    learned = denominator > 0
    shares = gains / np.where(learned, denominator, 1.0)[..., None, :]
    return np.where(learned.all(axis=-1), aggregate_iqm(shares), np.nan)


def aggregate_mean(scores: np.ndarray) -> np.ndarray | np.floating:
    """Mean over tasks of the per-task mean scores (``rliable.metrics.aggregate_mean``)."""
    return _task_means(scores).mean(axis=-1)


def aggregate_optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> np.ndarray | np.floating:
    """Mean shortfall below the target ``gamma``: ``gamma - mean(min(score, gamma))``.

    This is ``rliable.metrics.aggregate_optimality_gap``; it equals the pooled
    mean of ``max(gamma - score, 0)``.

    Lower is better; scores above ``gamma`` earn no credit, so 0 means every run
    reached the target.
    """
    return np.maximum(gamma - _score_matrix(scores), 0.0).mean(axis=(-2, -1))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray | np.floating:
    """Average over tasks of ``P(X_m > Y_m)``, ties counting one half.

    Per task this is the Mann-Whitney U statistic of ``x`` against ``y`` divided
    by ``n_x * n_y``: the fraction of all (run of x, run of y) pairs where x
    scores higher. Shapes ``[..., n_x, num_tasks]`` and ``[..., n_y, num_tasks]``.
    Same as ``rliable.metrics.probability_of_improvement`` (which also gives 0.5
    for a task whose two samples are identical).
    """
    x = _score_matrix(x, "x")
    y = _score_matrix(y, "y")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(
            f"x and y must have the same num_tasks (last axis), got {x.shape[-1]} and {y.shape[-1]}"
        )
    # Pairwise comparison [..., n_x, n_y, num_tasks]; score matrices are small.
    left = x[..., :, None, :]
    right = y[..., None, :, :]
    wins = (left > right) + 0.5 * (left == right)
    return wins.mean(axis=(-3, -2)).mean(axis=-1)


def _check_bootstrap_options(reps: int, confidence: float) -> None:
    if not isinstance(reps, (int, np.integer)) or isinstance(reps, bool) or reps < 1:
        raise ValueError(f"reps must be an integer >= 1, got {reps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def _resample_within_tasks(scores: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Draws runs with replacement, independently per task: ``[runs, tasks] -> [reps, runs, tasks]``.

    Stratifying by task keeps each resample's task mix fixed; a value is only
    ever drawn into its own task's column.
    """
    num_runs, num_tasks = scores.shape
    rows = rng.integers(0, num_runs, size=(reps, num_runs, num_tasks))
    return scores[rows, np.arange(num_tasks)]


def _bootstrap(
    samples: tuple[np.ndarray, ...],
    statistic: Aggregate,
    statistic_name: str,
    reps: int,
    confidence: float,
    seed: int,
) -> tuple[float, float, float]:
    """Percentile stratified bootstrap of ``statistic(*samples)``, each sample resampled on its own.

    ``statistic_name`` names the caller's argument in errors.
    """
    _check_bootstrap_options(reps, confidence)
    rng = np.random.default_rng(seed)
    point = float(statistic(*samples))
    replicates = np.asarray(statistic(*(_resample_within_tasks(s, reps, rng) for s in samples)))
    if replicates.shape != (reps,):
        raise ValueError(
            f"{statistic_name} must accept batches [reps, num_runs, num_tasks] and return shape "
            f"[reps] = ({reps},), got shape {replicates.shape}"
        )
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return point, float(low), float(high)


def stratified_bootstrap_ci(
    scores: np.ndarray,
    aggregate_fn: Aggregate,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval of an aggregate.

    Args:
      scores: ``[num_runs, num_tasks]``.
      aggregate_fn: maps ``[..., num_runs, num_tasks]`` to ``[...]`` (every
        aggregate in this module does).
      reps: number of bootstrap resamples.
      confidence: coverage of the interval, e.g. 0.95.
      seed: seed of the resampling; the same seed gives the same interval.

    Returns:
      ``(point, low, high)`` where ``point = aggregate_fn(scores)`` and
      ``[low, high]`` are the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
      quantiles of the aggregate over resamples that draw runs with replacement
      independently within each task (``rliable.library.StratifiedBootstrap``
      without task resampling; ``percentile`` method of
      ``rliable.library.get_interval_estimates``).
    """
    samples = (_single_matrix(scores, "scores"),)
    return _bootstrap(samples, aggregate_fn, "aggregate_fn", reps, confidence, seed)


def stratified_bootstrap_ci_pair(
    x: np.ndarray,
    y: np.ndarray,
    statistic: Aggregate,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and interval of a two-sample statistic, as ``stratified_bootstrap_ci``.

    For statistics such as ``probability_of_improvement``: ``x`` ``[n_x, num_tasks]``
    and ``y`` ``[n_y, num_tasks]`` are each resampled within tasks, independently,
    and ``statistic`` maps batches ``[..., n, num_tasks]`` of both to ``[...]``.
    """
    samples = (_single_matrix(x, "x"), _single_matrix(y, "y"))
    return _bootstrap(samples, statistic, "statistic", reps, confidence, seed)


def normalize_scores(
    returns: np.ndarray, initial: np.ndarray | float, reference: np.ndarray | float
) -> np.ndarray:
    """Maps returns onto a per-task scale: ``(R - initial) / (reference - initial)``.

    0 is the task's initial-policy return and 1 a per-task reference return.
    ``returns`` is ``[..., num_tasks]``; ``initial`` and ``reference`` are
    ``[num_tasks]`` (or scalars) and broadcast against it. NaN returns stay NaN.
    """
    returns = np.asarray(returns, dtype=float)
    initial = np.asarray(initial, dtype=float)
    reference = np.asarray(reference, dtype=float)
    try:
        np.broadcast_shapes(returns.shape, initial.shape, reference.shape)
    except ValueError as error:
        raise ValueError(
            f"returns {returns.shape}, initial {initial.shape} and reference {reference.shape} "
            "must broadcast (returns [..., num_tasks], initial and reference [num_tasks])"
        ) from error
    if not (np.all(np.isfinite(initial)) and np.all(np.isfinite(reference))):
        raise ValueError("initial and reference must be finite")
    if np.any(reference == initial):
        raise ValueError("reference must differ from initial for every task")
    return (returns - initial) / (reference - initial)


def area_under_curve(normalized_curve: np.ndarray, env_steps: np.ndarray) -> np.ndarray | np.floating:
    """Area under a normalised learning curve over training progress in [0, 1].

    ``env_steps`` ``[num_points]`` (strictly increasing, at least two points) is
    rescaled linearly so its first point is 0 and its last 1, and the curve
    ``[..., num_points]`` is integrated with the trapezoid rule. A curve constant
    at ``c`` has area ``c``. NaN points give a NaN area.
    """
    curve = np.asarray(normalized_curve, dtype=float)
    steps = np.asarray(env_steps, dtype=float)
    if steps.ndim != 1 or steps.shape[0] < 2:
        raise ValueError(f"env_steps must be 1-D with at least 2 points, got shape {steps.shape}")
    if not np.all(np.diff(steps) > 0):
        raise ValueError("env_steps must be strictly increasing")
    if curve.ndim < 1 or curve.shape[-1] != steps.shape[0]:
        raise ValueError(
            f"normalized_curve must have shape [..., {steps.shape[0]}] to match env_steps, "
            f"got {curve.shape}"
        )
    progress = (steps - steps[0]) / (steps[-1] - steps[0])
    return np.trapezoid(curve, progress, axis=-1)
