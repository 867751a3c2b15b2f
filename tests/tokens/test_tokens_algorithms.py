"""The token testbed's algorithm registry: hand-computed losses and advantages, invariants at
lag 0, the VCPO hooks, training at lag 0 and at a high lag, and refused thresholds."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import losses, testbeds
from vaco_jax import experiment as sweep
from vaco_jax.core import phase
from vaco_jax.core.knobs import read_by
from vaco_jax.core.policy_buffer import push
from vaco_jax.tokens.algorithms import ALGORITHMS, STABILISER_METRICS
from vaco_jax.tokens.surrogates import (AdvantageInputs, TokenTerms, group_centred,
                                        group_relative, leave_one_out)
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer

TINY = TokenConfig(task="add", task_size=1, layers=1, width=32, heads=2, context=10, prompts=4,
                   group_size=4, num_updates=2, eval_every=2, eval_prompts=8,
                   buffer_capacity=4, minibatches=2, partial_credit=True)
PARAMS = TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(0))
HP = TokenHParams.create(learning_rate=3e-3)


def _inputs(reward, scale_by_std=True):
    """Fresh sequences (log staleness 0) with equal gradient norms."""
    reward = jnp.asarray(reward, jnp.float32)
    return AdvantageInputs(reward=reward, log_staleness=jnp.zeros_like(reward),
                           scale_by_std=scale_by_std,
                           sequence_grad_sq_norms=lambda: jnp.ones_like(reward))


def _terms(algo, log_prob, behaviour=None, phase=None, advantages=(1.0, -1.0), mask=None,
           version_gap=None, **static):
    """Terms of two sequences of length `L` for `algo`, with its own aggregation."""
    log_prob = jnp.asarray(log_prob, jnp.float32)
    zeros = jnp.zeros_like(log_prob)
    as_array = lambda x: zeros + (0.0 if x is None else jnp.asarray(x, jnp.float32))  # noqa
    aggregation = ALGORITHMS[algo].aggregation or "token-mean"
    return TokenTerms(log_prob=log_prob, behaviour_log_prob=as_array(behaviour),
                      phase_log_prob=as_array(phase), advantages=jnp.asarray(advantages),
                      mask=jnp.ones_like(log_prob) if mask is None else as_array(mask),
                      version_gap=as_array(version_gap),
                      group=jnp.zeros(log_prob.shape[0], jnp.int32),
                      reward=jnp.zeros(log_prob.shape[0]), reference_log_prob=zeros,
                      aggregation=aggregation, **static)


def _loss_and_grad(algo, terms, **hparams):
    """The loss, its gradient in the current log-probs, and the stabiliser metrics."""
    hp = TokenHParams.create(**hparams)
    loss_fn = lambda lp: ALGORITHMS[algo].policy_loss(terms.replace(log_prob=lp), hp)  # noqa
    (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(terms.log_prob)
    return float(loss), np.asarray(grad), {k: float(v) for k, v in metrics.items()}


# ---------------------------------------------------------------------------- advantages
def test_rloo_and_group_mean_baselines_by_hand():
    reward = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]]
    # Leave-one-out: R_i minus the mean of the three others.
    np.testing.assert_allclose(leave_one_out(_inputs(reward)),
                               [[1, -1 / 3, -1 / 3, -1 / 3], [1 / 3, 1 / 3, -1, 1 / 3]],
                               rtol=1e-6)
    np.testing.assert_allclose(group_centred(_inputs(reward)),
                               [[0.75, -0.25, -0.25, -0.25], [0.25, 0.25, -0.75, 0.25]],
                               rtol=1e-6)
    # GRPO divides by the population std (sqrt(3)/4 in both groups) unless told not to.
    np.testing.assert_allclose(group_relative(_inputs(reward)),
                               np.asarray(group_centred(_inputs(reward))) / (np.sqrt(3) / 4),
                               rtol=1e-4)
    np.testing.assert_allclose(group_relative(_inputs(reward, scale_by_std=False)),
                               group_centred(_inputs(reward)), rtol=1e-6)


def test_every_entry_and_each_of_its_knobs_documents_itself():
    for algo in ALGORITHMS.values():
        assert algo.description and algo.source, algo.name
        assert all(knob.description for knob in algo.knobs), algo.name


# ---------------------------------------------------------------------------- hand-computed losses
def test_dr_grpo_divides_each_sequence_by_the_constant_length():
    # On-policy (ratio 1) PPO-clip is -A per token; sequences of 1 and 3 valid tokens of L = 4.
    mask = [[1, 0, 0, 0], [1, 1, 1, 0]]
    log_prob = jnp.full((2, 4), -1.0)
    dr, _, _ = _loss_and_grad("dr_grpo", _terms("dr_grpo", log_prob, log_prob, mask=mask))
    grpo, _, _ = _loss_and_grad("grpo", _terms("grpo", log_prob, log_prob, mask=mask))
    assert dr == pytest.approx(((-1 / 4) + (3 / 4)) / 2)
    assert grpo == pytest.approx((-1 + 3) / 4)


def test_reinforce_is_ratio_free():
    # -A log pi, whatever the behaviour log-prob says.
    log_prob = jnp.asarray([[-1.0, -2.0], [-0.5, -0.5]])
    loss, grad, metrics = _loss_and_grad("reinforce", _terms("reinforce", log_prob, behaviour=-9.0))
    assert loss == pytest.approx((1 + 2 - 0.5 - 0.5) / 4)
    np.testing.assert_allclose(grad, [[-0.25, -0.25], [0.25, 0.25]])
    assert metrics == {}


def test_tis_truncates_the_behaviour_ratio_per_token_or_per_sequence():
    # Behaviour ratios 0.5, 3 | 1, 4 against cap 2.
    behaviour = -jnp.log(jnp.asarray([[0.5, 3.0], [1.0, 4.0]]))
    _, grad, metrics = _loss_and_grad("tis", _terms("tis", jnp.zeros((2, 2)), behaviour),
                                      is_cap=2.0)
    np.testing.assert_allclose(grad, -np.asarray([[0.5, 2.0], [-1.0, -2.0]]) / 4, rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)
    assert metrics["is_weight_mean"] == pytest.approx((0.5 + 2 + 1 + 2) / 4)
    # Sequence level: weights min(0.5 * 3, 2) = 1.5 and min(1 * 4, 2) = 2 on every token.
    _, grad, metrics = _loss_and_grad(
        "tis", _terms("tis", jnp.zeros((2, 2)), behaviour, is_level="sequence"), is_cap=2.0)
    np.testing.assert_allclose(grad, -np.asarray([[1.5, 1.5], [-2.0, -2.0]]) / 4, rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)


def test_mis_drops_ratios_outside_its_bounds_and_keeps_the_others_weight():
    behaviour = -jnp.log(jnp.asarray([[0.5, 3.0], [1.0, 0.1]]))
    _, grad, metrics = _loss_and_grad("mis", _terms("mis", jnp.zeros((2, 2)), behaviour),
                                      is_cap=2.0, mis_low=0.2)
    np.testing.assert_allclose(grad, -np.asarray([[0.5, 0.0], [-1.0, 0.0]]) / 4, rtol=1e-5)
    assert metrics["is_masked_fraction"] == pytest.approx(0.5)


def test_decoupled_ppo_clips_the_phase_ratio_and_weights_by_truncated_staleness():
    # pi_theta = pi_T (phase ratio 1); staleness pi_T / beta = 0.5, 3 | 1, 1 with cap 2.
    staleness = jnp.asarray([[0.5, 3.0], [1.0, 1.0]])
    terms = _terms("decoupled_ppo", jnp.zeros((2, 2)), behaviour=-jnp.log(staleness),
                   phase=jnp.zeros((2, 2)))
    loss, grad, metrics = _loss_and_grad("decoupled_ppo", terms, is_cap=2.0)
    assert loss == pytest.approx(-(0.5 + 2.0 - 1.0 - 1.0) / 4, rel=1e-5)
    np.testing.assert_allclose(grad, -np.asarray([[0.5, 2.0], [-1.0, -1.0]]) / 4, rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.25)
    assert metrics["is_weight_mean"] == pytest.approx(4.5 / 4)
    # The behaviour ratio plays no part beyond the staleness: grpo's clip sees ratio 3 there.
    _, grpo_grad, _ = _loss_and_grad("grpo", terms)
    assert not np.allclose(grpo_grad, grad)


def test_freshness_mask_drops_sequences_older_than_alpha_versions():
    # Three sequences of 2 tokens; under in_flight the first token is the oldest.
    gap = [[0, 0], [2, 2], [3, 1]]
    terms = _terms("freshness_mask", jnp.zeros((3, 2)), jnp.zeros((3, 2)),
                   advantages=(1.0, -1.0, 2.0), version_gap=gap)
    loss, grad, metrics = _loss_and_grad("freshness_mask", terms, freshness_alpha=1.0)
    assert loss == pytest.approx(-1.0)  # the mean of -A over the two fresh tokens
    np.testing.assert_allclose(grad, [[-0.5, -0.5], [0, 0], [0, 0]])
    assert metrics["stale_dropped_fraction"] == pytest.approx(4 / 6)
    assert metrics[phase.KEPT] == 2  # the optimiser steps
    _, _, metrics = _loss_and_grad("freshness_mask", terms, freshness_alpha=3.0)
    assert metrics["stale_dropped_fraction"] == 0.0
    _, grad, metrics = _loss_and_grad("freshness_mask", terms.replace(version_gap=terms.version_gap
                                                                      + 2), freshness_alpha=1.0)
    assert metrics[phase.KEPT] == 0 and not grad.any()  # nothing kept: no step


# The mechanisms that remove samples from a surrogate; one that does must say how many it kept,
# so that a step that kept none leaves the optimiser as it was (`phase.optimiser_step`).
DROPPING = ("is_masked_fraction", "stale_dropped_fraction", "filter_fraction")


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_surrogate_that_drops_samples_says_how_many_it_kept(algo):
    terms = _terms(algo, jnp.zeros((2, 3)), behaviour=[[0.0, -2.0, 1.0], [0.5, 0.0, -0.5]])
    _, _, metrics = _loss_and_grad(algo, terms)
    if any(name in metrics for name in DROPPING):
        assert phase.KEPT in metrics
        assert 0 <= metrics[phase.KEPT] <= 6


def test_topr_keeps_positive_sequences_and_tapers_negative_ones_by_their_sequence_ratio():
    behaviour = -jnp.log(jnp.asarray([[4.0, 0.1], [0.5, 0.6]]))  # sequence ratios 0.4 and 0.3
    _, grad, metrics = _loss_and_grad("topr", _terms("topr", jnp.zeros((2, 2)), behaviour))
    np.testing.assert_allclose(grad, -np.asarray([[1.0, 1.0], [-0.3, -0.3]]) / 4, rtol=1e-5)
    assert metrics["is_weight_mean"] == pytest.approx(1.3 / 2, rel=1e-5)
    # The taper acted on the negative sequence's two tokens, half of the valid ones.
    assert metrics["is_tapered_fraction"] == pytest.approx(0.5)


def test_grpo_tv_filter_filters_against_the_chosen_reference():
    # pi_theta = pi_T but away from beta: TV to pi_T is 0, TV to beta 0.15.
    behaviour = -jnp.log(jnp.asarray([[1.1, 1.1], [0.5, 0.5]]))
    kwargs = dict(log_prob=jnp.zeros((2, 2)), behaviour=behaviour, phase=jnp.zeros((2, 2)),
                  advantages=(1.0, 1.0))
    grpo = _loss_and_grad("grpo", _terms("grpo", **kwargs))
    # A budget of 0.2 is a TV threshold of 0.1.
    phase = _loss_and_grad("grpo_tv_filter",
                           _terms("grpo_tv_filter", **kwargs, tv_reference="phase"),
                           tv_delta=0.2)
    assert phase[0] == pytest.approx(grpo[0]) and phase[2]["filter_fraction"] == 0.0
    # Against beta (TV 0.15 > 0.1) the tokens with A > 0 and rho > 1 would move rho further.
    loss, grad, metrics = _loss_and_grad(
        "grpo_tv_filter", _terms("grpo_tv_filter", **kwargs, tv_reference="behaviour"),
        tv_delta=0.2)
    assert metrics["filter_fraction"] == pytest.approx(0.5)
    assert np.all(grad[0] == 0) and np.all(grad[1] != 0) and np.all(grpo[1][0] != 0)
    # Dropped tokens stay in the count: the kept ones' PPO-clip terms over all four tokens.
    assert loss == pytest.approx(-(0.5 + 0.5) / 4)


def test_threshold_losses_read_their_hyper_parameters():
    """m2po_drop, gspo, cispo and bapo are the library's tested losses, fed the traced
    thresholds."""
    log_ratio = jnp.asarray([[0.1, -0.3], [0.5, 0.0]])
    terms = _terms("gspo", log_ratio, advantages=(1.0, -1.0))
    loss, _, _ = _loss_and_grad("gspo", terms, gspo_clip_low=0.01, gspo_clip_high=0.02)
    expected, _ = losses.gspo_loss(log_ratio, jnp.asarray([1.0, -1.0]), (0.01, 0.02))
    assert loss == pytest.approx(float(expected))
    _, _, metrics = _loss_and_grad("m2po_drop", terms, m2po_tau=0.05)
    assert metrics["is_masked_fraction"] == pytest.approx(0.25)  # dropping 0.25 leaves 0.1 / 3
    _, _, metrics = _loss_and_grad("cispo", terms, cispo_eps_low=0.3, cispo_eps_high=0.2)
    assert metrics["clip_fraction"] == pytest.approx(0.25)  # only exp(0.5) > 1.2
    _, _, metrics = _loss_and_grad("bapo", terms, bapo_low_start=0.5, bapo_low_end=0.5,
                                   bapo_high_start=1.5, bapo_high_end=1.5)
    assert (metrics["bapo_ratio_low"], metrics["bapo_ratio_high"]) == pytest.approx((0.5, 1.5))


# ---------------------------------------------------------------------------- on the model
@pytest.fixture(scope="module")
def fresh_batch():
    """One lag-0 batch of the untrained policy, its phase start the behaviour policy; advantages
    of both signs on every sequence, so that every token's gradient counts."""
    trainer = TokenTrainer(TINY, PARAMS)
    state = trainer.init(jax.random.PRNGKey(0), HP)
    _, batch = jax.jit(trainer.collect)(state, jax.random.PRNGKey(0), HP)
    return state, batch.replace(advantages=jnp.linspace(-1.0, 1.0, TINY.batch_size))


