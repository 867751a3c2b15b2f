"""Lag models: every model's drawn lags follow its stated distribution (chi-square tests)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from engine_configs import TOY
from vaco_jax.config import HParams, TrainConfig, validate
from vaco_jax.policy_buffer import in_flight_lags, sample_lags
from vaco_jax.train import make_train

CAPACITY = 8
DRAWS = 20_000
PER_ACTOR = jnp.arange(DRAWS) % 3


def _expected(lag_model, lag, probabilities=()):
    """Each model's distribution over lags 0..CAPACITY-1, as the docstring states it."""
    j = np.arange(CAPACITY)
    if lag_model == "fixed":
        return (j == lag).astype(float)
    if lag_model in ("uniform", "per_actor"):
        return (j <= lag) / (lag + 1)
    if lag_model == "geometric":
        weights = lag * (1 - lag) ** j
        return weights / weights.sum()
    if lag_model == "bounded":
        return np.where(j < lag, 1 / CAPACITY, np.where(j == lag, (CAPACITY - lag) / CAPACITY, 0))
    if lag_model == "empirical":
        return np.pad(probabilities, (0, CAPACITY - len(probabilities)))
    raise AssertionError(lag_model)


def _p_value(lags, expected):
    counts = np.bincount(np.asarray(lags), minlength=CAPACITY)
    support = expected > 0
    assert counts[~support].sum() == 0, "a lag outside the model's support was drawn"
    if support.sum() == 1:
        return 1.0
    return stats.chisquare(counts[support], DRAWS * expected[support]).pvalue


CASES = [("fixed", 3, ()), ("uniform", 4, ()), ("geometric", 0.3, ()), ("per_actor", 2, ()),
         ("bounded", 3, ()), ("bounded", 0, ()), ("empirical", 0, (0.5, 0.3, 0.0, 0.2))]


def _draw(lag_model, lag, probabilities):
    per_actor = jax.random.randint(jax.random.PRNGKey(1), (DRAWS,), 0, int(lag) + 1)
    return sample_lags(jax.random.PRNGKey(0), lag_model, jnp.float32(lag), DRAWS, CAPACITY,
                       per_actor, probabilities)


@pytest.mark.parametrize("lag_model,lag,probabilities", CASES)
def test_drawn_lags_follow_the_model(lag_model, lag, probabilities):
    lags = _draw(lag_model, lag, probabilities)
    assert _p_value(lags, _expected(lag_model, lag, probabilities)) > 1e-3


@pytest.mark.parametrize("lag_model,lag,probabilities", [c for c in CASES if c[0] != "fixed"])
def test_the_test_rejects_a_wrong_distribution(lag_model, lag, probabilities):
    lags = _draw(lag_model, lag, probabilities)
    expected = _expected(lag_model, lag, probabilities)
    support = np.flatnonzero(expected)
    if len(support) == 1:  # a point mass: a draw off the wrong support is caught
        with pytest.raises(AssertionError, match="outside the model's support"):
            _p_value(lags, np.roll(expected, 1))
        return
    wrong = expected.copy()  # move 5% of the probability from the likeliest lag to another
    likeliest = support[np.argmax(expected[support])]
    wrong[likeliest] -= 0.05
    wrong[support[support != likeliest][0]] += 0.05
    assert _p_value(lags, wrong) < 1e-6


def test_bounded_never_exceeds_eta():
    for eta in range(CAPACITY):
        lags = sample_lags(jax.random.PRNGKey(eta), "bounded", jnp.float32(eta), 4096, CAPACITY,
                           PER_ACTOR[:4096])
        assert int(lags.max()) == eta  # reached, never exceeded


def test_in_flight_lags_catch_up_to_the_newest_version():
    start = jnp.array([0, 1, 3, 7], jnp.int32)
    lags = np.asarray(in_flight_lags(start, 8))
    assert lags.shape == (8, 4)
    expected = np.array([[s - (t * (s + 1)) // 8 for s in (0, 1, 3, 7)] for t in range(8)])
    np.testing.assert_array_equal(lags, np.maximum(expected, 0))
    np.testing.assert_array_equal(lags[0], start)
    np.testing.assert_array_equal(lags[:, 0], 0)  # synchronous stays synchronous
    np.testing.assert_array_equal(lags[:, 3], 7 - np.arange(8))  # one version per step
    assert np.all(np.diff(lags, axis=0) <= 0) and np.all(lags >= 0)


@pytest.mark.parametrize("probabilities,message", [
    ((), "non-empty"), ((0.5, 0.6), "sum to 1"), ((1.2, -0.2), ">= 0"),
    ((0.1,) * 10, "at most buffer_capacity"), (("a",), "tuple of numbers")])
def test_empirical_probabilities_are_validated(probabilities, message):
    config = TrainConfig(env="toy_reach", lag_model="empirical", buffer_capacity=8,
                         lag_probabilities=probabilities)
    with pytest.raises(ValueError, match="lag_probabilities") as error:
        validate(config)
    assert message in str(error.value)


def test_lag_probabilities_need_the_empirical_model():
    with pytest.raises(ValueError, match="lag_probabilities is only used"):
        validate(TrainConfig(env="toy_reach", lag_model="uniform", lag_probabilities=(1.0,)))
    validate(TrainConfig(env="toy_reach", lag_model="empirical", lag_probabilities=(0.5, 0.5)))


def test_vmapped_in_flight_runs_equal_single_runs():
    train = make_train(TOY.replace(lag_model="in_flight"))
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    hparams = HParams.stack([HParams.create(lag=0.0), HParams.create(lag=3.0)])
    batched_state, batched_metrics = jax.jit(jax.vmap(train))(keys, hparams)
    assert np.asarray(batched_metrics["version_gap_max"])[1].max() == 3
    for i in range(2):
        state, metrics = jax.jit(train)(keys[i], jax.tree.map(lambda x: x[i], hparams))
        for name, values in metrics.items():
            np.testing.assert_allclose(batched_metrics[name][i], values, rtol=2e-5, atol=1e-6,
                                       err_msg=name)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=2e-5, atol=1e-6),
                     batched_state.params, state.params)


def test_sweeps_and_cli_accept_an_empirical_histogram(tmp_path):
    from vaco_jax.cli import parse_lag
    from vaco_jax.sweep import load_experiment

    assert parse_lag("empirical:0.5,0.3,0.2") == ("empirical", 0.0, (0.5, 0.3, 0.2))
    assert parse_lag("bounded:4") == ("bounded", 4.0, ())
    text = ('name = "e"\ntasks = ["toy_reach"]\nalgos = ["ppo"]\nseeds = 1\n'
            '[lag]\nmodel = "empirical"\nlevels = [0]\n[config]\nlag_probabilities = {}\n')
    (tmp_path / "good.toml").write_text(text.format("[0.5, 0.3, 0.2]"))
    assert load_experiment(tmp_path / "good.toml").groups[0].config.lag_probabilities == (
        0.5, 0.3, 0.2)
    (tmp_path / "bad.toml").write_text(text.format("[0.5, 0.6]"))
    with pytest.raises(ValueError, match="lag_probabilities must sum to 1"):
        load_experiment(tmp_path / "bad.toml")
