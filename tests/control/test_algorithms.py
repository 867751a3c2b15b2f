"""Registry entries: the ratio each one clips, VACO's filtered mean."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import losses
from vaco_jax.control import train as control_train
from vaco_jax.control.algorithms import ALGORITHMS, GAE, PolicyTerms, ValueTerms
from vaco_jax.core.knobs import read_by
from vaco_jax.control.config import ControlHParams


def _terms(behaviour_log_prob, phase_log_prob):
    log_prob = jnp.log(jnp.array([1.0, 1.5, 0.7, 1.1]))
    return PolicyTerms(log_prob=log_prob, behaviour_log_prob=behaviour_log_prob,
                       phase_log_prob=phase_log_prob,
                       advantages=jnp.array([1.0, 1.0, -1.0, -2.0]),
                       tv_log_rho=jnp.zeros(4), tv=None, kl_coef=jnp.asarray(0.0))


def test_ppo_recompute_clips_the_phase_ratio_and_ppo_the_behaviour_ratio():
    hp = ControlHParams.create(clip_eps=0.2)
    # Ratios pi_theta/beta = (1, 1.5, 0.7, 1.1) and pi_theta/pi_T = (0.5, 1, 1.4, 1.1).
    behaviour = jnp.zeros(4)
    phase = jnp.log(jnp.array([2.0, 1.5, 0.5, 1.0]))
    terms = _terms(behaviour, phase)
    recompute, recompute_metrics = ALGORITHMS["ppo_recompute"].policy_loss(terms, hp)
    ppo, ppo_metrics = ALGORITHMS["ppo"].policy_loss(terms, hp)
    # Hand-computed: -mean(min(r A, clip(r) A)).
    np.testing.assert_allclose(recompute, -np.mean([0.5, 1.0, -1.4, -2.2]), rtol=1e-6)
    np.testing.assert_allclose(ppo, -np.mean([1.0, 1.2, -0.8, -2.2]), rtol=1e-6)
    np.testing.assert_allclose(recompute_metrics["clip_fraction"], 0.0)  # no zeroed gradient
    np.testing.assert_allclose(ppo_metrics["clip_fraction"], 0.5)  # 1.5 (A > 0), 0.7 (A < 0)
    # Swapping the two old log-probs swaps the losses: nothing but the clipped ratio differs.
    swapped, _ = ALGORITHMS["ppo"].policy_loss(_terms(phase, behaviour), hp)
    np.testing.assert_allclose(swapped, recompute, rtol=1e-6)
    np.testing.assert_allclose(
        recompute, losses.ppo_clip_loss(terms.log_prob - phase, terms.advantages, 0.2)[0], rtol=1e-6)
    assert ALGORITHMS["ppo_recompute"].advantages is ALGORITHMS["ppo"].advantages is GAE


def _filtered_terms(ratio, advantages, filter_normalization, convention="budget"):
    """VACO's inputs with `pi_T = beta` and `pi_T` as the filter's reference: `rho = r_T = r`."""
    log_prob = jnp.log(jnp.array(ratio))
    return PolicyTerms(log_prob=log_prob, behaviour_log_prob=jnp.zeros(4),
                       phase_log_prob=jnp.zeros(4), advantages=jnp.array(advantages),
                       tv_log_rho=log_prob, tv=None, kl_coef=jnp.asarray(0.0),
                       filter_normalization=filter_normalization,
                       tv_delta_convention=convention)


def _vaco_loss_and_grad(terms, hp):
    def loss(log_prob):
        return ALGORITHMS["vaco"].policy_loss(
            terms.replace(log_prob=log_prob, tv_log_rho=log_prob), hp)
    (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(terms.log_prob)
    return value, metrics, grad


def test_filter_normalization_divides_by_all_or_by_the_kept_samples():
    # rho = (1, 1.5, 0.7, 1.1): TV = 0.5 mean|rho - 1| = 0.1125 > 0.1, the threshold of the
    # budget tv_delta = 0.2, so the filter drops the samples with A sign(rho - 1) > 0, the
    # second and third; it keeps rho = 1 (no sign) and the fourth, which pulls rho back.
    hp = ControlHParams.create(tv_delta=0.2)
    ratio, advantages = [1.0, 1.5, 0.7, 1.1], [1.0, 1.0, -1.0, -2.0]
    kept_terms = -(1.0 * 1.0 + 1.1 * -2.0)
    results = {n: _vaco_loss_and_grad(_filtered_terms(ratio, advantages, n), hp)
               for n in ("all", "kept")}
    for normalization, count in (("all", 4), ("kept", 2)):
        value, metrics, grad = results[normalization]
        np.testing.assert_allclose(metrics["tv"], 0.1125, rtol=1e-6)
        np.testing.assert_allclose(metrics["filter_fraction"], 0.5)
        np.testing.assert_allclose(value, kept_terms / count, rtol=1e-6)
        # d(-rho A)/d log rho = -rho A on the kept samples, divided by the count; 0 elsewhere.
        np.testing.assert_allclose(grad, [-1.0 / count, 0.0, 0.0, 2.2 / count], rtol=1e-6)
    # Below the threshold (budget 0.4: TV threshold 0.2) nothing is dropped and the two
    # normalisations agree.
    quiet = ControlHParams.create(tv_delta=0.4)
    np.testing.assert_allclose(
        *(_vaco_loss_and_grad(_filtered_terms(ratio, advantages, n), quiet)[0]
          for n in ("all", "kept")), rtol=1e-6)


def test_the_tv_convention_reads_tv_delta_as_the_threshold_itself():
    ratio, advantages = [1.0, 1.5, 0.7, 1.1], [1.0, 1.0, -1.0, -2.0]
    as_budget = _vaco_loss_and_grad(_filtered_terms(ratio, advantages, "all"),
                                    ControlHParams.create(tv_delta=0.2))
    as_tv = _vaco_loss_and_grad(_filtered_terms(ratio, advantages, "all", "tv"),
                                ControlHParams.create(tv_delta=0.1))
    for budget_value, tv_value in zip(as_budget, as_tv):
        chex.assert_trees_all_close(budget_value, tv_value)
    # tv_delta = 0.2 read as a TV threshold is above TV = 0.1125: nothing is dropped.
    _, metrics, _ = _vaco_loss_and_grad(_filtered_terms(ratio, advantages, "all", "tv"),
                                        ControlHParams.create(tv_delta=0.2))
    assert float(metrics["filter_fraction"]) == 0.0


def test_kept_normalization_gives_zero_when_the_filter_drops_every_sample():
    # Every sample has A sign(rho - 1) > 0, so all are dropped: no step, not 0 / 0.
    terms = _filtered_terms([1.5, 0.7, 1.2, 0.6], [1.0, -1.0, 1.0, -1.0], "kept")
    value, metrics, grad = _vaco_loss_and_grad(terms, ControlHParams.create(tv_delta=0.1))
    assert float(metrics["filter_fraction"]) == 1.0
    assert float(value) == 0.0 and np.all(np.asarray(grad) == 0.0)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_each_control_entry_declares_the_knobs_and_metrics_its_loss_reads_and_reports(algo):
    """The knobs an entry and its estimator declare are those its loss and estimator read (a
    run holds those and refuses a sweep of any other), and its metrics those its loss reports
    among the trainer's columns."""
    entry = ALGORITHMS[algo]
    samples = jax.ShapeDtypeStruct((3, 2), jnp.float32)
    terms = PolicyTerms(log_prob=samples, behaviour_log_prob=samples, phase_log_prob=samples,
                        advantages=samples, tv_log_rho=samples, tv=None,
                        kl_coef=jax.ShapeDtypeStruct((), jnp.float32))
    values = ValueTerms(*(samples,) * 6)
    estimator = read_by(entry.advantages.estimate, ControlHParams(), values)
    assert estimator == {k.name for k in entry.advantages.knobs}
    # The loss also reads V-trace's rho_bar, to report the share the estimator truncated.
    assert (read_by(entry.loss, ControlHParams(), terms) | estimator
            == {k.name for k in (*entry.knobs, *entry.advantages.knobs)})
    _, reported = jax.eval_shape(lambda t: entry.loss(t, ControlHParams()), terms)
    columns = set(control_train.MECHANISMS + control_train.SOFT_STABILISERS)
    assert set(reported) & columns == {m.name for m in entry.metrics}