def _first_step_gradient(algo, batch, params, **hparams):
    trainer = TokenTrainer(TINY.replace(algo=algo), PARAMS)
    hp = TokenHParams.create(**hparams)
    return jax.jit(jax.grad(lambda p: trainer._loss(p, batch, hp)[0]))(params)


# At lag 0, pi_theta = pi_T = beta on the first step: every ratio is 1, so a correction that
# reads a ratio of 1 as weight 1 (and a filter or mask that keeps every token) is GRPO.
@pytest.mark.parametrize("algo,hparams", [
    ("tis", dict(is_cap=1.0)), ("tis", dict(is_cap=5.0)), ("mis", dict(mis_low=0.9)),
    ("decoupled_ppo", dict(is_cap=1.0)), ("freshness", dict(freshness_alpha=0.0)),
    ("freshness_mask", dict(freshness_alpha=0.0)),
    ("m2po", {}), ("m2po_drop", {}), ("topr", {}), ("cispo_behaviour", {}),
    ("cispo", dict(cispo_eps_low=0.1, cispo_eps_high=0.1)),
    ("bapo", {}), ("grpo_tv_filter", dict(tv_delta=0.01))])
def test_at_lag_zero_the_corrected_algorithms_step_as_grpo(fresh_batch, algo, hparams):
    state, batch = fresh_batch
    expected = _first_step_gradient("grpo", batch, state.params)
    got = _first_step_gradient(algo, batch, state.params, **hparams)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6),
                 got, expected)


