"""The token registry's lag-robust methods of 2025-26 (`sapo`, `gmpo`, `icepop`, `opsm`,
`kl_cov`, and the behaviour-ratio forms `*_behaviour`): which ratio each reads, by hand; at lag 0
each steps as GRPO; on a stale batch each mechanism that reads the staleness acts and on a fresh
one none does, and one on the phase ratio acts on the update alone; refused thresholds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_tokens_algorithms import (PARAMS, TINY, _loss_and_grad, _terms,  # noqa: F401
                                    fresh_batch, lagged_batches)
from vaco_jax.tokens.config import TokenHParams, validate
from vaco_jax.tokens.train import TokenTrainer

STALENESS_MECHANISMS = ("sapo_behaviour", "gmpo_behaviour", "icepop", "opsm", "kl_cov_behaviour")
"""The methods whose mechanism reads the generator's staleness at a phase's first step."""


def test_icepop_clips_the_phase_ratio_and_masks_the_staleness_outside_its_band():
    # Staleness pi_T / beta = 0.4, 2 | 1, 6 in the band [0.5, 5]: weights 0, 2 | 1, 0. The
    # learner moved one token: phase ratio 1.5 with A > 0, clipped at 1.2.
    staleness = jnp.asarray([[0.4, 2.0], [1.0, 6.0]])
    log_prob = jnp.asarray([[0.0, np.log(1.5)], [0.0, 0.0]], jnp.float32)
    terms = _terms("icepop", log_prob, behaviour=-jnp.log(staleness), phase=jnp.zeros((2, 2)))
    loss, grad, metrics = _loss_and_grad("icepop", terms)
    assert loss == pytest.approx(-(0.0 + 2 * 1.2 - 1.0 + 0.0) / 4, rel=1e-5)
    np.testing.assert_allclose(grad, [[0, 0], [0.25, 0]], atol=1e-7)
    assert metrics["is_masked_fraction"] == pytest.approx(0.5)
    assert metrics["is_weight_mean"] == pytest.approx(0.75)
    assert metrics["clip_fraction"] == pytest.approx(0.25)


def test_opsm_reads_the_learners_distance_to_the_sampler():
    # Both sequences sit 0.6 nats per token below beta: the negative one is dropped, its tokens
    # staying in the mean's count; a threshold of 0.7 keeps both.
    terms = _terms("opsm", jnp.full((2, 2), -1.6), behaviour=jnp.full((2, 2), -1.0))
    loss, grad, metrics = _loss_and_grad("opsm", terms)
    ratio = np.exp(-0.6)  # inside neither clip bound for A > 0: r A counts
    assert loss == pytest.approx(-ratio / 2, rel=1e-5)
    np.testing.assert_allclose(grad, [[-ratio / 4] * 2, [0, 0]], rtol=1e-5)
    assert metrics["is_masked_fraction"] == pytest.approx(0.5)
    _, _, metrics = _loss_and_grad("opsm", terms, opsm_delta=0.7)
    assert metrics["is_masked_fraction"] == 0.0


def test_opsm_averages_each_answer_then_the_answers():
    # Answers of 1 and 3 valid tokens, on policy (r = 1): the paper's 1/G sum_i 1/|o_i| sum_t
    # gives each answer half the loss, -(A_1 + A_2) / 2, and each of the long answer's tokens a
    # third of its half; a token-mean would weigh the long answer three times the short one.
    mask = [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    terms = _terms("opsm", jnp.zeros((2, 3)), mask=mask, advantages=(1.0, 0.5))
    loss, grad, _ = _loss_and_grad("opsm", terms)
    assert loss == pytest.approx(-(1.0 + 0.5) / 2, rel=1e-6)
    np.testing.assert_allclose(grad, [[-1 / 2, 0, 0], [-0.5 / 6] * 3], rtol=1e-6)


@pytest.mark.parametrize("suffix, moved", [("", "phase"), ("_behaviour", "behaviour")])
def test_sapo_gmpo_and_kl_cov_read_the_phase_ratio_or_under_their_old_names_the_behaviour_one(
        suffix, moved):
    # pi_theta a factor 2 (first token) above the policy the ratio is taken to (pi_T by default,
    # beta under the old names) and equal to the other, so the other ratio is 1.
    above = jnp.asarray([[-np.log(2.0), 0.0]] * 2, jnp.float32)
    kwargs = dict(log_prob=jnp.zeros((2, 2)),
                  behaviour=above if moved == "behaviour" else jnp.zeros((2, 2)),
                  phase=above if moved == "phase" else jnp.zeros((2, 2)))
    _, _, sapo = _loss_and_grad("sapo" + suffix, _terms("sapo" + suffix, **kwargs))
    s = 1 / (1 + np.exp(-1.0))  # tau 1 (A > 0) and 1.05 (A < 0) at r = 2
    s_neg = 1 / (1 + np.exp(-1.05))
    assert sapo["gate_weight_mean"] == pytest.approx(
        (4 * s * (1 - s) + 4 * s_neg * (1 - s_neg) + 2) / 4, rel=1e-5)
    _, _, gmpo = _loss_and_grad("gmpo" + suffix, _terms("gmpo" + suffix, **kwargs))
    assert gmpo["clip_fraction"] == pytest.approx(0.25)  # ln 2 > 0.4 where A > 0
    _, _, kl_cov = _loss_and_grad("kl_cov" + suffix, _terms("kl_cov" + suffix, **kwargs),
                                  kl_cov_fraction=1.0)
    assert kl_cov["kl_penalty_mean"] == pytest.approx(2 * np.log(2.0) / 4, rel=1e-5)


def _first_step_gradient(batch, params, **changes):
    trainer = TokenTrainer(TINY.replace(**changes), PARAMS)
    return jax.jit(jax.grad(lambda p: trainer._loss(p, batch, TokenHParams())[0]))(params)


# At lag 0 on a phase's first step every ratio is 1: SAPO's gate has GRPO's slope, GMPO's
# geometric mean GRPO's per-token gradient over each sequence's length, nothing is masked and
# KL-Cov's penalty has zero gradient. SAPO, GMPO and OPSM average over sequences.
@pytest.mark.parametrize("algo,aggregation", [
    ("sapo", "seq-mean-token-mean"), ("gmpo", "seq-mean-token-mean"),
    ("icepop", "token-mean"), ("opsm", "seq-mean-token-mean"), ("kl_cov", "token-mean"),
    ("trm", "token-mean"), ("kpop", "token-mean"), ("a3po", "token-mean")])
def test_at_lag_zero_the_new_methods_step_as_grpo(fresh_batch, algo, aggregation):
    state, batch = fresh_batch
    if algo == "kl_cov":
        # The sampler's log-probs differ from the learner's by rounding (~1e-7), and the
        # gradient of KL-Cov's |log r| is +-kl_cov_coef however small log r is: exactly on
        # policy it is 0.
        batch = batch.replace(behaviour_log_prob=batch.phase_log_prob)
    expected = _first_step_gradient(batch, state.params, algo="grpo", aggregation=aggregation)
    got = _first_step_gradient(batch, state.params, algo=algo)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6),
                 got, expected)


MECHANISM = {"sapo": "gate_weight_mean", "gmpo": "clip_fraction",
             "icepop": "is_masked_fraction", "opsm": "is_masked_fraction",
             "kl_cov": "kl_penalty_mean"}
IDLE = {"sapo": 1.0, "gmpo": 0.0, "icepop": 0.0, "opsm": 0.0, "kl_cov": 0.0}


def _mechanism(trainer, state, batch, algo):
    name = algo.removesuffix("_behaviour")
    metrics = trainer._loss(state.params, batch, TokenHParams())[1]
    return float(metrics[MECHANISM[name]]), IDLE[name]


@pytest.mark.parametrize("algo", STALENESS_MECHANISMS)
def test_each_mechanism_acts_on_stale_data_and_not_on_fresh(lagged_batches, algo):
    states, batches = lagged_batches
    trainer = TokenTrainer(TINY.replace(algo=algo, minibatches=1), PARAMS)
    values = []
    for index in (0, 1):
        state, batch = jax.tree.map(lambda x: x[index], (states, batches))
        batch = batch.replace(advantages=jnp.linspace(-1.0, 1.0, TINY.batch_size))
        value, idle = _mechanism(trainer, state, batch, algo)
        values.append(value)
    assert values[0] == pytest.approx(idle, abs=1e-6)
    assert abs(values[1] - idle) > 1e-3, values


@pytest.mark.parametrize("algo", ("sapo", "gmpo", "kl_cov"))
def test_on_the_phase_ratio_a_mechanism_acts_on_the_update_and_not_on_staleness(lagged_batches,
                                                                                algo):
    """At a phase's first step pi_theta = pi_T, so on stale data the mechanism is idle; once the
    learner has moved from pi_T (here: pi_T's log-probs shifted by +-0.8) it acts."""
    states, batches = lagged_batches
    trainer = TokenTrainer(TINY.replace(algo=algo, minibatches=1), PARAMS)
    state, batch = jax.tree.map(lambda x: x[1], (states, batches))  # the stale batch
    batch = batch.replace(advantages=jnp.linspace(-1.0, 1.0, TINY.batch_size))
    value, idle = _mechanism(trainer, state, batch, algo)
    assert value == pytest.approx(idle, abs=1e-5)
    shift = 0.8 * jnp.where(jnp.arange(batch.phase_log_prob.shape[-1]) % 2 == 0, 1.0, -1.0)
    value, idle = _mechanism(trainer, state, batch.replace(
        phase_log_prob=batch.phase_log_prob + shift), algo)
    assert abs(value - idle) > 1e-3, value


def test_trm_rejects_an_answer_whole_when_one_token_leaves_its_trust_region():
    # pi_T / beta = e^3 on the first answer's second token: k2 = 4.5 > 2.5, so that answer
    # leaves the loss and its token count; the second (A = -1, staleness e^0.5, k2 0.125)
    # trains by PPO-clip on the phase ratio: 1.5 on its first token, where -A r is the larger
    # term (max(1.5, 1.2) for A < 0), so it is not clipped.
    log_staleness = jnp.asarray([[0.0, 3.0], [0.5, 0.0]])
    phase = jnp.zeros((2, 2))
    log_prob = jnp.asarray([[0.0, 0.0], [np.log(1.5), 0.0]], jnp.float32)
    terms = _terms("trm", log_prob, behaviour=phase - log_staleness, phase=phase)
    loss, grad, metrics = _loss_and_grad("trm", terms)
    assert loss == pytest.approx((1.5 + 1.0) / 2, rel=1e-5)  # -A r with A = -1, over 2 tokens
    np.testing.assert_allclose(grad, [[0, 0], [1.5 / 2, 1 / 2]], rtol=1e-5)
    assert metrics["is_masked_fraction"] == pytest.approx(0.5)
    _, _, metrics = _loss_and_grad("trm", terms, trm_delta=5.0)
    assert metrics["is_masked_fraction"] == 0.0


def _verl_seq_max_k2_ppo(log_prob, old_log_prob, rollout_log_prob, advantages, mask, threshold,
                         clip_eps=0.2):
    """A transcription, in numpy, of verl's decoupled-mode loss under `rollout_rs="seq_max_k2"`
    (`rollout_corr_helper.compute_rollout_rejection_mask` then the vanilla PPO policy loss,
    `loss_agg_mode="token-mean"`): the response mask multiplied by the per-sequence keep."""
    log_ratio = np.clip(old_log_prob - rollout_log_prob, -20.0, 20.0)
    k2 = 0.5 * log_ratio ** 2
    seq_max = np.where(mask > 0, k2, -np.inf).max(axis=-1)
    response_mask = mask * (seq_max <= threshold)[:, None]
    ratio = np.exp(log_prob - old_log_prob)
    adv = advantages[:, None]
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip_eps, 1 + clip_eps))
    return (pg * response_mask).sum() / max(response_mask.sum(), 1)


