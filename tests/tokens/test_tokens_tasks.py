import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import evaluation, tasks
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


@pytest.mark.parametrize("name,size", [("add", 3), ("sort", 5), ("chain", 4), ("add_steps", 5),
                                       ("sort", 15), ("chain", 15)])
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
    with pytest.raises(ValueError, match="task='mul'.*'add', 'sort', 'chain', 'add_steps'"):
        tasks.make_task("mul", 2)
    with pytest.raises(ValueError, match="task_size=0 must be at least 1"):
        tasks.make_task("add_steps", 0)


def _digest(*arrays) -> str:
    digest = hashlib.sha256()
    for array in map(np.asarray, arrays):
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


# Recorded with the tasks as they were before each task became a class of its own (commit
# 3325163): prompts and answers of 64 instances from `PRNGKey(11)`, training and held-out
# splits; the four rewards (partial credit off and on, format penalty 0 and 0.5) of responses
# with random tokens in 15% of positions; the 128 prompts and answers of `held_out_set`. `add`
# with 15 digits is left out: its sums overflowed 32-bit integers then.
BEFORE_TASK_CLASSES = {
    ("add", 1): ("26840c8a68bcdb1d", "545c6ee46a98a160", "c21a215689e08951"),
    ("add", 2): ("3e8ed5f36571ee7f", "bcd06a0f16b732b7", "b29d0ec3416d989c"),
    ("add", 3): ("ec57481a347f1466", "e66900da598ad9ec", "822c401c6d8cab6c"),
    ("sort", 1): ("2c43a8babc86921a", "16b47728e1717180", "ca6c0e905bb278dc"),
    ("sort", 2): ("0b515faa90f103ac", "61d7e92610cee117", "c21a215689e08951"),
    ("sort", 3): ("6e48aee9ea361cc2", "05dd9df7b527bce5", "f4a99990ae31e3f6"),
    ("sort", 15): ("5d322a45b831c253", "353a9b3ef7b735ff", "f6e78da0907f730a"),
    ("chain", 1): ("f7f3b9b153b58f89", "47f1ee7e641c1f2a", "ca6c0e905bb278dc"),
    ("chain", 2): ("587a48e08161197c", "7aeb59e55518ac1a", "aa1c330b72c725a4"),
    ("chain", 3): ("d02f7a89b7255ba1", "6d7d50d3afbf49e6", "b29d0ec3416d989c"),
    ("chain", 15): ("071ed63277a96f83", "e912b1cbb2c2f864", "58faa8838027e087"),
}
HELD_OUT_SETS_BEFORE = {"add": "001e2f7449486e8d", "sort": "2972d420056d4af8",
                        "chain": "6fe9934ed514e28b"}


@pytest.mark.parametrize("name,size", sorted(BEFORE_TASK_CLASSES))
def test_existing_tasks_draw_and_reward_as_before_the_task_classes(name, size):
    task = tasks.make_task(name, size)
    key = jax.random.PRNGKey(11)
    prompt, answer = tasks.sample(task, key, 64)
    response = jnp.concatenate([answer, jnp.full((64, 1), PAD, jnp.int32)], axis=1)
    noise = jax.random.randint(jax.random.PRNGKey(12), response.shape, 0, tasks.VOCAB_SIZE)
    flip = jax.random.uniform(jax.random.PRNGKey(13), response.shape) < 0.15
    response = tasks.pad_after_eos(jnp.where(flip, noise, response))
    rewards = [tasks.reward(answer, response, partial_credit=partial, format_penalty=penalty)
               for partial in (False, True) for penalty in (0.0, 0.5)]
    assert (_digest(prompt, answer), _digest(*tasks.sample(task, key, 64, held_out=True)),
            _digest(*rewards)) == BEFORE_TASK_CLASSES[name, size]
    # The whole answer is these tasks' result under `reward_on="result"`, but for `chain`'s.
    if name != "chain":
        assert task.unchecked_steps("result") == 0


@pytest.mark.parametrize("name", sorted(HELD_OUT_SETS_BEFORE))
def test_held_out_sets_are_those_before_the_task_classes(name):
    held_out = evaluation.held_out_set(tasks.make_task(name, 2), 128)
    assert _digest(*held_out) == HELD_OUT_SETS_BEFORE[name]


def test_sums_of_many_digits_do_not_overflow():
    task = tasks.make_task("add", 15)
    prompt, answer = tasks.sample(task, jax.random.PRNGKey(6), 16)
    for p, a in zip(np.asarray(prompt), np.asarray(answer)):
        total = int("".join(map(str, p[1:16]))) + int("".join(map(str, p[17:32])))
        assert list(a) == [int(c) for c in f"{total:016d}"] + [EOS]


