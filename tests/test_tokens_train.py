"""The token training program: validation, lag 0, recorded staleness, vmap over seeds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.policy_buffer import push
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import METRICS, TokenTrainer, make_train

TINY = TokenConfig(task="add", task_size=1, layers=1, width=32, heads=2, context=10, prompts=4,
                   group_size=4, num_updates=4, eval_every=2, eval_prompts=16,
                   buffer_capacity=4, minibatches=2)
PARAMS = TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(0))
HP = TokenHParams.create(learning_rate=3e-3)


@pytest.mark.parametrize("changes,hparams,message", [
    ({"task": "mul"}, None, "task='mul' is not supported; allowed values: add, sort, chain"),
    ({"context": 8}, None, "context=8 is too short for task='add'.*context >= 9"),
    ({"group_size": 1}, None, "group_size=1 .* allowed: group_size >= 2"),
    ({"group_unit": "token"}, None, "group_unit='token' .* allowed values: prompt, sample"),
    ({"lag_model": "bounded"}, None, "lag_model='bounded' .* fixed, uniform, geometric"),
    ({}, TokenHParams.create(lag=4.0), r"lag for lag_model='fixed' must be an integer in \[0, 3\]"),
])
def test_bad_settings_fail_before_compilation(changes, hparams, message):
    with pytest.raises(ValueError, match=message):
        validate(TINY.replace(**changes), hparams)


# Partial credit gives even the untrained policy non-zero advantages, so versions differ.
STALE = TINY.replace(partial_credit=True)


def lagged(lag):
    return TokenHParams.create(lag=lag, learning_rate=3e-3)


@pytest.fixture(scope="module")
def train_stale():
    """One compiled program for every lag: `lag` is a traced hyper-parameter."""
    return jax.jit(make_train(STALE, PARAMS))


def test_lag_zero_equals_on_policy_bit_for_bit(train_stale):
    key = jax.random.PRNGKey(0)
    on_policy_state, on_policy = jax.jit(make_train(STALE.replace(buffer_capacity=1), PARAMS))(
        key, lagged(0.0))
    state, metrics = train_stale(key, lagged(0.0))
    assert set(metrics) == set(METRICS)
    for name in METRICS:
        np.testing.assert_array_equal(metrics[name], on_policy[name], err_msg=name)
    jax.tree.map(np.testing.assert_array_equal, state.params, on_policy_state.params)
    assert np.all(np.asarray(metrics["version_gap_max"]) == 0)
    np.testing.assert_allclose(metrics["tv_backward"], 0, atol=1e-5)
    evals = np.asarray(metrics["eval_accuracy"])
    assert np.isnan(evals[::2]).all() and np.isfinite(evals[1::2]).all()


def test_fixed_lag_reaches_its_value_once_pushed(train_stale):
    _, metrics = train_stale(jax.random.PRNGKey(0), lagged(2.0))
    np.testing.assert_array_equal(metrics["version_gap_mean"], [0, 1, 2, 2])
    assert float(metrics["tv_backward"][-1]) > 1e-4


def test_vmap_over_seeds_and_hparams_equals_single_runs(train_stale):
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    hps = [TokenHParams.create(lag=1.0, learning_rate=1e-3),
           TokenHParams.create(lag=2.0, learning_rate=3e-3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *hps)
    _, batched = jax.jit(jax.vmap(make_train(STALE, PARAMS)))(keys, stacked)
    for i in range(2):
        _, metrics = train_stale(keys[i], hps[i])
        for name in METRICS:
            np.testing.assert_allclose(batched[name][i], metrics[name], rtol=1e-4, atol=1e-5,
                                       err_msg=name)


def test_each_sequence_records_the_log_probs_of_its_own_version():
    config = TINY.replace(lag_model="uniform", group_unit="sample", prompts=8)
    trainer = TokenTrainer(config, PARAMS)
    hp = TokenHParams.create(lag=3.0, temperature=1.2)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    for seed in range(1, 4):  # three distinct newer versions
        state = state.replace(params=TokenPolicy(config.model_spec).init(jax.random.PRNGKey(seed)))
        state = state.replace(buffer=push(state.buffer, state.params))
    batch = jax.jit(trainer.generate)(state, jax.random.PRNGKey(9), hp)
    versions = np.asarray(batch.behaviour_version)
    assert len(set(versions.tolist())) > 2
    log_probs = jax.jit(trainer.policy.response_log_probs)
    for version in set(versions.tolist()):
        rows = versions == version
        params = jax.tree.map(lambda stack: stack[version % config.buffer_capacity],
                              state.buffer.policies)
        expected, _ = log_probs(params, batch.prompt, batch.response, hp.temperature)
        np.testing.assert_allclose(batch.behaviour_log_prob[rows], expected[rows], atol=2e-5)