def test_trm_matches_a_transcription_of_its_authors_code_on_random_batches():
    rng = np.random.default_rng(0)
    for _ in range(20):
        shape = (6, 5)
        log_prob = rng.normal(-1.0, 0.5, shape)
        phase = log_prob + rng.normal(0.0, 0.2, shape)
        behaviour = phase + rng.normal(0.0, 1.5, shape)
        advantages = rng.normal(size=6)
        mask = (rng.random(shape) < 0.8).astype(float)
        mask[:, 0] = 1.0
        terms = _terms("trm", jnp.asarray(log_prob, jnp.float32), behaviour=behaviour,
                       phase=phase, advantages=jnp.asarray(advantages, jnp.float32), mask=mask)
        loss, _, _ = _loss_and_grad("trm", terms)
        expected = _verl_seq_max_k2_ppo(log_prob, phase, behaviour, advantages, mask, 2.5)
        assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6)


def _bernoulli_kl(log_p, log_q, eps=1e-8):
    p, q = np.clip(np.exp(log_p), eps, 1 - eps), np.clip(np.exp(log_q), eps, 1 - eps)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def test_kpop_masks_a_token_by_its_symmetric_bernoulli_kl_and_weights_the_rest():
    # pi_T = 0.5 on every token; beta 0.5 (KL 0), 0.25 (KL_B 0.13 / 0.14) and 0.001 (KL_B 2.76
    # one way, past 2): weights pi_T/beta 1, 2 and 0 (masked, kept in the count of 4).
    phase = jnp.full((2, 2), np.log(0.5), jnp.float32)
    behaviour = jnp.log(jnp.asarray([[0.5, 0.25], [0.001, 0.5]]))
    terms = _terms("kpop", phase, behaviour=behaviour, phase=phase)
    loss, grad, metrics = _loss_and_grad("kpop", terms)
    assert _bernoulli_kl(np.log(0.5), np.log(0.001)) > 2.0 > _bernoulli_kl(np.log(0.001),
                                                                          np.log(0.5))
    # r = 1 everywhere: -A w / 4 with A = +1, -1 per answer.
    assert loss == pytest.approx(-(1.0 + 2.0) / 4 + (0.0 + 1.0) / 4, rel=1e-5)
    np.testing.assert_allclose(grad, [[-0.25, -0.5], [0.0, 0.25]], rtol=1e-5)
    assert metrics["is_masked_fraction"] == pytest.approx(0.25)
    assert metrics["is_weight_mean"] == pytest.approx(4 / 4)