# TVPO and DPPO share Dr. GRPO's advantages and aggregation; at lag 0 on the first step their
# ratio is 1, their TV 0 and no probability moved, so they step as Dr. GRPO.
@pytest.mark.parametrize("algo", ["vaco", "dppo_binary_tv", "dppo_binary_kl"])
@pytest.mark.parametrize("tv_scope", ["prompt", "batch"])
def test_at_lag_zero_tvpo_and_dppo_step_as_dr_grpo(fresh_batch, algo, tv_scope):
    state, batch = fresh_batch
    expected = _first_step_gradient("dr_grpo", batch, state.params)
    trainer = TokenTrainer(TINY.replace(algo=algo, tv_scope=tv_scope), PARAMS)
    hp = TokenHParams.create(tv_delta=1e-4, dppo_delta_low=1e-4, dppo_delta_high=1e-4,
                             dppo_kl_delta=1e-6)
    got = jax.jit(jax.grad(lambda p: trainer._loss(p, batch, hp)[0]))(state.params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6),
                 got, expected)


def test_tba_reads_the_warm_start_as_its_reference(fresh_batch):
    state, _ = fresh_batch
    assert state.reference is None  # only an algorithm that reads it keeps a copy
    trainer = TokenTrainer(TINY.replace(algo="tba"), PARAMS)
    tba_state = trainer.init(jax.random.PRNGKey(0), HP)
    moved = jax.tree.map(lambda x: x + 0.1, tba_state.params)
    _, batch = jax.jit(trainer.collect)(tba_state.replace(params=moved), jax.random.PRNGKey(0),
                                        HP)
    reference, _ = trainer.policy.response_log_probs(PARAMS, batch.prompt, batch.response,
                                                     HP.temperature)
    np.testing.assert_allclose(batch.reference_log_prob, reference, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(batch.phase_log_prob - reference).max()) > 1e-3


