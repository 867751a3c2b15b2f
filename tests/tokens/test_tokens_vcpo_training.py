"""VCPO as trainable token algorithms (`vcpo`, `vcpo_ess_only`, `vcpo_opob_only`): the registry's
surrogate by hand, the batch's OPOB advantages against an independent computation, the ESS step
against its formula, training at lag 0 and at a high lag, and refused settings."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import experiment as sweep
from vaco_jax.cli import main
from vaco_jax.core.policy_buffer import push
from vaco_jax.tokens.algorithms import ALGORITHMS
from vaco_jax.tokens.surrogates import TokenTerms, group_relative, off_policy_optimal
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer, make_train

VCPO_ALGOS = ("vcpo", "vcpo_ess_only", "vcpo_opob_only")
# One epoch x one minibatch: the phase's single step is taken at pi_T, VCPO's own setting.
TINY = TokenConfig(task="add", task_size=1, layers=1, width=32, heads=2, context=10, prompts=4,
                   group_size=4, num_updates=4, eval_every=4, eval_prompts=8,
                   buffer_capacity=4, partial_credit=True)
PARAMS = TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(0))
STALE = TokenHParams.create(lag=3.0, learning_rate=3e-3)
# With the buffer of `_stale_state`, this key's batch has ESS about 0.55 and three prompt groups
# whose rewards differ.
GENERATE_KEY = jax.random.PRNGKey(4)


def _stale_state(trainer, hp, step=0.05):
    """A state whose buffer holds versions 0..3, version `v` being `PARAMS + v * step * d` for a
    fixed direction `d`; the learner `pi_T` is version 3, so lag 3 generates with `PARAMS`."""
    direction = TokenPolicy(TINY.model_spec).init(jax.random.PRNGKey(1))
    state = trainer.init(jax.random.PRNGKey(0), hp)
    for version in range(1, 4):
        params = jax.tree.map(lambda p, d: p + version * step * d, PARAMS, direction)
        state = state.replace(params=params, buffer=push(state.buffer, params))
    return state


def _sequence_log_weights(batch):
    """`log pi_T(y) / beta(y)` of each sequence, from the batch's recorded log-probs."""
    return np.asarray(((batch.phase_log_prob - batch.behaviour_log_prob) * batch.mask).sum(1),
                      np.float64)


def _ess(log_w):
    w = np.exp(log_w - log_w.max())
    return w.sum() ** 2 / (len(w) * np.square(w).sum())


