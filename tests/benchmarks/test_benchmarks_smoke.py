"""Smoke test of the benchmark machinery (`benchmarks/`) on the pure-JAX toy task."""

import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from engine_configs import TOY
from vaco_jax.core.lag_models import Uniform

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import harness, programs, tables  # noqa: E402


def test_env_program_is_timed_in_rounds_from_its_warmed_up_state():
    compiled = harness.Compiled(programs.env_program(TOY, num_seeds=2, updates=2))
    [result] = harness.timed_rounds([compiled], repeats=2, max_wait_s=0.0)
    assert result["steps_per_call"] == 2 * 2 * TOY.steps_per_update
    assert len(result["calls_s"]) == 2 and result["steps_per_s"] > 0
    assert int(compiled.args[0].step_count.max()) > 0  # the warm-up call stepped the envs


def test_compile_events_count_only_new_compilations():
    double = jax.jit(lambda x: 2 * x)
    with harness.CompileEvents() as first:
        double(1.0)
    with harness.CompileEvents() as again:
        double(3.0)
    assert first.summary()["backend_compiles"] == 1
    assert again.summary()["backend_compiles"] == 0


def test_recorded_results_render_as_tables():
    recorded = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert recorded
    for path in recorded:
        text = tables.markdown(json.loads(path.read_text()))
        assert "### Throughput" in text, path


def test_paired_rate_ratio_is_the_median_of_per_round_ratios():
    baseline = {"steps_per_call": 100, "calls_s": [1.0, 1.0, 1.0]}
    slower = {"steps_per_call": 100, "calls_s": [2.0, 1.0, 4.0]}
    assert harness.paired_rate_ratio(slower, baseline) == 0.5
    more_steps = {"steps_per_call": 400, "calls_s": [2.0, 1.0, 4.0]}
    assert harness.paired_rate_ratio(more_steps, baseline) == 2.0


def test_run_refuses_to_overwrite_results_unless_asked(tmp_path):
    from benchmarks import run

    out = tmp_path / "results.json"
    out.write_text("{}")
    with pytest.raises(SystemExit, match="--overwrite"):
        run.main(["--quick", "--only", "env", "--out", str(out)])
    assert out.read_text() == "{}"


def test_token_benchmark_refuses_to_overwrite_results_unless_asked(tmp_path):
    from benchmarks import tokens

    out = tmp_path / "results.json"
    out.write_text("{}")
    with pytest.raises(SystemExit, match="--overwrite"):
        tokens.main(["--quick", "--out", str(out)])
    assert out.read_text() == "{}"


@pytest.mark.slow
def test_token_benchmark_states_hold_every_lag_and_count_response_tokens():
    from benchmarks import token_programs, tokens
    from vaco_jax.tokens.config import TokenConfig

    config = TokenConfig(layers=1, width=16, heads=2, prompts=2, group_size=3,
                         lag_model=Uniform(), buffer_capacity=3)
    _, hp, state = token_programs._start(config, num_seeds=2)
    assert state.buffer.latest_version.tolist() == [2, 2]  # lag K - 1 is not capped
    assert hp.lag.tolist() == [2.0, 2.0]
    program = tokens.update_program(config, num_seeds=2, updates=3)
    assert program.steps_per_call == 2 * 3 * 2 * 3 * config.response_length
    assert tokens.forward_program(config, batches=4).args[1].shape == (
        4, 6, config.task_spec.prompt_length + config.response_length)


def test_recorded_token_results_render_as_tables():
    from benchmarks import tokens

    headings = {"throughput": "#### Throughput", "seeds": "#### Vmapped seeds",
                "capacity": "#### Largest model and batch"}
    recorded = sorted((ROOT / "benchmarks" / "results" / "tokens").glob("*.json"))
    assert recorded
    for path in recorded:
        result = json.loads(path.read_text())
        text = tokens.markdown(result)
        assert result["parts"] and set(result["parts"]) <= set(headings), path
        # Each part a run measured (`--only` picks them) renders its own table, and no other.
        for part, heading in headings.items():
            assert (heading in text) == (part in result["parts"]), (path, part)


def test_brax_stand_in_places_copies_as_brax_s_epoch_returns_them():
    """Brax's first epoch takes the stand-in's copies, the later ones that epoch's own outputs:
    where their shardings differ, the epoch compiles twice."""
    import jax.numpy as jnp
    import numpy as np

    from benchmarks import brax_ppo

    _, ppo = brax_ppo._brax()
    devices = jax.local_devices()[:1]
    tree = {"w": jnp.arange(3.0), "n": jnp.int32(2)}
    copies = jax.device_put_replicated(tree, devices)
    np.testing.assert_array_equal(copies["w"], [[0.0, 1.0, 2.0]])
    assert copies["n"].shape == (1,)
    epoch = jax.pmap(lambda t: jax.tree.map(lambda x: x + 1, t), axis_name=ppo._PMAP_AXIS_NAME)
    returned = epoch(copies)
    assert [x.sharding for x in jax.tree.leaves(copies)] == \
        [x.sharding for x in jax.tree.leaves(returned)]