def test_the_batch_carries_the_algorithms_advantages(fresh_batch):
    state, _ = fresh_batch
    _, batch = jax.jit(TokenTrainer(TINY.replace(algo="rloo"), PARAMS).collect)(
        state, jax.random.PRNGKey(0), HP)
    reward = np.asarray(batch.reward).reshape(4, 4)
    others = (reward.sum(axis=1, keepdims=True) - reward) / 3
    assert np.abs(reward - others).max() > 0
    np.testing.assert_allclose(batch.advantages, (reward - others).ravel(), rtol=1e-5, atol=1e-6)


@pytest.mark.default_emitters
def test_ess_scaling_hook_shrinks_the_step_by_its_formula(fresh_batch):
    state, batch = fresh_batch
    # A stale batch: sequence log staleness 0, 0.5, ..., 7.5.
    log_staleness = jnp.arange(TINY.batch_size) / 2.0
    stale = batch.replace(behaviour_log_prob=batch.phase_log_prob - batch.mask * (
        log_staleness[:, None] / batch.mask.sum(axis=1, keepdims=True)))
    trainer = TokenTrainer(TINY.replace(minibatches=1), PARAMS)
    plain = trainer.optimise(state, stale, jax.random.PRNGKey(0), HP)[0]
    trainer.algorithm = dataclasses.replace(trainer.algorithm, ess_scaling=True)
    hp = HP.replace(ess_target=jnp.float32(0.9))
    scaled = trainer.optimise(state.replace(opt_state=trainer.optimizer(hp).init(state.params)),
                              stale, jax.random.PRNGKey(0), hp)[0]
    ess = float(losses.ess_ratio(log_staleness))
    factor = np.sqrt(min(1.0, ess / 0.9))
    assert factor < 0.9
    jax.tree.map(lambda s, p, p0: np.testing.assert_allclose(s - p0, factor * (p - p0),
                                                            rtol=1e-3, atol=1e-7),
                 scaled, plain, state.params)


