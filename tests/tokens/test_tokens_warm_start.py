import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import evaluation, tasks, warm_start
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


def test_warm_start_learns_is_saved_and_reused(tmp_path, monkeypatch):
    settings = WarmStart(steps=120, batch=32, learning_rate=1e-2)
    params = warm_start.warm_start(TASK, SPEC, settings, tmp_path)
    policy = TokenPolicy(SPEC)
    prompts, answers = evaluation.held_out_set(TASK, 128)
    untrained = evaluation.greedy_accuracy(policy, policy.init(jax.random.PRNGKey(0)), prompts,
                                           answers, TASK.answer_length)
    trained = evaluation.greedy_accuracy(policy, params, prompts, answers, TASK.answer_length)
    assert trained > untrained + 0.1

    (folder,) = [p for p in tmp_path.iterdir()]
    assert folder.name == f"sort-{warm_start.settings_hash(TASK, SPEC, settings)}"

    def no_training(*_):
        raise AssertionError("a cached warm start was trained again")
    monkeypatch.setattr(warm_start, "supervised_train", no_training)
    restored = warm_start.warm_start(TASK, SPEC, settings, tmp_path)
    jax.tree.map(np.testing.assert_array_equal, restored, params)
    with pytest.raises(AssertionError, match="trained again"):
        warm_start.warm_start(TASK, SPEC, WarmStart(steps=121, batch=32), tmp_path)
