"""Tests for the advantage estimators in `vaco_jax.estimators`."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vaco_jax.estimators import (
    gae,
    group_relative_advantages,
    off_policy_optimal_baseline,
    opob_advantages,
    per_sample_grad_sq_norms,
    vtrace,
)

TRANSFORMS = pytest.mark.parametrize(
    "transform", [lambda f: f, jax.jit], ids=["eager", "jit"]
)
PROPERTY = settings(max_examples=25, deadline=None)
ATOL = 1e-5

# Compiled once per shape: op-by-op dispatch would dominate the runtime of the
# randomised tests. The hand-value tests also run the estimators eagerly.
_gae = jax.jit(gae)
_vtrace = jax.jit(vtrace)
_grpo = jax.jit(
    group_relative_advantages, static_argnames=("num_groups", "scale_by_std")
)
_opob = jax.jit(opob_advantages, static_argnames=("num_groups",))
_baseline = jax.jit(off_policy_optimal_baseline)

# T = 4 hand example with gamma = 0.9:
#   t=0 continues  (next_values[0] = values[1] = 1.0),
#   t=1 truncated  (bootstraps from the final observation's value 10.0),
#   t=2 continues  (next_values[2] = values[3] = 2.0),
#   t=3 terminated (discount 0, so next_values[3] = 7.0 must be ignored).
HAND = dict(
    rewards=jnp.array([1.0, 2.0, 3.0, 4.0]),
    values=jnp.array([0.5, 1.0, 1.5, 2.0]),
    next_values=jnp.array([1.0, 10.0, 2.0, 7.0]),
    discounts=jnp.array([0.9, 0.9, 0.9, 0.0]),
    continuations=jnp.array([1.0, 0.0, 1.0, 0.0]),
)


def _random_trajectory(rng, shape, gamma=0.9, consistent=True):
    """Random time-major rollout with terminations and truncations.

    With `consistent`, `next_values[t] == values[t+1]` inside an episode, as a
    real rollout produces; otherwise next_values are independent noise.
    """
    terminated = rng.random(shape) < 0.2
    truncated = ~terminated & (rng.random(shape) < 0.2)
    done = terminated | truncated
    values = rng.normal(size=shape)
    next_values = rng.normal(size=shape)
    if consistent:
        next_values[:-1] = np.where(done[:-1], next_values[:-1], values[1:])
    arrays = dict(
        rewards=rng.normal(size=shape),
        values=values,
        next_values=next_values,
        discounts=gamma * (1.0 - terminated),
        continuations=1.0 - done,
    )
    return {k: jnp.asarray(v, jnp.float32) for k, v in arrays.items()}


def _gae_reference(rewards, values, next_values, discounts, continuations, lam):
    """Literal per-step loop over a `[T]` trajectory."""
    advantages = np.zeros(len(rewards))
    next_advantage = 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + discounts[t] * next_values[t] - values[t]
        next_advantage = (
            delta + discounts[t] * lam * continuations[t] * next_advantage
        )
        advantages[t] = next_advantage
    return advantages, advantages + np.asarray(values)


def _vtrace_reference(
    rewards,
    values,
    next_values,
    discounts,
    continuations,
    log_rhos,
    lam,
    rho_bar,
    c_bar,
    rho_bar_pg,
):
    """Literal per-step loop over a `[T]` trajectory (q = vs_{t+1} inside)."""
    num_steps = len(rewards)
    w = np.exp(np.asarray(log_rhos, np.float64))
    rho = np.minimum(rho_bar, w)
    c = lam * np.minimum(c_bar, w)
    rho_pg = np.minimum(rho_bar_pg, w)
    vs = np.zeros(num_steps)
    next_correction = 0.0
    for t in reversed(range(num_steps)):
        delta = rewards[t] + discounts[t] * next_values[t] - values[t]
        next_correction = rho[t] * delta + (
            discounts[t] * c[t] * continuations[t] * next_correction
        )
        vs[t] = values[t] + next_correction
    pg = np.zeros(num_steps)
    for t in range(num_steps):
        in_episode = continuations[t] == 1 and t < num_steps - 1
        q = vs[t + 1] if in_episode else next_values[t]
        pg[t] = rho_pg[t] * (rewards[t] + discounts[t] * q - values[t])
    return pg, vs


# --------------------------------------------------------------------- GAE


@TRANSFORMS
def test_gae_hand_values(transform):
    # lambda = 0.5, so the trace decay is gamma * lambda = 0.45.
    # deltas: 1 + 0.9*1.0 - 0.5 = 1.4;   2 + 0.9*10 - 1.0 = 10.0;
    #         3 + 0.9*2.0 - 1.5 = 3.3;   4 + 0*7.0 - 2.0 = 2.0.
    # A3 = 2.0
    # A2 = 3.3 + 0.45 * 1 * 2.0 = 4.2
    # A1 = 10.0 + 0.45 * 0 * 4.2 = 10.0   (truncation: bootstrapped, no trace)
    # A0 = 1.4 + 0.45 * 1 * 10.0 = 5.9
    adv, targets = transform(gae)(**HAND, lambda_=0.5)
    np.testing.assert_allclose(adv, [5.9, 10.0, 4.2, 2.0], atol=ATOL)
    np.testing.assert_allclose(targets, [6.4, 11.0, 5.7, 4.0], atol=ATOL)


@TRANSFORMS
@pytest.mark.parametrize(
    "discount, next_value, expected",
    [
        (0.9, 5.0, 5.5),  # truncation: 1 + 0.9 * 5.0
        (0.0, 5.0, 1.0),  # termination: 1 + 0 * 5.0
        (0.0, -300.0, 1.0),  # termination ignores the final value entirely
    ],
    ids=["truncated", "terminated", "terminated-other-value"],
)
def test_truncation_bootstraps_and_termination_does_not(
    transform, discount, next_value, expected
):
    step = dict(
        rewards=jnp.array([1.0]),
        values=jnp.array([0.0]),
        next_values=jnp.array([next_value]),
        discounts=jnp.array([discount]),
        continuations=jnp.array([0.0]),
    )
    # With V = 0, advantages and value targets coincide.
    outputs = transform(gae)(**step, lambda_=1.0) + transform(vtrace)(
        **step, log_rhos=jnp.zeros(1)
    )
    for out in outputs:
        np.testing.assert_allclose(out, [expected], atol=ATOL)


# ----------------------------------------------------------------- V-trace


@TRANSFORMS
def test_vtrace_hand_values(transform):
    # w = [2, 0.5, 1, 3]; lambda 0.5, rho_bar 1.5, c_bar 1, rho_bar_pg 1.2.
    # rho = min(1.5, w) = [1.5, 0.5, 1, 1.5]
    # c   = 0.5 * min(1, w) = [0.5, 0.25, 0.5, 0.5]
    # deltas (as in the GAE example) = [1.4, 10.0, 3.3, 2.0]
    # e3 = 1.5 * 2.0 = 3.0
    # e2 = 1 * 3.3 + 0.9 * 0.5 * 1 * 3.0 = 4.65
    # e1 = 0.5 * 10.0 + 0.9 * 0.25 * 0 * 4.65 = 5.0
    # e0 = 1.5 * 1.4 + 0.9 * 0.5 * 1 * 5.0 = 4.35
    # vs = V + e = [4.85, 6.0, 6.15, 5.0]
    # pg = min(1.2, w) * (r + discount * q - V), q = [vs1, nv1, vs3, nv3]:
    #   1.2 * (1 + 0.9*6.0 - 0.5) = 7.08     0.5 * (2 + 0.9*10 - 1.0) = 5.0
    #   1.0 * (3 + 0.9*5.0 - 1.5) = 6.0      1.2 * (4 + 0*7.0 - 2.0) = 2.4
    log_rhos = jnp.log(jnp.array([2.0, 0.5, 1.0, 3.0]))
    pg, vs = transform(vtrace)(
        **HAND,
        log_rhos=log_rhos,
        lambda_=0.5,
        rho_bar=1.5,
        c_bar=1.0,
        rho_bar_pg=1.2,
    )
    np.testing.assert_allclose(vs, [4.85, 6.0, 6.15, 5.0], atol=ATOL)
    np.testing.assert_allclose(pg, [7.08, 5.0, 6.0, 2.4], atol=ATOL)


@TRANSFORMS
@pytest.mark.parametrize(
    "log_rhos, expected_pg, expected_vs",
    [
        # w = [e^1e4, e^50] -> rho = rho_bar = 2, c = pg ratio = 1.
        # deltas: 1 + 0.9*0.5 - 0.5 = 0.95,  2 + 0.9*1.0 - 0.5 = 2.4
        # e1 = 2 * 2.4 = 4.8;  e0 = 2 * 0.95 + 0.9 * 1 * 4.8 = 6.22
        # vs = [6.72, 5.3]; pg = [1 + 0.9*5.3 - 0.5, 2.4] = [5.27, 2.4]
        ([1e4, 50.0], [5.27, 2.4], [6.72, 5.3]),
        # w ~ 0: no correction at all, vs = V, pg = 0.
        ([-1e4, -50.0], [0.0, 0.0], [0.5, 0.5]),
    ],
    ids=["large", "small"],
)
def test_vtrace_truncates_extreme_ratios(
    transform, log_rhos, expected_pg, expected_vs
):
    pg, vs = transform(vtrace)(
        rewards=jnp.array([1.0, 2.0]),
        values=jnp.array([0.5, 0.5]),
        next_values=jnp.array([0.5, 1.0]),
        discounts=jnp.array([0.9, 0.9]),
        continuations=jnp.array([1.0, 1.0]),
        log_rhos=jnp.array(log_rhos),
        rho_bar=2.0,
        c_bar=1.0,
    )
    np.testing.assert_allclose(vs, expected_vs, atol=ATOL)
    np.testing.assert_allclose(pg, expected_pg, atol=ATOL)


@pytest.mark.parametrize("consistent", [True, False])
@pytest.mark.parametrize("lambda_", [0.0, 0.5, 0.95, 1.0])
def test_on_policy_vtrace_equals_gae(lambda_, consistent):
    traj = _random_trajectory(
        np.random.default_rng(0), (9, 4), consistent=consistent
    )
    adv, targets = _gae(**traj, lambda_=lambda_)
    pg, vs = _vtrace(
        **traj, log_rhos=jnp.zeros((9, 4)), lambda_=lambda_, rho_bar=1.0
    )
    np.testing.assert_allclose(vs, targets, atol=ATOL)
    if lambda_ == 1.0:
        np.testing.assert_allclose(pg, adv, atol=ATOL)


@given(
    seed=st.integers(0, 2**31 - 1),
    num_steps=st.sampled_from([1, 2, 7]),
    lambda_=st.floats(0.0, 1.0),
    rho_bar=st.floats(0.1, 3.0),
    c_bar=st.floats(0.1, 3.0),
    rho_bar_pg=st.floats(0.1, 3.0),
)
@PROPERTY
def test_estimators_match_step_loop_references(
    seed, num_steps, lambda_, rho_bar, c_bar, rho_bar_pg
):
    rng = np.random.default_rng(seed)
    traj = _random_trajectory(rng, (num_steps,))
    log_rhos = jnp.asarray(rng.normal(size=(num_steps,)), jnp.float32)
    np_traj = {k: np.asarray(v, np.float64) for k, v in traj.items()}

    for got, want in zip(
        _gae(**traj, lambda_=lambda_), _gae_reference(**np_traj, lam=lambda_)
    ):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    hyper = dict(rho_bar=rho_bar, c_bar=c_bar, rho_bar_pg=rho_bar_pg)
    for got, want in zip(
        _vtrace(**traj, log_rhos=log_rhos, lambda_=lambda_, **hyper),
        _vtrace_reference(**np_traj, log_rhos=log_rhos, lam=lambda_, **hyper),
    ):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_episode_boundary_stops_every_recursion():
    boundary = 3
    traj = _random_trajectory(np.random.default_rng(1), (8,))
    # A truncation, so only the continuation (not the discount) can stop it.
    traj["discounts"] = jnp.full((8,), 0.9)
    traj["continuations"] = jnp.ones((8,)).at[boundary].set(0.0)
    log_rhos = jnp.asarray(np.random.default_rng(2).normal(size=8), jnp.float32)

    changed = dict(traj)
    for key in ("rewards", "values", "next_values"):
        changed[key] = traj[key].at[boundary + 1:].add(100.0)
    changed_log_rhos = log_rhos.at[boundary + 1:].add(3.0)

    before = slice(0, boundary + 1)
    for a, b in zip(_gae(**traj, lambda_=0.9), _gae(**changed, lambda_=0.9)):
        np.testing.assert_allclose(a[before], b[before], atol=ATOL)
        assert not np.allclose(a[boundary + 1:], b[boundary + 1:])
    hyper = dict(lambda_=0.9, rho_bar=2.0, c_bar=2.0, rho_bar_pg=2.0)
    for a, b in zip(
        _vtrace(**traj, log_rhos=log_rhos, **hyper),
        _vtrace(**changed, log_rhos=changed_log_rhos, **hyper),
    ):
        np.testing.assert_allclose(a[before], b[before], atol=ATOL)
        assert not np.allclose(a[boundary + 1:], b[boundary + 1:])


@pytest.mark.parametrize("shape", [(6,), (6, 3), (6, 3, 2)])
def test_trailing_batch_dims_match_per_column_calls(shape):
    rng = np.random.default_rng(3)
    traj = _random_trajectory(rng, shape)
    traj["log_rhos"] = jnp.asarray(rng.normal(size=shape), jnp.float32)
    hyper = dict(lambda_=0.8, rho_bar=1.3, c_bar=0.9, rho_bar_pg=1.1)

    @jax.jit
    def both(t):
        rest = {k: v for k, v in t.items() if k != "log_rhos"}
        return gae(**rest, lambda_=0.8) + vtrace(
            **rest, log_rhos=t["log_rhos"], **hyper
        )

    outputs = both(traj)
    flat = {k: v.reshape(shape[0], -1) for k, v in traj.items()}
    for col in range(flat["rewards"].shape[1]):
        column = both({k: v[:, col] for k, v in flat.items()})
        for out, out_col in zip(outputs, column):
            assert out.shape == shape
            np.testing.assert_allclose(
                out.reshape(shape[0], -1)[:, col], out_col, atol=ATOL
            )
    if len(shape) > 1:
        vmapped = jax.vmap(both, in_axes=1, out_axes=1)(traj)
        for out, out_vmapped in zip(outputs, vmapped):
            np.testing.assert_allclose(out, out_vmapped, atol=ATOL)


def test_vmap_over_hyper_parameters_under_jit():
    traj = _random_trajectory(np.random.default_rng(4), (7, 2))
    log_rhos = jnp.asarray(
        np.random.default_rng(5).normal(size=(7, 2)), jnp.float32
    )
    lambdas = jnp.array([0.0, 0.5, 0.9, 1.0])
    rho_bars = jnp.array([0.5, 1.0, 2.0, 4.0])

    gae_sweep = jax.jit(jax.vmap(lambda lam: gae(**traj, lambda_=lam)))(lambdas)
    vtrace_sweep = jax.jit(
        jax.vmap(
            lambda lam, rb: vtrace(
                **traj, log_rhos=log_rhos, lambda_=lam, rho_bar=rb, c_bar=rb
            )
        )
    )(lambdas, rho_bars)
    for i, (lam, rb) in enumerate(zip(lambdas.tolist(), rho_bars.tolist())):
        for swept, single in zip(gae_sweep, _gae(**traj, lambda_=lam)):
            np.testing.assert_allclose(swept[i], single, atol=ATOL)
        single_vtrace = _vtrace(
            **traj, log_rhos=log_rhos, lambda_=lam, rho_bar=rb, c_bar=rb
        )
        for swept, single in zip(vtrace_sweep, single_vtrace):
            np.testing.assert_allclose(swept[i], single, atol=ATOL)


# A few shapes keep compilation bounded while covering [T], [T, B], [T, B, C].
_TIME_MAJOR_SHAPES = st.sampled_from([(1,), (5,), (4, 3), (3, 2, 2)])


@jax.jit
def _outputs_and_input_grads(
    rewards, values, next_values, discounts, continuations, log_rhos, lambda_
):
    def total(rewards, values, next_values, log_rhos):
        common = (rewards, values, next_values, discounts, continuations)
        outputs = gae(*common, lambda_) + vtrace(
            *common, log_rhos, lambda_, 2.0, 1.5, 1.0
        )
        return sum(jnp.sum(out) for out in outputs), outputs

    return jax.grad(total, argnums=(0, 1, 2, 3), has_aux=True)(
        rewards, values, next_values, log_rhos
    )


@given(data=st.data(), shape=_TIME_MAJOR_SHAPES, lambda_=st.floats(0.0, 1.0))
@PROPERTY
def test_time_major_outputs_are_finite_stop_gradients(data, shape, lambda_):
    def floats(lo, hi):
        return data.draw(
            hnp.arrays(np.float32, shape, elements=st.floats(lo, hi, width=32))
        )

    rewards, values, next_values = (floats(-10, 10) for _ in range(3))
    discounts = floats(0, 1)
    continuations = data.draw(hnp.arrays(np.bool_, shape)).astype(np.float32)
    log_rhos = floats(-50, 50)

    grads, outputs = _outputs_and_input_grads(
        rewards,
        values,
        next_values,
        discounts,
        continuations,
        log_rhos,
        lambda_,
    )
    for out in outputs:
        assert out.shape == shape
        assert np.all(np.isfinite(out))
    for grad in grads:
        np.testing.assert_array_equal(grad, np.zeros(shape))


# ------------------------------------------------------------ GRPO and OPOB


@TRANSFORMS
def test_group_relative_hand_values(transform):
    returns = jnp.array([[0.0, 0.0, 4.0, 4.0], [1.0, 1.0, 1.0, 5.0]])
    # Group 0: mean 2, deviations [-2, -2, 2, 2], std sqrt(16/4) = 2.
    # Group 1: mean 2, deviations [-1, -1, -1, 3], std sqrt(12/4) = sqrt(3).
    grpo = transform(lambda r: group_relative_advantages(r, eps=0.0))(returns)
    s3 = math.sqrt(3.0)
    np.testing.assert_allclose(
        grpo, [[-1, -1, 1, 1], [-1 / s3, -1 / s3, -1 / s3, 3 / s3]], atol=ATOL
    )
    dr_grpo = transform(
        lambda r: group_relative_advantages(r, scale_by_std=False)
    )(returns)
    np.testing.assert_allclose(
        dr_grpo, [[-2, -2, 2, 2], [-1, -1, -1, 3]], atol=ATOL
    )


@TRANSFORMS
def test_group_ids_with_unequal_groups_hand_values(transform):
    # Group 0 = {1, 3} (mean 2, std 1); group 1 = {10, 10, 13} (mean 11,
    # std sqrt((1 + 1 + 4) / 3) = sqrt(2)); group 2 is empty.
    returns = jnp.array([10.0, 1.0, 10.0, 3.0, 13.0])
    group_ids = jnp.array([1, 0, 1, 0, 1])
    fn = transform(
        lambda r, g: group_relative_advantages(
            r, group_ids=g, num_groups=3, eps=0.0
        )
    )
    s2 = math.sqrt(2.0)
    np.testing.assert_allclose(
        fn(returns, group_ids), [-1 / s2, -1.0, -1 / s2, 1.0, 2 / s2], atol=ATOL
    )


@pytest.mark.parametrize("value", [3.0, 26.347404])
def test_constant_group_gets_exactly_zero_advantages(value):
    # In float32 the mean of five copies of 26.347404 is off by 2e-6; centred
    # on it, that rounding noise over std + eps ~ 1e-6 would be O(1).
    returns = jnp.full((1, 5), value)
    np.testing.assert_array_equal(_grpo(returns), np.zeros((1, 5)))
    log_w = jnp.array([[0.0, 1.0, -2.0, 0.5, 3.0]])
    np.testing.assert_array_equal(
        _opob(returns, log_w, jnp.ones((1, 5))), np.zeros((1, 5))
    )


_GROUP_SHAPES = st.sampled_from([(1, 5), (3, 4)])


@given(
    returns=hnp.arrays(
        np.float32, _GROUP_SHAPES, elements=st.floats(-100, 100, width=32)
    ),
    scale_by_std=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@PROPERTY
def test_group_relative_is_centred_and_layouts_agree(
    returns, scale_by_std, seed
):
    adv = _grpo(returns, scale_by_std=scale_by_std)
    assert adv.shape == returns.shape
    assert np.all(np.isfinite(adv))
    scale = 1.0 if scale_by_std else 1.0 + np.abs(returns).max()
    np.testing.assert_allclose(np.mean(adv, axis=-1), 0.0, atol=1e-4 * scale)

    # The same groups, flattened and shuffled, addressed by `group_ids`.
    num_groups, size = returns.shape
    perm = np.random.default_rng(seed).permutation(num_groups * size)
    group_ids = np.repeat(np.arange(num_groups), size)[perm]
    by_ids = _grpo(
        returns.reshape(-1)[perm],
        group_ids=jnp.asarray(group_ids),
        num_groups=num_groups,
        scale_by_std=scale_by_std,
    )
    np.testing.assert_allclose(by_ids, adv.reshape(-1)[perm], atol=1e-4)


def test_opob_with_equal_weights_is_the_plain_mean_baseline():
    returns = jnp.array([[1.0, 2.0, 6.0, 3.0], [0.0, -1.0, 5.0, 2.0]])
    # Equal w^2 * ||g||^2 within each group, by a different route per sample.
    log_w = jnp.log(jnp.array([[1.0, 2.0, 0.5, 1.0], [3.0, 3.0, 3.0, 3.0]]))
    grad_sq_norms = jnp.array([[4.0, 1.0, 16.0, 4.0], [0.1, 0.1, 0.1, 0.1]])
    np.testing.assert_allclose(
        _opob(returns, log_w, grad_sq_norms), _grpo(returns), atol=ATOL
    )


# R = [1, 2, 6], w = [1, 2, 1], ||g||^2 = [2, 1, 1] -> W = [2, 4, 1].
# b = (2*1 + 4*2 + 1*6) / 7 = 16/7; mean 3, std sqrt((4 + 1 + 9) / 3).
_OPOB_R = jnp.array([1.0, 2.0, 6.0])
_OPOB_LOG_W = jnp.log(jnp.array([1.0, 2.0, 1.0]))
_OPOB_G2 = jnp.array([2.0, 1.0, 1.0])
_OPOB_EXPECTED = (np.array([1.0, 2.0, 6.0]) - 16 / 7) / math.sqrt(14 / 3)


@TRANSFORMS
@pytest.mark.parametrize("shift", [0.0, 50.0, -50.0])
def test_opob_hand_weighted_baseline(transform, shift):
    # A common shift of log_w rescales every W of the group, leaving b alone;
    # at +-50, w^2 is far outside float32 and must not be formed directly.
    adv = transform(lambda r, lw, g: opob_advantages(r, lw, g, eps=0.0))(
        _OPOB_R, _OPOB_LOG_W + shift, _OPOB_G2
    )
    np.testing.assert_allclose(adv, _OPOB_EXPECTED, rtol=1e-5)


def test_opob_group_ids_match_group_axis():
    returns = jnp.stack([_OPOB_R, jnp.array([0.0, 4.0, 1.0])])
    # Log-weights 100 apart between the groups: each group's W must be
    # normalised by its own maximum, or one of them overflows or underflows.
    log_w = jnp.stack(
        [_OPOB_LOG_W - 50.0, jnp.array([0.3, -0.2, 1.0]) + 50.0]
    )
    grad_sq_norms = jnp.stack([_OPOB_G2, jnp.array([1.0, 0.5, 2.0])])
    perm = jnp.array([3, 0, 5, 1, 4, 2])
    group_ids = jnp.array([0, 0, 0, 1, 1, 1])[perm]
    by_ids = _opob(
        returns.reshape(-1)[perm],
        log_w.reshape(-1)[perm],
        grad_sq_norms.reshape(-1)[perm],
        group_ids=group_ids,
        num_groups=2,
    )
    by_axis = _opob(returns, log_w, grad_sq_norms)
    np.testing.assert_allclose(by_ids, by_axis.reshape(-1)[perm], atol=ATOL)
    np.testing.assert_allclose(by_axis[0], _OPOB_EXPECTED, rtol=1e-5)


def test_grouped_estimators_under_vmap():
    rng = np.random.default_rng(6)
    returns, log_w = (
        jnp.asarray(rng.normal(size=(3, 6)), jnp.float32) for _ in range(2)
    )
    grad_sq_norms = jnp.asarray(rng.random((3, 6)), jnp.float32)
    # Each row holds two interleaved groups of three.
    group_ids = jnp.tile(jnp.array([0, 1, 0, 1, 0, 1]), (3, 1))
    by_ids = jax.jit(
        jax.vmap(
            lambda r, lw, g, ids: (
                group_relative_advantages(r, group_ids=ids, num_groups=2),
                opob_advantages(r, lw, g, group_ids=ids, num_groups=2),
            )
        )
    )(returns, log_w, grad_sq_norms, group_ids)

    def regroup(x):  # [3, 6] -> [3, 2, 3], group axis last
        return x.reshape(3, 3, 2).swapaxes(1, 2)

    by_axis = (
        _grpo(regroup(returns)),
        _opob(regroup(returns), regroup(log_w), regroup(grad_sq_norms)),
    )
    for got, want in zip(by_ids, by_axis):
        np.testing.assert_allclose(regroup(got), want, atol=ATOL)


def test_opob_all_zero_weights_fall_back_to_mean():
    returns = jnp.array([[1.0, 2.0, 6.0], [1.0, 2.0, 6.0]])
    # Group 0 has no weight at all; group 1 puts all of it on sample 2.
    grad_sq_norms = jnp.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    adv = _opob(returns, jnp.zeros_like(returns), grad_sq_norms)
    std = math.sqrt(14 / 3)
    np.testing.assert_allclose(
        adv[0], (np.array([1.0, 2.0, 6.0]) - 3.0) / std, rtol=1e-5
    )
    np.testing.assert_allclose(
        adv[1], (np.array([1.0, 2.0, 6.0]) - 6.0) / std, rtol=1e-5
    )


@jax.jit
def _opob_and_input_grads(returns, log_w, grad_sq_norms):
    def total(*args):
        adv = opob_advantages(*args)
        return jnp.sum(adv), adv

    return jax.grad(total, argnums=(0, 1, 2), has_aux=True)(
        returns, log_w, grad_sq_norms
    )


@given(
    data=st.data(),
    shape=_GROUP_SHAPES,
    extreme=st.sampled_from([50.0, 1e4]),
)
@PROPERTY
def test_opob_extreme_log_weights_stay_finite(data, shape, extreme):
    returns = data.draw(
        hnp.arrays(np.float32, shape, elements=st.floats(-10, 10, width=32))
    )
    log_w = data.draw(
        hnp.arrays(
            np.float32,
            shape,
            elements=st.sampled_from([-extreme, 0.0, extreme]),
        )
    )
    grad_sq_norms = data.draw(
        hnp.arrays(np.float32, shape, elements=st.floats(0, 1e3, width=32))
    )
    grads, adv = _opob_and_input_grads(returns, log_w, grad_sq_norms)
    assert adv.shape == shape
    assert np.all(np.isfinite(adv))
    for grad in grads:
        np.testing.assert_array_equal(grad, np.zeros(shape))


@TRANSFORMS
@pytest.mark.parametrize("shift", [0.0, 50.0, -50.0])
def test_opob_baseline_hand_computed(transform, shift):
    # Group 0 is the hand example above (b = 16/7). Group 1: R = [0, 4, 1],
    # w = [1, 1, 3], ||g||^2 = [1, 2, 1] -> W = [1, 2, 9], b = (0 + 8 + 9) / 12.
    rewards = jnp.stack([_OPOB_R, jnp.array([0.0, 4.0, 1.0])])
    log_w = jnp.stack([_OPOB_LOG_W, jnp.log(jnp.array([1.0, 1.0, 3.0]))])
    grad_sq_norms = jnp.stack([_OPOB_G2, jnp.array([1.0, 2.0, 1.0])])
    baseline = transform(off_policy_optimal_baseline)(
        rewards, log_w + shift, grad_sq_norms
    )
    assert baseline.shape == (2,)
    np.testing.assert_allclose(baseline, [16 / 7, 17 / 12], rtol=1e-5)


@TRANSFORMS
def test_opob_baseline_truncates_weights_at_the_cap(transform):
    # w = [1, 20, 1], ||g||^2 = [2, 1, 1]: untruncated W = [2, 400, 1],
    # b = (2 + 800 + 6) / 403; at C = 8, W = [2, 64, 1], b = (2 + 128 + 6) / 67.
    log_w = jnp.log(jnp.array([1.0, 20.0, 1.0]))
    baseline = transform(
        lambda r, lw, g, cap: off_policy_optimal_baseline(r, lw, g, weight_cap=cap)
    )
    np.testing.assert_allclose(
        baseline(_OPOB_R, log_w, _OPOB_G2, jnp.inf), 808 / 403, rtol=1e-5
    )
    np.testing.assert_allclose(
        baseline(_OPOB_R, log_w, _OPOB_G2, 8.0), 136 / 67, rtol=1e-5
    )
    np.testing.assert_allclose(
        off_policy_optimal_baseline(_OPOB_R, log_w, _OPOB_G2), 808 / 403, rtol=1e-5
    )


@given(
    rewards=hnp.arrays(
        np.float32, _GROUP_SHAPES, elements=st.floats(-100, 100, width=32)
    ),
    log_w=st.floats(-60, 60, width=32),
    grad_sq_norm=st.floats(0.0625, 1024.0, width=32),
)
@PROPERTY
def test_opob_baseline_with_equal_weights_is_the_group_mean(
    rewards, log_w, grad_sq_norm
):
    baseline = _baseline(
        rewards,
        jnp.full(rewards.shape, log_w),
        jnp.full(rewards.shape, grad_sq_norm),
    )
    np.testing.assert_allclose(
        baseline, rewards.mean(axis=-1), atol=1e-4 * (1 + np.abs(rewards).max())
    )


def test_opob_baseline_edge_cases():
    rewards = jnp.array([[1.0, 2.0, 6.0], [1.0, 2.0, 6.0], [26.347404] * 3])
    # All W = 0 -> the plain mean; all W on one sample -> its reward; huge
    # log-weights stay finite; a constant group's baseline is its reward exactly.
    grad_sq_norms = jnp.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]])
    log_w = jnp.array([[0.0, 0.0, 0.0], [1e4, -1e4, 1e4], [1e4, 0.0, -1e4]])
    baseline = _baseline(rewards, log_w, grad_sq_norms)
    np.testing.assert_allclose(baseline[:2], [3.0, 6.0], rtol=1e-6)
    assert baseline[2] == np.float32(26.347404)


def test_opob_advantages_use_the_opob_baseline():
    rng = np.random.default_rng(3)
    rewards, log_w = (jnp.asarray(rng.normal(size=(4, 6)), jnp.float32) for _ in range(2))
    grad_sq_norms = jnp.asarray(rng.random((4, 6)), jnp.float32)
    baseline = _baseline(rewards, log_w, grad_sq_norms, weight_cap=2.0)
    std = rewards.std(axis=-1, keepdims=True)
    np.testing.assert_allclose(
        jax.jit(lambda *a: opob_advantages(*a, weight_cap=2.0, eps=0.0))(
            rewards, log_w, grad_sq_norms
        ),
        (rewards - baseline[:, None]) / std,
        atol=1e-4,
    )


# ------------------------------------------------- per-sample gradient norms


@TRANSFORMS
def test_per_sample_grad_sq_norms_closed_form(transform):
    # log p = y (x . theta) + bias  =>  grads (y x, 1), norm^2 = y^2 |x|^2 + 1.
    def log_prob_fn(params, sample):
        theta, bias = params["theta"], params["bias"]
        return sample["y"] * jnp.dot(sample["x"], theta) + bias

    params = {"theta": jnp.array([0.3, -1.0, 2.0]), "bias": jnp.array(0.5)}
    batch = {
        "x": jnp.array([[1.0, 2.0, 2.0], [0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]),
        "y": jnp.array([1.0, 5.0, -2.0]),
    }
    for chunk_size in (None, 1, 2, 3):
        norms = transform(
            lambda p, b: per_sample_grad_sq_norms(
                log_prob_fn, p, b, chunk_size=chunk_size
            )
        )(params, batch)
        np.testing.assert_allclose(norms, [9.0 + 1.0, 0.0 + 1.0, 100.0 + 1.0])


# ------------------------------------------------------------ input errors


def _time_major(**overrides):
    arrays = dict(HAND, log_rhos=jnp.zeros(4))
    arrays.update(overrides)
    return arrays


def _gae_call(**overrides):
    arrays = _time_major(**overrides)
    arrays.pop("log_rhos")
    return lambda: gae(**arrays, lambda_=0.9)


def _vtrace_call(**overrides):
    return lambda: vtrace(**_time_major(**overrides))


_RETURNS = jnp.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "call, name",
    [
        pytest.param(_gae_call(values=jnp.zeros(5)), "values", id="length"),
        pytest.param(
            _gae_call(values=jnp.zeros((4, 1))), "values", id="trailing-dim"
        ),
        pytest.param(
            _gae_call(rewards=jnp.array([1, 2, 3, 4])), "rewards", id="int"
        ),
        pytest.param(
            lambda: gae(*[jnp.array(1.0)] * 5, lambda_=0.9),
            "rewards",
            id="rank-0",
        ),
        pytest.param(
            lambda: gae(**HAND, lambda_=jnp.ones(2)),
            "lambda_",
            id="vector-lambda",
        ),
        pytest.param(
            _vtrace_call(log_rhos=jnp.zeros(3)), "log_rhos", id="vtrace-length"
        ),
        pytest.param(
            _vtrace_call(continuations=jnp.ones(4, bool)),
            "continuations",
            id="vtrace-bool",
        ),
        pytest.param(
            lambda: vtrace(**_time_major(), rho_bar=jnp.ones(4)),
            "rho_bar",
            id="vector-rho-bar",
        ),
        pytest.param(
            lambda: group_relative_advantages(jnp.arange(3)),
            "returns",
            id="grpo-int",
        ),
        pytest.param(
            lambda: group_relative_advantages(jnp.array(1.0)),
            "returns",
            id="grpo-rank-0",
        ),
        pytest.param(
            lambda: group_relative_advantages(
                _RETURNS, group_ids=jnp.zeros(3), num_groups=1
            ),
            "group_ids",
            id="float-group-ids",
        ),
        pytest.param(
            lambda: group_relative_advantages(
                _RETURNS, group_ids=jnp.zeros(2, int), num_groups=1
            ),
            "group_ids",
            id="group-ids-length",
        ),
        pytest.param(
            lambda: group_relative_advantages(
                _RETURNS, group_ids=jnp.zeros(3, int)
            ),
            "num_groups",
            id="missing-num-groups",
        ),
        pytest.param(
            lambda: opob_advantages(_RETURNS, jnp.zeros(2), jnp.ones(3)),
            "log_w",
            id="opob-length",
        ),
        pytest.param(
            lambda: opob_advantages(_RETURNS, jnp.zeros(3), jnp.ones(3, int)),
            "grad_sq_norms",
            id="opob-int",
        ),
        pytest.param(
            lambda: off_policy_optimal_baseline(
                jnp.ones((2, 3)), jnp.zeros((2, 2)), jnp.ones((2, 3))
            ),
            "log_weights",
            id="opob-baseline-shape",
        ),
        pytest.param(
            lambda: off_policy_optimal_baseline(
                jnp.array(1.0), jnp.array(0.0), jnp.array(1.0)
            ),
            "rewards",
            id="opob-baseline-rank-0",
        ),
        pytest.param(
            lambda: off_policy_optimal_baseline(
                _RETURNS, jnp.zeros(3), jnp.ones(3), weight_cap=jnp.ones(3)
            ),
            "weight_cap",
            id="opob-baseline-vector-cap",
        ),
        pytest.param(
            lambda: per_sample_grad_sq_norms(
                lambda p, s: jnp.sum(s["x"] * p),
                jnp.ones(2),
                {"x": jnp.ones((3, 2)), "y": jnp.ones(4)},
            ),
            "batch",
            id="batch-sizes",
        ),
        pytest.param(
            lambda: per_sample_grad_sq_norms(
                lambda p, s: jnp.sum(s * p), jnp.ones(2), jnp.ones((3, 2)), chunk_size=0
            ),
            "chunk_size",
            id="chunk-size",
        ),
    ],
)
def test_bad_inputs_raise_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        call()