def test_purejaxrl_stand_ins_equal_vaco_jax_categorical_and_gymnax_v0_step():
    import jax.numpy as jnp
    import numpy as np

    from benchmarks import purejaxrl
    from vaco_jax.control.networks import Categorical

    logits, action = jnp.array([[0.3, -1.0, 2.0]]), jnp.array([2])
    stand_in = purejaxrl._Categorical(logits)
    np.testing.assert_allclose(stand_in.log_prob(action), Categorical.log_prob((logits,), action),
                               rtol=1e-6)
    np.testing.assert_allclose(stand_in.entropy(), Categorical.entropy((logits,)), rtol=1e-6)

    import gymnax
    env, params = gymnax.make("CartPole-v1")
    wrapped = purejaxrl._GymnaxV0Step(env)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    state = state.replace(time=params.max_steps_in_episode - 1)  # the next step hits the limit
    obs, _, reward, done, info = wrapped.step(jax.random.PRNGKey(1), state, 1, params)
    assert bool(done) and float(reward) == 1.0
    assert not set(info) & {"terminated", "truncated", "final_observation"}


def test_purejaxrl_gaussian_stand_in_has_the_closed_form_log_prob_entropy_and_moments():
    import jax.numpy as jnp
    import numpy as np
    from scipy import stats

    from benchmarks import purejaxrl

    loc = jnp.array([[0.5, -1.0], [2.0, 0.0]])
    scale = jnp.array([0.3, 2.0])  # one scale per action dimension, as the script's log-std
    value = jnp.array([[0.1, 1.0], [2.0, -3.0]])
    pi = purejaxrl._MultivariateNormalDiag(loc, scale)
    np.testing.assert_allclose(pi.log_prob(value),
                               stats.norm.logpdf(value, loc, scale).sum(axis=-1), rtol=1e-5)
    np.testing.assert_allclose(pi.entropy(), [stats.norm.entropy(scale=scale).sum()] * 2,
                               rtol=1e-6)
    draws = jax.vmap(pi.sample)(jax.random.split(jax.random.PRNGKey(0), 20_000))
    assert draws.shape == (20_000, 2, 2)
    np.testing.assert_allclose(draws.mean(axis=0), loc, atol=0.05)
    np.testing.assert_allclose(draws.std(axis=0), jnp.broadcast_to(scale, loc.shape), rtol=0.03)


def test_learner_floor_counts_the_flops_xla_counts_for_its_matrix_products():
    import dataclasses

    from benchmarks import speed_split

    # One minibatch step and one update: XLA removes loops of one trip, so its count covers
    # the whole program (the gradient steps' few elementwise operations aside).
    config = dataclasses.replace(TOY, epochs=1, minibatches=1, actor_hidden=(64, 64),
                                 critic_hidden=(32,))
    program = speed_split.floor_program(config, num_seeds=1, updates=1)
    counted = harness.xla_counts(program.fn.lower(*program.args).compile())["flops"]
    expected = speed_split.learning_flops(config)
    assert expected == pytest.approx(counted, rel=0.03)
    # Forward products alone would be a third of the step (the phase pass aside): the count
    # holds the backward ones.
    assert expected > 2.5 * 2 * config.steps_per_update * sum(
        i * o for sizes in speed_split.layer_sizes(config)
        for i, o in zip(sizes[:-1], sizes[1:]))


def test_speed_split_splits_the_time_and_refuses_to_overwrite(tmp_path):
    from benchmarks import speed_split

    out = tmp_path / "bound.json"
    overrides = ('{"num_envs": 8, "rollout_length": 16, "actor_hidden": [16], '
                 '"critic_hidden": [16], "total_steps": 512, "eval_every": 4}')
    args = ["--env", "toy_reach", "--config", overrides, "--updates", "2", "--repeats", "2",
            "--max-wait", "0", "--out", str(out)]
    result = speed_split.main(args)
    assert set(result["median_call_s"]) == {"vaco_jax_update", "vaco_jax_rollouts",
                                            "matmul_floor"}
    written = speed_split.ControlConfig.from_dict(json.loads(out.read_text())["config"])
    updates_times_seeds = 2 * 2
    assert result["learning_flops_per_call"] == updates_times_seeds * speed_split.learning_flops(
        written)
    # The split is `bound`'s of the calls it timed (its arithmetic is tested below); how the
    # times fall depends on the machine's load: tiny programs, two calls, tests running beside.
    calls = {name: s["calls_s"] for name, s in result["programs"].items()}
    assert all(t > 0 for times in calls.values() for t in times)
    assert {k: result[k] for k in speed_split.bound(calls)} == speed_split.bound(calls)
    with pytest.raises(SystemExit, match="--overwrite"):
        speed_split.main(args)