def _areal_kpop_loss(log_prob, prox, behave, advantages, mask, phi, eps_clip=0.2):
    """A transcription, in numpy, of AReaL's `ppo_actor_loss_fn` with `rejection_sampling` at
    token level, `action="mask"`, `metric="binary_kl"` (`apply_rejection_sampling`,
    `compute_binary_kl_divergence`): weight pi_prox/beta, 0 where masked, token count taken
    before the mask."""
    metric = np.maximum(_bernoulli_kl(prox, behave), _bernoulli_kl(behave, prox))
    updated = (mask > 0) & (metric <= phi)
    weight = np.where(updated, np.exp(prox - behave), 0.0)
    ratio = np.exp(log_prob - prox)
    adv = advantages[:, None]
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps_clip, 1 + eps_clip)) * weight
    return np.where(updated, pg, 0.0).sum() / max(int((mask > 0).sum()), 1)


def test_kpop_matches_a_transcription_of_areal_on_random_batches():
    rng = np.random.default_rng(1)
    for _ in range(20):
        shape = (6, 5)
        prox = np.log(rng.uniform(0.02, 0.98, shape))
        behave = np.log(rng.uniform(0.02, 0.98, shape))
        log_prob = prox + rng.normal(0.0, 0.2, shape)
        advantages = rng.normal(size=6)
        mask = (rng.random(shape) < 0.8).astype(float)
        terms = _terms("kpop", jnp.asarray(log_prob, jnp.float32), behaviour=behave, phase=prox,
                       advantages=jnp.asarray(advantages, jnp.float32), mask=mask)
        loss, _, _ = _loss_and_grad("kpop", terms, kpop_phi=0.3)
        expected = _areal_kpop_loss(log_prob, prox, behave, advantages, mask, 0.3)
        assert loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_kpops_mask_is_not_dppos_binary_kl_trust_region():
    # DPPO masks by the learner's own move from the old policy (here the sampler's), one way
    # and by the advantage's sign; KPop by the gap between pi_T and the sampler, both ways,
    # whatever the learner does. A = +1 on the first answer, -1 on the second.
    half = np.log(0.5)

    def masked(algo, log_prob, behaviour, phase, **hparams):
        terms = _terms(algo, jnp.asarray(log_prob, jnp.float32), behaviour=behaviour,
                       phase=phase)
        return _loss_and_grad(algo, terms, **hparams)[2]["is_masked_fraction"]

    # The sampler far below pi_T on a negative answer's token, the learner still at pi_T (above
    # the sampler, the way a negative advantage does not push): KPop masks it, DPPO does not.
    sampler_far = jnp.log(jnp.asarray([[0.5, 0.5], [0.001, 0.5]]))
    assert masked("kpop", jnp.full((2, 2), half), sampler_far, half, kpop_phi=0.05) == 0.25
    assert masked("dppo_binary_kl", jnp.full((2, 2), half), sampler_far, half) == 0.0
    # The learner moved far up on a positive answer's token, pi_T and the sampler equal: DPPO
    # masks it, KPop does not.
    moved = [[np.log(0.999), half], [half, half]]
    assert masked("kpop", moved, half, half, kpop_phi=0.05) == 0.0
    assert masked("dppo_binary_kl", moved, half, half) == 0.25


