"""The token training program: validation, lag 0, recorded staleness, vmap over seeds,
in-flight weight updates and divergence."""

from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint
import pytest

from vaco_jax.core.lag_models import Bounded, Empirical, Geometric, InFlight, Uniform, named
from vaco_jax.core.policy_buffer import push
from vaco_jax.tokens import tasks, warm_start
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
    ({"lag_model": "poisson"}, None, "lag_model='poisson' .* bounded, in_flight, empirical"),
    ({"in_flight_cache": "engine"}, None,
     "in_flight_cache='engine' .* allowed values: shared, per_snapshot"),
    ({"reward_on": "steps"}, None,
     "^reward_on='steps' is not supported; allowed values: solution, result$"),
    ({}, TokenHParams.create(lag=4.0), r"lag for lag_model='fixed' must be an integer in \[0, 3\]"),
    ({"lag_model": "uniform"}, None,
     r"lag_model='uniform' must be a lag model object: .*lag_models.named\('uniform'\)"),
    ({"lag_model": Bounded()}, TokenHParams.create(lag=4.0),
     r"lag for lag_model='bounded' must be an integer in \[0, 3\]"),
    ({"lag_model": Empirical((0.5, 0.6))}, None, "lag_probabilities must sum to 1"),
    ({"lag_model": Empirical((0.2,) * 5)}, None,
     "lag_probabilities has 5 entries; at most buffer_capacity"),
    ({}, TokenHParams.create(learning_rate=jnp.inf), r"learning_rate must be finite, got inf"),
    ({}, TokenHParams.create(temperature=jnp.nan), r"temperature must be finite, got nan"),
    ({}, TokenHParams.create(clip_eps=-jnp.inf), r"clip_eps must be finite, got -inf"),
    ({"lag_model": Geometric()}, TokenHParams.create(lag=jnp.nan),
     r"hyper-parameter lag must be finite, got nan"),
    ({}, TokenHParams.create(max_grad_norm=jnp.array([1.0, jnp.inf])),
     r"max_grad_norm must be finite, got \[1.0, inf\]"),
])
def test_bad_settings_fail_before_compilation(changes, hparams, message):
    with pytest.raises(ValueError, match=message):
        validate(TINY.replace(**changes), hparams)


def test_init_touches_no_disk(tmp_path, monkeypatch):
    """Given its parameters, a token trainer's `init`, traced or not, neither trains a warm start
    nor reads or writes its cache; built without them, it refuses in one line."""
    cache = tmp_path / "cache"

    def no_warm_start(*args, **kwargs):
        raise AssertionError("init trained, read or wrote a warm start")

    def outside_the_cache(method):
        def checked(path, *args, **kwargs):
            if path == cache or cache in path.parents:
                no_warm_start()
            return method(path, *args, **kwargs)
        return checked
    monkeypatch.setattr(warm_start, "supervised_train", no_warm_start)
    monkeypatch.setattr(orbax.checkpoint, "StandardCheckpointer", no_warm_start)
    for name in ("exists", "mkdir", "is_dir", "iterdir"):
        monkeypatch.setattr(Path, name, outside_the_cache(getattr(Path, name)))
    config = TINY.replace(warm_start_dir=str(cache))
    key = jax.random.PRNGKey(0)
    for init in (TokenTrainer(config, PARAMS).init, jax.jit(TokenTrainer(config, PARAMS).init)):
        jax.tree.map(np.testing.assert_array_equal, init(key, HP).params, PARAMS)
    for init in (TokenTrainer(config).init, jax.jit(TokenTrainer(config).init)):
        with pytest.raises(ValueError, match="a token run starts from its warm start's"):
            init(key, HP)
    assert jax.tree.leaves(TokenTrainer(config).state_shapes(key, HP))


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
    assert np.all(np.asarray(metrics["diverged"]) == 0)
    np.testing.assert_allclose(metrics["tv_backward"], 0, atol=1e-5)
    for quantile in ("sequence_log_ratio_median", "sequence_log_ratio_p99"):
        np.testing.assert_allclose(metrics[quantile], 0, atol=1e-5)
    evals = np.asarray(metrics["eval_accuracy"])
    assert np.isnan(evals[::2]).all() and np.isfinite(evals[1::2]).all()


@pytest.mark.parametrize("changes", [dict(lag_model=Bounded()),
                                     dict(lag_model=InFlight(), in_flight_cache="shared"),
                                     dict(lag_model=InFlight(), in_flight_cache="per_snapshot"),
                                     dict(lag_model=Empirical((1.0,)))])
