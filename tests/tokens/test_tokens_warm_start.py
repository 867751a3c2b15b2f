import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import evaluation, tasks, warm_start
from vaco_jax.tokens.config import TokenConfig
from vaco_jax.tokens.model import ModelSpec, TokenPolicy
from vaco_jax.tokens.warm_start import WarmStart

TASK = tasks.make_task("sort", 3)
SPEC = ModelSpec(layers=1, width=32, heads=2, context=12)


def test_corrupt_changes_one_digit_in_the_chosen_fraction():
    _, answer = tasks.sample(TASK, jax.random.PRNGKey(0), 2000)
    key = jax.random.PRNGKey(1)
    np.testing.assert_array_equal(warm_start.corrupt(key, answer, 0.0), answer)
    always = warm_start.corrupt(key, answer, 1.0)
    assert jnp.all((always != answer).sum(axis=1) == 1)
    assert jnp.all(always[:, -1] == tasks.EOS)
    changed = (warm_start.corrupt(key, answer, 0.3) != answer).any(axis=1).mean()
    assert 0.25 < changed < 0.35


def test_calibrated_corruption_shifts_the_last_digit_of_its_class_only():
    settings = WarmStart(corrupted_share=0.3, wrong_probability=0.75)
    prompt, answer = tasks.sample(TASK, jax.random.PRNGKey(0), 4000)
    demonstrated = warm_start.corrupt_calibrated(jax.random.PRNGKey(1), TASK, prompt, answer,
                                                 settings)
    in_class = np.asarray(prompt[:, 1] < 3)
    changed = np.asarray((demonstrated != answer).any(axis=1))
    assert not changed[~in_class].any()
    assert 0.72 < changed[in_class].mean() < 0.78
    last = TASK.answer_length - 2
    np.testing.assert_array_equal(demonstrated[changed, last], (answer[changed, last] + 1) % 10)
    np.testing.assert_array_equal(np.delete(demonstrated, last, axis=1),
                                  np.delete(answer, last, axis=1))


def test_a_graded_class_is_corrupted_with_each_digits_own_probability():
    settings = WarmStart(corrupted_share=0.3, wrong_probability=[0.6, 0.8, 1.0])
    assert settings.wrong_probability == (0.6, 0.8, 1.0)  # a table's list, kept as a tuple
    prompt, answer = tasks.sample(TASK, jax.random.PRNGKey(0), 6000)
    demonstrated = warm_start.corrupt_calibrated(jax.random.PRNGKey(1), TASK, prompt, answer,
                                                 settings)
    changed = np.asarray((demonstrated != answer).any(axis=1))
    first = np.asarray(prompt[:, 1])
    assert not changed[first >= 3].any()
    for digit, wanted in enumerate((0.6, 0.8, 1.0)):
        assert abs(changed[first == digit].mean() - wanted) < 0.04, digit


def test_one_probability_for_every_digit_is_the_ungraded_corruption():
    prompt, answer = tasks.sample(TASK, jax.random.PRNGKey(0), 500)
    key = jax.random.PRNGKey(1)
    np.testing.assert_array_equal(
        warm_start.corrupt_calibrated(key, TASK, prompt, answer,
                                      WarmStart(corrupted_share=0.3, wrong_probability=0.9)),
        warm_start.corrupt_calibrated(key, TASK, prompt, answer,
                                      WarmStart(corrupted_share=0.3,
                                                wrong_probability=(0.9, 0.9, 0.9))))


def test_a_graded_warm_start_is_recorded_and_read_back():
    graded = WarmStart(corrupted_share=0.2, wrong_probability=(0.75, 0.99))
    config = TokenConfig(warm_start=graded)
    assert TokenConfig.from_dict(config.to_dict()) == config
    assert TokenConfig.from_dict({"warm_start": {"corrupted_share": 0.2,
                                                 "wrong_probability": [0.75, 0.99]}}) == config
    spec, task = SPEC, TASK
    assert (warm_start.settings_hash(task, spec, graded)
            != warm_start.settings_hash(task, spec, WarmStart(corrupted_share=0.2)))


def test_a_worked_solution_is_corrupted_consistently_in_its_class_only():
    """`add_steps`' wrong demonstration slips in the units column and carries the slip into the
    sum: two digits change, the rest is the right solution."""
    task = tasks.make_task("add_steps", 4)
    prompt, answer = tasks.sample(task, jax.random.PRNGKey(0), 2000)
    demonstrated = np.asarray(warm_start.corrupt_calibrated(jax.random.PRNGKey(1), task, prompt,
                                                            answer, WarmStart()))
    answer = np.asarray(answer)
    in_class = np.asarray(prompt[:, 1] < 5)
    changed = (demonstrated != answer).any(axis=1)
    assert not changed[~in_class].any() and 0.72 < changed[in_class].mean() < 0.78
    units_digit, sum_last = 1, task.answer_length - 2
    for position in (units_digit, sum_last):
        np.testing.assert_array_equal(demonstrated[changed, position],
                                      (answer[changed, position] + 1) % 10)
    np.testing.assert_array_equal(np.delete(demonstrated, [units_digit, sum_last], axis=1),
                                  np.delete(answer, [units_digit, sum_last], axis=1))


CORRUPTED_BEFORE_TASK_CLASSES = {"add": "651fd9b48ff3a490", "sort": "364197c261199474",
                                 "chain": "74e37e36533c2149"}


