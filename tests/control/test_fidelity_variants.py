"""The control variants the fidelity review changed: IMPALA's one step per batch, VACO's
ablations that each change one thing, the V-trace truncation reported, and no optimiser step
where VACO's filter kept no sample."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_configs import TOY
from vaco_jax.control.algorithms import ALGORITHMS, GAE, VTRACE_PHASE, PolicyTerms
from vaco_jax.control.config import ControlHParams
from vaco_jax.control.train import ControlTrainer
from vaco_jax.core import phase
from vaco_jax.core.lag_models import Fixed

HP = ControlHParams.create(lag=2.0, tv_delta=0.0)


def _terms(log_prob, behaviour, phase_log_prob, advantages):
    as_array = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    log_prob = as_array(log_prob)
    return PolicyTerms(log_prob=log_prob, behaviour_log_prob=as_array(behaviour),
                       phase_log_prob=as_array(phase_log_prob), advantages=as_array(advantages),
                       tv_log_rho=log_prob - as_array(phase_log_prob), tv=None,
                       kl_coef=jnp.asarray(0.0))


def test_impala_takes_one_gradient_step_per_batch_and_the_old_variant_the_configured_steps():
    for algo, steps in (("impala", 1), ("impala_multistep", TOY.epochs * TOY.minibatches)):
        trainer = ControlTrainer(TOY.replace(algo=algo, lag_model=Fixed()))
        hp = ControlHParams.create(lag=1.0)
        state = trainer.init(jax.random.PRNGKey(0), hp)
        state, _ = jax.jit(trainer.update, static_argnums=())(state, hp)
        assert int(state.opt_state[1][0].count) == steps, algo
    assert TOY.replace(algo="impala").phase_shape == (1, 1)
    assert TOY.replace(algo="impala_multistep").phase_shape == (TOY.epochs, TOY.minibatches)


def test_vaco_filter_only_is_vaco_without_the_realignment_and_nothing_else():
    vaco, filter_only = ALGORITHMS["vaco"], ALGORITHMS["vaco_filter_only"]
    assert (vaco.advantages, filter_only.advantages) == (VTRACE_PHASE, GAE)
    # Stale data, so the behaviour and phase ratios differ: the same surrogate on the phase ratio.
    # Advantages that pull every phase ratio back to 1: the filter keeps all three samples.
    terms = _terms([0.1, -0.2, 0.3], [0.4, 0.1, -0.2], [0.0, -0.1, 0.2], [-1.0, 1.0, -0.5])
    (vaco_loss, _), (loss, _) = vaco.policy_loss(terms, HP), filter_only.policy_loss(terms, HP)
    assert float(loss) == float(vaco_loss)
    old, _ = ALGORITHMS["vaco_filter_only_behaviour"].policy_loss(terms, HP)
    assert float(old) != pytest.approx(float(loss))  # the old ablation changed the ratio too
    # vaco_realign_only is vaco's realignment with ppo_recompute's clipped surrogate.
    realign, recompute = ALGORITHMS["vaco_realign_only"], ALGORITHMS["ppo_recompute"]
    assert realign.advantages == VTRACE_PHASE and recompute.advantages == GAE
    assert realign.policy_loss is recompute.policy_loss


@pytest.mark.parametrize("algo,log_rho", [("vaco", "staleness"), ("impala", "behaviour")])
def test_the_vtrace_truncation_is_reported_as_a_mechanism(algo, log_rho):
    # Ratios 2, 0.5 and 1.5 to the policy V-trace truncates at rho_bar = 1.
    ratios = jnp.log(jnp.asarray([2.0, 0.5, 1.5]))
    zeros = jnp.zeros(3)
    if log_rho == "staleness":  # pi_T / beta, taken once per phase
        terms = _terms(zeros, zeros, ratios, [1.0, 1.0, 1.0])
    else:  # pi_theta / beta, from the current parameters
        terms = _terms(ratios, zeros, zeros, [1.0, 1.0, 1.0])
    _, metrics = ALGORITHMS[algo].loss(terms, HP)
    assert float(metrics["is_truncated_fraction"]) == pytest.approx(2 / 3)
    _, metrics = ALGORITHMS["vaco_filter_only"].loss(terms, HP)
    assert "is_truncated_fraction" not in metrics  # GAE truncates nothing


def test_vaco_says_how_many_samples_its_filter_kept():
    # Every step would raise TV (A sign(log rho) > 0) and TV exceeds delta = 0: none kept.
    terms = _terms([0.2, -0.3], [0.0, 0.0], [0.0, 0.0], [1.0, -1.0])
    _, metrics = ALGORITHMS["vaco"].policy_loss(terms, HP)
    assert float(metrics[phase.KEPT]) == 0
    _, metrics = ALGORITHMS["vaco"].policy_loss(terms.replace(advantages=jnp.asarray([1.0, 1.0])),
                                                HP)
    assert float(metrics[phase.KEPT]) == 1
    assert phase.KEPT not in ALGORITHMS["ppo"].policy_loss(terms, HP)[1]


@pytest.mark.parametrize("jit", [False, True])
def test_a_phase_whose_every_sample_vacos_filter_drops_leaves_parameters_and_optimiser_state(jit):
    trainer = ControlTrainer(TOY.replace(algo="vaco", lag_model=Fixed(), tv_reference="behaviour"))
    hp = ControlHParams.create(lag=1.0, tv_delta=0.0, learning_rate=3e-3)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    state, _ = jax.jit(trainer.update)(state, hp)  # Adam now carries momentum
    _, data = trainer.collect(state, jax.random.PRNGKey(1), hp)
    batch = trainer.phase_batch(state, data, hp)
    # Every ratio to beta above 1 and every advantage positive: each step would raise TV.
    dropped = batch.replace(behaviour_log_prob=batch.phase_log_prob - 1.0,
                            advantages=jnp.ones_like(batch.advantages))
    optimise = jax.jit(trainer._optimise) if jit else trainer._optimise
    params, opt_state, metrics = optimise(state, dropped, jax.random.PRNGKey(2), hp)
    jax.tree.map(np.testing.assert_array_equal, params, state.params)
    jax.tree.map(np.testing.assert_array_equal, opt_state, state.opt_state)
    assert float(metrics["skipped_step_fraction"]) == 1.0
    assert float(metrics["skipped_step_acted"]) == 1.0
    # The same phase with advantages that pull the ratios back steps.
    pulled = dropped.replace(advantages=-dropped.advantages)
    params, _, metrics = optimise(state, pulled, jax.random.PRNGKey(2), hp)
    assert float(metrics["skipped_step_fraction"]) == 0.0
    assert not all(jax.tree.leaves(jax.tree.map(np.array_equal, params, state.params)))