def test_a3po_interpolates_the_proximal_policy_by_each_tokens_staleness():
    # One version behind (alpha 1/2): with pi_theta/beta = 4, pi_prox/beta = 2 and the PPO ratio
    # pi_theta/pi_prox = 2, clipped at 1.2 for A = +1: loss -2 * 1.2 on that token, no gradient.
    # Fresh tokens (alpha 0): the behaviour ratio, here 1, unweighted.
    behaviour = jnp.zeros((2, 2))
    log_prob = jnp.asarray([[np.log(4.0), 0.0], [0.0, 0.0]], jnp.float32)
    gap = jnp.asarray([[1.0, 0.0], [0.0, 0.0]])
    terms = _terms("a3po", log_prob, behaviour=behaviour, version_gap=gap)
    loss, grad, metrics = _loss_and_grad("a3po", terms)
    assert loss == pytest.approx(-(2 * 1.2 + 1.0) / 4 + (1.0 + 1.0) / 4, rel=1e-5)
    np.testing.assert_allclose(grad, [[0.0, -0.25], [0.25, 0.25]], rtol=1e-5)
    assert metrics["is_weight_mean"] == pytest.approx((2 + 1 + 1 + 1) / 4)


def _areal_a3po_loss(log_prob, behave, versions, current_version, advantages, mask,
                     eps_clip=0.2):
    """A transcription, in numpy, of AReaL's decoupled loss with `prox_logp_method="loglinear"`
    (`compute_prox_logp_approximations`, then `ppo_actor_loss_fn` with the behaviour weight
    applied uncapped, as the paper's code does)."""
    v_prox, v_theta = current_version - 1, float(current_version)
    diff = v_theta - versions
    alpha = np.clip(np.where(diff > 0, (v_prox - versions) / np.where(diff > 0, diff, 1), 0),
                    0.0, 1.0)
    prox = behave + alpha * (log_prob - behave)
    weight = np.exp(prox - behave)
    ratio = np.exp(log_prob - prox)
    adv = advantages[:, None]
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps_clip, 1 + eps_clip)) * weight
    return np.where(mask > 0, pg, 0.0).sum() / max(int((mask > 0).sum()), 1)


