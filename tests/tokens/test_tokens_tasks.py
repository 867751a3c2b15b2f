import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import tasks
from vaco_jax.tokens.tasks import BOS, EOS, EQUALS, PAD, PLUS, SORT_END, TIMES


def row(*tokens):
    return jnp.array([tokens], jnp.int32)


def test_addition_by_hand():
    task = tasks.make_task("add", 2)
    prompt, answer = tasks.sample(task, jax.random.PRNGKey(0), 64)
    p, a = np.asarray(prompt), np.asarray(answer)
    for i in range(64):
        x = p[i, 1] * 10 + p[i, 2]
        y = p[i, 4] * 10 + p[i, 5]
        s = x + y
        assert list(p[i, [0, 3, 6]]) == [BOS, PLUS, EQUALS]
        assert list(a[i]) == [s // 100, s // 10 % 10, s % 10, EOS]
    assert tasks.reward(row(1, 3, 8, EOS), row(1, 3, 8, EOS, PAD))[0] == 1.0
    assert tasks.reward(row(1, 3, 8, EOS), row(1, 3, 7, EOS, PAD))[0] == 0.0
    # An EOS one token late is wrong even when the digits match.
    assert tasks.reward(row(1, 3, 8, EOS), row(1, 3, 8, 8, EOS))[0] == 0.0


def test_sort_and_chain_by_hand():
    sort = tasks.make_task("sort", 4)
    prompt, answer = tasks.sample(sort, jax.random.PRNGKey(1), 32)
    for p, a in zip(np.asarray(prompt), np.asarray(answer)):
        assert p[0] == BOS and p[-1] == SORT_END
        assert list(a) == sorted(p[1:-1]) + [EOS]
    chain = tasks.make_task("chain", 3)
    prompt, answer = tasks.sample(chain, jax.random.PRNGKey(2), 32)
    for p, a in zip(np.asarray(prompt), np.asarray(answer)):
        x, expected = p[1], []
        for op, v in zip(p[2:-1:2], p[3:-1:2]):
            assert op in (PLUS, TIMES)
            x = (x + v if op == PLUS else x * v) % 10
            expected.append(x)
        assert p[-1] == EQUALS and list(a) == expected + [EOS]


@pytest.mark.parametrize("name,size", [("add", 3), ("sort", 5), ("chain", 4)])
def test_demonstrations_score_one_and_corruptions_zero(name, size):
    task = tasks.make_task(name, size)
    _, answer = tasks.sample(task, jax.random.PRNGKey(3), 128)
    response = jnp.concatenate([answer, jnp.full((128, 2), PAD, jnp.int32)], axis=1)
    assert jnp.all(tasks.reward(answer, response) == 1.0)
    position = jax.random.randint(jax.random.PRNGKey(4), (128,), 0, task.answer_length - 1)
    shift = jax.random.randint(jax.random.PRNGKey(5), (128,), 1, 10)
    rows = jnp.arange(128)
    corrupted = response.at[rows, position].set((response[rows, position] + shift) % 10)
    assert jnp.all(tasks.reward(answer, corrupted) == 0.0)
    partial = tasks.reward(answer, corrupted, partial_credit=True)
    np.testing.assert_allclose(partial, (task.answer_length - 1) / task.answer_length)


def test_format_penalty_only_for_malformed_responses():
    answer = row(0, 4, EOS)
    well_formed_wrong = tasks.reward(answer, row(0, 5, EOS, PAD), format_penalty=0.5)
    no_eos = tasks.reward(answer, row(0, 4, 4, PAD), format_penalty=0.5)
    symbol = tasks.reward(answer, row(PLUS, 4, EOS, PAD), format_penalty=0.5)
    right = tasks.reward(answer, row(0, 4, EOS, PAD), format_penalty=0.5)
    assert [float(well_formed_wrong[0]), float(no_eos[0]), float(symbol[0]),
            float(right[0])] == [0.0, -0.5, -0.5, 1.0]


@pytest.mark.parametrize("name", tasks.TASKS)
def test_deterministic_from_key_and_splits_disjoint(name):
    task = tasks.make_task(name, 3)
    key = jax.random.PRNGKey(7)
    first, second = tasks.sample(task, key, 256), tasks.sample(task, key, 256)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    other = tasks.sample(task, jax.random.PRNGKey(8), 256)
    assert not np.array_equal(first[0], other[0])
    assert not jnp.any(tasks.is_held_out(task, first[0]))
    held_out = tasks.sample(task, key, 256, held_out=True)[0]
    assert jnp.all(tasks.is_held_out(task, held_out))


def test_padding_and_mask_after_eos():
    response = row(3, EOS, 5, EOS, 7)
    np.testing.assert_array_equal(tasks.pad_after_eos(response), row(3, EOS, PAD, PAD, PAD))
    np.testing.assert_array_equal(tasks.response_mask(response), [[1, 1, 0, 0, 0]])


def test_unknown_task_is_rejected():
    with pytest.raises(ValueError, match="task='mul'.*'add', 'sort', 'chain'"):
        tasks.make_task("mul", 2)
