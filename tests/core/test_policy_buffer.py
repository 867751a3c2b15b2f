"""Policy buffer, lag models and acting with per-environment behaviour policies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.envs import make_env
from vaco_jax.control.envs.episodes import reset_episodes
from vaco_jax.control.networks import ActorCritic, Policy, init_stats
from vaco_jax.core.lag_models import Fixed, Geometric, PerActor, Uniform, in_flight_lags
from vaco_jax.core.policy_buffer import (cond_in_every_run, effective_lags, init_buffer,
                                         make_behaviour, newest, push)
from vaco_jax.control.rollout import rollout

NUM_ENVS = 8
CAPACITY = 4


def _policy(model, seed):
    actor, _ = model.init(jax.random.PRNGKey(seed))
    stats = init_stats(model.observation_size)
    # Distinct normaliser statistics per snapshot: they must travel with the parameters.
    stats = stats.replace(mean=stats.mean + 0.1 * seed, var=stats.var * (1.0 + seed))
    return Policy(actor, stats)


@pytest.fixture(scope="module", params=["toy_reach", "toy_reach_discrete"])
def setup(request):
    env = make_env(request.param)
    model = ActorCritic(env.observation_size, env.action_size, (8,), (8,),
                        discrete=env.discrete)
    buffer = init_buffer(_policy(model, 0), CAPACITY)
    for seed in range(1, 6):  # versions 1..5; slots now hold versions 2..5
        buffer = push(buffer, _policy(model, seed))
    return env, model, buffer


def test_push_keeps_the_newest_capacity_versions(setup):
    _, model, buffer = setup
    assert int(buffer.latest_version) == 5
    for lag in range(CAPACITY):
        slot = (5 - lag) % CAPACITY
        stored = jax.tree.map(lambda x: x[slot], buffer.policies)
        expected = _policy(model, 5 - lag)
        jax.tree.map(np.testing.assert_array_equal, stored, expected)
    jax.tree.map(np.testing.assert_array_equal, newest(buffer), _policy(model, 5))


def test_lags_are_capped_by_versions_pushed_so_far(setup):
    _, model, _ = setup
    young = push(init_buffer(_policy(model, 0), CAPACITY), _policy(model, 1))  # versions 0, 1
    np.testing.assert_array_equal(effective_lags(young, jnp.array([0, 1, 2, 3])), [0, 1, 1, 1])


def test_lag_models():
    key = jax.random.PRNGKey(3)
    per_actor = jnp.arange(NUM_ENVS) % 3
    fixed = Fixed().sample(key, jnp.float32(2), NUM_ENVS, CAPACITY, per_actor)
    np.testing.assert_array_equal(fixed, np.full(NUM_ENVS, 2))
    uniform = Uniform().sample(key, jnp.float32(2), 4096, CAPACITY, per_actor)
    assert set(np.unique(uniform)) == {0, 1, 2}
    np.testing.assert_allclose(np.bincount(uniform) / 4096, [1 / 3] * 3, atol=0.03)
    sync = Geometric().sample(key, jnp.float32(1.0), NUM_ENVS, CAPACITY, per_actor)
    np.testing.assert_array_equal(sync, np.zeros(NUM_ENVS))
    p = 0.5
    geometric = Geometric().sample(key, jnp.float32(p), 8192, CAPACITY, per_actor)
    weights = p * (1 - p) ** np.arange(CAPACITY)
    np.testing.assert_allclose(np.bincount(geometric, minlength=CAPACITY) / 8192,
                               weights / weights.sum(), atol=0.02)
    np.testing.assert_array_equal(
        PerActor().sample(key, jnp.float32(2), NUM_ENVS, CAPACITY, per_actor), per_actor)


@pytest.mark.parametrize("acting", ["gather", "select"])
def test_rollout_records_each_environments_own_behaviour_policy(setup, acting):
    env, model, buffer = setup
    lags = jnp.arange(NUM_ENVS) % CAPACITY
    behaviour = make_behaviour(buffer, lags, acting)
    episodes = reset_episodes(env, jax.random.split(jax.random.PRNGKey(1), NUM_ENVS))
    _, data = jax.jit(lambda b, e, k: rollout(env, model, b, e, k, length=6, episode_length=40,
                                              acting=acting))(behaviour, episodes,
                                                              jax.random.PRNGKey(2))
    versions = np.asarray(data.behaviour_version)
    np.testing.assert_array_equal(versions, np.broadcast_to(5 - np.asarray(lags), versions.shape))
    assert len(np.unique(versions[0])) == CAPACITY
    for e in range(NUM_ENVS):
        policy = _policy(model, int(versions[0, e]))
        recomputed = model.log_prob(policy, data.obs[:, e], data.action[:, e])
        np.testing.assert_allclose(data.behaviour_log_prob[:, e], recomputed, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("acting", ["gather", "select"])
def test_in_flight_rollout_acts_with_each_steps_own_behaviour_policy(setup, acting):
    env, model, buffer = setup
    length = 6
    lags = in_flight_lags(jnp.arange(NUM_ENVS) % CAPACITY, length)
    episodes = reset_episodes(env, jax.random.split(jax.random.PRNGKey(1), NUM_ENVS))
    _, data = jax.jit(lambda b, e, k: rollout(env, model, b, e, k, length=length,
                                              episode_length=40, acting=acting))(
        make_behaviour(buffer, lags, acting), episodes, jax.random.PRNGKey(2))
    versions = np.asarray(data.behaviour_version)
    np.testing.assert_array_equal(versions, 5 - np.asarray(lags))
    assert len(np.unique(versions[:, 3])) > 1  # the policy changed within one rollout
    for t in range(length):
        for e in range(NUM_ENVS):
            # The snapshot that version occupies in the buffer, recomputed independently.
            policy = jax.tree.map(lambda x: x[versions[t, e] % CAPACITY], buffer.policies)
            recomputed = model.log_prob(policy, data.obs[t, e], data.action[t, e])
            np.testing.assert_allclose(data.behaviour_log_prob[t, e], recomputed, rtol=1e-5,
                                       atol=1e-5)


def test_gather_and_select_strategies_agree(setup):
    env, model, buffer = setup
    lags = jnp.array([3, 0, 1, 2, 2, 1, 0, 3])
    episodes = reset_episodes(env, jax.random.split(jax.random.PRNGKey(1), NUM_ENVS))
    outputs = [rollout(env, model, make_behaviour(buffer, lags, acting), episodes,
                       jax.random.PRNGKey(2), length=5, episode_length=40, acting=acting)[1]
               for acting in ("gather", "select")]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), *outputs)


@pytest.mark.parametrize("flags,ran", [((False, False), {"if_false"}), ((True, True), {"if_true"}),
                                       ((True, False), {"if_true", "if_false"})])
def test_cond_in_every_run_runs_a_branch_only_where_some_run_takes_it(flags, ran):
    """Both branches run only when the vmapped runs disagree; each run keeps its own either
    way. (Stale token runs paid for a synchronous decoding they threw away before this.)"""
    calls = set()

    def branch(name, shift):
        def run(x):
            jax.debug.callback(lambda: calls.add(name))
            return x + shift
        return run

    choose = jax.jit(jax.vmap(lambda flag, x: cond_in_every_run(
        flag, branch("if_true", 1.0), branch("if_false", 2.0), x)))
    out = choose(jnp.array(flags), jnp.zeros(len(flags)))
    jax.effects_barrier()
    np.testing.assert_array_equal(out, [1.0 if f else 2.0 for f in flags])
    assert calls == ran
