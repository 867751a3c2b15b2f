"""Lag models: every model's drawn lags follow its stated distribution (chi-square tests), on a
full buffer and, under both `lag_warmup` options, before it is full."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from engine_configs import TOY
from vaco_jax.control.config import ControlConfig, ControlHParams, validate
from vaco_jax.core.lag_models import (LAG_MODELS, LAG_WARMUPS, Bounded, Empirical, Fixed,
                                      Geometric, InFlight, PerActor, Uniform, in_flight_lags, named,
                                      refuse_stale)
from vaco_jax.core.policy_buffer import (PolicyBuffer, effective_lags, max_available_lag, push,
                                         redraw_unavailable_lags)
from vaco_jax.control.train import ControlTrainer, make_train

CAPACITY = 8
DRAWS = 20_000
PER_ACTOR = jnp.arange(DRAWS) % 3


def _expected(lag_model, lag, probabilities=()):
    """Each model's distribution over lags 0..CAPACITY-1, as the docstring states it."""
    j = np.arange(CAPACITY)
    if lag_model == "fixed":
        return (j == lag).astype(float)
    if lag_model in ("uniform", "per_actor", "in_flight"):
        return (j <= lag) / (lag + 1)
    if lag_model == "geometric":
        weights = lag * (1 - lag) ** j
        return weights / weights.sum()
    if lag_model == "bounded":
        return np.where(j < lag, 1 / CAPACITY, np.where(j == lag, (CAPACITY - lag) / CAPACITY, 0))
    if lag_model == "empirical":
        return np.pad(probabilities, (0, CAPACITY - len(probabilities)))
    raise AssertionError(lag_model)


def _p_value(lags, expected):
    counts = np.bincount(np.ravel(lags), minlength=CAPACITY)
    support = expected > 0
    assert counts[~support].sum() == 0, "a lag outside the model's support was drawn"
    if support.sum() == 1:
        return 1.0
    return stats.chisquare(counts[support], counts.sum() * expected[support]).pvalue


CASES = [("fixed", 3, ()), ("uniform", 4, ()), ("geometric", 0.3, ()), ("per_actor", 2, ()),
         ("bounded", 3, ()), ("bounded", 0, ()), ("empirical", 0, (0.5, 0.3, 0.0, 0.2))]


def _draw(lag_model, lag, probabilities):
    per_actor = jax.random.randint(jax.random.PRNGKey(1), (DRAWS,), 0, int(lag) + 1)
    return named(lag_model, probabilities).sample(jax.random.PRNGKey(0), jnp.float32(lag), DRAWS,
                                                  CAPACITY, per_actor)


@pytest.mark.parametrize("lag_model,lag,probabilities", CASES)
def test_drawn_lags_follow_the_model(lag_model, lag, probabilities):
    lags = _draw(lag_model, lag, probabilities)
    assert _p_value(lags, _expected(lag_model, lag, probabilities)) > 1e-3


@pytest.mark.parametrize("lag_model,lag,probabilities", [c for c in CASES if c[0] != "fixed"])
def test_the_test_rejects_a_wrong_distribution(lag_model, lag, probabilities):
    lags = _draw(lag_model, lag, probabilities)
    expected = _expected(lag_model, lag, probabilities)
    support = np.flatnonzero(expected)
    if len(support) == 1:  # a point mass: a draw off the wrong support is caught
        with pytest.raises(AssertionError, match="outside the model's support"):
            _p_value(lags, np.roll(expected, 1))
        return
    wrong = expected.copy()  # move 5% of the probability from the likeliest lag to another
    likeliest = support[np.argmax(expected[support])]
    wrong[likeliest] -= 0.05
    wrong[support[support != likeliest][0]] += 0.05
    assert _p_value(lags, wrong) < 1e-6