def test_speed_split_compiles_each_whole_run_in_a_child_of_the_same_flags(monkeypatch, capsys):
    """`--compile N`: each program compiled by a child `--compile-one` with the run's own flags,
    the order reversed every other round. One child's work runs for real in this process; the
    children of the rounds are stood in for (a real one costs its imports, seconds)."""
    import subprocess

    from benchmarks import speed_split

    overrides = '{"num_envs": 8, "rollout_length": 16, "actor_hidden": [16], "total_steps": 256}'
    flags = ["--env", "toy_reach", "--config", overrides, "--seeds", "1", "--out", "unused"]
    # One child's work, for real: its program compiled, its times printed as JSON.
    speed_split.main([*flags, "--compile-one", "vaco_jax_without_evaluation"])
    real = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert real["total_s"] == real["lower_s"] + real["compile_s"] > 0
    speed_split.main([*flags, "--compile-one", "vaco_jax_driver"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["total_s"] > 0

    children = []

    def child(command, **kwargs):
        child_flags = command[command.index("benchmarks.speed_split") + 1:]
        assert child_flags[:-2] == flags and child_flags[-2] == "--compile-one"
        children.append(child_flags[-1])
        return subprocess.CompletedProcess(command, 0, stdout=json.dumps(
            {"lower_s": 1.0, "compile_s": float(len(children)), "total_s": 0.0}) + "\n")

    monkeypatch.setattr(speed_split.subprocess, "run", child)
    times = speed_split.compile_times(flags, checkout=None, rounds=2)
    assert children == ["vaco_jax", "vaco_jax_without_evaluation", "vaco_jax_driver",
                        "vaco_jax_driver", "vaco_jax_without_evaluation", "vaco_jax"]
    assert [t["compile_s"] for t in times["vaco_jax"]] == [1.0, 6.0]
    assert [t["compile_s"] for t in times["vaco_jax_without_evaluation"]] == [2.0, 5.0]


def test_speed_split_ratios_are_medians_of_each_round_s_own():
    from benchmarks import speed_split

    # Round 2 ran on a machine twice as slow: every term doubles, no ratio moves.
    one = {"vaco_jax_update": 2.0, "vaco_jax_rollouts": 0.5, "matmul_floor": 0.75,
           "purejaxrl_update": 1.5, "purejaxrl_rollouts": 0.25}
    result = speed_split.bound({name: [t, 2 * t, t] for name, t in one.items()})
    assert result["vaco_jax_learning_s"] == 1.5
    assert result["vaco_jax_learning_share"] == 0.75
    assert result["floor_share_of_vaco_jax_learning"] == 0.5
    assert result["ratio_now"] == 0.75
    assert result["ratio_bound"] == 1.2
    assert result["ratio_bound_with_purejaxrl_rollouts"] == 1.5
    # Medians of per-round ratios, not ratios of per-program medians.
    # (The ratio of the medians would be 3.0 / 2.0.)
    drifting = {**{name: [t, t, t] for name, t in one.items()},
                "purejaxrl_update": [1.5, 3.0, 3.0], "vaco_jax_update": [2.0, 4.0, 2.0]}
    assert speed_split.bound(drifting)["ratio_now"] == 0.75


def test_log_ratio_summary_by_hand():
    from benchmarks import log_ratio_tails

    # Weights 1, 1, 1, 3: ESS ratio (1 + 1 + 1 + 3)^2 / (4 x (1 + 1 + 1 + 9)) = 36 / 48; the
    # 99th percentile lies 0.97 of the way from the third value (0) to the fourth (log 3).
    summary = log_ratio_tails.summary(np.log(np.array([1.0, 1.0, 1.0, 3.0])))
    np.testing.assert_allclose([summary[k] for k in ("median", "p1", "p99", "max", "ess_ratio")],
                               [0.0, 0.0, 0.97 * np.log(3.0), np.log(3.0), 0.75], rtol=1e-6)


@pytest.mark.slow
def test_log_ratios_vanish_at_lag_zero_and_spread_at_a_larger_lag():
    from benchmarks import log_ratio_tails
    from vaco_jax.core.lag_models import Fixed
    from vaco_jax.tokens.config import TokenConfig, TokenHParams
    from vaco_jax.tokens.warm_start import WarmStart

    config = TokenConfig(task="add_steps", layers=1, width=16, heads=2, prompts=2, group_size=4,
                         partial_credit=True, lag_model=Fixed(), buffer_capacity=3,
                         warm_start=WarmStart(steps=10))
    hparams = TokenHParams.create(learning_rate=3e-2)
    with pytest.raises(ValueError, match="updates=1 must reach the largest lag 2"):
        log_ratio_tails.measure(config, hparams, [0, 2], updates=1, batches=2)
    synchronous, stale = log_ratio_tails.measure(config, hparams, [0, 2], updates=3, batches=2)
    assert synchronous["responses"] == stale["responses"] == 2 * 2 * 4
    assert max(abs(synchronous["p1"]), abs(synchronous["max"])) < 1e-4
    assert stale["p99"] - stale["p1"] > 1e-3