def test_vaco_no_filter_is_vaco_where_its_filter_drops_nothing_and_not_where_it_does():
    """The one-change ablation: the same realigned, unclipped surrogate without the filter."""
    key = jax.random.PRNGKey(3)
    log_prob = 0.05 * jax.random.normal(key, (64,))
    terms = PolicyTerms(log_prob=log_prob, behaviour_log_prob=jnp.zeros(64),
                        phase_log_prob=jnp.zeros(64),
                        advantages=jax.random.normal(jax.random.fold_in(key, 1), (64,)),
                        tv_log_rho=log_prob, tv=None, kl_coef=jnp.zeros(()))
    ablation = ALGORITHMS["vaco_no_filter"]
    assert ablation.advantages is ALGORITHMS["vaco"].advantages  # the realignment kept
    loose = ControlHParams.create(tv_delta=2.0)  # TV threshold 1.0: nothing is dropped
    loss = lambda algo, hp, t: ALGORITHMS[algo].loss(t, hp)[0]  # noqa: E731
    np.testing.assert_allclose(loss("vaco_no_filter", loose, terms), loss("vaco", loose, terms),
                               rtol=1e-6)
    grads = [jax.grad(lambda lp: loss(algo, loose, terms.replace(log_prob=lp)))(log_prob)
             for algo in ("vaco_no_filter", "vaco")]
    np.testing.assert_allclose(*grads, rtol=1e-6)
    tight = ControlHParams.create(tv_delta=0.0)  # every sample that raises TV is dropped
    assert ALGORITHMS["vaco"].loss(terms, tight)[1]["filter_fraction"] > 0
    assert loss("vaco_no_filter", tight, terms) != pytest.approx(loss("vaco", tight, terms))
