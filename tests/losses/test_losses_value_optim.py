"""Tests of `vaco_jax.losses.value` and `vaco_jax.losses.optim`."""


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from loss_helpers import f32
from vaco_jax.losses import (clip_by_global_norm_per_subtree, entropy_loss, ess_ratio,
                             scale_by_ess, value_loss)


# ---------------------------------------------------------------------------------------------
# Value and entropy.


def test_value_loss_hand_computed(call):
    values, targets = f32(1.0, 2.0, 3.0), f32(1.5, 2.0, 1.0)
    # 0.5 * (0.25 + 0 + 4) / 3.
    loss, metrics = call(value_loss, values, targets)
    np.testing.assert_allclose(loss, 0.5 * 4.25 / 3, rtol=1e-6)
    np.testing.assert_allclose(metrics["value_loss"], loss)
    grads = jax.jit(jax.grad(lambda v, t: value_loss(v, t)[0], argnums=(0, 1)))(values, targets)
    np.testing.assert_allclose(grads[0], [-0.5 / 3, 0.0, 2.0 / 3], rtol=1e-6)
    np.testing.assert_array_equal(grads[1], 0.0)


def test_clipped_value_loss_hand_computed(call):
    values, old, targets = f32(1.5, 0.5), f32(1.0, 1.0), f32(2.0, 2.0)
    # eps = 0.2. Element 0: max((1.5 - 2)^2, (1 + 0.2 - 2)^2) = max(0.25, 0.64) = 0.64.
    # Element 1: max((0.5 - 2)^2, (1 - 0.2 - 2)^2) = max(2.25, 1.44) = 2.25.
    loss, _ = call(value_loss, values, targets, old_values=old, clip_eps=0.2)
    np.testing.assert_allclose(loss, 0.5 * (0.64 + 2.25) / 2, rtol=1e-6)
    grad = jax.jit(jax.grad(lambda v: value_loss(v, targets, old_values=old, clip_eps=0.2)[0]))(
        values
    )
    # The clipped branch of element 0 is constant in v; element 1: (0.5 - 2) / 2.
    np.testing.assert_allclose(grad, [0.0, -0.75], rtol=1e-6)


def test_explained_variance(call):
    targets = f32(1.0, 2.0, 3.0, 4.0)
    # Residuals (0, 0, 0, -1): variance 0.1875; Var[t] = 1.25; 1 - 0.1875 / 1.25 = 0.85.
    _, metrics = call(value_loss, f32(1.0, 2.0, 3.0, 5.0), targets)
    np.testing.assert_allclose(metrics["explained_variance"], 0.85, rtol=1e-6)
    _, metrics = call(value_loss, targets, targets)
    np.testing.assert_allclose(metrics["explained_variance"], 1.0)
    _, metrics = call(value_loss, np.full(4, 2.5, np.float32), targets)
    np.testing.assert_allclose(metrics["explained_variance"], 0.0, atol=1e-7)
    # Masked elements are left out; constant targets give 0, not NaN.
    _, metrics = call(value_loss, f32(1.0, 2.0, 9.0), f32(1.0, 2.0, 3.0), mask=f32(1, 1, 0))
    np.testing.assert_allclose(metrics["explained_variance"], 1.0)
    _, metrics = call(value_loss, f32(1.0, 2.0), f32(3.0, 3.0))
    assert float(metrics["explained_variance"]) == 0.0


def test_entropy_loss(call):
    entropy, mask = f32([1.0, 2.0, 3.0], [4.0, 0.0, 0.0]), f32([1, 1, 0], [1, 0, 0])
    loss, metrics = call(entropy_loss, entropy, mask=mask)
    np.testing.assert_allclose(loss, -(1.0 + 2.0 + 4.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(metrics["entropy"], -loss)
    # Sequence means 1.5 and 4.
    loss, _ = call(entropy_loss, entropy, mask=mask, aggregation="seq-mean-token-mean")
    np.testing.assert_allclose(loss, -(1.5 + 4.0) / 2, rtol=1e-6)


def test_value_bad_inputs():
    with pytest.raises(ValueError, match="clip_eps"):
        value_loss(jnp.zeros(3), jnp.zeros(3), old_values=jnp.zeros(3))
    with pytest.raises(AssertionError, match="targets"):
        value_loss(jnp.zeros(3), jnp.zeros(4))
    with pytest.raises(AssertionError, match="old_values"):
        value_loss(jnp.zeros(3), jnp.zeros(3), old_values=jnp.zeros(2), clip_eps=0.2)
    with pytest.raises(AssertionError, match="entropy"):
        entropy_loss(jnp.zeros(3, jnp.int32))


# ---------------------------------------------------------------------------------------------
# ESS ratio.


def test_ess_ratio_hand_computed(call):
    # w = (1, 2): (1 + 2)^2 / (2 * (1 + 4)) = 0.9, whatever the common scale of the weights.
    log_w = np.log(f32(1.0, 2.0))
    np.testing.assert_allclose(call(ess_ratio, log_w), 0.9, rtol=1e-6)
    # exp(+-200) overflows / underflows float32; the shifted computation does not. (The tolerance
    # covers the float32 rounding of the shifted inputs themselves.)
    np.testing.assert_allclose(call(ess_ratio, log_w + 200.0), 0.9, rtol=1e-4)
    np.testing.assert_allclose(call(ess_ratio, log_w - 200.0), 0.9, rtol=1e-4)
    # A masked third weight is ignored, however large.
    np.testing.assert_allclose(
        call(ess_ratio, np.append(log_w, 1e30).astype(np.float32), f32(1, 1, 0)), 0.9, rtol=1e-6
    )


def test_ess_ratio_limits(call):
    np.testing.assert_allclose(call(ess_ratio, np.full((4, 8), 3.7, np.float32)), 1.0, rtol=1e-6)
    dominant = np.full(5, -100.0, np.float32)
    dominant[2] = 0.0
    np.testing.assert_allclose(call(ess_ratio, dominant), 1 / 5, rtol=1e-6)
    assert float(call(ess_ratio, f32(1.0, 2.0), f32(0, 0))) == 1.0


# ---------------------------------------------------------------------------------------------
# ESS learning-rate scaling.

PARAMS = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array(0.3)}


def _grads(step):
    return jax.tree.map(lambda p: jnp.sin(p * (step + 1.0)), PARAMS)


def test_scale_by_ess_scales_adam_updates_exactly():
    base = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    scaled = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2), scale_by_ess(0.5))
    assert isinstance(scaled, optax.GradientTransformationExtraArgs)
    base_state, scaled_state = base.init(PARAMS), scaled.init(PARAMS)
    base_update, update = jax.jit(base.update), jax.jit(scaled.update)
    for step, ess in enumerate([0.2, 0.8, 0.05, 0.5]):
        grads = _grads(step)
        expected, base_state = base_update(grads, base_state, PARAMS)
        updates, scaled_state = update(grads, scaled_state, PARAMS, ess=ess)
        factor = np.sqrt(min(1.0, ess / 0.5))
        for key in PARAMS:
            np.testing.assert_allclose(updates[key], factor * expected[key], rtol=1e-5)