def test_a3po_matches_a_transcription_of_areal_on_random_batches():
    rng = np.random.default_rng(2)
    learner = 40  # the phase's learner's version; AReaL's current_version is one more
    for _ in range(20):
        shape = (6, 5)
        behave = rng.normal(-1.5, 0.5, shape)
        log_prob = behave + rng.normal(0.0, 0.4, shape)
        gap = rng.integers(0, 9, size=(6, 1)).astype(float) * np.ones(shape)
        advantages = rng.normal(size=6)
        mask = (rng.random(shape) < 0.8).astype(float)
        terms = _terms("a3po", jnp.asarray(log_prob, jnp.float32), behaviour=behave,
                       advantages=jnp.asarray(advantages, jnp.float32), mask=mask,
                       version_gap=gap)
        loss, _, _ = _loss_and_grad("a3po", terms)
        expected = _areal_a3po_loss(log_prob, behave, learner - gap, learner + 1, advantages,
                                    mask)
        assert loss == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_gepo_divides_each_answers_probability_by_its_groups_expectation():
    # One group; answers of two tokens at per-token probability 0.5 and 0.4 under both the
    # learner and the sampler: E_q[q] = (0.25 + 0.16) / 0.9, weights 0.5 / E and 0.4 / E,
    # inside the clip [0.8, 1.2], so the loss is -mean(w A) and d loss / d log pi_t = -w A /
    # (2 answers x 2 tokens).
    log_prob = jnp.log(jnp.asarray([[0.5, 0.5], [0.4, 0.4]]))
    terms = _terms("gepo", log_prob, behaviour=log_prob)
    loss, grad, metrics = _loss_and_grad("gepo", terms)
    expectation = (0.25 + 0.16) / 0.9
    w = np.asarray([0.5, 0.4]) / expectation
    assert loss == pytest.approx(-(w[0] - w[1]) / 2, rel=1e-5)
    np.testing.assert_allclose(grad, [[-w[0] / 4] * 2, [w[1] / 4] * 2], rtol=1e-5)
    assert metrics["clip_fraction"] == 0.0


