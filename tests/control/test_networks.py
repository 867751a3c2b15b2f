"""Network initialisation: the orthogonal initialiser and what `vmap` over seeds compiles to."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.networks import (ActorCritic, Categorical, Gaussian, Policy, init_stats,
                                       orthogonal)

SHAPES = [(11, 64), (64, 64), (64, 1), (17, 6), (6, 17)]


@pytest.mark.parametrize("shape", SHAPES)
def test_orthogonal_equals_flax_orthogonal_for_the_same_key(shape):
    key = jax.random.PRNGKey(7)
    ours = orthogonal(1.3)(key, shape)
    reference = nn.initializers.orthogonal(1.3)(key, shape)
    np.testing.assert_allclose(ours, reference, atol=2e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_orthogonal_has_orthonormal_columns_or_rows_scaled(shape):
    w = jax.jit(orthogonal(2.0), static_argnums=1)(jax.random.PRNGKey(1), shape)
    small = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(small, 4.0 * np.eye(min(shape)), atol=1e-5)


def test_orthogonal_rejects_kernels_that_are_not_matrices():
    with pytest.raises(ValueError, match="2-D"):
        orthogonal(1.0)(jax.random.PRNGKey(0), (3, 4, 5))


def test_network_init_vmapped_over_seeds_calls_no_lapack():
    """Batched LAPACK QR can deadlock XLA's CPU thread pool on small machines (see
    `orthogonal`); the seed-vmapped initialisation must not contain any."""
    model = ActorCritic(11, 3, (64, 64), (64, 64))
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    text = jax.jit(jax.vmap(model.init)).lower(keys).as_text()
    assert "lapack" not in text and "custom_call" not in text
    actor, _ = jax.vmap(model.init)(keys)
    kernel = actor["params"]["MLP_0"]["Dense_1"]["kernel"]
    assert kernel.shape == (8, 64, 64)
    assert not np.allclose(kernel[0], kernel[1])  # every seed its own draw
    np.testing.assert_allclose(jnp.einsum("sij,sik->sjk", kernel, kernel),
                               np.broadcast_to(2.0 * np.eye(64), (8, 64, 64)), atol=1e-4)


LOGITS = jnp.array([[0.0, 1.0, -1.0], [2.0, 0.0, 0.0]])


@pytest.mark.parametrize("jit", [False, True])
def test_categorical_log_prob_entropy_and_mode_against_hand_computed_values(jit):
    maybe_jit = jax.jit if jit else (lambda f: f)
    dist = (LOGITS,)
    actions = jnp.array([1, 2], jnp.int32)
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    log_prob = maybe_jit(Categorical.log_prob)(dist, actions)
    np.testing.assert_allclose(log_prob, np.log([probs[0, 1], probs[1, 2]]), rtol=1e-6)
    entropy = maybe_jit(Categorical.entropy)(dist)
    np.testing.assert_allclose(entropy, -(probs * np.log(probs)).sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(maybe_jit(Categorical.mode)(dist), [1, 0])
    np.testing.assert_array_equal(Categorical.env_action(actions), actions)


def test_categorical_samples_follow_the_softmax_of_the_logits():
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    samples = jax.vmap(lambda k: Categorical.sample((LOGITS,), k))(keys)
    assert samples.dtype == jnp.int32 and samples.shape == (20_000, 2)
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    for row in range(2):
        frequencies = np.bincount(samples[:, row], minlength=3) / len(keys)
        np.testing.assert_allclose(frequencies, probs[row], atol=0.01)


def test_gaussian_distribution_matches_its_closed_forms():
    mean, log_std = jnp.array([[0.5, -1.0]]), jnp.array([[-0.5, 0.2]])
    action = jnp.array([[0.1, 0.3]])
    std = np.exp(log_std)
    expected = (-0.5 * ((action - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(Gaussian.log_prob((mean, log_std), action), expected, rtol=1e-6)
    np.testing.assert_allclose(Gaussian.entropy((mean, log_std)),
                               (np.log(std) + 0.5 * (1 + np.log(2 * np.pi))).sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(Gaussian.mode((mean, log_std)), mean)
    np.testing.assert_allclose(Gaussian.env_action(jnp.array([-3.0, 0.2, 2.0])),
                               [-1.0, 0.2, 1.0], rtol=1e-7)


def test_discrete_actor_outputs_logits_with_its_own_parameters():
    model = ActorCritic(5, 4, (16,), (16,), discrete=True)
    actor, _ = model.init(jax.random.PRNGKey(0))
    assert "log_std" not in actor["params"]
    policy = Policy(actor, init_stats(5))
    (logits,) = model.distribution(policy, jnp.ones((7, 5)))
    assert logits.shape == (7, 4)
    actions = jnp.arange(7) % 4
    np.testing.assert_allclose(model.log_prob(policy, jnp.ones((7, 5)), actions),
                               jax.nn.log_softmax(logits)[jnp.arange(7), actions], rtol=1e-6)
