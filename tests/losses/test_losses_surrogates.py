"""Tests of `vaco_jax.losses.surrogates` (and, through the mask test, of every loss)."""


import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loss_helpers import f32
from vaco_jax.losses import (
    adaptive_kl_coef,
    cispo_loss,
    decoupled_ppo_loss,
    entropy_loss,
    gmpo_loss,
    gspo_loss,
    importance_sampled_loss,
    kl_cov_loss,
    policy_gradient_loss,
    ppo_clip_loss,
    ppo_kl_loss,
    sapo_loss,
    spo_loss,
    value_loss,
    vcpo_loss,
)

log = np.log


def k3(r):
    return (r - 1) - np.log(r)


# ---------------------------------------------------------------------------------------------
# Hand-computed values.


def test_ppo_clip_hand_computed(call):
    ratio = f32(1.5, 0.5, 1.1, 0.5, 1.5)
    adv = f32(1.0, -1.0, 2.0, 2.0, -1.0)
    # eps = 0.2: min(rA, clip(r, 0.8, 1.2) A) per element:
    #   min(1.5, 1.2) = 1.2 (clipped), min(-0.5, -0.8) = -0.8 (clipped), min(2.2, 2.2) = 2.2,
    #   min(1.0, 1.6) = 1.0, min(-1.5, -1.2) = -1.5.
    loss, metrics = call(ppo_clip_loss, log(ratio), adv, 0.2)
    np.testing.assert_allclose(loss, -(1.2 - 0.8 + 2.2 + 1.0 - 1.5) / 5, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 2 / 5)
    np.testing.assert_allclose(metrics["ratio_mean"], 5.1 / 5, rtol=1e-6)
    np.testing.assert_allclose(metrics["approx_kl"], k3(ratio.astype(np.float64)).mean(), rtol=1e-5)