def _heterorl_gepo_loss(log_prob, sampler_log_prob, advantages, mask, eps=0.2):
    """A transcription, in numpy, of HeteroRL's `OnlineRLTrainer._compute_loss` at
    `loss_type="gepo"` on one micro-batch (one prompt group in the authors' config)."""
    length = np.maximum(mask.sum(1), 1.0)
    learner = np.exp((log_prob * mask).sum(1) / length)
    sampler = np.exp((sampler_log_prob * mask).sum(1) / length)
    normalised = sampler / sampler.sum()
    coef_1 = learner / (normalised * sampler).sum()
    coef_2 = np.clip(coef_1, 1 - eps, 1 + eps)
    return (-np.minimum(coef_1 * advantages, coef_2 * advantages)).mean()


def test_gepo_matches_a_transcription_of_its_authors_code_group_by_group():
    rng = np.random.default_rng(3)
    for _ in range(20):
        shape = (8, 5)  # two groups of four answers
        behaviour = np.log(rng.uniform(0.2, 0.9, shape))
        log_prob = behaviour + rng.normal(0.0, 0.1, shape)
        advantages = rng.normal(size=8)
        mask = (rng.random(shape) < 0.8).astype(float)
        mask[:, 0] = 1.0
        terms = _terms("gepo", jnp.asarray(log_prob, jnp.float32), behaviour=behaviour,
                       advantages=jnp.asarray(advantages, jnp.float32), mask=mask)
        terms = terms.replace(group=jnp.repeat(jnp.arange(2, dtype=jnp.int32), 4), num_groups=2)
        loss, _, _ = _loss_and_grad("gepo", terms)
        halves = [_heterorl_gepo_loss(log_prob[g], behaviour[g], advantages[g], mask[g])
                  for g in (slice(0, 4), slice(4, 8))]
        assert loss == pytest.approx(np.mean(halves), rel=1e-4, abs=1e-6)


