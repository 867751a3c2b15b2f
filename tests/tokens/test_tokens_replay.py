"""TBA's replay buffer in the token trainer: distinct responses, the ring of prompt groups, the
batch drawn from the update's own groups or the stored ones, and a run that reuses what it
stored."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import replay
from vaco_jax.tokens.config import TokenConfig, TokenHParams, knobs, validate
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer

PAD = 0


def test_a_response_repeating_an_earlier_one_of_its_group_is_not_distinct():
    response = jnp.array([[3, 4, 1, PAD], [3, 5, 1, PAD], [3, 4, 1, PAD], [3, 4, 1, PAD],
                          [3, 4, 2, 1]])
    for distinct in (replay.distinct_responses, jax.jit(replay.distinct_responses)):
        np.testing.assert_array_equal(distinct(response), [True, True, False, False, True])


def _generated(groups, group_size=4, length=3, first_token=0, version=0):
    """`groups` prompt groups whose responses are all distinct, the group's index in their
    first token (offset by `first_token`) and the member's in their second."""
    group = first_token + jnp.arange(groups)[:, None, None]
    member = jnp.arange(group_size)[None, :, None]
    response = jnp.concatenate([jnp.broadcast_to(group, (groups, group_size, 1)),
                                jnp.broadcast_to(member, (groups, group_size, 1)),
                                jnp.ones((groups, group_size, length - 2), jnp.int32)], axis=-1)
    tokens = (groups, group_size, length)
    return replay.Generated(prompt=group[:, :, 0].repeat(2, axis=1).astype(jnp.int32),
                            response=response.astype(jnp.int32), mask=jnp.ones(tokens),
                            log_prob=jnp.full(tokens, -0.5), entropy=jnp.full(tokens, 0.1),
                            version=jnp.full(tokens, version, jnp.int32),
                            reward=(member[..., 0] % 2).astype(jnp.float32)
                            * jnp.ones((groups, 1)))


def test_the_store_is_a_ring_of_prompt_groups_written_over_its_oldest():
    store = replay.empty_store(capacity=5, prompt_length=2, group_size=4, response_length=3)
    store, slots = replay.written_into(store, _generated(3, first_token=10))
    np.testing.assert_array_equal(slots, [0, 1, 2])
    store, slots = replay.written_into(store, _generated(3, first_token=20, version=1))
    np.testing.assert_array_equal(slots, [3, 4, 0])  # the oldest group, 10's, overwritten
    assert int(store.written) == 6
    np.testing.assert_array_equal(store.response[:, 0, 0], [22, 11, 12, 20, 21])
    np.testing.assert_array_equal(store.version[:, 0, 0], [1, 0, 0, 1, 1])
    assert bool(store.distinct.all())


def test_the_update_s_own_groups_are_drawn_with_probability_online_prob():
    store = replay.empty_store(capacity=16, prompt_length=2, group_size=4, response_length=3)
    store, _ = replay.written_into(store, _generated(8, first_token=0))
    store, own = replay.written_into(store, _generated(8, first_token=8, version=1))
    draw = jax.jit(replay.replayed_groups)
    slots, members, online = draw(store, own, jax.random.PRNGKey(0), 1.0)
    np.testing.assert_array_equal(slots, own)
    assert bool(online.all())
    # Every response distinct: each group's members are a permutation of its own.
    np.testing.assert_array_equal(np.sort(np.asarray(members), axis=1), np.tile(np.arange(4),
                                                                                (8, 1)))
    shares = []
    for seed in range(200):
        slots, _, online = draw(store, own, jax.random.PRNGKey(seed), 0.75)
        np.testing.assert_array_equal(np.asarray(slots)[np.asarray(online)],
                                      np.asarray(own)[np.asarray(online)])
        shares.append(float(online.mean()))
    assert np.mean(shares) == pytest.approx(0.75, abs=0.02)
    stored = np.concatenate([np.asarray(draw(store, own, jax.random.PRNGKey(s), 0.0)[0])
                             for s in range(50)])
    assert set(stored) == set(range(16))  # the stored groups, uniformly: every one appears
    assert np.bincount(stored, minlength=16).min() > 10


