"""Tests of `vaco_jax.tokens.vcpo`: per-sequence gradient norms of the token policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens import tasks
from vaco_jax.tokens.model import ModelSpec, TokenPolicy
from vaco_jax.tokens.vcpo import sequence_grad_sq_norms

SPEC = ModelSpec(layers=1, width=16, heads=2, context=16)
TEMPERATURE = jnp.asarray(1.3)


def _batch(batch=5, length=6):
    policy = TokenPolicy(SPEC)
    params = jax.jit(policy.init)(jax.random.PRNGKey(0))
    # The norms hold for any tokens; random digits stand in for prompts.
    prompt = jax.random.randint(jax.random.PRNGKey(1), (batch, 7), 0, 10)
    tokens = jax.random.randint(jax.random.PRNGKey(2), (batch, length), 0, tasks.EOS)
    # Rows end at EOS after 2, 4, ... tokens (or never), PAD after it, as sampling leaves them.
    eos_at = jnp.arange(batch)[:, None] * 2 + 1
    tokens = jnp.where(jnp.arange(length)[None] == eos_at, tasks.EOS, tokens)
    return policy, params, prompt, tasks.pad_after_eos(tokens)


@pytest.fixture(scope="module")
def batch_and_loop_norms():
    """A batch and the reference norms: one `jax.grad` call per sequence, in a Python loop
    (the gradient function compiled once, all sequences having the same shapes)."""
    policy, params, prompt, response = _batch()
    sequence_grad = jax.jit(jax.grad(lambda p, x, y: policy.response_log_probs(
        p, x, y, TEMPERATURE)[0].sum()))
    norms = []
    for i in range(prompt.shape[0]):
        grads = sequence_grad(params, prompt[i:i + 1], response[i:i + 1])
        norms.append(sum(float(jnp.sum(jnp.square(g))) for g in jax.tree.leaves(grads)))
    return (policy, params, prompt, response), np.array(norms)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_sequence_grad_sq_norms_match_a_loop_of_per_sequence_grads(batch_and_loop_norms,
                                                                   chunk_size):
    (policy, params, prompt, response), expected = batch_and_loop_norms
    assert 0 < tasks.response_mask(response).mean() < 1
    norms = jax.jit(lambda p, x, y: sequence_grad_sq_norms(
        policy, p, x, y, TEMPERATURE, chunk_size=chunk_size))(params, prompt, response)
    assert norms.shape == (5,)
    assert np.all(expected > 0) and len(np.unique(expected)) == 5
    np.testing.assert_allclose(norms, expected, rtol=1e-4)


def test_tokens_after_eos_do_not_count(batch_and_loop_norms):
    (policy, params, prompt, response), _ = batch_and_loop_norms
    mask = tasks.response_mask(response)
    row = int(np.argmin(mask.sum(axis=1)))
    assert mask[row].sum() < response.shape[1]
    # Whatever follows the first EOS is masked out of the sequence's log-prob.
    garbled = response.at[row].set(jnp.where(mask[row] > 0, response[row], 3))
    norms = jax.jit(lambda y: sequence_grad_sq_norms(policy, params, prompt, y, TEMPERATURE))
    np.testing.assert_allclose(norms(garbled), norms(response), rtol=1e-6)


def test_bad_shapes_are_refused(batch_and_loop_norms):
    (policy, params, prompt, response), _ = batch_and_loop_norms
    with pytest.raises(AssertionError):
        sequence_grad_sq_norms(policy, params, prompt[:4], response, TEMPERATURE)
    with pytest.raises(AssertionError):
        sequence_grad_sq_norms(policy, params, prompt, response[0], TEMPERATURE)