def test_lag_zero_of_every_other_model_is_fixed_zero_bit_for_bit(train_stale, changes):
    key = jax.random.PRNGKey(0)
    fixed_state, fixed = train_stale(key, lagged(0.0))
    state, metrics = jax.jit(make_train(STALE.replace(**changes), PARAMS))(key, lagged(0.0))
    for name in METRICS:
        np.testing.assert_array_equal(metrics[name], fixed[name], err_msg=name)
    jax.tree.map(np.testing.assert_array_equal, state.params, fixed_state.params)


def test_fixed_lag_reaches_its_value_once_pushed(train_stale):
    _, metrics = train_stale(jax.random.PRNGKey(0), lagged(2.0))
    np.testing.assert_array_equal(metrics["version_gap_mean"], [0, 1, 2, 2])
    assert float(metrics["tv_backward"][-1]) > 1e-4
    # Quantiles of the batch's sequence log-ratios: 0 while the batch is on-policy, spread
    # once the versions differ, the 99th percentile above the median.
    median, p99 = (np.asarray(metrics[f"sequence_log_ratio_{q}"]) for q in ("median", "p99"))
    np.testing.assert_allclose([median[0], p99[0]], 0, atol=1e-5)
    assert p99[-1] > median[-1] + 0.1


@pytest.fixture(scope="module")
def train_vmapped():
    """Two runs in one program, shared by the tests of vmapped runs."""
    return jax.jit(jax.vmap(make_train(STALE, PARAMS)))


def _stack(*hparams):
    return jax.tree.map(lambda *x: jnp.stack(x), *hparams)


def _assert_metrics_close(a, b):
    for name in METRICS:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_vmap_over_seeds_and_hparams_equals_single_runs(train_stale, train_vmapped):
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    hps = [TokenHParams.create(lag=1.0, learning_rate=1e-3),
           TokenHParams.create(lag=2.0, learning_rate=3e-3)]
    _, batched = train_vmapped(keys, _stack(*hps))
    for i in range(2):
        _, alone = train_stale(keys[i], hps[i])
        _assert_metrics_close(jax.tree.map(lambda m: m[i], batched), alone)


def test_a_non_finite_update_freezes_its_run_alone(train_stale, train_vmapped):
    keys = jnp.stack([jax.random.PRNGKey(0)] * 2)
    hps = [lagged(1.0), TokenHParams.create(lag=1.0, learning_rate=jnp.inf)]
    state, metrics = train_vmapped(keys, _stack(*hps))
    # An infinite step makes the parameters non-finite at the first update.
    np.testing.assert_array_equal(metrics["diverged"], [[0] * 4, [1] * 4])
    assert state.diverged.tolist() == [False, True] and state.diverged_at.tolist() == [-1, 1]
    assert all(np.isnan(metrics[name][1]).all() for name in METRICS if name != "diverged")
    # The frozen run keeps its last finite state: the initial one.
    assert int(state.update[1]) == 0 and int(state.buffer.latest_version[1]) == 0
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[1], b), state.params, PARAMS)
    _, alone = train_stale(keys[0], hps[0])
    _assert_metrics_close(jax.tree.map(lambda m: m[0], metrics), alone)


def _stale_buffer_state(trainer, hp):
    """A state whose buffer holds four distinct versions, the newest being version 3."""
    state = trainer.init(jax.random.PRNGKey(0), hp)
    for seed in range(1, 4):
        state = state.replace(params=TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(seed)))
        state = state.replace(buffer=push(state.buffer, state.params))
    return state


@pytest.mark.parametrize("lag_model", ["uniform", "in_flight"])
def test_each_token_records_the_log_prob_of_its_own_version(lag_model):
    """Each token's behaviour log-prob is its version's teacher-forced one (in flight: with
    every snapshot's own cache; a shared cache records the engine's, tested beside it)."""
    config = TINY.replace(lag_model=named(lag_model), in_flight_cache="per_snapshot",
                          group_unit="sample", prompts=8)
    trainer = TokenTrainer(config, PARAMS)
    hp = TokenHParams.create(lag=3.0, temperature=1.2)
    state = _stale_buffer_state(trainer, hp)
    _, batch = jax.jit(trainer.collect)(state, jax.random.PRNGKey(9), hp)
    versions = np.asarray(batch.behaviour_version)
    assert versions.shape == batch.response.shape and len(np.unique(versions)) > 2
    # Versions never fall behind along a sequence (lags never grow); in flight they change.
    assert np.all(np.diff(versions, axis=1) >= 0)
    changing = np.any(versions != versions[:, :1], axis=1)
    assert changing.any() if lag_model == "in_flight" else not changing.any()
    log_probs = jax.jit(trainer.policy.response_log_probs)
    for version in np.unique(versions):
        tokens = versions == version
        params = jax.tree.map(lambda stack: stack[version % config.buffer_capacity],
                              state.buffer.policies)
        expected, _ = log_probs(params, batch.prompt, batch.response, hp.temperature)
        np.testing.assert_allclose(batch.behaviour_log_prob[tokens], expected[tokens], atol=2e-5)


