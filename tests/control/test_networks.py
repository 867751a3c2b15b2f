"""Network initialisation: the orthogonal initialiser and what `vmap` over seeds compiles to."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.control.networks import ActorCritic, orthogonal

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
