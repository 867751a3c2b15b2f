"""The token entries as their authors' code runs them: M2PO's capped second moment, GSPO and
CISPO on the phase ratio with verl's optional rollout correction, and the variants that keep
the earlier forms, against hand-computed losses and gradients, with and without `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.tokens.algorithms import ALGORITHMS
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.surrogates import TokenTerms


def _terms(log_prob, behaviour, phase, advantages=(1.0, -1.0), **static):
    log_prob = jnp.asarray(log_prob, jnp.float32)
    zeros = jnp.zeros_like(log_prob)
    return TokenTerms(log_prob=log_prob, behaviour_log_prob=zeros + jnp.asarray(behaviour),
                      phase_log_prob=zeros + jnp.asarray(phase),
                      advantages=jnp.asarray(advantages, jnp.float32),
                      mask=jnp.ones_like(log_prob), version_gap=zeros,
                      group=jnp.zeros(log_prob.shape[0], jnp.int32),
                      reward=jnp.zeros(log_prob.shape[0]), reference_log_prob=zeros, **static)


@pytest.fixture(params=[False, True], ids=["plain", "jit"])
def loss_and_grad(request):
    """`(loss, d loss / d log_prob, metrics)` of `algo` on `terms`, eagerly or under `jit`."""
    def run(algo, terms, **hparams):
        hp = TokenHParams.create(**hparams)

        def value_and_grad(t):
            fn = lambda lp: ALGORITHMS[algo].policy_loss(t.replace(log_prob=lp), hp)  # noqa
            return jax.value_and_grad(fn, has_aux=True)(t.log_prob)
        (loss, metrics), grad = (jax.jit(value_and_grad) if request.param
                                 else value_and_grad)(terms)
        return float(loss), np.asarray(grad), {k: float(v) for k, v in metrics.items()}
    return run


def test_m2po_clips_the_harmful_tokens_beyond_its_solved_cap(loss_and_grad):
    # Behaviour ratios exp(log_prob); tau = 0.12 (tests/losses/test_m2po_clip_bounds.py).
    log_prob = [[0.12, 0.3, -0.2], [-0.4, 0.2, -0.05]]
    _, grad, metrics = loss_and_grad("m2po", _terms(log_prob, 0.0, 0.0))
    # PPO-clip, token-mean over 6: -A r / 6 unless clipped. 0.3 (A > 0) is above exp(0.12) and
    # -0.4 (A < 0) below exp(-0.12): no gradient. Harmless tokens are never clipped. (The
    # token at the cap itself sits on the bound and is left out.)
    r = np.exp(np.asarray(log_prob))
    assert grad[0, 1] == 0.0 and grad[1, 0] == 0.0
    np.testing.assert_allclose(grad[0, 2], -r[0, 2] / 6, rtol=1e-5)
    np.testing.assert_allclose(grad[1, 1:], r[1, 1:] / 6, rtol=1e-5)
    assert 2 / 6 <= metrics["clip_fraction"] <= 3 / 6
    assert set(metrics) == {"clip_fraction"}
    # The drop variant masks instead, over all six tokens: dropping -0.4 leaves a mean
    # (log r)^2 of 0.1869 / 5 < 0.04; the others keep the unclipped -r A, 0.3 included.
    _, grad, metrics = loss_and_grad("m2po_drop", _terms(log_prob, 0.0, 0.0))
    assert metrics["is_masked_fraction"] == pytest.approx(1 / 6)
    assert grad[1, 0] == 0.0
    np.testing.assert_allclose(grad[0], -r[0] / 6, rtol=1e-5)


def test_gspo_and_cispo_take_their_ratio_to_the_phase_start(loss_and_grad):
    # pi_theta = pi_T, but beta is behind: every behaviour ratio is exp(0.1).
    terms = _terms(jnp.zeros((2, 2)), -0.1, 0.0)
    _, grad, metrics = loss_and_grad("gspo", terms)
    # Sequence ratio 1: unclipped; GSPO-token's gradient -A / (|y| N) per token.
    np.testing.assert_allclose(grad, [[-0.25, -0.25], [0.25, 0.25]], rtol=1e-5)
    assert metrics["clip_fraction"] == 0.0
    _, grad, metrics = loss_and_grad("gspo_behaviour", terms)
    # exp(0.1) > 1 + 4e-4 with A > 0: the first sequence is clipped.
    np.testing.assert_array_equal(grad[0], 0.0)
    assert metrics["clip_fraction"] == pytest.approx(0.5)
    _, grad, metrics = loss_and_grad("cispo", terms, cispo_eps_high=0.05)
    assert metrics["clip_fraction"] == 0.0
    np.testing.assert_allclose(grad, [[-0.25, -0.25], [0.25, 0.25]], rtol=1e-5)
    _, grad, metrics = loss_and_grad("cispo_behaviour", terms, cispo_eps_high=0.05)
    assert metrics["clip_fraction"] == 1.0
    np.testing.assert_allclose(grad, 1.05 * np.asarray([[-0.25, -0.25], [0.25, 0.25]]),
                               rtol=1e-5)


# Staleness pi_T / beta per token: 0.5, 3 | 1, 4; pi_theta = pi_T.
STALENESS = np.asarray([[0.5, 3.0], [1.0, 4.0]])


def test_gspo_rollout_correction_weights_each_token_by_its_truncated_staleness(loss_and_grad):
    terms = _terms(jnp.zeros((2, 2)), -np.log(STALENESS), 0.0, rollout_is="token")
    loss, grad, metrics = loss_and_grad("gspo", terms, is_cap=2.0)
    # Weights 0.5, 2 | 1, 2 times the per-token -A s (s = 1), seq-mean-token-mean.
    assert loss == pytest.approx((-(0.5 + 2) / 2 + (1 + 2) / 2) / 2, rel=1e-5)
    np.testing.assert_allclose(grad, [[-0.125, -0.5], [0.25, 0.5]], rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)
    assert metrics["is_weight_mean"] == pytest.approx(5.5 / 4, rel=1e-5)


def test_cispo_rollout_correction_per_sequence_truncates_the_product(loss_and_grad):
    phase = -1.0
    terms = _terms(jnp.full((2, 2), phase), phase - np.log(STALENESS), phase,
                   rollout_is="sequence")
    _, grad, metrics = loss_and_grad("cispo", terms, is_cap=2.0)
    # Sequence weights min(0.5 * 3, 2) = 1.5 and min(1 * 4, 2) = 2; -w A log pi, token-mean.
    np.testing.assert_allclose(grad, [[-0.375, -0.375], [0.5, 0.5]], rtol=1e-5)
    assert metrics["is_truncated_fraction"] == pytest.approx(0.5)
    # Without the correction (verl's default) the staleness is not read at all.
    _, grad, metrics = loss_and_grad("cispo", terms.replace(rollout_is="none"))
    np.testing.assert_allclose(grad, [[-0.25, -0.25], [0.25, 0.25]], rtol=1e-5)
    assert "is_truncated_fraction" not in metrics


@pytest.mark.parametrize("algo", ["gspo", "cispo"])
def test_at_lag_zero_the_phase_and_behaviour_forms_agree(loss_and_grad, algo):
    # beta = pi_T: the two ratios are one, and the rollout correction weighs 1.
    log_prob = jnp.asarray([[-0.3, -1.2], [-0.7, -0.1]])
    terms = _terms(log_prob, log_prob - 0.02, log_prob - 0.02)
    base = loss_and_grad(f"{algo}_behaviour", terms)
    for rollout_is in ("none", "token", "sequence"):
        got = loss_and_grad(algo, terms.replace(rollout_is=rollout_is))
        assert got[0] == pytest.approx(base[0], rel=1e-6)
        np.testing.assert_allclose(got[1], base[1], rtol=1e-6)


def test_the_rollout_correction_is_refused_where_no_loss_reads_it():
    validate(TokenConfig(algo="gspo", rollout_is="sequence"))
    with pytest.raises(ValueError, match="rollout_is='token' is refused for algo='grpo'.*"
                                         "allowed for: gspo, cispo"):
        validate(TokenConfig(algo="grpo", rollout_is="token"))
    with pytest.raises(ValueError, match="rollout_is"):
        validate(TokenConfig(algo="gspo", rollout_is="batch"))


@pytest.mark.parametrize("compile_", [False, True])
def test_adamw_decays_the_weights_on_top_of_adams_step(compile_):
    """VCPO's optimiser: AdamW's first step is Adam's minus lr x weight_decay x the parameter."""
    from vaco_jax.tokens.train import TokenTrainer

    params = {"w": jnp.asarray([1.0, -2.0, 0.5])}
    grads = {"w": jnp.asarray([0.3, 0.3, -0.1])}
    hp = TokenHParams.create(learning_rate=0.01, weight_decay=0.1, max_grad_norm=10.0)

    def first_step(optimizer):
        tx = TokenTrainer(TokenConfig(optimizer=optimizer)).optimizer(hp)
        step = lambda g, p: tx.update(g, tx.init(p), p)[0]  # noqa: E731
        return (jax.jit(step) if compile_ else step)(grads, params)["w"]

    adam, adamw = first_step("adam"), first_step("adamw")
    np.testing.assert_allclose(adam, -0.01 * np.sign(grads["w"]), rtol=1e-4)
    np.testing.assert_allclose(adamw - adam, -0.01 * 0.1 * params["w"], rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match="optimizer"):
        validate(TokenConfig(optimizer="sgd"))