def test_stable_reinforce_normalises_over_the_batch_and_zeroes_the_outliers():
    from vaco_jax.tokens.methods.stable_reinforce import filtered_batch_advantages
    from vaco_jax.tokens.surrogates import AdvantageInputs

    def advantages(reward):
        reward = jnp.asarray(reward, jnp.float32)
        return np.asarray(filtered_batch_advantages(AdvantageInputs(
            reward=reward, log_staleness=jnp.zeros_like(reward), scale_by_std=True,
            sequence_grad_sq_norms=lambda: jnp.zeros_like(reward))))
    # Two groups, one success in eight: batch mean 1/8, std sqrt(7)/8, so the success's z is
    # sqrt(7) = 2.65 (kept) and each failure's -1/sqrt(7); groups are not normalised apart.
    one = advantages([[1, 0, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_allclose(one, [[np.sqrt(7), *[-1 / np.sqrt(7)] * 3],
                                     [-1 / np.sqrt(7)] * 4], rtol=1e-5, atol=1e-6)
    # One success in sixteen: z = sqrt(15) = 3.87 lies outside mean +- 3 (mean 1/16): zeroed,
    # the rare success teaches nothing.
    rare = advantages([[1] + [0] * 7, [0] * 8])
    assert rare[0, 0] == 0.0
    np.testing.assert_allclose(rare.ravel()[1:], -1 / np.sqrt(15), rtol=1e-5)


def _openrlhf_policy_loss(log_prob, old_log_prob, advantages, mask, eps=0.2):
    """A transcription, in numpy, of the authors' `PolicyLoss.forward` (`openrlhf/models/
    loss.py`): the log-ratio clamped to [log 1e-3, log 1e3] before `exp`, PPO-clip, the masked
    mean per answer, then the mean over answers."""
    log_diff = np.clip(log_prob - old_log_prob, np.log(1e-3), np.log(1e3))
    ratio = np.exp(log_diff)
    adv = advantages[:, None]
    loss = -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)
    return ((loss * mask).sum(1) / mask.sum(1)).mean()


def test_stable_reinforce_matches_a_transcription_of_its_authors_loss():
    rng = np.random.default_rng(4)
    for _ in range(20):
        shape = (6, 5)
        phase = rng.normal(-1.5, 0.5, shape)
        log_prob = phase + rng.normal(0.0, 4.0, shape)  # some past the pre-clip's 6.9 nats
        advantages = rng.normal(size=6)
        mask = (rng.random(shape) < 0.8).astype(float)
        mask[:, 0] = 1.0
        terms = _terms("stable_reinforce", jnp.asarray(log_prob, jnp.float32),
                       behaviour=phase - 3.0, phase=phase,
                       advantages=jnp.asarray(advantages, jnp.float32), mask=mask)
        loss, _, _ = _loss_and_grad("stable_reinforce", terms)
        expected = _openrlhf_policy_loss(log_prob, phase, advantages, mask)
        assert loss == pytest.approx(expected, rel=1e-4, abs=1e-5)