def test_add_steps_by_hand():
    """47 + 85: the units column 7 + 5 = 12 (carry 1, digit 2), the tens 4 + 8 + 1 = 13, so the
    sum 132; 90 + 04 has no carry: 0 + 4 = 04, 9 + 0 = 09, sum 094."""
    task = tasks.make_task("add_steps", 2)
    assert (task.prompt_length, task.answer_length, task.result_length) == (7, 8, 3)
    worked = task.solve(jnp.array([[4, 7], [9, 0]]), jnp.array([[8, 5], [0, 4]]))
    np.testing.assert_array_equal(worked, [[1, 2, 1, 3, 1, 3, 2], [0, 4, 0, 9, 0, 9, 4]])
    # The warm start's wrong solution slips in the units column and carries the slip to the sum.
    wrong = task.wrong_answer(jnp.array([[1, 2, 1, 3, 1, 3, 2, EOS], [0, 9, 1, 0, 1, 0, 9, EOS]]))
    np.testing.assert_array_equal(wrong, [[1, 3, 1, 3, 1, 3, 3, EOS],
                                          [0, 0, 1, 0, 1, 0, 0, EOS]])
    assert tasks.make_task("add_steps", 5).answer_length == 17  # at least 16 tokens


def test_add_steps_prompts_are_add_s_and_every_step_checks_out():
    add, steps = tasks.make_task("add", 3), tasks.make_task("add_steps", 3)
    key = jax.random.PRNGKey(9)
    prompt, answer = tasks.sample(steps, key, 128)
    add_prompt, add_answer = tasks.sample(add, key, 128)
    np.testing.assert_array_equal(prompt, add_prompt)
    np.testing.assert_array_equal(answer[:, 6:], add_answer)  # the result is add's answer
    for p, a in zip(np.asarray(prompt), np.asarray(answer)):
        carry = 0
        for column in range(3):  # from the least significant
            total = p[3 - column] + p[7 - column] + carry
            assert list(a[2 * column:2 * column + 2]) == [total // 10, total % 10]
            carry = total // 10


def test_reward_on_the_result_ignores_the_steps_but_not_their_format():
    answer = row(1, 2, 1, 3, 1, 3, 2, EOS)  # 47 + 85, worked
    unchecked = tasks.make_task("add_steps", 2).unchecked_steps("result")
    assert unchecked == 4

    def rewards(*tokens, **options):
        response = row(*tokens, PAD)
        return (float(tasks.reward(answer, response, **options)[0]),
                float(tasks.reward(answer, response, unchecked=unchecked, **options)[0]))

    assert rewards(1, 2, 1, 3, 1, 3, 2, EOS) == (1.0, 1.0)
    assert rewards(0, 0, 9, 9, 1, 3, 2, EOS) == (0.0, 1.0)  # wrong steps, right result
    assert rewards(1, 2, 1, 3, 1, 3, 3, EOS) == (0.0, 0.0)  # right steps, wrong result
    assert rewards(1, 2, PLUS, 3, 1, 3, 2, EOS) == (0.0, 0.0)  # a step that is no digit
    # Partial credit counts the compared positions: all 8, or the result's 3 digits and EOS.
    assert rewards(0, 0, 9, 9, 1, 3, 3, EOS, partial_credit=True) == (3 / 8, 0.75)
    assert rewards(1, 2, PLUS, 3, 1, 3, 2, EOS, partial_credit=True) == (7 / 8, 1.0)
    # The format penalty is the same in both modes: only malformed responses pay it.
    assert rewards(0, 0, 9, 9, 1, 3, 2, EOS, format_penalty=0.5) == (0.0, 1.0)
    assert rewards(1, 2, PLUS, 3, 1, 3, 2, EOS, format_penalty=0.5) == (-0.5, -0.5)
    late = tasks.reward(answer, row(1, 2, 1, 3, 1, 3, 2, 2, EOS), unchecked=unchecked)
    assert float(late[0]) == 0.0
    with pytest.raises(ValueError, match="unchecked=8 must leave some of the answer's 8"):
        tasks.reward(answer, row(1, 2, 1, 3, 1, 3, 2, EOS), unchecked=8)


def test_chain_s_result_is_its_last_value():
    chain = tasks.make_task("chain", 3)
    assert chain.unchecked_steps("result") == 2 and chain.unchecked_steps("solution") == 0
    answer = row(7, 4, 8, EOS)
    assert float(tasks.reward(answer, row(0, 0, 8, EOS), unchecked=2)[0]) == 1.0
    assert float(tasks.reward(answer, row(7, 4, 9, EOS), unchecked=2)[0]) == 0.0