@pytest.mark.slow
def test_advantage_hook_supplies_per_sequence_gradient_norms(fresh_batch):
    state, _ = fresh_batch
    trainer = TokenTrainer(TINY, PARAMS)
    trainer.algorithm = dataclasses.replace(
        trainer.algorithm, advantages=lambda inputs: inputs.sequence_grad_sq_norms())
    _, batch = jax.jit(trainer.collect)(state, jax.random.PRNGKey(0), HP)

    def sequence_log_prob(params, i):
        log_prob, _ = trainer.policy.response_log_probs(params, batch.prompt[i:i + 1],
                                                        batch.response[i:i + 1], HP.temperature)
        return jnp.where(batch.mask[i:i + 1] > 0, log_prob, 0.0).sum()

    for i in (0, 5):
        grads = jax.grad(sequence_log_prob)(state.params, i)
        expected = sum(float(jnp.sum(g ** 2)) for g in jax.tree.leaves(grads))
        assert float(batch.advantages[i]) == pytest.approx(expected, rel=1e-4)


# ---------------------------------------------------------------------------- training
def _stabiliser_metrics(algo):
    terms = _terms(algo, jnp.zeros((2, 2)))
    return set(ALGORITHMS[algo].policy_loss(terms, HP)[1])


@pytest.fixture(scope="module")
def lagged_batches(fresh_batch):
    """A lag-0 batch and a lag-3 batch (a buffer of four distinct versions), stacked."""
    state, fresh = fresh_batch
    trainer = TokenTrainer(TINY, PARAMS)
    stale_state = state
    for seed in range(1, 4):
        params = TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(seed))
        stale_state = stale_state.replace(buffer=push(stale_state.buffer, params), params=params)
    _, stale = jax.jit(trainer.collect)(stale_state, jax.random.PRNGKey(0),
                                        HP.replace(lag=jnp.float32(3.0)))
    assert float(stale.version_gap.min()) == 3
    batches = jax.tree.map(lambda *x: jnp.stack(x), fresh, stale)
    states = jax.tree.map(lambda *x: jnp.stack(x), state, stale_state)
    return states, batches


def test_at_a_phase_first_step_tis_cispo_and_decoupled_ppo_take_one_gradient(lagged_batches):
    """On a phase's first step pi_theta = pi_T: decoupled PPO's ratio pi_theta/pi_T is 1, inside
    its clip, so its weight min(pi_T/beta, 2) is TIS's min(pi_theta/beta, 2) and the behaviour
    CISPO's weight clipped to [0, 2]. With one gradient step per batch the three train alike on stale data."""
    states, batches = lagged_batches
    state, stale = jax.tree.map(lambda x: x[1], (states, batches))
    stale = stale.replace(advantages=jnp.linspace(-1.0, 1.0, TINY.batch_size))
    weights = jnp.exp(stale.phase_log_prob - stale.behaviour_log_prob)[stale.mask > 0]
    assert float(weights.max()) > 3.0 and float(weights.min()) < 0.5
    expected = _first_step_gradient("tis", stale, state.params, is_cap=2.0)
    for algo, hparams in (("decoupled_ppo", dict(is_cap=2.0)),
                          ("cispo_behaviour", dict(cispo_eps_low=1.0, cispo_eps_high=1.0))):
        got = _first_step_gradient(algo, stale, state.params, **hparams)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
                     got, expected)
    # Some stale tokens' weights exceed 2, so the shared cap is what makes them agree.
    other_cap = _first_step_gradient("tis", stale, state.params, is_cap=3.0)
    differences = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), other_cap, expected)
    assert max(jax.tree.leaves(differences)) > 1e-4