def test_ppo_clip_asymmetric_bounds(call):
    ratio, adv = f32(1.25, 0.85), f32(1.0, -1.0)
    # (low, high) = (0.1, 0.3): clip range [0.9, 1.3]. min(1.25, 1.25) = 1.25 (a symmetric 0.2
    # would clip it to 1.2); min(-0.85, -0.9) = -0.9 (clipped).
    loss, metrics = call(ppo_clip_loss, log(ratio), adv, (0.1, 0.3))
    np.testing.assert_allclose(loss, -(1.25 - 0.9) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    # The pair may be a traced (2,) array too.
    loss_array, _ = call(ppo_clip_loss, log(ratio), adv, f32(0.1, 0.3))
    np.testing.assert_allclose(loss_array, loss, rtol=1e-6)


def test_ppo_dual_clip(call):
    ratio, adv = f32(5.0, 5.0, 2.0), f32(-1.0, 1.0, -1.0)
    # c = 3: max(min(-5, -1.2), -3) = -3 (dual-clipped); min(5, 1.2) = 1.2 (clipped);
    # max(min(-2, -1.2), -3) = -2.
    loss, metrics = call(ppo_clip_loss, log(ratio), adv, 0.2, dual_clip=3.0)
    np.testing.assert_allclose(loss, -(-3.0 + 1.2 - 2.0) / 3, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 2 / 3, rtol=1e-6)
    plain, _ = call(ppo_clip_loss, log(ratio), adv, 0.2)
    np.testing.assert_allclose(plain, -(-5.0 + 1.2 - 2.0) / 3, rtol=1e-5)


def test_decoupled_ppo_hand_computed(call):
    ratio_phase, staleness, adv = f32(1.5, 1.0), f32(2.0, 0.5), f32(1.0, -1.0)
    # PPO-clip terms: min(1.5, 1.2) = 1.2 and -1.0; weights w = min(w, 1.5) = 1.5 and 0.5.
    loss, metrics = call(
        decoupled_ppo_loss, log(ratio_phase), log(staleness), adv, 0.2, staleness_cap=1.5
    )
    np.testing.assert_allclose(loss, -(1.5 * 1.2 + 0.5 * -1.0) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["staleness_mean"], (1.5 + 0.5) / 2, rtol=1e-6)
    uncapped, _ = call(decoupled_ppo_loss, log(ratio_phase), log(staleness), adv, 0.2)
    np.testing.assert_allclose(uncapped, -(2.0 * 1.2 + 0.5 * -1.0) / 2, rtol=1e-5)


def test_decoupled_ppo_staleness_is_stop_gradient():
    grad = jax.jit(jax.grad(decoupled_ppo_loss, argnums=(0, 1), has_aux=True))(
        jnp.array([0.05, -0.05]), jnp.array([0.3, -0.2]), jnp.array([1.0, 1.0]), 0.2
    )[0]
    assert np.all(grad[0] != 0)
    np.testing.assert_array_equal(grad[1], 0.0)


def test_ppo_kl_hand_computed(call):
    ratio, adv = f32(2.0, 0.5), f32(1.0, -1.0)
    # k3(2) = 1 - ln 2, k3(0.5) = -0.5 + ln 2, summing to 0.5;
    # loss = mean(-r A + 0.5 k3) = (-2 + 0.5 + 0.5 * 0.5) / 2.
    loss, metrics = call(ppo_kl_loss, log(ratio), adv, 0.5)
    np.testing.assert_allclose(loss, (-2.0 + 0.5 + 0.25) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["approx_kl"], 0.25, rtol=1e-5)


def test_ppo_kl_penalty_is_nonnegative_and_zero_at_ratio_one():
    loss_fn = jax.jit(ppo_kl_loss)
    log_ratio = jnp.linspace(-3.0, 3.0, 61)
    with_penalty, _ = loss_fn(log_ratio, jnp.zeros(61), 1.0)
    assert float(with_penalty) > 0
    at_one, metrics = loss_fn(jnp.zeros(3), jnp.zeros(3), 1.0)
    assert float(at_one) == 0.0 and float(metrics["approx_kl"]) == 0.0


def test_adaptive_kl_coef(call):
    # target 2: doubled above 1.5 * 2 = 3, halved below 2 / 1.5 = 1.333, unchanged in between.
    observed = f32(3.01, 3.0, 2.0, 1.34, 1.3)
    np.testing.assert_allclose(call(adaptive_kl_coef, 1.0, observed, 2.0), [2, 1, 1, 1, 0.5])


def test_adaptive_kl_coef_is_clipped_to_its_bounds(call):
    # Target 2, bounds [0.5, 2]: 2 doubled to 4 -> 2, 0.5 halved to 0.25 -> 0.5, 1 unchanged.
    coefs = call(adaptive_kl_coef, f32(2.0, 0.5, 1.0), f32(9.0, 0.1, 2.0), 2.0, 0.5, 2.0)
    np.testing.assert_allclose(coefs, [2.0, 0.5, 1.0])


def test_adaptive_kl_coef_vmaps_over_its_state():
    coefs = jax.vmap(adaptive_kl_coef, (0, 0, None))(f32(1.0, 4.0, 0.2), f32(9.0, 0.1, 2.0), 2.0)
    np.testing.assert_allclose(coefs, [2.0, 2.0, 0.2])


def test_spo_hand_computed(call):
    ratio, adv = f32(1.5, 0.5), f32(2.0, -1.0)
    # eps = 0.25: 1.5 * 2 - 2 * 0.25 / 0.5 = 2, and -0.5 - 1 * 0.25 / 0.5 = -1.
    loss, _ = call(spo_loss, log(ratio), adv, 0.25)
    np.testing.assert_allclose(loss, -(2.0 - 1.0) / 2, rtol=1e-5)


def test_spo_gradient_vanishes_at_one_plus_sign_eps():
    grad = jax.jit(jax.grad(lambda lr: spo_loss(lr, jnp.array([3.0, -3.0]), 0.25)[0]))(
        jnp.log(jnp.array([1.25, 0.75]))
    )
    np.testing.assert_allclose(grad, 0.0, atol=1e-6)


def test_importance_sampled_hand_computed(call):
    ratio, adv = f32(2.0, 0.5), f32(1.0, -3.0)
    loss, metrics = call(importance_sampled_loss, log(ratio), adv)
    np.testing.assert_allclose(loss, -(2.0 - 1.5) / 2, rtol=1e-6)
    np.testing.assert_allclose(metrics["ratio_mean"], 1.25, rtol=1e-6)
    weighted, _ = call(importance_sampled_loss, log(ratio), adv, weights=f32(0.5, 2.0))
    np.testing.assert_allclose(weighted, -(0.5 * 2.0 - 2.0 * 1.5) / 2, rtol=1e-6)


def test_policy_gradient_hand_computed(call):
    log_prob, adv, weights = f32(-1.0, -2.0), f32(2.0, -1.0), f32(0.5, 1.0)
    # -(0.5 * 2 * -1) - (1 * -1 * -2) = 1 - 2.
    loss, metrics = call(policy_gradient_loss, log_prob, adv, weights=weights)
    np.testing.assert_allclose(loss, (1.0 - 2.0) / 2)
    np.testing.assert_allclose(metrics["log_prob_mean"], -1.5)
    grads = jax.jit(
        jax.grad(lambda lp, a, w: policy_gradient_loss(lp, a, weights=w)[0], argnums=(0, 1, 2))
    )(log_prob, adv, weights)
    np.testing.assert_allclose(grads[0], [-0.5 * 2.0 / 2, -1.0 * -1.0 / 2])
    np.testing.assert_array_equal(grads[1], 0.0)
    np.testing.assert_array_equal(grads[2], 0.0)


def test_cispo_hand_computed(call):
    ratio, log_prob, adv = f32(2.0, 0.5, 1.1), f32(-1.0, -1.0, -2.0), f32(1.0, 1.0, -1.0)
    # eps_low 0.2, eps_high 0.3: weights clip(r, 0.8, 1.3) = 1.3, 0.8, 1.1;
    # -w A log_prob = 1.3, 0.8, -2.2.
    loss, metrics = call(cispo_loss, log(ratio), log_prob, adv, 0.2, 0.3)
    np.testing.assert_allclose(loss, (1.3 + 0.8 - 2.2) / 3, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(metrics["clip_fraction"], 2 / 3, rtol=1e-6)
    grads = jax.jit(
        jax.grad(lambda lr, lp: cispo_loss(lr, lp, adv, 0.2, 0.3)[0], argnums=(0, 1))
    )(log(ratio), log_prob)
    np.testing.assert_array_equal(grads[0], 0.0)
    # Clipped tokens keep a (bounded) gradient, unlike PPO-clip.
    np.testing.assert_allclose(grads[1], [-1.3 / 3, -0.8 / 3, 1.1 / 3], rtol=1e-5)


def test_gspo_hand_computed(call):
    log_ratio = np.array([[log(2.0), 0.0, 9.0], [log(0.5)] * 3, [7.0, 7.0, 7.0]], np.float32)
    mask = f32([1, 1, 0], [1, 1, 1], [0, 0, 0])
    adv = f32(1.0, 1.0, 5.0)
    # s_1 = exp((ln 2 + 0) / 2) = 1.414 -> min(1.414, 1.2) = 1.2 (clipped); s_2 = 0.5 ->
    # min(0.5, 0.8) = 0.5; the empty third sequence is ignored.
    loss, metrics = call(gspo_loss, log_ratio, adv, 0.2, mask=mask)
    np.testing.assert_allclose(loss, -(1.2 + 0.5) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    np.testing.assert_allclose(metrics["ratio_mean"], (np.sqrt(2.0) + 0.5) / 2, rtol=1e-5)
    grad = jax.jit(jax.grad(lambda lr: gspo_loss(lr, adv, 0.2, mask=mask)[0]))(log_ratio)
    # d(-s_2 A / 2) / d log r_2t = -s_2 / 3 / 2 through the token mean.
    np.testing.assert_allclose(grad, [[0, 0, 0], [-1 / 12] * 3, [0, 0, 0]], atol=1e-6)


# VCPO hand example: two sequences of 3 tokens and an empty one.
#   staleness  w_0 = 2 * 3 = 6 (third token masked) -> 6;  w_1 = 4 * 4 * 1 = 16 -> C = 8.
#   phase ratio r_0 = (1.5, 0.5), r_1 = (1, 2, 0.5);  A = (1, -2).
#   per-sequence token means: -6 * 1 * (1.5 + 0.5) / 2 = -6;  -8 * -2 * 3.5 / 3 = 56 / 3.
_VCPO = dict(
    log_ratio_phase=np.log(np.array([[1.5, 0.5, 9.0], [1.0, 2.0, 0.5], [3.0] * 3], np.float32)),
    log_staleness=np.log(np.array([[2.0, 3.0, 9.0], [4.0, 4.0, 1.0], [5.0] * 3], np.float32)),
    advantages=f32(1.0, -2.0, 7.0),
    mask=f32([1, 1, 0], [1, 1, 1], [0, 0, 0]),
)


def test_vcpo_hand_computed(call):
    inputs = dict(_VCPO)
    mask = inputs.pop("mask")
    loss, metrics = call(vcpo_loss, *inputs.values(), mask=mask)
    np.testing.assert_allclose(loss, (-6.0 + 56 / 3) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["truncated_fraction"], 0.5)
    np.testing.assert_allclose(metrics["is_weight_mean"], (6.0 + 8.0) / 2, rtol=1e-5)
    # ESS of the untruncated weights (6, 16): 22^2 / (2 (36 + 256)).
    np.testing.assert_allclose(metrics["ess_ratio"], 484 / 584, rtol=1e-5)
    np.testing.assert_allclose(metrics["ratio_mean"], 5.5 / 5, rtol=1e-5)
    grads = jax.jit(jax.grad(lambda *a: vcpo_loss(*a, mask=mask)[0], argnums=(0, 1, 2)))(
        *inputs.values()
    )
    # d/d log r_it = -min(w_i, C) A_i r_it / (|y_i| * 2 sequences); w and A are stop-gradient.
    np.testing.assert_allclose(
        grads[0], [[-2.25, -0.75, 0.0], [8 / 3, 16 / 3, 4 / 3], [0.0] * 3], rtol=1e-5
    )
    np.testing.assert_array_equal(grads[1], 0.0)
    np.testing.assert_array_equal(grads[2], 0.0)


def test_vcpo_cap_is_traced():
    inputs = dict(_VCPO)
    mask = inputs.pop("mask")
    losses = jax.jit(jax.vmap(lambda cap: vcpo_loss(*inputs.values(), is_cap=cap, mask=mask)[0]))(
        f32(8.0, 32.0, 3.0)
    )
    # C = 32 truncates nothing: seq 1 gives 16 * 2 * 3.5 / 3 = 112 / 3; C = 3 truncates both.
    np.testing.assert_allclose(
        losses, [(-6 + 56 / 3) / 2, (-6 + 112 / 3) / 2, (-3 + 21 / 3) / 2], rtol=1e-5
    )


# ---------------------------------------------------------------------------------------------
# PPO-clip's gradient structure.


def test_ppo_clip_gradient_is_zero_exactly_where_clipped():
    rng = np.random.default_rng(0)
    log_ratio = rng.uniform(-0.6, 0.6, size=400).astype(np.float32)
    adv = rng.choice([-1.0, 1.0], size=400).astype(np.float32) * rng.uniform(0.1, 2.0, 400)
    adv = adv.astype(np.float32)
    eps = 0.2
    grad_fn = jax.jit(jax.grad(ppo_clip_loss, has_aux=True))
    grad, metrics = grad_fn(jnp.asarray(log_ratio), adv, eps)
    ratio = np.exp(log_ratio)
    clipped = ((ratio > 1 + eps) & (adv > 0)) | ((ratio < 1 - eps) & (adv < 0))
    assert 50 < clipped.sum() < 350
    np.testing.assert_array_equal(np.asarray(grad)[clipped], 0.0)
    assert np.all(np.asarray(grad)[~clipped] != 0.0)
    # Unclipped elements get the gradient of -r A / n.
    np.testing.assert_allclose(
        np.asarray(grad)[~clipped], (-ratio * adv / 400)[~clipped], rtol=1e-5
    )
    np.testing.assert_allclose(metrics["clip_fraction"], clipped.mean(), rtol=1e-6)


def test_hyperparameters_may_be_vmapped():
    log_ratio, adv = jnp.log(f32(1.5, 0.5)), f32(1.0, -1.0)
    losses = jax.jit(jax.vmap(lambda eps: ppo_clip_loss(log_ratio, adv, eps)[0]))(f32(0.2, 0.6))
    # eps 0.2: (-1.2 + 0.8) / 2; eps 0.6: (-1.5 + 0.5) / 2.
    np.testing.assert_allclose(losses, [-0.2, -0.5], rtol=1e-5)
    coefs = f32(0.0, 1.0)
    kl_losses = jax.jit(jax.vmap(lambda c: ppo_kl_loss(log_ratio, adv, c)[0]))(coefs)
    penalty = kl_losses[1] - kl_losses[0]
    np.testing.assert_allclose(penalty, k3(np.array([1.5, 0.5])).mean(), rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Masking: masked elements change neither the loss, its gradient nor the metrics, for every loss.

SHAPE = (4, 5)
# The call to make for each loss; `x` holds the inputs, `m` the mask.
LOSSES = {
    "ppo_clip": lambda x, m: ppo_clip_loss(
        x["log_ratio"], x["adv"], 0.2, dual_clip=3.0, mask=m, weights=x["weights"]
    ),
    "ppo_clip_seq": lambda x, m: ppo_clip_loss(
        x["log_ratio"], x["adv"], (0.1, 0.3), mask=m, aggregation="seq-mean-token-mean"
    ),
    "decoupled_ppo": lambda x, m: decoupled_ppo_loss(
        x["log_ratio"], x["log_prob"], x["adv"], 0.2, staleness_cap=2.0, mask=m
    ),
    "ppo_kl": lambda x, m: ppo_kl_loss(x["log_ratio"], x["adv"], 0.3, mask=m, weights=x["weights"]),
    "spo": lambda x, m: spo_loss(
        x["log_ratio"], x["adv"], 0.2, mask=m, aggregation="seq-mean-token-sum-norm"
    ),
    "importance_sampled": lambda x, m: importance_sampled_loss(
        x["log_ratio"], x["adv"], mask=m, weights=x["weights"]
    ),
    "policy_gradient": lambda x, m: policy_gradient_loss(
        x["log_prob"], x["adv"], weights=x["weights"], mask=m
    ),
    "cispo": lambda x, m: cispo_loss(x["log_ratio"], x["log_prob"], x["adv"], 0.2, 0.3, mask=m),
    # One advantage per sequence: the first token's.
    "gspo": lambda x, m: gspo_loss(x["log_ratio"], x["adv"][..., 0], 0.2, mask=m),
    "gmpo": lambda x, m: gmpo_loss(x["log_ratio"], x["adv"][..., 0], 0.4, mask=m),
    "sapo": lambda x, m: sapo_loss(x["log_ratio"], x["adv"], 1.0, 1.05, mask=m,
                                   weights=x["weights"]),
    "kl_cov": lambda x, m: kl_cov_loss(x["log_ratio"], x["log_prob"], x["adv"], 1.0, 0.3, mask=m),
    "vcpo": lambda x, m: vcpo_loss(
        x["log_ratio"], x["log_prob"], x["adv"][..., 0], is_cap=2.0, mask=m
    ),
    "value": lambda x, m: value_loss(x["log_ratio"], x["adv"], mask=m),
    "value_clipped": lambda x, m: value_loss(
        x["log_ratio"], x["adv"], old_values=x["log_prob"], clip_eps=0.2, mask=m
    ),
    "entropy": lambda x, m: entropy_loss(x["log_prob"], mask=m),
}
SURROGATES = sorted(set(LOSSES) - {"value", "value_clipped", "entropy"})


@jax.jit
def values_and_grads(inputs, mask):
    """`((loss, metrics), grads)` of every loss in `LOSSES`, compiled once per shape."""
    return {name: jax.value_and_grad(fn, has_aux=True)(inputs, mask) for name, fn in LOSSES.items()}


def _random_inputs(rng, shape):
    return {
        "log_ratio": rng.uniform(-1.0, 1.0, shape).astype(np.float32),
        "log_prob": rng.uniform(-3.0, 0.0, shape).astype(np.float32),
        "adv": rng.normal(size=shape).astype(np.float32),
        "weights": rng.uniform(0.5, 1.5, shape).astype(np.float32),
    }


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_masked_elements_change_nothing(name):
    rng = np.random.default_rng(3)
    inputs = _random_inputs(rng, SHAPE)
    mask = rng.random(SHAPE) < 0.6
    mask[2] = False  # an empty sequence
    mask[:, 0] |= mask[:, 1:].any(axis=1)  # GSPO's per-sequence advantage sits in column 0
    (loss, metrics), grads = values_and_grads(inputs, mask)[name]
    extremes = {
        key: np.where(mask, value, np.float32(sign * 1e30)).astype(np.float32)
        for (key, value), sign in zip(inputs.items(), [1, -1, 1, -1])
    }
    (loss2, metrics2), grads2 = values_and_grads(extremes, mask)[name]
    np.testing.assert_array_equal(loss2, loss)
    for key in metrics:
        np.testing.assert_array_equal(metrics2[key], metrics[key], err_msg=key)
    for key in inputs:
        np.testing.assert_array_equal(grads2[key], grads[key], err_msg=key)
        np.testing.assert_array_equal(np.asarray(grads[key])[~mask], 0.0, err_msg=key)
    assert np.isfinite(loss) and any(np.any(np.asarray(g) != 0) for g in grads.values())


# ---------------------------------------------------------------------------------------------
# Property-based: any shape, finite values and gradients for log-ratios in [-50, 50].


def _assert_finite(results, shape):
    for name in SURROGATES:
        (loss, metrics), grads = results[name]
        assert np.isfinite(loss), name
        assert all(np.isfinite(v) for v in metrics.values()), name
        for key, grad in grads.items():
            assert np.all(np.isfinite(grad)), (name, key)
            assert grad.shape == shape


@st.composite
def surrogate_inputs(draw):
    # [N], [T, B] and [B, L] batches; few shapes, as each one compiles `values_and_grads`.
    shape = draw(st.sampled_from([(6,), SHAPE, SHAPE[::-1]]))

    def array(low, high):
        elements = st.floats(low, high, width=32, allow_subnormal=False)
        return draw(hnp.arrays(np.float32, shape, elements=elements))

    inputs = {
        "log_ratio": array(-50.0, 50.0),
        "log_prob": array(-50.0, 0.0),
        "adv": array(-10.0, 10.0),
        "weights": array(0.0, 10.0),
    }
    return inputs, draw(hnp.arrays(np.bool_, shape))


@settings(deadline=None, max_examples=25)
@given(surrogate_inputs())
def test_surrogates_are_finite_for_any_shape_and_extreme_ratios(case):
    inputs, mask = case
    _assert_finite(values_and_grads(inputs, mask), mask.shape)


def test_surrogates_are_finite_far_beyond_fifty():
    inputs = _random_inputs(np.random.default_rng(4), SHAPE)
    inputs["log_ratio"] = np.array([[1e4, -1e4, 50.0, -50.0, 100.0]] * 4, np.float32)
    inputs["log_prob"] = np.full(SHAPE, -1e4, np.float32)
    _assert_finite(values_and_grads(inputs, np.ones(SHAPE, bool)), SHAPE)


# ---------------------------------------------------------------------------------------------
# Bad inputs raise errors that name the argument.


def test_bad_inputs_name_the_argument():
    lr, adv = jnp.zeros((3, 4)), jnp.ones((3, 4))
    with pytest.raises(AssertionError, match="advantages"):
        ppo_clip_loss(lr, jnp.ones((4, 3)), 0.2)
    with pytest.raises(AssertionError, match="log_ratio"):
        ppo_clip_loss(jnp.zeros((3, 4), jnp.int32), adv, 0.2)
    with pytest.raises(AssertionError, match="mask"):
        spo_loss(lr, adv, 0.2, mask=jnp.ones(4))
    with pytest.raises(AssertionError, match="weights"):
        importance_sampled_loss(lr, adv, weights=jnp.ones(3))
    with pytest.raises(AssertionError, match="log_staleness"):
        decoupled_ppo_loss(lr, jnp.zeros(3), adv, 0.2)
    with pytest.raises(AssertionError, match="log_prob"):
        cispo_loss(lr, jnp.zeros((3, 4), jnp.int32), adv, 0.2, 0.2)
    with pytest.raises(AssertionError, match="advantages"):
        gspo_loss(lr, adv, 0.2)
    with pytest.raises(AssertionError, match="advantages"):
        vcpo_loss(lr, lr, adv)
    with pytest.raises(AssertionError, match="log_staleness"):
        vcpo_loss(lr, jnp.zeros(3), jnp.ones(3))
    with pytest.raises(ValueError, match="token axis"):
        vcpo_loss(jnp.zeros(()), jnp.zeros(()), jnp.ones(()))
    with pytest.raises(ValueError, match="aggregation"):
        ppo_kl_loss(lr, adv, 0.1, aggregation="token-sum")
    with pytest.raises(ValueError, match="clip_eps"):
        ppo_clip_loss(lr, adv, (0.1, 0.2, 0.3))