def test_bounded_never_exceeds_eta():
    for eta in range(CAPACITY):
        lags = Bounded().sample(jax.random.PRNGKey(eta), jnp.float32(eta), 4096, CAPACITY,
                                PER_ACTOR[:4096])
        assert int(lags.max()) == eta  # reached, never exceeded


def test_in_flight_lags_catch_up_to_the_newest_version():
    start = jnp.array([0, 1, 3, 7], jnp.int32)
    lags = np.asarray(in_flight_lags(start, 8))
    assert lags.shape == (8, 4)
    expected = np.array([[s - (t * (s + 1)) // 8 for s in (0, 1, 3, 7)] for t in range(8)])
    np.testing.assert_array_equal(lags, np.maximum(expected, 0))
    np.testing.assert_array_equal(lags[0], start)
    np.testing.assert_array_equal(lags[:, 0], 0)  # synchronous stays synchronous
    np.testing.assert_array_equal(lags[:, 3], 7 - np.arange(8))  # one version per step
    assert np.all(np.diff(lags, axis=0) <= 0) and np.all(lags >= 0)


@pytest.mark.parametrize("lag_model, level, length, counted_steps, expected", [
    ("fixed", 8, 5, None, 8.0),
    ("uniform", 16, 5, None, 8.0),
    ("per_actor", 3, 5, 2, 1.5),
    ("in_flight", 0, 4, None, 0.0),
    # Start 0: lags 0 0 0 0; start 1: 1 - floor(2t / 4) = 1 1 0 0.
    ("in_flight", 1, 4, None, (0 + 2 / 4) / 2),
    # Start 1: 1 - floor(2t / 5) = 1 1 1 0 0; start 2: 2 - floor(3t / 5) = 2 2 1 1 0.
    ("in_flight", 2, 5, None, (0 + 3 / 5 + 6 / 5) / 3),
    ("in_flight", 2, 5, 4, (0 + 3 / 4 + 6 / 4) / 3),  # the first 4 steps only
    ("in_flight", 2.0, 5, 1, 1.0),  # the first step: the start lag, uniform over 0..2
])
def test_mean_lag_by_hand(lag_model, level, length, counted_steps, expected):
    assert named(lag_model).mean_lag(level, length, counted_steps) == pytest.approx(expected,
                                                                                   abs=1e-12)


def test_mean_lag_is_the_mean_of_the_drawn_in_flight_lags():
    full = PolicyBuffer(policies=jnp.zeros((CAPACITY, 1)), latest_version=jnp.int32(CAPACITY))
    lags = InFlight().draw(jax.random.PRNGKey(3), jnp.float32(6), full, PER_ACTOR, "clip", 5)
    lags = np.asarray(lags, np.float64)
    standard_error = lags.mean(axis=0).std() / np.sqrt(DRAWS)
    assert abs(lags.mean() - InFlight().mean_lag(6, 5)) < 4 * standard_error
    assert abs(lags[:3].mean() - InFlight().mean_lag(6, 5, 3)) < 4 * standard_error


@pytest.mark.parametrize("arguments, message", [
    (("geometric", 1, 4), r"mean_lag is defined for the lag models fixed, uniform, per_actor, "
                          r"in_flight .*got 'geometric'"),
    (("bounded", 1, 4), "got 'bounded'"),
    (("fixed", -1, 4), "level must be an integer >= 0, got -1"),
    (("uniform", 1.5, 4), "level must be an integer >= 0, got 1.5"),
    (("fixed", 1, 0), "length must be an integer >= 1, got 0"),
    (("in_flight", 1, 4, 5), r"counted_steps must be an integer in \[1, length=4\], got 5"),
    (("in_flight", 1, 4, 0), r"counted_steps must be an integer in \[1, length=4\], got 0"),
])
def test_mean_lag_refuses_what_it_does_not_define(arguments, message):
    lag_model, *rest = arguments
    with pytest.raises(ValueError, match=message):
        named(lag_model).mean_lag(*rest)


@pytest.mark.parametrize("probabilities,message", [
    ((), "non-empty"), ((0.5, 0.6), "sum to 1"), ((1.2, -0.2), ">= 0"),
    ((0.1,) * 10, "at most buffer_capacity"), (("a",), "tuple of numbers")])
def test_empirical_probabilities_are_validated(probabilities, message):
    config = ControlConfig(env="toy_reach", lag_model=Empirical(probabilities), buffer_capacity=8)
    with pytest.raises(ValueError, match="lag_probabilities") as error:
        validate(config)
    assert message in str(error.value)


def test_lag_probabilities_need_the_empirical_model():
    for name in set(LAG_MODELS) - {"empirical"}:
        with pytest.raises(ValueError, match=f"lag_probabilities is only used with "
                                             f"lag_model='empirical', got lag_model='{name}' "
                                             r"and lag_probabilities=\(1.0,\)"):
            named(name, (1.0,))
        assert named(name) == LAG_MODELS[name]()
    with pytest.raises(ValueError, match="lag_probabilities is only used"):
        ControlConfig.from_dict({"lag_model": "uniform", "lag_probabilities": [1.0]})
    validate(ControlConfig(env="toy_reach", lag_model=Empirical((0.5, 0.5))))


@pytest.mark.slow
def test_vmapped_in_flight_runs_equal_single_runs():
    train = make_train(TOY.replace(lag_model=InFlight()))
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    hparams = ControlHParams.stack([ControlHParams.create(lag=0.0), ControlHParams.create(lag=3.0)])
    batched_state, batched_metrics = jax.jit(jax.vmap(train))(keys, hparams)
    assert np.asarray(batched_metrics["version_gap_max"])[1].max() == 3
    for i in range(2):
        state, metrics = jax.jit(train)(keys[i], jax.tree.map(lambda x: x[i], hparams))
        for name, values in metrics.items():
            np.testing.assert_allclose(batched_metrics[name][i], values, rtol=2e-5, atol=1e-6,
                                       err_msg=name)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=2e-5, atol=1e-6),
                     batched_state.params, state.params)


def test_sweeps_and_cli_accept_an_empirical_histogram(tmp_path):
    from vaco_jax.cli.common import parse_lag
    from vaco_jax.core.lag_presets import LagChoice
    from vaco_jax.experiment import load_experiment

    assert parse_lag("empirical:0.5,0.3,0.2") == LagChoice(Empirical((0.5, 0.3, 0.2)), 0.0)
    assert parse_lag("bounded:4") == LagChoice(Bounded(), 4.0)
    text = ('name = "e"\ntasks = ["toy_reach"]\nalgos = ["ppo"]\nseeds = 1\n'
            '[lag]\nmodel = "empirical"\nlevels = [0]\n[config]\nlag_probabilities = {}\n')
    (tmp_path / "good.toml").write_text(text.format("[0.5, 0.3, 0.2]"))
    assert load_experiment(tmp_path / "good.toml").groups[0].config.lag_model == Empirical(
        (0.5, 0.3, 0.2))
    (tmp_path / "bad.toml").write_text(text.format("[0.5, 0.6]"))
    with pytest.raises(ValueError, match="lag_probabilities must sum to 1"):
        load_experiment(tmp_path / "bad.toml")


# ---------------------------------------------------------------- before the buffer is full

AVAILABLE = 3  # versions pushed so far: lags 0..2 exist, 3..CAPACITY-1 do not yet
WARMUP_CASES = [("uniform", 5, ()), ("in_flight", 5, ()), ("geometric", 0.3, ()),
                ("bounded", 5, ()), ("bounded", 1, ()), ("empirical", 0, (0.1, 0.2, 0.0, 0.3, 0.4)),
                ("empirical", 0, (0.0, 0.0, 0.0, 0.5, 0.5)), ("fixed", 5, ()), ("per_actor", 5, ())]


def _buffer(versions):
    """A buffer after `versions - 1` pushes (the lags only read its version and capacity)."""
    return PolicyBuffer(policies=jnp.zeros((CAPACITY, 1)), latest_version=jnp.int32(versions - 1))


def _warmup_expected(lag_model, lag, probabilities, warmup):
    """The distribution over existing lags: the excess piled onto the oldest version (`clip`)
    or the model restricted and renormalised (`redraw`; a point mass, or a model without mass
    on the existing versions, has nothing to renormalise and piles as `clip` does)."""
    expected = _expected(lag_model, lag, probabilities)
    head = expected[:AVAILABLE].copy()
    if warmup == "clip" or lag_model in ("fixed", "per_actor") or head.sum() == 0:
        head[-1] += expected[AVAILABLE:].sum()
    else:
        head /= head.sum()
    return np.pad(head, (0, CAPACITY - AVAILABLE))


def _draw_lags(lag_model, lag, probabilities, buffer, warmup, key=jax.random.PRNGKey(0)):
    """The drawn lags, the start lags under `in_flight` (row 0 of its per-step lags)."""
    per_actor = jax.random.randint(jax.random.PRNGKey(1), (DRAWS,), 0, int(lag) + 1)
    model = named(lag_model, probabilities)
    lags = model.draw(key, jnp.float32(lag), buffer, per_actor, warmup, length=4)
    return lags[0] if model.changes_mid_rollout else lags


@pytest.mark.parametrize("lag_model,lag,probabilities", WARMUP_CASES)
def test_lags_before_the_buffer_is_full_are_clipped_or_redrawn(lag_model, lag, probabilities):
    drawn = {w: _draw_lags(lag_model, lag, probabilities, _buffer(AVAILABLE), w)
             for w in LAG_WARMUPS}
    expected = {w: _warmup_expected(lag_model, lag, probabilities, w) for w in LAG_WARMUPS}
    for warmup in LAG_WARMUPS:
        assert _p_value(drawn[warmup], expected[warmup]) > 1e-3, warmup
    if not np.allclose(expected["clip"], expected["redraw"]):  # the test tells them apart
        assert _p_value(drawn["redraw"], expected["clip"]) < 1e-6


@pytest.mark.parametrize("lag_model,lag,probabilities", WARMUP_CASES)
def test_no_draw_is_of_a_version_not_pushed_and_redraw_changes_only_clipped_lags(
        lag_model, lag, probabilities):
    """At every fill of the buffer, under both rules, no lag exceeds the newest version; where
    `redraw` differs from `clip` (same key), `clip` put the lag on the oldest version, so the
    lags of existing versions are the same draws."""
    for versions in range(1, CAPACITY + 2):
        newest = min(versions - 1, CAPACITY - 1)
        clip, redraw = (np.asarray(_draw_lags(lag_model, lag, probabilities, _buffer(versions), w))
                        for w in LAG_WARMUPS)
        assert max(clip.max(), redraw.max()) <= newest and min(clip.min(), redraw.min()) >= 0
        assert np.all(clip[clip != redraw] == newest), versions


LAG_ZERO_CASES = [("uniform", 0, ()), ("in_flight", 0, ()), ("geometric", 1.0, ()),
                  ("bounded", 0, ()), ("empirical", 0, (1.0,)), ("fixed", 0, ()),
                  ("per_actor", 0, ())]


@pytest.mark.parametrize("case,versions",
                         [(c, v) for c in LAG_ZERO_CASES for v in (1, AVAILABLE, CAPACITY)] +
                         [(c, v) for c in WARMUP_CASES for v in (CAPACITY, 3 * CAPACITY + 1)])
def test_redraw_equals_clip_at_lag_zero_and_on_a_full_buffer(case, versions):
    clip, redraw = (_draw_lags(*case, _buffer(versions), w) for w in LAG_WARMUPS)
    np.testing.assert_array_equal(clip, redraw)


def test_the_trainer_draws_its_lags_with_the_configured_warmup():
    config = TOY.replace(lag_model=Uniform(), num_envs=DRAWS, rollout_length=1, minibatches=1)
    hp = ControlHParams.create(lag=5.0)
    for warmup in LAG_WARMUPS:
        trainer = ControlTrainer(config.replace(buffer_capacity=CAPACITY, lag_warmup=warmup))
        state = trainer.init(jax.random.PRNGKey(0), hp)
        for _ in range(AVAILABLE - 1):
            state = state.replace(buffer=push(state.buffer, state.policy))
        _, data = trainer.collect(state, jax.random.PRNGKey(1), hp)
        gaps = state.buffer.latest_version - data.behaviour_version
        assert _p_value(gaps, _warmup_expected("uniform", 5, (), warmup)) > 1e-3, warmup


def test_sweeps_accept_a_lag_warmup(tmp_path):
    from vaco_jax.experiment import load_experiment

    text = ('name = "w"\ntasks = ["toy_reach"]\nalgos = ["ppo"]\nseeds = 1\n'
            '[lag]\nmodel = "uniform"\nlevels = [2]\n[config]\nlag_warmup = "{}"\n')
    (tmp_path / "good.toml").write_text(text.format("redraw"))
    assert load_experiment(tmp_path / "good.toml").groups[0].config.lag_warmup == "redraw"
    (tmp_path / "bad.toml").write_text(text.format("renormalise"))
    with pytest.raises(ValueError, match="lag_warmup='renormalise'.*clip, redraw"):
        load_experiment(tmp_path / "bad.toml")


# ---------------------------------------------------------------- the lag model objects

MODELS = [Fixed(), Uniform(), Geometric(), PerActor(), Bounded(), InFlight(),
          Empirical((0.5, 0.25, 0.0, 0.25))]
LEVELS = {"fixed": 3.0, "uniform": 4.0, "geometric": 0.3, "per_actor": 2.0, "bounded": 3.0,
          "in_flight": 5.0, "empirical": 0.0}


def test_the_registry_names_one_class_per_model():
    assert list(LAG_MODELS) == ["fixed", "uniform", "geometric", "per_actor", "bounded",
                                "in_flight", "empirical"]
    assert [type(m) for m in MODELS] == list(LAG_MODELS.values())
    assert all(LAG_MODELS[m.name] is type(m) for m in MODELS)


def test_samples_are_the_models_draws_by_hand():
    """Each model's `sample` against its own few ops, written out (the same draws bit for bit)."""
    key, n = jax.random.PRNGKey(5), 64
    per_actor = jax.random.randint(jax.random.PRNGKey(6), (n,), 0, 3)
    lag = jnp.float32(2.6)  # levels are rounded
    by_hand = {
        "fixed": jnp.full((n,), 3, jnp.int32),
        "uniform": jax.random.randint(key, (n,), 0, 4),
        "in_flight": jax.random.randint(key, (n,), 0, 4),
        "per_actor": per_actor,
        "bounded": jnp.minimum(jax.random.randint(key, (n,), 0, CAPACITY), 3),
        "geometric": jax.random.categorical(
            key, jnp.arange(CAPACITY) * jnp.log1p(-jnp.float32(0.3)), shape=(n,)),
        "empirical": jax.random.categorical(
            key, jnp.log(jnp.asarray([0.5, 0.25, 0.0, 0.25], jnp.float32)), shape=(n,)),
    }
    for model in MODELS:
        level = jnp.float32(0.3) if model.name == "geometric" else lag
        drawn = model.sample(key, level, n, CAPACITY, per_actor)
        assert drawn.dtype == jnp.int32 and drawn.shape == (n,), model.name
        np.testing.assert_array_equal(drawn, by_hand[model.name], err_msg=model.name)


def test_only_per_actor_keeps_lags_of_its_own_in_the_state():
    key, lag = jax.random.PRNGKey(2), jnp.float32(3.0)
    for model in MODELS:
        kept = model.initial_per_actor_lags(key, lag, 16)
        assert kept.dtype == jnp.int32 and kept.shape == (16,)
        expected = (jax.random.randint(key, (16,), 0, 4) if isinstance(model, PerActor)
                    else jnp.zeros(16, jnp.int32))
        np.testing.assert_array_equal(kept, expected, err_msg=model.name)


@pytest.mark.parametrize("warmup", LAG_WARMUPS)
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_draw_is_sample_then_the_warmup_rule_then_existing_versions(model, warmup):
    """`draw` composed by hand: constant models never redraw; the others redraw from their
    `log_probs` with the key folded once; `in_flight` then spreads its start lags over steps."""
    key, lag, buffer = jax.random.PRNGKey(4), jnp.float32(LEVELS[model.name]), _buffer(AVAILABLE)
    per_actor = jax.random.randint(jax.random.PRNGKey(1), (DRAWS,), 0, 3)
    lags = model.sample(key, lag, DRAWS, CAPACITY, per_actor)
    if warmup == "redraw" and not isinstance(model, (Fixed, PerActor)):
        lags = redraw_unavailable_lags(jax.random.fold_in(key, 1), lags,
                                       model.log_probs(lag, CAPACITY), max_available_lag(buffer))
    expected = effective_lags(buffer, lags)
    if isinstance(model, InFlight):
        expected = in_flight_lags(expected, 5)
    drawn = model.draw(key, lag, buffer, per_actor, warmup, 5)
    np.testing.assert_array_equal(drawn, expected)
    assert drawn.shape == ((5, DRAWS) if model.changes_mid_rollout else (DRAWS,))


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_draw_is_the_same_with_and_without_jit_and_vmapped_over_levels(model):
    key, buffer = jax.random.PRNGKey(8), _buffer(AVAILABLE)
    per_actor = jax.random.randint(jax.random.PRNGKey(1), (256,), 0, 3)
    levels = jnp.asarray([0.5, 1.0] if model.name == "geometric" else [1.0, 4.0], jnp.float32)

    def draw(lag):
        return model.draw(key, lag, buffer, per_actor, "redraw", 3)
    eager = [draw(level) for level in levels]
    for level, expected in zip(levels, eager):
        np.testing.assert_array_equal(jax.jit(draw)(level), expected)
    np.testing.assert_array_equal(jax.jit(jax.vmap(draw))(levels), jnp.stack(eager))


def test_a_config_records_its_lag_model_by_name_as_it_always_has():
    """`config.json` (and a run's identity, its hash) keeps `lag_model` and `lag_probabilities`
    where they were, with the same values."""
    for model in MODELS:
        record = ControlConfig(lag_model=model, lag_warmup="redraw").to_dict()
        names = list(record)
        assert names[names.index("lag_model"):names.index("lag_model") + 3] == [
            "lag_model", "lag_probabilities", "lag_warmup"]
        assert (record["lag_model"], record["lag_probabilities"], record["lag_warmup"]) == (
            model.name, getattr(model, "probabilities", ()), "redraw")
        assert ControlConfig.from_dict(record) == ControlConfig(lag_model=model,
                                                                lag_warmup="redraw")
    old = {"env": "toy_reach", "lag_model": "empirical", "lag_probabilities": [0.5, 0.5]}
    assert ControlConfig.from_dict(old).lag_model == Empirical((0.5, 0.5))
    assert ControlConfig.from_dict({"env": "toy_reach"}).lag_model == Fixed()
    with pytest.raises(ValueError, match=r"unknown ControlConfig field\(s\) \['lag'\]; allowed: "
                                         r"\[.*'lag_model', 'lag_preset', 'lag_probabilities', "
                                         r"'lag_warmup'"):
        ControlConfig.from_dict({"lag": 3})


def test_new_runs_redraw_and_records_without_lag_warmup_read_as_the_clip_they_ran():
    """`redraw` is the default of both testbeds' configs; a `config.json` written before it
    was (no `lag_warmup`, or `clip` named) is the `clip` run it was, not today's default."""
    from vaco_jax.core.config_compat import config_as_now, recorded_config
    from vaco_jax.tokens.config import TokenConfig

    for config_type in (ControlConfig, TokenConfig):
        assert config_type().lag_warmup == "redraw"
        record = config_type().to_dict()
        assert recorded_config(config_type, record).lag_warmup == "redraw"
        del record["lag_warmup"]
        assert config_type.from_dict(record).lag_warmup == "redraw"  # a partial spec's default
        assert recorded_config(config_type, record).lag_warmup == "clip"
        assert config_as_now(config_type, record)["lag_warmup"] == "clip"
        assert recorded_config(config_type, {**record, "lag_warmup": "clip"}).lag_warmup == "clip"


@pytest.mark.parametrize("build, message", [
    (lambda: named("poisson"), "lag_model='poisson' is not supported; allowed values: fixed, "
                               "uniform, geometric, per_actor, bounded, in_flight, empirical"),
    (lambda: named(["uniform"]), r"lag_model=\['uniform'\] is not supported"),
    (lambda: ControlConfig.from_dict({"lag_model": "poisson"}), "lag_model='poisson' is not"),
    (lambda: validate(ControlConfig(lag_model="uniform")),
     r"lag_model='uniform' must be a lag model object: "
     r"vaco_jax.core.lag_models.named\('uniform'\)"),
    (lambda: validate(ControlConfig(lag_model="poisson")), "lag_model='poisson' is not supported"),
    (lambda: Uniform().draw(jax.random.PRNGKey(0), jnp.float32(1), _buffer(2), PER_ACTOR, "wait",
                            1), "warmup='wait' is not supported; allowed values: clip, redraw"),
    (lambda: Uniform().check_level([1.0, 8.0], CAPACITY),
     r"lag for lag_model='uniform' must be an integer in \[0, 7\] \(buffer_capacity - 1, "
     r"buffer_capacity=8\), got \[1.0, 8.0\]"),
    (lambda: Fixed().check_level(1.5, CAPACITY), "lag for lag_model='fixed' must be an integer"),
    (lambda: Geometric().check_level(0.0, CAPACITY),
     r"lag for lag_model='geometric' is the probability p and must lie in \(0, 1\], got 0.0"),
])
def test_bad_lag_settings_are_one_line_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message) as error:
        build()
    assert "\n" not in str(error.value)


def test_levels_the_buffer_holds_and_any_empirical_level_pass():
    for model in MODELS:
        model.check_level(np.asarray([0.3, 1.0]) if model.name == "geometric" else [0.0, 7.0],
                          CAPACITY)
    Empirical((1.0,)).check_level(123.4, CAPACITY)  # its lags come from its histogram


def test_every_model_says_what_it_means():
    for model in MODELS:
        text = model.describe(LEVELS[model.name], CAPACITY)
        assert text.startswith(model.name) and "(" in text, text


def test_refuse_stale_replaces_generations_older_than_the_bound_by_ones_at_the_bound():
    # Three generations of 3 steps; the second starts 3 behind and catches up (in flight).
    lags = jnp.asarray([[0, 0, 0], [3, 2, 0], [1, 1, 1]], jnp.int32)
    kept, refused = refuse_stale(lags, jnp.asarray(1.5))  # admits lags up to 1
    np.testing.assert_array_equal(kept, [[0, 0, 0], [1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(refused, [0.0, 1.0, 0.0])
    _, refused = jax.jit(refuse_stale)(lags, jnp.asarray(3.0))
    np.testing.assert_array_equal(refused, [0.0, 0.0, 0.0])