def test_vaco_at_its_defaults_filters_stale_tokens_and_keeps_fresh_ones(lagged_batches):
    """The token defaults (one step per version, TVPO's budget 0.015, the behaviour ratio):
    the filter acts on a stale batch and never on a fresh one's first step."""
    states, batches = lagged_batches
    trainer = TokenTrainer(TINY.replace(algo="vaco", minibatches=1), PARAMS)
    shares = []
    for index in (0, 1):
        state, batch = jax.tree.map(lambda x: x[index], (states, batches))
        shares.append(float(trainer._loss(state.params, batch, TokenHParams())[1]
                            ["filter_fraction"]))
    assert shares[0] == 0.0 and shares[1] > 0.05


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_trains_without_nan_at_lag_zero_and_at_lag_three(lagged_batches, algo):
    """Three phases of 2 epochs x 2 minibatches on a fresh and a stale batch, vmapped: one
    program per algorithm, its own advantages."""
    states, batches = lagged_batches
    trainer = TokenTrainer(TINY.replace(algo=algo, epochs=2), PARAMS)
    # The algorithm's own optimiser state (an ESS-scaled step adds a transform to the chain).
    states = states.replace(opt_state=jax.vmap(trainer.optimizer(HP).init)(states.params))
    batches = batches.replace(advantages=jax.vmap(lambda reward: trainer.algorithm.advantages(
        _inputs(reward.reshape(4, 4))).reshape(-1))(batches.reward))
    if trainer.algorithm.needs_reference:  # TBA: the initial policy as its reference
        batches = batches.replace(reference_log_prob=batches.phase_log_prob)
    optimise = jax.jit(jax.vmap(lambda state, batch, key: trainer.optimise(state, batch, key, HP)))
    own = _stabiliser_metrics(algo)
    for step in range(3):
        params, opt_state, metrics = optimise(states, batches, jax.random.split(
            jax.random.PRNGKey(step), 2))
        states = states.replace(params=params, opt_state=opt_state)
        assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params))
        for name in ("policy_loss", "grad_norm", "behaviour_kl", "tv_forward", "approx_kl"):
            assert np.isfinite(metrics[name]).all(), name
        for name in STABILISER_METRICS:
            finite = np.isfinite(metrics[name])
            assert finite.all() if name in own else not finite.any(), name
    assert float(metrics["grad_norm"][0]) > 0  # the fresh batch trains every algorithm


def _four_updates(algo):
    """Four updates at lag 0 and at fixed lag 3 in one vmapped program."""
    trainer = TokenTrainer(TINY.replace(algo=algo), PARAMS)

    def train(hp):
        state = trainer.init(jax.random.PRNGKey(0), hp)
        return jax.lax.scan(lambda s, _: trainer.update(s, hp), state, None, length=4)

    hp = TokenHParams.create(lag=[0.0, 3.0], learning_rate=[3e-3, 3e-3])
    return jax.jit(jax.vmap(train))(jax.tree.map(lambda x: jnp.broadcast_to(x, (2,)), hp))


