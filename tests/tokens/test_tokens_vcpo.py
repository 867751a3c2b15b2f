"""Tests of `vaco_jax.tokens.vcpo`: per-sequence gradient norms of the token policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import estimators, losses
from vaco_jax.tokens import tasks
from vaco_jax.tokens.model import ModelSpec, TokenPolicy
from vaco_jax.tokens.vcpo import sequence_grad_sq_norms

SPEC = ModelSpec(layers=1, width=16, heads=2, context=16)
TEMPERATURE = jnp.asarray(1.3)


def _batch(batch=6, length=6):
    policy = TokenPolicy(SPEC)
    params = jax.jit(policy.init)(jax.random.PRNGKey(0))
    # The norms hold for any tokens; random digits stand in for prompts.
    prompt = jax.random.randint(jax.random.PRNGKey(1), (batch, 7), 0, 10)
    tokens = jax.random.randint(jax.random.PRNGKey(2), (batch, length), 0, tasks.EOS)
    # Rows end at EOS after 2, 4, 6 tokens or never, PAD after it, as sampling leaves them.
    eos_at = jnp.arange(batch)[:, None] * 2 + 1
    tokens = jnp.where(jnp.arange(length)[None] == eos_at, tasks.EOS, tokens)
    return policy, params, prompt, tasks.pad_after_eos(tokens)


@pytest.fixture(scope="module")
def batch_and_loop_grads():
    """A batch and the reference: one `jax.grad` call per sequence, in a Python loop (the
    gradient function compiled once, all sequences having the same shapes)."""
    policy, params, prompt, response = _batch()
    sequence_grad = jax.jit(jax.grad(lambda p, x, y: policy.response_log_probs(
        p, x, y, TEMPERATURE)[0].sum()))
    grads = [sequence_grad(params, prompt[i:i + 1], response[i:i + 1])
             for i in range(prompt.shape[0])]
    return (policy, params, prompt, response), grads


def _sq_norm(tree):
    return sum(float(jnp.sum(jnp.square(g))) for g in jax.tree.leaves(tree))


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_sequence_grad_sq_norms_match_a_loop_of_per_sequence_grads(batch_and_loop_grads,
                                                                   chunk_size):
    (policy, params, prompt, response), grads = batch_and_loop_grads
    expected = np.array([_sq_norm(g) for g in grads])
    assert 0 < tasks.response_mask(response).mean() < 1
    norms = jax.jit(lambda p, x, y: sequence_grad_sq_norms(
        policy, p, x, y, TEMPERATURE, chunk_size=chunk_size))(params, prompt, response)
    assert norms.shape == (6,)
    assert np.all(expected > 0) and len(np.unique(expected)) == 6
    np.testing.assert_allclose(norms, expected, rtol=1e-4)


def test_tokens_after_eos_do_not_count(batch_and_loop_grads):
    (policy, params, prompt, response), _ = batch_and_loop_grads
    mask = tasks.response_mask(response)
    row = int(np.argmin(mask.sum(axis=1)))
    assert mask[row].sum() < response.shape[1]
    # Whatever follows the first EOS is masked out of the sequence's log-prob.
    garbled = response.at[row].set(jnp.where(mask[row] > 0, response[row], 3))
    norms = jax.jit(lambda y: sequence_grad_sq_norms(policy, params, prompt, y, TEMPERATURE))
    np.testing.assert_allclose(norms(garbled), norms(response), rtol=1e-6)


def test_bad_shapes_are_refused(batch_and_loop_grads):
    (policy, params, prompt, response), _ = batch_and_loop_grads
    with pytest.raises(AssertionError):
        sequence_grad_sq_norms(policy, params, prompt[:4], response, TEMPERATURE)
    with pytest.raises(AssertionError):
        sequence_grad_sq_norms(policy, params, prompt, response[0], TEMPERATURE)


def test_vcpo_pieces_compose_on_the_token_policy(batch_and_loop_grads):
    # Two groups of three: OPOB advantages from the per-sequence norms, then VCPO's loss at
    # pi_theta = pi_T, whose gradient must be -mean_i min(w_i, C) A_i grad log pi(y_i) / |y_i|.
    (policy, params, prompt, response), grads = batch_and_loop_grads
    mask = tasks.response_mask(response)
    # Random staleness, the last sequence's pushed above the cap C = 8.
    log_staleness = (jax.random.normal(jax.random.PRNGKey(3), mask.shape)
                     + 0.5 * (jnp.arange(6) == 5)[:, None]) * mask
    rewards = jnp.array([[1.0, 0.0, 0.5], [0.0, 0.0, 1.0]])

    @jax.jit
    def vcpo_gradient(params):
        norms = sequence_grad_sq_norms(policy, params, prompt, response, TEMPERATURE)
        sequence_log_w = log_staleness.sum(axis=1)
        baseline = estimators.off_policy_optimal_baseline(
            rewards, sequence_log_w.reshape(2, 3), norms.reshape(2, 3))
        advantages = ((rewards - baseline[:, None])
                      / rewards.std(axis=1, keepdims=True)).reshape(-1)
        phase_log_prob, _ = policy.response_log_probs(params, prompt, response, TEMPERATURE)

        def loss(params):
            log_prob, _ = policy.response_log_probs(params, prompt, response, TEMPERATURE)
            return losses.vcpo_loss(log_prob - phase_log_prob, log_staleness, advantages,
                                    mask=mask)[0]

        return jax.grad(loss)(params), advantages, sequence_log_w

    got, advantages, sequence_log_w = vcpo_gradient(params)
    assert np.sum(np.exp(sequence_log_w) > 8.0) == 1
    coefficients = (-np.minimum(np.exp(sequence_log_w), 8.0) * advantages
                    / mask.sum(axis=1) / len(grads))
    expected = jax.tree.map(lambda *g: sum(c * x for c, x in zip(coefficients, g)), *grads)
    for got_leaf, want_leaf in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(got_leaf, want_leaf, rtol=1e-4, atol=1e-7)