def test_scale_by_ess_is_vcpo_step_rule_and_leaves_adam_state_alone():
    # VCPO sets Adam's learning rate to lr0 * sqrt(min(1, ess / ess0)) for each step; Adam's
    # moments never see the learning rate, so scaling the step after Adam must give the same
    # updates and exactly the moments (and count) of an unscaled run on the same gradients.
    lr0, ess0 = 1e-2, 1.0
    scaled = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr0), scale_by_ess())
    plain = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr0))
    vcpo = optax.chain(optax.clip_by_global_norm(1.0),
                       optax.inject_hyperparams(optax.adam)(learning_rate=lr0))
    scaled_state, plain_state, vcpo_state = (tx.init(PARAMS) for tx in (scaled, plain, vcpo))
    for step, ess in enumerate([0.2, 1.0, 0.05, 0.7, 0.3]):
        grads = _grads(step)
        updates, scaled_state = jax.jit(scaled.update)(grads, scaled_state, PARAMS, ess=ess)
        plain_updates, plain_state = jax.jit(plain.update)(grads, plain_state, PARAMS)
        vcpo_state[1].hyperparams["learning_rate"] = lr0 * np.sqrt(min(1.0, ess / ess0))
        vcpo_updates, vcpo_state = jax.jit(vcpo.update)(grads, vcpo_state, PARAMS)
        factor = np.sqrt(min(1.0, ess / ess0))
        for key in PARAMS:
            np.testing.assert_allclose(updates[key], factor * plain_updates[key], rtol=1e-5)
            np.testing.assert_allclose(updates[key], vcpo_updates[key], rtol=1e-5)
        for got, want in zip(jax.tree.leaves(scaled_state[1][0]),
                             jax.tree.leaves(plain_state[1][0])):
            np.testing.assert_array_equal(got, want)


def test_scale_by_ess_vmaps_over_ess_and_target():
    tx = optax.chain(optax.sgd(1.0), scale_by_ess(0.5))
    state = tx.init(PARAMS)
    grads = _grads(0)

    def scaled(ess, target):
        return tx.update(grads, state, PARAMS, ess=ess, ess_target=target)[0]

    ess = f32(0.125, 0.5, 1.0)
    updates = jax.jit(jax.vmap(scaled, (0, None)))(ess, 0.5)
    for i, factor in enumerate([0.5, 1.0, 1.0]):
        np.testing.assert_allclose(updates["w"][i], -factor * grads["w"], rtol=1e-6)
    # `ess_target=` overrides the constructor's target and may itself be vmapped.
    updates = jax.jit(jax.vmap(scaled, (None, 0)))(0.125, f32(0.5, 0.125))
    np.testing.assert_allclose(updates["w"][0], -0.5 * grads["w"], rtol=1e-6)
    np.testing.assert_allclose(updates["w"][1], -grads["w"], rtol=1e-6)


def test_scale_by_ess_needs_ess():
    tx = optax.chain(optax.adam(1e-3), scale_by_ess())
    with pytest.raises(ValueError, match="ess"):
        tx.update(PARAMS, tx.init(PARAMS), PARAMS)


def test_clip_per_subtree_bounds_each_network_on_its_own():
    grads = {"actor": {"w": jnp.array([0.3, 0.4])},  # norm 0.5: under the bound, kept
             "critic": {"w": jnp.array([30.0, 0.0]), "b": jnp.array([40.0])}}  # norm 50
    clipped, _ = clip_by_global_norm_per_subtree(1.0).update(grads, optax.EmptyState())
    np.testing.assert_allclose(clipped["actor"]["w"], [0.3, 0.4], rtol=1e-6)
    np.testing.assert_allclose(clipped["critic"]["w"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["critic"]["b"], [0.8], rtol=1e-6)
    # One joint norm (about 50) would have shrunk the actor's step a hundredfold.
    joint, _ = optax.clip_by_global_norm(1.0).update(grads, optax.EmptyState())
    assert float(joint["actor"]["w"][1]) < 0.01