@pytest.mark.slow
def test_a_token_algorithm_runs_end_to_end_through_every_lag():
    """The whole program for `freshness_mask`, which reads each token's recorded version."""
    state, metrics = _four_updates("freshness_mask")
    assert not np.asarray(state.diverged).any()
    np.testing.assert_array_equal(metrics["version_gap_max"], [[0, 0, 0, 0], [0, 1, 2, 3]])
    # Lag 3 acts with the initial policy, version 0, until version 3 is pushed: all 4 updates.
    np.testing.assert_array_equal(metrics["initial_policy_share"], [[1, 0, 0, 0], [1, 1, 1, 1]])
    # alpha = 1: at lag 3 the sequences two or three versions old are dropped: every one of
    # them, so the optimiser takes no step in those updates.
    np.testing.assert_array_equal(metrics["stale_dropped_fraction"], [[0, 0, 0, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(metrics["skipped_step_fraction"], [[0, 0, 0, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(metrics["skipped_step_acted"], [[0, 0, 0, 0], [0, 0, 1, 1]])
    assert np.isfinite(metrics["policy_loss"]).all()


@pytest.mark.slow
def test_freshness_refuses_stale_generations_at_collection_and_refills_the_batch():
    """ROLL Flash: at lag 3 with alpha 1 the generations two or three versions old are refused
    and replaced by ones of the oldest admitted version, so no sample is older than alpha and
    every update steps."""
    state, metrics = _four_updates("freshness")
    assert not np.asarray(state.diverged).any()
    np.testing.assert_array_equal(metrics["version_gap_max"], [[0, 0, 0, 0], [0, 1, 1, 1]])
    np.testing.assert_array_equal(metrics["stale_dropped_fraction"], [[0, 0, 0, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(metrics["stale_dropped_acted"], [[0, 0, 0, 0], [0, 0, 1, 1]])
    assert np.isnan(metrics["skipped_step_fraction"]).all()  # its loss drops no sample
    assert np.isfinite(metrics["policy_loss"]).all()


@pytest.mark.parametrize("jit", [False, True])
def test_an_update_whose_every_sequence_is_masked_leaves_parameters_and_optimiser_state(jit):
    trainer = TokenTrainer(TINY.replace(algo="freshness_mask"), PARAMS)
    hp = TokenHParams.create(lag=2.0, learning_rate=3e-3)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    # Two updates (gaps 0 and 1), so that the next batch is two versions old, beyond alpha = 1;
    # and momentum in Adam, which a zero gradient would follow.
    state, _ = jax.jit(lambda s: jax.lax.scan(lambda s, _: trainer.update(s, hp), s, None,
                                              length=2))(state)
    clip, (adam, *rest) = state.opt_state
    adam = adam._replace(mu=jax.tree.map(lambda m: m + 1e-3, adam.mu),
                         nu=jax.tree.map(lambda v: v + 1e-6, adam.nu))
    state = state.replace(opt_state=(clip, (adam, *rest)))
    _, batch = jax.jit(trainer.collect)(state, jax.random.PRNGKey(1), hp)
    assert float(batch.version_gap.min()) == 2
    optimise = jax.jit(trainer.optimise) if jit else trainer.optimise
    params, opt_state, metrics = optimise(state, batch, jax.random.PRNGKey(2), hp)
    jax.tree.map(np.testing.assert_array_equal, params, state.params)
    jax.tree.map(np.testing.assert_array_equal, opt_state, state.opt_state)
    assert float(metrics["skipped_step_fraction"]) == 1.0
    # A batch of which some sequences are fresh enough steps.
    mixed = batch.replace(version_gap=batch.version_gap.at[0].set(0.0))
    params, opt_state, metrics = optimise(state, mixed, jax.random.PRNGKey(2), hp)
    assert float(metrics["skipped_step_fraction"]) < 1.0
    assert not all(jax.tree.leaves(jax.tree.map(np.array_equal, params, state.params)))


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("changes,hparams,message", [
    ({"algo": "ppo"}, {}, "algo='ppo' is not supported; allowed values: grpo, dr_grpo"),
    ({"is_level": "batch"}, {}, "is_level='batch' .* allowed values: token, sequence"),
    ({"tv_reference": "pi"}, {}, "tv_reference='pi' .* allowed values: behaviour, phase"),
    ({"tv_scope": "group"}, {}, "tv_scope='group' .* allowed values: prompt, batch"),
    ({"tv_delta_convention": "l1"}, {}, "tv_delta_convention='l1' .* allowed values: budget, tv"),
    ({"algo": "vaco", "tv_reference": "phase", "minibatches": 1}, {},
     "algo='vaco' with tv_reference='phase', epochs=1 and minibatches=1 is refused: its trust "
     "region measures pi_theta/pi_T, which is exactly 1"),
    ({"algo": "dppo_binary_tv", "tv_reference": "phase", "minibatches": 1}, {},
     "set tv_reference='behaviour'"),
    ({}, {"tv_delta": 2.5}, r"tv_delta must lie in \[0, 2\]"),
    ({}, {"trust_is_cap": 0.5}, r"trust_is_cap must lie in \[1, inf\)"),
    ({}, {"dppo_delta_high": 1.5}, r"dppo_delta_high must lie in \[0, 1\]"),
    ({}, {"tba_beta": 0.0}, r"tba_beta must lie in \(0, inf\)"),
    ({}, {"is_cap": 0.5}, r"is_cap must lie in \[1, inf\), got 0.5"),
    ({}, {"is_cap": np.inf}, r"is_cap must be finite"),
    ({}, {"mis_low": 1.5}, r"mis_low must lie in \[0, 1\]"),
    ({}, {"m2po_tau": 0.0}, r"m2po_tau must lie in \(0, inf\)"),
    ({}, {"tv_delta": [0.1, np.nan]}, r"tv_delta must be finite, got \[0.1"),
    ({}, {"freshness_alpha": -1.0}, r"freshness_alpha must lie in \[0, inf\)"),
    ({}, {"gspo_clip_high": 0.0}, r"gspo_clip_high must lie in \(0, inf\)"),
    ({}, {"cispo_eps_low": 2.0}, r"cispo_eps_low must lie in \[0, 1\]"),
    ({}, {"bapo_positive_share": 0.0}, r"bapo_positive_share must lie in \(0, 1\]"),
    ({}, {"bapo_high_start": 2.0, "bapo_high_end": 1.5},
     "bapo_high_start must be <= bapo_high_end"),
    ({}, {"ess_target": 0.0}, r"ess_target must lie in \(0, 1\]"),
    ({}, {"clip_eps": -0.1}, r"clip_eps must lie in \(0, inf\)"),
])
def test_bad_algorithms_and_thresholds_fail_before_compilation(changes, hparams, message):
    with pytest.raises(ValueError, match=message):
        validate(TINY.replace(**changes), TokenHParams.create(**hparams))


SWEEP = """\
name = "token_algorithms"
testbed = "tokens"
tasks = ["add"]
algos = ["grpo", "tis", "vaco"]
seeds = 2

[lag]
model = "fixed"
levels = [0, 3]

[config]
task_size = 1
is_level = "sequence"

[overrides.tis.hparams]
is_cap = [1.5, 4.0]

[overrides.vaco.config]
tv_reference = "behaviour"
"""


def test_a_token_sweep_takes_any_algorithm_and_sweeps_its_thresholds(monkeypatch):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    experiment = sweep.parse_experiment(SWEEP)
    groups = {g.config.algo: g for g in experiment.groups}
    assert set(groups) == {"grpo", "tis", "vaco"}
    assert groups["vaco"].config.tv_reference == "behaviour"
    assert groups["tis"].config.is_level == "sequence"
    caps = groups["tis"].hparams(range(len(groups["tis"].runs))).is_cap
    assert sorted(set(np.asarray(caps).tolist())) == [1.5, 4.0]  # one program, traced caps
    with pytest.raises(ValueError, match=r"is_cap must lie in \[1, inf\)"):
        sweep.parse_experiment(SWEEP.replace("is_cap = [1.5, 4.0]", "is_cap = [0.5, 4.0]"))


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_each_token_entry_declares_the_knobs_and_metrics_its_loss_reads_and_reports(algo):
    """What `TokenAlgorithm.knobs` declares is what a run holds and what the refusal of unread
    knobs trusts; what `metrics` declares is what its runs report. The knobs read where it
    collects (a refusal of stale generations) and by its schedule count as its own."""
    entry = ALGORITHMS[algo]
    static = {"rollout_is": "token"} if entry.rollout_correction else {}
    terms = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)),
                         _terms(algo, [[-1.0, -2.0], [-0.5, -0.5]], **static))
    read = read_by(entry.policy_loss, TokenHParams(), terms)
    if entry.hparam_schedule is not None:
        read |= read_by(lambda update, hp: entry.hparam_schedule(hp, update), TokenHParams(),
                        jax.ShapeDtypeStruct((), jnp.float32))
    if entry.refuses_stale:
        read |= {"freshness_alpha"}  # `TokenTrainer.behaviour_versions` reads it
    own = {k.name for k in entry.knobs} - {"ess_target"} if entry.ess_scaling else {
        k.name for k in entry.knobs}
    assert read == own, sorted(read ^ own)
    _, reported = jax.eval_shape(lambda t: entry.policy_loss(t, TokenHParams()), terms)
    reported = set(reported) & set(STABILISER_METRICS)
    if entry.refuses_stale:
        reported |= {"stale_dropped_fraction"}  # reported where it collects
    assert reported == {m.name for m in entry.metrics}


def test_a_token_run_holds_its_own_knobs_and_a_loss_reading_another_fails_naming_it():
    config = TokenConfig(algo="m2po")
    held = TokenHParams.create().only(testbeds.TOKENS.knobs(config))
    assert set(held.names) == {"learning_rate", "lag", "temperature", "max_grad_norm", "m2po_tau"}
    with pytest.raises(AttributeError, match="hold no knob 'clip_eps'"):
        ALGORITHMS["grpo"].policy_loss(_terms("grpo", [[-1.0, -2.0], [-0.5, -0.5]]), held)