def test_a_shared_cache_draws_each_response_from_its_generator_s_versions():
    """Wiring of `in_flight_cache="shared"`: every row decodes with its own generator's
    versions (a response's first token is its first version's, teacher-forced), and the
    responses are those of `sample_shared_cache` called on each generator alone."""
    config = TINY.replace(lag_model=InFlight(), in_flight_cache="shared", group_unit="prompt",
                          prompts=8)
    trainer = TokenTrainer(config, PARAMS)
    hp = TokenHParams.create(lag=3.0, temperature=1.2)
    state = _stale_buffer_state(trainer, hp)
    _, batch = jax.jit(trainer.collect)(state, jax.random.PRNGKey(9), hp)
    versions = np.asarray(batch.behaviour_version)
    assert np.any(versions != versions[:, :1])
    log_probs = jax.jit(trainer.policy.response_log_probs)
    for version in np.unique(versions[:, 0]):
        rows = versions[:, 0] == version
        params = jax.tree.map(lambda stack: stack[version % config.buffer_capacity],
                              state.buffer.policies)
        expected, _ = log_probs(params, batch.prompt, batch.response, hp.temperature)
        np.testing.assert_allclose(batch.behaviour_log_prob[rows, 0], expected[rows, 0],
                                   atol=2e-5)
    g = 5  # one generator by hand: its slots, prompt rows and key
    generator_versions = versions[g * config.group_size]
    keys = jax.random.split(jax.random.split(jax.random.PRNGKey(9), 3)[2], config.generators)
    rows = slice(g * config.group_size, (g + 1) * config.group_size)
    alone = trainer.policy.sample_shared_cache(
        state.buffer.policies, jnp.asarray(generator_versions % config.buffer_capacity),
        batch.prompt[rows], keys[g], config.response_length, hp.temperature)
    np.testing.assert_array_equal(alone.response, batch.response[rows])


@pytest.mark.parametrize("in_flight_cache", ["shared", "per_snapshot"])
def test_in_flight_collection_of_a_run_does_not_depend_on_its_neighbours(in_flight_cache):
    """Vmapped beside another run in flight, a run decodes in flight alone; beside a run at lag
    0 (whose versions never change) both decodings run and each run keeps its own. Its batch is
    the same bit for bit either way, and the one it collects alone, compiled or not, up to the
    rounding of a program batched differently."""
    config = TINY.replace(lag_model=InFlight(), in_flight_cache=in_flight_cache, prompts=8)
    trainer = TokenTrainer(config, PARAMS)
    state = _stale_buffer_state(trainer, lagged(3.0))

    def collect(key, hp):
        return trainer.collect(state, key, hp)[1]

    keys = jnp.stack([jax.random.PRNGKey(9), jax.random.PRNGKey(10)])
    together = jax.jit(jax.vmap(collect))
    beside_in_flight = together(keys, _stack(lagged(3.0), lagged(2.0)))
    beside_lag_zero = together(keys, _stack(lagged(3.0), lagged(0.0)))
    first = lambda batch: jax.tree.map(lambda x: x[0], batch)
    versions = np.asarray(first(beside_in_flight).behaviour_version)
    assert np.any(versions != versions[:, :1])  # it does change versions mid-decoding
    jax.tree.map(np.testing.assert_array_equal, first(beside_in_flight),
                 first(beside_lag_zero))
    for alone in (jax.jit(collect)(keys[0], lagged(3.0)), collect(keys[0], lagged(3.0))):
        _assert_same_draws(alone, first(beside_in_flight))


def _assert_same_draws(batch, expected):
    """The same responses and versions, and the same log-probs up to float rounding."""
    for name in ("response", "mask", "behaviour_version"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(expected, name), name)
    for name in ("behaviour_log_prob", "phase_log_prob"):
        np.testing.assert_allclose(getattr(batch, name), getattr(expected, name), atol=2e-5,
                                   err_msg=name)


@pytest.mark.parametrize("lag_model,lag,probabilities,allowed", [
    ("bounded", 2.0, (), {0, 1, 2}), ("empirical", 0.0, (0.5, 0.0, 0.5), {0, 2}),
    ("in_flight", 2.0, (), {0, 1, 2})])