def test_a_group_with_repeated_responses_draws_its_distinct_ones_with_replacement():
    distinct = jnp.array([True, False, True, False])
    drawn = np.stack([np.asarray(replay.draw_members(jax.random.PRNGKey(s), distinct))
                      for s in range(100)])
    assert set(drawn.ravel()) == {0, 2}
    assert abs((drawn == 0).mean() - 0.5) < 0.05
    every = np.asarray(replay.draw_members(jax.random.PRNGKey(0), jnp.ones(4, bool)))
    np.testing.assert_array_equal(np.sort(every), np.arange(4))


def test_gathering_takes_each_group_s_prompt_and_drawn_members():
    store = replay.empty_store(capacity=4, prompt_length=2, group_size=4, response_length=3)
    store, _ = replay.written_into(store, _generated(4, first_token=30))
    drawn = replay.gathered(store, jnp.array([2, 0]), jnp.array([[3, 3, 1, 0], [0, 1, 2, 3]]))
    np.testing.assert_array_equal(drawn.prompt, [[32, 32], [30, 30]])
    np.testing.assert_array_equal(drawn.response[..., :2],
                                  [[[32, 3], [32, 3], [32, 1], [32, 0]],
                                   [[30, 0], [30, 1], [30, 2], [30, 3]]])
    np.testing.assert_array_equal(drawn.reward, [[1, 1, 1, 0], [0, 1, 0, 1]])


REPLAYED = TokenConfig(task="add", task_size=1, layers=1, width=32, heads=2, context=10,
                       prompts=4, group_size=4, num_updates=6, eval_every=3, eval_prompts=16,
                       buffer_capacity=4, algo="tba", replay=True)
PARAMS = TokenPolicy(REPLAYED.model_spec).init(jax.random.PRNGKey(0))


def _trained(config, online_prob):
    hp = TokenHParams.create(knobs(config), learning_rate=3e-3, replay_online_prob=online_prob)
    trainer = TokenTrainer(config, PARAMS)
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(1), hp)
    return state, jax.tree.map(np.asarray, metrics)


def test_a_replaying_run_stores_every_group_and_trains_again_on_stored_ones():
    state, metrics = _trained(REPLAYED, 0.0)
    assert int(state.replay.written) == 6 * 4  # every update's groups, the run's whole
    assert state.replay.reward.shape == (24, 4)
    # At lag 0 only replay makes data old: drawn from the stored groups, the batch reaches
    # back to earlier versions, which fresh generation at lag 0 never does.
    assert metrics["version_gap_max"].max() > 0
    _, on_policy = _trained(REPLAYED, 1.0)
    assert on_policy["version_gap_max"].max() == 0  # the update's own groups only
    assert np.isfinite(metrics["policy_loss"]).all()


def test_replay_is_refused_unless_its_store_holds_an_update_s_groups():
    with pytest.raises(ValueError, match=r"replay_capacity=3 must hold one update's prompt "
                                         r"groups, prompts=4"):
        validate(REPLAYED.replace(replay_capacity=3))
    with pytest.raises(ValueError, match=r"replay_capacity must be a positive integer"):
        validate(REPLAYED.replace(replay_capacity=0))
    with pytest.raises(ValueError, match=r"replay_capacity=8 is read only with replay=true"):
        validate(REPLAYED.replace(replay=False, replay_capacity=8))
    with pytest.raises(ValueError, match=r"replay=true is refused for algo='freshness', which "
                                         r"refuses stale generations"):
        validate(REPLAYED.replace(algo="freshness"))
    assert "replay_online_prob" in knobs(REPLAYED)
    assert "replay_online_prob" not in knobs(REPLAYED.replace(replay=False))
