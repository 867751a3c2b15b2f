"""The authors' TVPO (token `vaco`), DPPO's two losses and TBA, against hand-computed values,
and their invariants at lag 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens.algorithms import ALGORITHMS
from vaco_jax.tokens.surrogates import TokenTerms
from vaco_jax.tokens.config import TokenHParams

# Four one-token sequences in two prompt groups. pi_theta / beta = (1.1, 1.0 | 1.5, 0.5).
RATIO = np.asarray([1.1, 1.0, 1.5, 0.5])
ADVANTAGES = np.asarray([1.0, -1.0, 1.0, 1.0])


def _terms(algo, ratio=RATIO, advantages=ADVANTAGES, **static):
    log_prob = jnp.log(jnp.asarray(ratio, jnp.float32))[:, None]
    zeros = jnp.zeros_like(log_prob)
    return TokenTerms(log_prob=log_prob, behaviour_log_prob=zeros, phase_log_prob=zeros,
                      advantages=jnp.asarray(advantages, jnp.float32), mask=jnp.ones_like(zeros),
                      version_gap=zeros, group=jnp.asarray([0, 0, 1, 1]), num_groups=2,
                      aggregation=ALGORITHMS[algo].aggregation, **static)


def _loss_and_grad(algo, terms, compile_=False, **hparams):
    hp = TokenHParams.create(**hparams)

    def loss_fn(log_prob):
        return ALGORITHMS[algo].policy_loss(terms.replace(log_prob=log_prob), hp)
    fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, metrics), grad = (jax.jit(fn) if compile_ else fn)(terms.log_prob)
    return float(loss), np.asarray(grad)[:, 0], {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("compile_", [False, True])
def test_tvpo_keeps_a_group_within_budget_and_filters_the_rest(compile_):
    # Budget 0.2: TV threshold 0.1. Group TVs 0.5 mean|r - 1|: 0.025 and 0.25; the batch's,
    # their mean, 0.1375. Group 0 is within: kept whole. In group 1 the filter acts: r = 1.5
    # with A > 0 would raise TV and is dropped; r = 0.5 with A > 0 pulls back and stays.
    loss, grad, metrics = _loss_and_grad("vaco", _terms("vaco"), compile_, tv_delta=0.2)
    assert metrics["filter_fraction"] == pytest.approx(0.25)
    # -A sg(min(r, C)) log pi per sequence, the dropped one counted: the mean over all four.
    np.testing.assert_allclose(grad, [-1.1 / 4, 1.0 / 4, 0.0, -0.5 / 4], rtol=1e-5)
    expected = (-1.1 * np.log(1.1) + 0.0 + 0.0 - 0.5 * np.log(0.5)) / 4
    assert loss == pytest.approx(expected, rel=1e-5)


def test_tvpo_batch_scope_filters_every_group_and_keeps_unmoved_tokens():
    # The batch's token-weighted TV, 0.5 (0.1 + 0 + 0.5 + 0.5) / 4 = 0.1375 > 0.1: r = 1.1
    # (A > 0) and r = 1.5 (A > 0) are dropped; r = 1 has no sign and stays, as does r = 0.5.
    _, grad, metrics = _loss_and_grad("vaco", _terms("vaco", tv_scope="batch"), tv_delta=0.2)
    assert metrics["filter_fraction"] == pytest.approx(0.5)
    np.testing.assert_allclose(grad, [0.0, 1.0 / 4, 0.0, -0.5 / 4], rtol=1e-5)
    # Below the threshold (budget 0.3, TV 0.15) nothing is dropped, and nothing is clipped:
    # r = 1.5 keeps its whole weight.
    _, grad, metrics = _loss_and_grad("vaco", _terms("vaco", tv_scope="batch"), tv_delta=0.3)
    assert metrics["filter_fraction"] == 0.0
    np.testing.assert_allclose(grad, -ADVANTAGES * RATIO / 4, rtol=1e-5)


def test_tvpo_truncates_its_weight_and_reads_the_old_convention():
    _, grad, metrics = _loss_and_grad("vaco", _terms("vaco", tv_scope="batch"), tv_delta=0.3,
                                      trust_is_cap=1.05)
    np.testing.assert_allclose(grad, -ADVANTAGES * np.minimum(RATIO, 1.05) / 4, rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)
    # Read as a TV threshold itself, 0.1 filters as the budget 0.2 does.
    as_tv = _loss_and_grad("vaco", _terms("vaco", tv_delta_convention="tv"), tv_delta=0.1)
    as_budget = _loss_and_grad("vaco", _terms("vaco"), tv_delta=0.2)
    np.testing.assert_allclose(as_tv[1], as_budget[1])


def test_tvpo_measures_the_chosen_reference():
    # pi_theta = beta but pi_T away from both: against beta nothing moved.
    terms = _terms("vaco", ratio=np.ones(4)).replace(
        phase_log_prob=jnp.log(jnp.asarray([[0.5], [0.5], [2.0], [2.0]])))
    assert _loss_and_grad("vaco", terms, tv_delta=0.2)[2]["filter_fraction"] == 0.0
    phase = _loss_and_grad("vaco", terms.replace(tv_reference="phase"), tv_delta=0.2)
    # Against pi_T: ratios 2, 2, 0.5, 0.5 (group TVs 0.5 and 0.25, both past 0.1). Only the
    # first (A = 1, r = 2) would raise TV; the others pull their ratio back.
    assert phase[2]["filter_fraction"] == pytest.approx(0.25)


@pytest.mark.parametrize("algo,hparams,kept", [
    # p = r * p_old with p_old = 0.5: p = 0.55, 0.5, 0.75, 0.25 (moves +0.05, 0, +0.25, -0.25).
    ("dppo_binary_tv", dict(dppo_delta_low=0.15, dppo_delta_high=0.15), [1, 1, 0, 1]),
    ("dppo_binary_tv", dict(dppo_delta_low=0.15, dppo_delta_high=0.3), [1, 1, 1, 1]),
    # Binary KLs: 0.005, 0, 0.131, 0.131; the fourth fell against its advantage (A > 0): kept.
    ("dppo_binary_kl", dict(dppo_kl_delta=0.05), [1, 1, 0, 1]),
    ("dppo_binary_kl", dict(dppo_kl_delta=0.004), [0, 1, 0, 1]),
])
def test_dppo_masks_the_probabilities_that_moved_past_their_budget(algo, hparams, kept):
    terms = _terms(algo).replace(behaviour_log_prob=jnp.full((4, 1), jnp.log(0.5)),
                                 log_prob=jnp.log(0.5 * jnp.asarray(RATIO))[:, None])
    hp = TokenHParams.create(**hparams)

    def loss_fn(log_prob):
        return ALGORITHMS[algo].policy_loss(terms.replace(log_prob=log_prob), hp)
    (_, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(terms.log_prob)
    kept = np.asarray(kept, np.float32)
    np.testing.assert_allclose(np.asarray(grad)[:, 0], -ADVANTAGES * RATIO * kept / 4, rtol=1e-5)
    assert float(metrics["is_masked_fraction"]) == pytest.approx(1 - kept.mean())


def _tba_terms(log_prob, reward, reference=None):
    log_prob = jnp.asarray(log_prob, jnp.float32)
    zeros = jnp.zeros_like(log_prob)
    return TokenTerms(log_prob=log_prob, behaviour_log_prob=zeros, phase_log_prob=zeros,
                      advantages=jnp.zeros(4), mask=jnp.ones_like(log_prob), version_gap=zeros,
                      group=jnp.asarray([0, 0, 1, 1]), reward=jnp.asarray(reward, jnp.float32),
                      reference_log_prob=zeros if reference is None else jnp.asarray(reference),
                      num_groups=2)


@pytest.mark.parametrize("compile_", [False, True])
def test_tba_is_the_variance_of_each_groups_balance_residuals(compile_):
    log_prob = [[-0.1, -0.2], [-0.5, -0.3], [-1.0, -0.1], [-0.2, -0.2]]
    reference = [[-0.2, -0.2], [-0.1, -0.1], [-0.3, -0.3], [-0.4, -0.1]]
    reward = [1.0, 0.0, 1.0, 1.0]
    beta = 0.5
    # Residuals sum log(pi / p_ref) - R / beta: (0.1 - 2, -0.6, -0.5 - 2, 0.1 - 2); log Z of a
    # group is minus their mean, so each sequence's term is its deviation from the group mean.
    residual = np.asarray([-1.9, -0.6, -2.5, -1.9])
    deviation = residual - np.repeat([residual[:2].mean(), residual[2:].mean()], 2)
    terms = _tba_terms(log_prob, reward, reference)
    loss, grad, _ = _tba_loss_and_grad(terms, beta, compile_)
    assert loss == pytest.approx(np.mean(deviation ** 2), rel=1e-5)
    # log Z is stop-gradient: d/d log pi_t = 2 deviation / N for every token of the sequence.
    np.testing.assert_allclose(grad, np.repeat(2 * deviation[:, None] / 4, 2, axis=1), rtol=1e-5)


def _tba_loss_and_grad(terms, beta, compile_=False):
    hp = TokenHParams.create(tba_beta=beta)

    def loss_fn(log_prob):
        return ALGORITHMS["tba"].policy_loss(terms.replace(log_prob=log_prob), hp)
    fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, metrics), grad = (jax.jit(fn) if compile_ else fn)(terms.log_prob)
    return float(loss), np.asarray(grad), metrics


def test_tba_ignores_the_behaviour_policy_and_a_groups_reward_offset():
    log_prob = [[-0.1, -0.2], [-0.5, -0.3], [-1.0, -0.1], [-0.2, -0.2]]
    terms = _tba_terms(log_prob, [1.0, 0.0, 1.0, 1.0])
    base = _tba_loss_and_grad(terms, 0.5)
    # Off-policy by construction: no ratio to the policy that generated the data.
    stale = _tba_loss_and_grad(terms.replace(behaviour_log_prob=jnp.full((4, 2), -3.0)), 0.5)
    np.testing.assert_allclose(stale[1], base[1])
    # log Z absorbs a reward shared by a prompt's samples.
    shifted = _tba_loss_and_grad(terms.replace(reward=terms.reward + jnp.asarray(
        [2.0, 2.0, -1.0, -1.0])), 0.5)
    np.testing.assert_allclose(shifted[1], base[1], rtol=1e-5, atol=1e-6)
    assert shifted[0] == pytest.approx(base[0], rel=1e-5)
