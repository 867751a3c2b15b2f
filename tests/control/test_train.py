"""The training program on the pure-JAX toy task: vmap, lag 0, realignment, divergence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine_configs import TOY
from vaco_jax import estimators
from vaco_jax.control.algorithms import ALGORITHMS, PolicyTerms
from vaco_jax.control.config import ControlHParams, validate
from vaco_jax.control.networks import Policy
from vaco_jax.core.lag_models import Bounded, Empirical, Fixed, InFlight, Uniform
from vaco_jax.core.policy_buffer import push
from vaco_jax.control.train import (METRICS, SOFT_STABILISERS, STEP_MECHANISMS, PhaseBatch,
                                    ControlTrainer, make_train)
from vaco_jax.core import phase


def _assert_trees_equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.fixture(scope="module")
def ppo_vmapped():
    """Two runs that differ in seed and learning rate, trained in one vmapped program."""
    train = make_train(TOY.replace(lag_model=Uniform()))
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    hparams = ControlHParams.stack([ControlHParams.create(lag=2.0, learning_rate=3e-4),
                             ControlHParams.create(lag=2.0, learning_rate=1e-3)])
    return train, keys, hparams, jax.jit(jax.vmap(train))(keys, hparams)


def test_metrics_are_per_update_scalars(ppo_vmapped):
    _, _, _, (_, metrics) = ppo_vmapped
    assert set(metrics) == set(METRICS)
    for name, values in metrics.items():
        assert values.shape == (2, TOY.num_updates), name
    evals = np.asarray(metrics["eval_return"])
    assert np.isfinite(evals[:, TOY.updates_per_period - 1::TOY.updates_per_period]).all()
    assert np.isnan(evals[:, ::TOY.updates_per_period]).all()
    np.testing.assert_array_equal(metrics["env_steps"][0],
                                  TOY.steps_per_update * np.arange(1, TOY.num_updates + 1))
    assert np.asarray(metrics["version_gap_max"]).max() == 2  # lag 2 reached once pushed


@pytest.mark.parametrize("lag_warmup,shares", [("clip", [1, 3 / 4, 2 / 4, 1 / 4]),
                                                ("redraw", [1, 1 / 2, 1 / 3, 1 / 4])])
def test_initial_policy_share_is_the_share_of_steps_acting_with_version_0(lag_warmup, shares):
    """`uniform:3` on a buffer of 4: at update `u` versions `0..u` exist and the lag is uniform
    over 0..3, so the initial policy acts for lags `u..3` under `clip`, `(4 - u)/4` of the
    environments, and for lag `u` alone of `0..u` under `redraw`, `1/(u + 1)`; at update 3 the
    buffer is full and both give 1/4. The fixed lag 2 acts with version 0 in updates 0, 1, 2."""
    config = TOY.replace(lag_model=Uniform(), lag_warmup=lag_warmup, num_envs=1024,
                         rollout_length=2, total_steps=4 * 1024 * 2)
    _, metrics = jax.jit(make_train(config))(jax.random.PRNGKey(0),
                                             ControlHParams.create(lag=3.0))
    np.testing.assert_allclose(metrics["initial_policy_share"], shares, atol=0.06)
    assert float(metrics["initial_policy_share"][0]) == 1.0
    fixed = config.replace(lag_model=Fixed())
    _, metrics = jax.jit(make_train(fixed))(jax.random.PRNGKey(0), ControlHParams.create(lag=2.0))
    np.testing.assert_array_equal(metrics["initial_policy_share"], [1, 1, 1, 0])
    np.testing.assert_array_equal(metrics["version_gap_mean"], [0, 1, 2, 2])


def test_vmap_over_seeds_and_hparams_equals_single_runs(ppo_vmapped):
    train, keys, hparams, (batched_state, batched_metrics) = ppo_vmapped
    single = jax.jit(train)
    for i in range(2):
        state, metrics = single(keys[i], jax.tree.map(lambda x: x[i], hparams))
        for name in METRICS:
            np.testing.assert_allclose(batched_metrics[name][i], metrics[name], rtol=2e-5,
                                       atol=1e-6, err_msg=name)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=2e-5, atol=1e-6),
                     batched_state.params, state.params)


@pytest.mark.default_emitters
@pytest.mark.parametrize("env", ["toy_reach", "toy_reach_discrete"])
def test_lag_zero_is_synchronous_training_bit_for_bit(env):
    hp = ControlHParams.create(lag=0.0)
    key = jax.random.PRNGKey(7)
    toy = TOY.replace(env=env)
    synchronous = jax.jit(make_train(toy.replace(lag_model=Fixed(), buffer_capacity=1)))(key, hp)
    lag_zero = [dict(lag_model=m) for m in (Fixed(), Uniform(), Bounded(), InFlight())]
    lag_zero += [dict(lag_model=Uniform(), lag_warmup="redraw")]
    for changes in lag_zero + [dict(lag_model=Empirical((1.0,)))]:
        lagged = jax.jit(make_train(toy.replace(buffer_capacity=8, **changes)))(key, hp)
        _assert_trees_equal(lagged[0].params, synchronous[0].params)
        _assert_trees_equal(lagged[1], synchronous[1])


def _collect_phase(algo: str, lag: float = 2.0):
    trainer = ControlTrainer(TOY.replace(algo=algo, lag_model=Fixed()))
    hp = ControlHParams.create(lag=lag, learning_rate=3e-3)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    state, _ = jax.jit(lambda s: jax.lax.scan(lambda s, _: trainer.update(s, hp), s, None,
                                              length=3))(state)  # versions differ from now on
    _, data = trainer.collect(state, jax.random.PRNGKey(1), hp)
    return trainer, hp, state, data, trainer.phase_batch(state, data, hp)


def test_vaco_realigns_once_per_phase_with_vtrace_from_the_phase_policy():
    trainer, hp, state, data, batch = _collect_phase("vaco")
    values = trainer.model.value(state.params["critic"], state.obs_stats, data.obs)
    next_values = trainer.model.value(state.params["critic"], state.obs_stats, data.next_obs)
    log_rhos = trainer.model.log_prob(state.policy, data.obs, data.action) - data.behaviour_log_prob
    assert np.abs(np.asarray(log_rhos)).max() > 1e-3  # the data really is stale
    expected = estimators.vtrace(data.reward, values, next_values, hp.gamma * (1 - data.terminated),
                                 1 - data.done, log_rhos, lambda_=hp.vtrace_lambda)
    np.testing.assert_allclose(batch.advantages, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.value_targets, expected[1], rtol=1e-5, atol=1e-5)
    # Later gradient steps move the parameters; the minibatch still sees the phase advantages.
    moved = jax.tree.map(lambda p: p + 0.5, state.params)
    used = trainer.minibatch_advantages(moved, batch, state.obs_stats, hp)
    _assert_trees_equal(used, (batch.advantages, batch.value_targets))


def test_impala_recomputes_vtrace_from_the_current_parameters_every_minibatch():
    trainer, hp, state, _, batch = _collect_phase("impala")
    at_phase_start = trainer.minibatch_advantages(state.params, batch, state.obs_stats, hp)
    moved = jax.tree.map(lambda p: p + 0.5, state.params)
    after_steps = trainer.minibatch_advantages(moved, batch, state.obs_stats, hp)
    assert not np.allclose(at_phase_start[0], after_steps[0])
    assert not np.allclose(at_phase_start[1], after_steps[1])


def test_ppo_uses_gae_on_the_behaviour_data():
    trainer, hp, state, data, batch = _collect_phase("ppo")
    values = trainer.model.value(state.params["critic"], state.obs_stats, data.obs)
    next_values = trainer.model.value(state.params["critic"], state.obs_stats, data.next_obs)
    expected = estimators.gae(data.reward, values, next_values, hp.gamma * (1 - data.terminated),
                              1 - data.done, hp.gae_lambda)
    np.testing.assert_allclose(batch.advantages, expected[0], rtol=1e-5, atol=1e-5)



@pytest.fixture(scope="module")
def ended_episodes():
    """Rollouts at lag 0 and lag 2 with truncated and terminated steps, from one state, and the
    expected phase quantities: the critic on every `obs` and every `next_obs`, the actor's
    log-probs recomputed.

    The toy task rarely terminates within a few steps, so some steps are marked terminated by
    hand; their next value is discounted to 0 either way.
    """
    config = TOY.replace(lag_model=Fixed(), episode_length=6)
    trainer = ControlTrainer(config)
    train_hp = ControlHParams.create(lag=2.0, learning_rate=3e-3)
    state = trainer.init(jax.random.PRNGKey(0), train_hp)
    state, _ = jax.jit(lambda s: jax.lax.scan(lambda s, _: trainer.update(s, train_hp), s, None,
                                              length=3))(state)
    critic = lambda obs: trainer.model.value(state.params["critic"], state.obs_stats, obs)
    rollouts = {}
    for lag in (0.0, 2.0):
        hp = ControlHParams.create(lag=lag, learning_rate=3e-3)
        _, data = trainer.collect(state, jax.random.PRNGKey(1), hp)
        terminated = jnp.zeros_like(data.terminated).at[3:5, :4].set(1.0) * (1 - data.truncated)
        data = data.replace(terminated=terminated)
        assert np.asarray(data.truncated).any() and np.asarray(terminated).any()
        expected = dict(values=critic(data.obs), next_values=critic(data.next_obs),
                        log_prob=trainer.model.log_prob(state.policy, data.obs, data.action))
        rollouts[lag] = (hp, data, expected)
    return config, state, rollouts


@pytest.mark.parametrize("lag", [0.0, 2.0])
def test_phase_batch_equals_gae_with_the_critic_on_every_next_observation(ended_episodes, lag):
    config, state, rollouts = ended_episodes
    trainer = ControlTrainer(config)
    hp, data, expected = rollouts[lag]
    not_done = np.asarray(data.done[:-1]) == 0
    np.testing.assert_array_equal(np.asarray(data.next_obs[:-1])[not_done],
                                  np.asarray(data.obs[1:])[not_done])
    batch = jax.jit(trainer.phase_batch)(state, data, hp)
    advantages, targets = estimators.gae(data.reward, expected["values"],
                                         expected["next_values"],
                                         hp.gamma * (1 - data.terminated), 1 - data.done,
                                         hp.gae_lambda)
    np.testing.assert_allclose(batch.advantages, advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.value_targets, targets, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.phase_log_prob, expected["log_prob"], rtol=1e-5, atol=1e-5)
    if lag == 0.0:  # the behaviour policy is pi_T: its own log-probs, no staleness at all
        np.testing.assert_array_equal(batch.phase_log_prob, data.behaviour_log_prob)
    else:
        assert np.abs(np.asarray(batch.phase_log_prob - data.behaviour_log_prob)).max() > 1e-3


def test_minibatch_vtrace_uses_the_critic_on_every_next_observation(ended_episodes):
    config, state, rollouts = ended_episodes
    trainer = ControlTrainer(config.replace(algo="impala"))
    hp, data, expected = rollouts[2.0]
    batch = trainer.phase_batch(state, data, hp)
    used = jax.jit(trainer.minibatch_advantages)(state.params, batch, state.obs_stats, hp)
    vtrace = estimators.vtrace(data.reward, expected["values"], expected["next_values"],
                               hp.gamma * (1 - data.terminated), 1 - data.done,
                               expected["log_prob"] - data.behaviour_log_prob,
                               lambda_=hp.vtrace_lambda, rho_bar=hp.rho_bar, c_bar=hp.c_bar,
                               rho_bar_pg=hp.rho_bar_pg)
    np.testing.assert_allclose(used[0], vtrace[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(used[1], vtrace[1], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("env", ["toy_reach", "toy_reach_discrete"])
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_trains_finitely_and_reports_its_diagnostics(algo, env):
    config = TOY.replace(env=env, algo=algo, lag_model=Fixed(),
                         tv_scope="batch" if algo == "vaco" else "minibatch")
    # delta 0 and a tight clip range: the filter and the clip act as soon as the policy moves.
    hp = ControlHParams.create(lag=2.0, tv_delta=0.0, clip_eps=0.01, learning_rate=3e-3)
    state, metrics = jax.jit(make_train(config))(jax.random.PRNGKey(0), hp)
    assert not bool(state.diverged)
    # A stabiliser's fraction and acted share are NaN throughout where the algorithm has none.
    stabilisers = {*STEP_MECHANISMS, *map(phase.acted_name, STEP_MECHANISMS), *SOFT_STABILISERS,
                   "ess_lr_scale"}
    for name in METRICS:
        values = np.asarray(metrics[name])
        if name in stabilisers:
            assert np.isfinite(values).all() or np.isnan(values).all(), name
        elif name not in ("eval_return", "episode_return"):
            assert np.isfinite(values).all(), name
    filtered = np.asarray(metrics["filter_fraction"])
    if algo in ("vaco", "vaco_filter_only", "vaco_filter_only_behaviour"):
        assert filtered.max() > 0
    else:
        assert np.isnan(filtered).all()
    if algo in ("ppo", "vaco_realign_only", "decoupled_ppo", "decoupled_ppo_ess",
                "ppo_recompute"):
        assert np.asarray(metrics["clip_fraction"]).max() > 0
    ess_scale = np.asarray(metrics["ess_lr_scale"])
    if ALGORITHMS[algo].ess_scaling:
        assert ((ess_scale > 0) & (ess_scale <= 1)).all()
    else:
        assert np.isnan(ess_scale).all()
    if algo == "ppo_kl":
        assert not np.allclose(metrics["kl_coef"], hp.kl_coef)  # adapted towards the target


def test_divergence_freezes_only_the_failing_run():
    train = jax.jit(jax.vmap(make_train(TOY)))
    hparams = ControlHParams.stack([ControlHParams.create(learning_rate=3e-4), ControlHParams.create(learning_rate=1e30)])
    state, metrics = train(jnp.stack([jax.random.PRNGKey(0)] * 2), hparams)
    assert not bool(state.diverged[0]) and bool(state.diverged[1])
    at = int(state.diverged_at[1])  # 1-based, as the run table numbers updates
    assert 1 <= at <= TOY.num_updates
    assert int(state.diverged_at[0]) == -1
    diverged = np.asarray(metrics["diverged"])
    update_numbers = np.arange(1, TOY.num_updates + 1)
    np.testing.assert_array_equal(diverged[1], update_numbers >= at)
    assert update_numbers[np.argmax(diverged[1])] == at
    assert np.isnan(np.asarray(metrics["policy_loss"])[1, at - 1:]).all()
    assert np.isfinite(np.asarray(metrics["policy_loss"])[0]).all()
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(state.params))  # frozen, finite


def test_ppo_recompute_at_lag_zero_is_ppo_up_to_float():
    # At lag 0 the behaviour policy is pi_T, but the rollout's log-prob of its sampled action
    # and the phase-start recomputation are different float programs (differences of order
    # 1e-7 in the log-prob), so the two runs agree to float precision, not bit for bit.
    hp = ControlHParams.create(lag=0.0, learning_rate=3e-3)
    key = jax.random.PRNGKey(3)
    config = TOY.replace(lag_model=Fixed())
    ppo = jax.jit(make_train(config))(key, hp)
    recompute = jax.jit(make_train(config.replace(algo="ppo_recompute")))(key, hp)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
                 recompute[0].params, ppo[0].params)
    assert np.asarray(recompute[1]["tv_backward"]).max() < 1e-6
    lagged = jax.jit(make_train(config.replace(algo="ppo_recompute")))(
        key, hp.replace(lag=jnp.asarray(2.0)))
    assert np.asarray(lagged[1]["tv_backward"]).max() > 1e-4  # the tolerance above can fail


def test_non_finite_normaliser_statistics_stop_the_update_that_produced_them(monkeypatch):
    from vaco_jax.control import train as train_module
    trainer = ControlTrainer(TOY)
    hp = ControlHParams.create()
    state = trainer.init(jax.random.PRNGKey(0), hp)
    monkeypatch.setattr(train_module, "update_stats",
                        lambda stats, obs: stats.replace(var=stats.var * jnp.nan))
    after, metrics = jax.jit(trainer.update)(state, hp)
    assert bool(after.diverged) and int(after.diverged_at) == 1
    assert float(metrics["diverged"]) == 1.0
    assert np.isfinite(np.asarray(after.obs_stats.var)).all()  # frozen at the last finite state


def test_batch_scope_filter_uses_the_current_parameters_at_every_step():
    # One epoch: the batch TV under the phase-start parameters is TV(pi_T, pi_T) = 0, so a TV
    # measured once per epoch never fires; measured at each step it fires from the second on.
    config = TOY.replace(algo="vaco", lag_model=Fixed(), tv_scope="batch", epochs=1,
                         minibatches=4)
    hp = ControlHParams.create(lag=2.0, tv_delta=0.0, learning_rate=3e-3)
    _, metrics = jax.jit(make_train(config))(jax.random.PRNGKey(0), hp)
    assert np.asarray(metrics["filter_fraction"]).min() > 0


def test_forward_diagnostics_are_weighted_to_the_phase_policy():
    trainer, hp, state, _, batch = _collect_phase("ppo")
    moved = jax.tree.map(lambda p: p * 1.3, state.params)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
    _, metrics = trainer._loss(moved, flat, state.obs_stats, state.kl_coef, None, hp)
    log_prob = trainer.model.log_prob(Policy(moved["actor"], state.obs_stats), flat.obs,
                                      flat.action)
    phase_ratio = np.asarray(log_prob - flat.phase_log_prob, np.float64)
    w = np.exp(np.asarray(flat.phase_log_prob - flat.behaviour_log_prob, np.float64))
    assert np.ptp(w) > 1e-3  # the weights matter here
    rho = np.exp(phase_ratio)
    np.testing.assert_allclose(metrics["tv_forward"],
                               0.5 * np.sum(w * np.abs(rho - 1)) / np.sum(w), rtol=1e-4)
    np.testing.assert_allclose(metrics["approx_kl"],
                               np.sum(w * (rho - 1 - phase_ratio)) / np.sum(w), rtol=1e-3)
    np.testing.assert_allclose(metrics["tv_forward_median"], np.median(0.5 * np.abs(rho - 1)),
                               rtol=1e-4)


def test_tv_estimator_is_validated_before_compilation():
    with pytest.raises(ValueError, match="tv_estimator.*unweighted.*weighted"):
        ControlTrainer(TOY.replace(tv_estimator="importance"))


def test_tv_estimator_changes_the_filter_decision():
    # Support {0, 1, 2} enumerated with the behaviour policy's frequencies (as in
    # test_losses_diagnostics): the plain mean over beta's samples gives TV = 0.15625 > delta,
    # TV(pi_theta, pi_T) itself is 0.1 < delta, so only the unweighted filter drops samples.
    behaviour = jnp.log(jnp.array([0.5, 0.5, 0.25, 0.25]))
    phase = jnp.log(jnp.array([0.2, 0.2, 0.4, 0.4]))  # pi_T
    log_prob = jnp.log(jnp.array([0.3, 0.3, 0.3, 0.4]))  # pi_theta
    mb = PhaseBatch(**{name: None for name in PhaseBatch.__dataclass_fields__}).replace(
        phase_log_prob=phase, behaviour_log_prob=behaviour)
    hp = ControlHParams.create(tv_delta=0.24)  # a budget: TV threshold 0.12
    decisions = {}
    for estimator in ("unweighted", "weighted"):
        trainer = ControlTrainer(TOY.replace(algo="vaco", tv_estimator=estimator))
        terms = PolicyTerms(log_prob=log_prob, behaviour_log_prob=behaviour, phase_log_prob=phase,
                            advantages=jnp.ones(4), tv_log_rho=trainer._tv_log_rho(log_prob, mb),
                            tv=trainer._filter_tv(log_prob, mb), kl_coef=jnp.asarray(0.0))
        _, decisions[estimator] = ALGORITHMS["vaco"].policy_loss(terms, hp)
    np.testing.assert_allclose(decisions["unweighted"]["tv"], 0.15625, rtol=1e-6)
    np.testing.assert_allclose(decisions["weighted"]["tv"], 0.1, rtol=1e-6)
    # rho = (1.5, 1.5, 0.75, 1) with A = 1: the two samples with rho > 1 raise TV.
    assert float(decisions["unweighted"]["filter_fraction"]) == 0.5
    assert float(decisions["weighted"]["filter_fraction"]) == 0.0


def test_filter_normalization_divides_by_the_kept_samples():
    trainer, hp, state, _, batch = _collect_phase("vaco")
    moved = jax.tree.map(lambda p: p * 1.3, state.params)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
    hp = hp.replace(tv_delta=jnp.asarray(0.0))
    losses = {}
    for normalization in ("all", "kept"):
        trainer = ControlTrainer(trainer.config.replace(filter_normalization=normalization))
        losses[normalization] = trainer._loss(moved, flat, state.obs_stats, state.kl_coef, None,
                                              hp)[1]
    kept = 1.0 - float(losses["all"]["filter_fraction"])
    assert 0.0 < kept < 1.0
    np.testing.assert_allclose(losses["all"]["policy_loss"], kept * losses["kept"]["policy_loss"],
                               rtol=1e-5)


@pytest.mark.parametrize("field,value,allowed", [
    ("lag_warmup", "wait", "clip, redraw"), ("filter_normalization", "kept_only", "all, kept"),
    ("restart_from", "reset", "fresh, first")])
def test_options_are_validated_before_compilation(field, value, allowed):
    with pytest.raises(ValueError, match=f"{field}='{value}'.*{allowed}"):
        ControlTrainer(TOY.replace(**{field: value}))


@pytest.mark.parametrize("algo,tv_reference,message", [
    ("vaco", "phase", "its TV filter measures pi_theta/pi_T .* set tv_reference='behaviour'"),
    ("vaco_filter_only", "phase", "its TV filter measures pi_theta/pi_T"),
    ("ppo_recompute", "phase", "its clip bounds pi_theta/pi_T.* use algo='ppo'"),
    ("vaco_realign_only", "behaviour", "its clip bounds pi_theta/pi_T")])
def test_a_trust_region_that_cannot_act_at_one_step_per_phase_is_refused(algo, tv_reference,
                                                                         message):
    one_step = TOY.replace(algo=algo, tv_reference=tv_reference, epochs=1, minibatches=1)
    with pytest.raises(ValueError, match=f"algo='{algo}' with epochs=1 and minibatches=1 is "
                                         f"refused: {message}"):
        ControlTrainer(one_step)
    ControlTrainer(one_step.replace(epochs=2))  # a second step lets the ratio move
    if algo.startswith("vaco") and tv_reference == "phase":  # the behaviour ratio moves at once
        ControlTrainer(one_step.replace(tv_reference="behaviour"))


def test_tv_delta_convention_is_validated_before_compilation():
    with pytest.raises(ValueError, match="tv_delta_convention='l1' .* allowed values: budget, tv"):
        ControlTrainer(TOY.replace(tv_delta_convention="l1"))


# ---------------------------------------------------------------- adaptive KL coefficient


def _run_updates(trainer, state, hp, n):
    return jax.jit(lambda s: jax.lax.scan(lambda s, _: trainer.update(s, hp), s, None,
                                          length=n))(state)


def test_adaptive_kl_coefficient_ignores_backward_lag_the_learner_cannot_remove():
    # The lag-3 behaviour policies of the first three updates are far from the learner, so
    # KL(beta || pi_T) is large; with learning rate 0 the learner cannot move, the phase's
    # KL(pi_T || pi_T+1) is 0 and the coefficient may only shrink.
    trainer = ControlTrainer(TOY.replace(algo="ppo_kl", lag_model=Fixed()))
    hp = ControlHParams.create(lag=3.0, learning_rate=0.0)
    state = trainer.init(jax.random.PRNGKey(0), hp)
    stale = Policy(jax.tree.map(lambda p: p + 0.5, state.params["actor"]), state.obs_stats)
    buffer = state.buffer
    for policy in (stale, stale, stale, state.policy):
        buffer = push(buffer, policy)
    _, metrics = _run_updates(trainer, state.replace(buffer=buffer), hp, 4)
    assert np.asarray(metrics["behaviour_kl"])[:3].min() > 1.5 * float(hp.kl_target)
    coefs = np.asarray(metrics["kl_coef"])
    assert coefs.max() <= float(hp.kl_coef) and np.all(np.diff(coefs) <= 0), coefs


def test_adaptive_kl_coefficient_stays_within_its_bounds():
    config = TOY.replace(algo="ppo_kl", lag_model=Uniform(),
                         total_steps=TOY.steps_per_update * 12)
    bounds = dict(kl_coef=0.2, kl_coef_min=0.05, kl_coef_max=0.8)
    # The first run cannot move (KL 0: halved every update), the second overshoots a tiny
    # target every phase (doubled every update); the bounds are traced, vmapped leaves.
    hparams = ControlHParams.stack([ControlHParams.create(lag=2.0, learning_rate=0.0, **bounds),
                             ControlHParams.create(lag=2.0, learning_rate=3e-3, kl_target=1e-9, **bounds)])
    keys = jnp.stack([jax.random.PRNGKey(0)] * 2)
    _, metrics = jax.jit(jax.vmap(make_train(config)))(keys, hparams)
    coefs = np.asarray(metrics["kl_coef"])
    assert coefs.min() >= np.float32(0.05) and coefs.max() <= np.float32(0.8)
    np.testing.assert_allclose(coefs[:, -4:], [[0.05] * 4, [0.8] * 4], rtol=1e-6)


def test_phase_kl_is_the_weighted_kl_from_the_phase_policy_to_the_learner_after_it():
    trainer, _, state, _, batch = _collect_phase("ppo_kl")
    after = jax.tree.map(lambda p: p * 1.1, state.params)
    log_prob = trainer.model.log_prob(Policy(after["actor"], state.obs_stats), batch.obs,
                                      batch.action)
    log_rho = np.asarray(log_prob - batch.phase_log_prob, np.float64)
    w = np.exp(np.asarray(batch.phase_log_prob - batch.behaviour_log_prob, np.float64))
    assert np.ptp(w) > 1e-3  # the weights matter here
    expected = np.sum(w * (np.exp(log_rho) - 1 - log_rho)) / np.sum(w)
    np.testing.assert_allclose(trainer.phase_kl(state, after, batch), expected, rtol=1e-4)
    # Zero up to rounding: the phase log-probs come from another compiled program.
    assert abs(float(trainer.phase_kl(state, state.params, batch))) < 1e-8


@pytest.mark.parametrize("changes,message", [
    (dict(kl_coef_min=0.0), r"kl_coef_min must lie in \(0, inf\)"),
    (dict(kl_coef_min=2.0, kl_coef_max=1.0, kl_coef=1.5), r"kl_coef_min must be <= kl_coef_max"),
    (dict(kl_coef=5.0, kl_coef_max=1.0), r"kl_coef must lie in \[kl_coef_min, kl_coef_max\]")])
def test_kl_coefficient_bounds_are_validated(changes, message):
    with pytest.raises(ValueError, match=message):
        validate(TOY.replace(algo="ppo_kl"), ControlHParams.create(**changes))


def test_a_fixed_kl_coefficient_need_not_lie_in_the_adaptive_range():
    validate(TOY.replace(algo="ppo_kl", adaptive_kl=False), ControlHParams.create(kl_coef=0.0))


@pytest.mark.default_emitters
def test_linear_learning_rate_schedule_falls_once_per_update_as_purejaxrls():
    config = TOY.replace(learning_rate_schedule="linear", epochs=2, minibatches=2)
    hp = ControlHParams.create(learning_rate=0.1)
    schedule = ControlTrainer(config).learning_rate(hp)
    steps = config.epochs * config.minibatches
    # Every minibatch step of update u uses 0.1 * (1 - u / num_updates), PureJaxRL's ANNEAL_LR.
    for update in range(config.num_updates):
        for step in range(steps):
            np.testing.assert_allclose(schedule(update * steps + step),
                                       0.1 * (1 - update / config.num_updates), rtol=1e-6)
    assert ControlTrainer(TOY).learning_rate(hp) == 0.1
    # The optimiser follows it: the first update (rate 0.1 either way) is the constant run's,
    # the second (rate 0.1 * (1 - 1 / num_updates)) is not.
    runs = []
    for schedule_name in ("linear", "constant"):
        trainer = ControlTrainer(config.replace(learning_rate_schedule=schedule_name))
        state = trainer.init(jax.random.PRNGKey(0), hp)
        first, _ = jax.jit(trainer.update)(state, hp)
        second, _ = jax.jit(trainer.update)(first, hp)
        runs.append((first.params, second.params))
    _assert_trees_equal(runs[0][0], runs[1][0])
    assert not np.allclose(runs[0][1]["actor"]["params"]["MLP_0"]["Dense_0"]["kernel"],
                           runs[1][1]["actor"]["params"]["MLP_0"]["Dense_0"]["kernel"])


def test_relu_activation_changes_the_networks_and_is_validated():
    hp = ControlHParams.create()
    tanh = ControlTrainer(TOY).init(jax.random.PRNGKey(0), hp)
    relu_trainer = ControlTrainer(TOY.replace(activation="relu"))
    relu = relu_trainer.init(jax.random.PRNGKey(0), hp)
    _assert_trees_equal(tanh.params, relu.params)  # same initial weights
    obs = jnp.linspace(-2, 2, 12).reshape(4, 3)
    assert not np.allclose(ControlTrainer(TOY).model.value(tanh.params["critic"], tanh.obs_stats, obs),
                           relu_trainer.model.value(relu.params["critic"], relu.obs_stats, obs))
    with pytest.raises(ValueError, match="activation.*tanh, relu"):
        ControlTrainer(TOY.replace(activation="gelu"))


@pytest.mark.parametrize("restart_from", ["fresh", "first"])
def test_finished_environments_restart_from_fresh_states_or_their_own_first(restart_from):
    """`toy_reach` draws its target at reset: under `first` every episode of an environment
    chases the target of its first one; under `fresh` later episodes draw new ones."""
    trainer = ControlTrainer(TOY.replace(lag_model=Fixed(), episode_length=5,
                                         restart_from=restart_from))
    hp = ControlHParams.create()
    state = trainer.init(jax.random.PRNGKey(0), hp)
    first_targets = np.asarray(state.episodes.env.obs[:, 2])
    collect = jax.jit(lambda s, k: trainer.collect(s, k, hp))
    observations = []
    for i in range(3):  # 48 steps: episodes of 5 steps end within and across rollouts
        state, data = collect(state, jax.random.PRNGKey(i))
        observations.append(np.asarray(data.obs))
    targets = np.concatenate(observations)[..., 2]  # [T, E]
    if restart_from == "first":
        np.testing.assert_array_equal(targets, np.broadcast_to(first_targets, targets.shape))
        _assert_trees_equal(state.episodes.first_states,
                            trainer.init(jax.random.PRNGKey(0), hp).episodes.env)
    else:
        assert state.episodes.first_states is None  # the state (and its checkpoints) as before
        restarted = targets[5]  # every environment's second episode starts at step 5
        assert np.all(restarted != first_targets)