def test_drawn_lags_come_from_the_shared_sampler(lag_model, lag, probabilities, allowed):
    """The engine's tests check the distributions; this checks the token side's wiring."""
    config = TINY.replace(lag_model=named(lag_model, probabilities), prompts=64)
    trainer = TokenTrainer(config, PARAMS)
    hp = TokenHParams.create(lag=lag)
    state = _stale_buffer_state(trainer, hp)
    versions, _ = jax.jit(trainer.behaviour_versions)(state, jax.random.PRNGKey(1), hp)
    versions = np.asarray(versions)
    assert versions.shape == (config.generators, config.response_length)
    first_lags = 3 - versions[:, 0]
    assert set(first_lags.tolist()) == allowed  # every allowed lag drawn, none beyond
    if lag_model == "in_flight":  # every generator catches up by its last token
        assert np.all(versions[:, -1] == 3)


@pytest.mark.parametrize("lag_warmup,share_at_oldest", [("clip", 0.75), ("redraw", 0.5)])
def test_lags_beyond_the_pushed_versions_follow_lag_warmup(lag_warmup, share_at_oldest):
    """Two versions exist (0 and 1) and `uniform:3` draws lags 0..3: `clip` acts with the oldest
    version for lags 1, 2 and 3 (3/4 of the generators), `redraw` draws them again from lags 0
    and 1 (1/2 of them); the lag-0 draws are the same under both."""
    config = TINY.replace(lag_model=Uniform(), lag_warmup=lag_warmup, group_unit="sample",
                          prompts=64, group_size=8)
    trainer = TokenTrainer(config, PARAMS)
    hp = TokenHParams.create(lag=3.0)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    state = state.replace(buffer=push(state.buffer, state.params))
    versions, _ = jax.jit(trainer.behaviour_versions)(state, jax.random.PRNGKey(2), hp)
    versions = np.asarray(versions)
    assert set(versions[:, 0].tolist()) == {0, 1}
    assert abs(np.mean(versions[:, 0] == 0) - share_at_oldest) < 0.06  # 512 generators


@pytest.mark.parametrize("task,size", [("chain", 15), ("sort", 15), ("add_steps", 5)])
def test_answers_of_sixteen_tokens_and_more_train_end_to_end(task, size):
    config = TINY.replace(task=task, task_size=size, width=16, context=50, minibatches=1,
                          num_updates=2, eval_every=2, reward_on="result", partial_credit=True)
    assert config.task_spec.answer_length >= 16
    params = TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0))
    state, metrics = jax.jit(make_train(config, params))(jax.random.PRNGKey(0), lagged(1.0))
    assert int(state.update) == 2 and not bool(state.diverged)
    for name in ("reward_mean", "response_length", "entropy", "tv_backward", "ess_ratio",
                 "grad_norm"):
        assert np.isfinite(metrics[name]).all(), name
    assert np.all(np.asarray(metrics["response_length"]) <= config.response_length)
    assert 0.0 <= float(metrics["eval_accuracy"][-1]) <= 1.0


class _Answering:
    """A policy whose greedy responses are given (for the evaluation's verifier)."""

    def __init__(self, responses):
        self.responses = responses

    def sample(self, *args, **kwargs):
        return SimpleNamespace(response=self.responses)


def test_reward_on_sets_the_training_reward_and_the_evaluation():
    """Worked solutions with wrong steps and the right sum earn 1 under `reward_on="result"`
    and 0 under `"solution"`, in the training batch and in the held-out evaluation alike."""
    base = TINY.replace(task="add_steps", task_size=2, context=16)
    hp = TokenHParams.create()
    params = TokenPolicy(base.model_spec).init(jax.random.PRNGKey(0))
    for reward_on, expected in (("solution", 0.0), ("result", 1.0)):
        trainer = TokenTrainer(base.replace(reward_on=reward_on), params)
        state = trainer.init(jax.random.PRNGKey(0), hp)
        _, answer = tasks.sample(trainer.task, jax.random.PRNGKey(1), base.batch_size)
        # Every step's digits replaced by 9s: no column carries 9.
        response = jnp.concatenate([answer.at[:, :4].set(9),
                                    jnp.full((base.batch_size, 1), tasks.PAD, jnp.int32)], axis=1)
        np.testing.assert_array_equal(trainer.reward(answer, response), expected)
        held_out = trainer.eval_answers
        trainer.policy = _Answering(jnp.concatenate(
            [held_out.at[:, :4].set(9), jnp.full((len(held_out), 1), tasks.PAD, jnp.int32)],
            axis=1))
        assert float(trainer.evaluate(state.params, jax.random.PRNGKey(0))) == expected