@pytest.mark.parametrize("compile_", [False, True])
def test_tba_beta_decays_linearly_then_holds(compile_):
    from vaco_jax.tokens.surrogates import tba_beta_schedule

    hp = TokenHParams.create()  # 0.014 to 0.004 over 500 updates, TBA's GSM8K schedule
    beta = lambda u: tba_beta_schedule(hp, u).tba_beta  # noqa: E731
    beta = jax.jit(beta) if compile_ else beta
    for update, expected in ((0, 0.014), (250, 0.009), (500, 0.004), (2000, 0.004)):
        assert float(beta(jnp.int32(update))) == pytest.approx(expected, rel=1e-5)
    constant = hp.replace(tba_beta_final=hp.tba_beta)
    assert float(tba_beta_schedule(constant, jnp.int32(300)).tba_beta) == pytest.approx(0.014)


def test_tba_trains_with_the_scheduled_beta():
    from vaco_jax.tokens.model import TokenPolicy
    from vaco_jax.tokens.train import TokenTrainer

    config = TokenConfig(algo="tba", task="add", task_size=1, layers=1, width=32, heads=2,
                         context=10, prompts=2, group_size=4, num_updates=2, eval_every=2,
                         eval_prompts=8, partial_credit=True)
    trainer = TokenTrainer(config, TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0)))
    hp = TokenHParams.create(learning_rate=1e-2)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    _, batch = trainer.collect(state, jax.random.PRNGKey(1), hp)
    # Rewards that differ within each group, so that beta shapes the loss.
    batch = batch.replace(reward=jnp.tile(jnp.asarray([0.0, 1.0, 0.5, 1.0]), 2))
    key = jax.random.PRNGKey(2)
    optimise = jax.jit(trainer.optimise)
    # Adam's first step is nearly the gradient's sign, so compare the losses the phase saw.
    scheduled = optimise(state.replace(update=jnp.int32(250)), batch, key, hp)[2]
    held = optimise(state, batch, key, hp.replace(tba_beta=0.009, tba_beta_final=0.009))[2]
    start = optimise(state, batch, key, hp)[2]
    assert float(scheduled["policy_loss"]) == pytest.approx(float(held["policy_loss"]),
                                                            rel=1e-5)
    assert float(scheduled["policy_loss"]) != pytest.approx(float(start["policy_loss"]),
                                                            rel=1e-2)