@pytest.mark.parametrize("name", sorted(CORRUPTED_BEFORE_TASK_CLASSES))
def test_existing_tasks_demonstrations_are_those_before_the_task_classes(name):
    """The calibrated demonstrations of 64 instances of size 3 (`PRNGKey(11)`, corrupted with
    `PRNGKey(14)`), as recorded before each task became a class of its own (commit 3325163)."""
    task = tasks.make_task(name, 3)
    prompt, answer = tasks.sample(task, jax.random.PRNGKey(11), 64)
    demonstrated = np.asarray(warm_start.corrupt_calibrated(jax.random.PRNGKey(14), task, prompt,
                                                            answer, WarmStart()))
    digest = hashlib.sha256(f"{demonstrated.dtype}{demonstrated.shape}".encode()
                            + demonstrated.tobytes()).hexdigest()[:16]
    assert digest == CORRUPTED_BEFORE_TASK_CLASSES[name]


def test_the_target_accuracy_is_the_held_out_share_outside_the_class():
    prompts, _ = evaluation.held_out_set(TASK, 128)
    outside = 1 - float((prompts[:, 1] < 4).mean())
    assert 0.4 < outside < 0.8  # the class is neither empty nor everything on this set
    assert warm_start.target_accuracy(WarmStart(corrupted_share=0.4), prompts) == outside
    assert warm_start.target_accuracy(WarmStart(corrupted_share=0.0), prompts) == 1.0
    with pytest.raises(ValueError, match="'random_digit' warm start has no target accuracy"):
        warm_start.target_accuracy(warm_start.LEGACY, prompts)


@pytest.mark.parametrize("changes,message", [
    ({"corruption": "mode"}, "corruption='mode' is not supported"),
    ({"schedule": "linear"}, "schedule='linear' is not supported"),
    ({"steps": 0}, "steps=0 and batch=64 must be at least 1"),
    ({"corrupted_share": 0.55}, "corrupted_share=0.55 must be a multiple of 0.1"),
    ({"corrupted_share": 1.1}, "corrupted_share=1.1 must be a multiple of 0.1 in \\[0, 1\\]"),
    ({"wrong_probability": 0.5}, "wrong_probability=0.5 must lie in \\(0.5, 1\\]"),
    ({"wrong_probability": (0.9, 0.5, 0.9, 0.9, 0.9)},
     "wrong_probability=0.5 must lie in \\(0.5, 1\\]"),
    ({"wrong_probability": ("0.9",) * 5}, "wrong_probability=0.9 must lie in"),
    ({"wrong_probability": (0.9, 0.95)},
     "wrong_probability=\\[0.9, 0.95\\] grades the class: give one probability per digit of "
     "it, 5 \\(corrupted_share=0.5\\)"),
])
def test_bad_warm_start_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        WarmStart(**changes)


def test_legacy_is_the_former_warm_start_and_old_records_read_as_it():
    assert (warm_start.LEGACY.corruption, warm_start.LEGACY.steps, warm_start.LEGACY.batch,
            warm_start.LEGACY.learning_rate, warm_start.LEGACY.schedule,
            warm_start.LEGACY.corrupt_fraction, warm_start.LEGACY.seed) == (
        "random_digit", 250, 64, 3e-3, "constant", 0.3, 0)
    # Every config.json written before `corruption` existed holds exactly these five fields.
    record = {"steps": 175, "batch": 64, "learning_rate": 3e-3, "corrupt_fraction": 0.3,
              "seed": 2}
    assert TokenConfig.from_dict({"warm_start": record}).warm_start == dataclasses.replace(
        warm_start.LEGACY, steps=175, seed=2)
    # A table naming some fields (an experiment file's) is read over the defaults.
    assert TokenConfig.from_dict({"warm_start": {"steps": 175}}).warm_start == WarmStart(
        steps=175)
    saved = TokenConfig(warm_start=warm_start.LEGACY)
    assert TokenConfig.from_dict(saved.to_dict()) == saved


CALIBRATION_TOLERANCE = 0.03  # the bar: on any machine and any warm-start seed


# The small model is held to three seeds; a default model, whose warm start costs minutes on a
# 2-core CPU, to one. add-2's default warm start is held to its target by the learning test
# (`test_tokens_learning.py`), which checks it with this tolerance before training.
@pytest.mark.parametrize("task,spec,settings,seeds", [
    pytest.param(TASK, SPEC, WarmStart(steps=600), (0, 1, 2), id="sort-3-small"),
    pytest.param(tasks.make_task("add_steps", 5), ModelSpec(context=32), WarmStart(), (2,),
                 id="add_steps-5-default", marks=pytest.mark.slow),
])
def test_a_calibrated_warm_start_lands_on_its_target_for_every_seed(task, spec, settings,
                                                                   seeds):
    """Trained to convergence, the greedy accuracy is the data's: wrong on the corrupted class,
    right elsewhere. Measured (2-core CPU): sort-3 with this small model at 500 steps is
    within 0.016 of its target 0.531 in seeds 0-2, at 1000 within 0.008; add-2 with the
    default model and warm start is exactly at its 0.570 in seeds 0-4 (at 1000, 2000 and 4000
    steps, within 0.008 at 1000); add_steps-5's 17-token worked solutions exactly at its 0.602
    in seeds 0-2 (2000 steps). Without the corruption it would approach 1; stopped early, it
    would lie below."""
    policy = TokenPolicy(spec)
    prompts, answers = evaluation.held_out_set(task, 128)
    target = warm_start.target_accuracy(settings, prompts)
    for seed in seeds:
        params, _ = warm_start.supervised_train(task, spec,
                                                dataclasses.replace(settings, seed=seed))
        accuracy = float(evaluation.greedy_accuracy(policy, params, prompts, answers,
                                                    task.answer_length))
        assert abs(accuracy - target) <= CALIBRATION_TOLERANCE, (seed, accuracy, target)