# ---------------------------------------------------------------------------- the surrogate
@pytest.mark.parametrize("algo", VCPO_ALGOS)
def test_vcpo_surrogate_by_hand(algo):
    # Two sequences at pi_theta = pi_T; staleness 3 x 4 = 12 on the first (truncated to the cap
    # 8), 0.5 on the second, whose masked token's log-probs must not count.
    behaviour = -jnp.log(jnp.asarray([[3.0, 4.0], [0.5, 1e-3]]))
    terms = TokenTerms(log_prob=jnp.zeros((2, 2)), behaviour_log_prob=behaviour,
                       phase_log_prob=jnp.zeros((2, 2)), advantages=jnp.asarray([1.0, -1.0]),
                       mask=jnp.asarray([[1.0, 1.0], [1.0, 0.0]]),
                       version_gap=jnp.zeros((2, 2)), aggregation=ALGORITHMS[algo].aggregation)

    def loss_and_grad(**hparams):
        hp = TokenHParams.create(**hparams)
        loss_fn = lambda lp: ALGORITHMS[algo].policy_loss(terms.replace(log_prob=lp), hp)  # noqa
        (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(terms.log_prob)
        return float(loss), np.asarray(grad), {k: float(v) for k, v in metrics.items()}

    # Each sequence's token mean of -min(w, C) A r, then the mean over sequences.
    loss, grad, metrics = loss_and_grad()
    assert loss == pytest.approx((-8.0 + 0.5) / 2, rel=1e-5)
    np.testing.assert_allclose(grad, [[-8.0 / 4, -8.0 / 4], [0.5 / 2, 0.0]], rtol=1e-5)
    assert metrics == pytest.approx({"is_weight_mean": 4.25, "is_truncated_fraction": 0.5})
    # The cap is the traced `vcpo_is_cap`, not the token algorithms' `is_cap`.
    loss, _, metrics = loss_and_grad(vcpo_is_cap=20.0, is_cap=1.0)
    assert loss == pytest.approx((-12.0 + 0.5) / 2, rel=1e-5)
    assert metrics["is_truncated_fraction"] == 0.0


def test_the_ablations_differ_from_vcpo_in_one_part_each():
    vcpo, ess_only, opob_only = (ALGORITHMS[a] for a in VCPO_ALGOS)
    assert vcpo.advantages is off_policy_optimal and vcpo.ess_scaling
    assert ess_only.advantages is group_relative and ess_only.ess_scaling
    assert opob_only.advantages is off_policy_optimal and not opob_only.ess_scaling
    assert vcpo.policy_loss is ess_only.policy_loss is opob_only.policy_loss
    assert {a.aggregation for a in (vcpo, ess_only, opob_only)} == {"seq-mean-token-mean"}


# ---------------------------------------------------------------------------- on the model
def test_opob_advantages_of_a_stale_batch_match_an_independent_computation():
    trainer = TokenTrainer(TINY.replace(algo="vcpo_opob_only"), PARAMS)
    state = _stale_state(trainer, STALE)
    _, batch = jax.jit(trainer.collect)(state, GENERATE_KEY, STALE)
    shape = (TINY.prompts, TINY.group_size)
    reward = np.asarray(batch.reward, np.float64).reshape(shape)
    assert (reward.std(axis=1) > 0).sum() >= 2

    # Weights from teacher-forced log-probs under pi_T (version 3) and beta (version 0).
    def log_probs(params):
        return trainer.policy.response_log_probs(params, batch.prompt, batch.response,
                                                 STALE.temperature)[0]

    behaviour = jax.tree.map(lambda stack: stack[0], state.buffer.policies)
    log_w = np.asarray((log_probs(state.params) - log_probs(behaviour)).sum(1), np.float64)
    assert np.ptp(log_w) > 1.0

    # Squared norms of each sequence's log-probability gradient, one `jax.grad` at a time.
    sequence_grad = jax.jit(jax.grad(lambda p, x, y: trainer.policy.response_log_probs(
        p, x, y, STALE.temperature)[0].sum()))
    norms = np.array([
        sum(float(jnp.sum(g ** 2)) for g in jax.tree.leaves(
            sequence_grad(state.params, batch.prompt[i:i + 1], batch.response[i:i + 1])))
        for i in range(TINY.batch_size)])

    big_w = (np.exp(log_w) ** 2 * norms).reshape(shape)
    baseline = (big_w * reward).sum(1, keepdims=True) / big_w.sum(1, keepdims=True)
    expected = (reward - baseline) / (reward.std(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(batch.advantages).reshape(shape), expected,
                               rtol=2e-3, atol=1e-5)
    # The baseline is not the group mean: GRPO's advantages would fail the comparison above.
    grpo = (reward - reward.mean(1, keepdims=True)) / (reward.std(1, keepdims=True) + 1e-6)
    assert np.abs(grpo - expected).max() > 0.05


@pytest.fixture(scope="module")
def ess_trainers():
    """`vcpo_ess_only` and the same algorithm without ESS scaling, their optimisation phase
    jitted, and a lag-0 and a stale batch."""
    scaled = TokenTrainer(TINY.replace(algo="vcpo_ess_only"), PARAMS)
    plain = TokenTrainer(TINY.replace(algo="vcpo_ess_only"), PARAMS)
    plain.algorithm = dataclasses.replace(plain.algorithm, ess_scaling=False)
    fresh = scaled.init(jax.random.PRNGKey(0), STALE)
    stale = _stale_state(scaled, STALE)
    collect = jax.jit(scaled.collect)
    batches = {"lag 0": collect(fresh, GENERATE_KEY, STALE.replace(lag=0.0)),
               "stale": collect(stale, GENERATE_KEY, STALE)}
    return (scaled, jax.jit(scaled.optimise)), (plain, jax.jit(plain.optimise)), batches


@pytest.mark.default_emitters
@pytest.mark.parametrize("which,ess_target", [("lag 0", 1.0), ("stale", 1.0), ("stale", 0.4)])
def test_ess_only_step_is_the_unscaled_step_times_the_ess_factor(ess_trainers, which,
                                                                 ess_target):
    scaled, plain, batches = ess_trainers
    state, batch = batches[which]
    hp = STALE.replace(ess_target=jnp.float32(ess_target))
    ess = _ess(_sequence_log_weights(batch))
    factor = np.sqrt(min(1.0, ess / ess_target))
    if which == "lag 0":
        assert factor == pytest.approx(1.0, abs=1e-5)  # pi_T is the behaviour policy
    elif ess_target == 1.0:
        assert 0.5 < factor < 0.9
    else:
        assert ess > ess_target and factor == 1.0  # above the target the step is untouched

    def step(trainer_and_optimise):
        trainer, optimise = trainer_and_optimise
        opt_state = trainer.optimizer(hp).init(state.params)
        params, _, metrics = optimise(state.replace(opt_state=opt_state), batch,
                                      jax.random.PRNGKey(0), hp)
        return params, metrics

    scaled_params, metrics = step(scaled)
    plain_params, plain_metrics = step(plain)
    assert float(metrics["ess_lr_scale"]) == pytest.approx(factor, rel=1e-4)
    assert np.isnan(plain_metrics["ess_lr_scale"])
    jax.tree.map(lambda s, p, p0: np.testing.assert_allclose(s - p0, factor * (p - p0),
                                                            rtol=1e-3, atol=1e-7),
                 scaled_params, plain_params, state.params)
    assert any(np.abs(p - p0).max() > 0 for p, p0 in zip(jax.tree.leaves(plain_params),
                                                         jax.tree.leaves(state.params)))


# ---------------------------------------------------------------------------- training
@pytest.mark.slow
def test_vcpo_trains_at_lag_zero_and_a_high_lag_with_its_step_shrinking_only_when_stale():
    train = jax.jit(jax.vmap(make_train(TINY.replace(algo="vcpo"), PARAMS), in_axes=(None, 0)))
    hp = jax.tree.map(lambda x: jnp.broadcast_to(x, (2,)),
                      TokenHParams.create(lag=[0.0, 3.0], learning_rate=[3e-3, 3e-3]))
    state, metrics = train(jax.random.PRNGKey(0), hp)
    assert not np.asarray(state.diverged).any()
    for name in ("policy_loss", "grad_norm", "ess_ratio", "ess_lr_scale", "is_weight_mean",
                 "is_truncated_fraction"):
        assert np.isfinite(metrics[name]).all(), name
    scale = np.asarray(metrics["ess_lr_scale"])
    np.testing.assert_allclose(scale[0], 1.0, atol=1e-5)
    np.testing.assert_allclose(metrics["is_weight_mean"][0], 1.0, atol=1e-4)
    # Stale once the learner has moved away from the versions it lags behind.
    assert np.all((scale[1] > 0) & (scale[1] <= 1.0)) and scale[1, -1] < 0.95
    np.testing.assert_allclose(scale[1], np.sqrt(np.minimum(1.0, metrics["ess_ratio"][1])),
                               rtol=1e-4)


# ---------------------------------------------------------------------------- refused settings
@pytest.mark.parametrize("hparams,message", [
    ({"vcpo_is_cap": 0.5}, r"vcpo_is_cap must lie in \[1, inf\), got 0.5"),
    ({"vcpo_is_cap": np.inf}, r"vcpo_is_cap must be finite"),
    ({"ess_target": 0.0}, r"ess_target must lie in \(0, 1\]"),
    ({"ess_target": [0.5, np.nan]}, r"ess_target must be finite, got \[0.5, nan\]"),
    ({"ess_target": 1.5}, r"ess_target must lie in \(0, 1\], got 1.5"),
])
def test_bad_vcpo_thresholds_fail_before_compilation(hparams, message):
    with pytest.raises(ValueError, match=message):
        validate(TINY.replace(algo="vcpo"), TokenHParams.create(**hparams))


def test_the_command_line_takes_the_vcpo_algorithms_and_checks_their_thresholds(tmp_path,
                                                                                capsys):
    out = tmp_path / "run"
    assert main(["tokens", "--algo", "vcpo_opob_only", "--hparam", "vcpo_is_cap=0.5",
                 "--out", str(out)]) == 2
    # The values are reported once per seed.
    assert "vcpo_is_cap must lie in [1, inf), got [0.5," in capsys.readouterr().err
    assert main(["tokens", "--algo", "vcpo_ess_only", "--hparam", "ess_target=0",
                 "--out", str(out)]) == 2
    assert "ess_target must lie in (0, 1], got [0.0," in capsys.readouterr().err
    assert not out.exists()


SWEEP = """
name = "vcpo"
testbed = "tokens"
tasks = ["add"]
algos = ["grpo", "vcpo", "vcpo_ess_only", "vcpo_opob_only"]
seeds = 2

[lag]
model = "fixed"
levels = [0, 3]

[hparams]
ess_target = 0.5

[overrides.vcpo.hparams]
vcpo_is_cap = [4.0, 8.0]

[overrides.vcpo_ess_only.hparams]
vcpo_is_cap = [4.0, 8.0]

[overrides.vcpo_opob_only.hparams]
vcpo_is_cap = [4.0, 8.0]
"""


def test_a_token_sweep_takes_the_vcpo_algorithms_and_sweeps_their_thresholds(monkeypatch):
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled while parsing"))
    experiment = sweep.parse_experiment(SWEEP)
    vcpo = experiment.group("add-vcpo-e1m1")
    assert vcpo.config.algo == "vcpo" and vcpo.swept == ("vcpo_is_cap",)
    np.testing.assert_array_equal(vcpo.hparams(range(len(vcpo.runs))).vcpo_is_cap,
                                  [4, 4, 8, 8] * 2)
    with pytest.raises(ValueError, match=r"vcpo_is_cap must lie in \[1, inf\)"):
        sweep.parse_experiment(SWEEP.replace("[4.0, 8.0]", "[0.5, 8.0]"))
    assert experiment.group("add-grpo-e1m1").swept == ()
    # GRPO reads no VCPO cap: the same grid in the shared table would give it two identical
    # groups of runs, and is refused.
    with pytest.raises(ValueError, match=r"algo='grpo' does not read hyper-parameter\(s\) "
                                         r"vcpo_is_cap"):
        sweep.parse_experiment(SWEEP.replace("ess_target = 0.5", "ess_target = 0.5\n"
                                             "vcpo_is_cap = [4.0, 8.0]"))
