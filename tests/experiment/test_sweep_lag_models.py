"""Experiments with several lag models (`[[lag]]`): expansion into groups, refusals, the
single-table form unchanged, and plan, parts, merge and report of such an experiment."""

import json
from pathlib import Path

import jax
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT as TOY
from test_sweep import EXPERIMENTS
from test_sweep_parts import whole_and_parts
from vaco_jax import cli
from vaco_jax import experiment as sweep
from vaco_jax.core.lag_models import Empirical, Fixed, InFlight, Uniform
from vaco_jax.report import figures_kept_tv

pytestmark = pytest.mark.slow  # whole sweeps of several lag models, as parts

SINGLE = '[lag]\nmodel = "uniform"\nlevels = [0, 2]\n'
SEVERAL = ('[[lag]]\nmodel = "uniform"\nlevels = [0, 2]\n\n'
           '[[lag]]\nmodel = "in_flight"\nlevels = [3]\n')
TOY_MODELS = TOY.replace(SINGLE, SEVERAL)  # 8 uniform runs (2 lags x 2 thresholds x 2 seeds), 4 in flight
UNIFORM, IN_FLIGHT = "toy_reach-vaco-uniform-e2m2", "toy_reach-vaco-in_flight-e2m2"


def with_lag(lag_tables: str) -> str:
    assert SINGLE in TOY
    return TOY.replace(SINGLE, lag_tables)


def test_each_lag_model_is_its_own_group_named_after_it():
    # Each algorithm sweeps a knob of its own: vaco its TV budget, ppo its gradient-norm bound.
    text = TOY_MODELS.replace('algos = ["vaco"]', 'algos = ["ppo", "vaco"]') \
        .replace("tv_delta = [0.1, 0.3]\n", "").replace("epochs = 2", "epochs = [1, 2]") \
        + "\n[overrides.vaco.hparams]\ntv_delta = [0.1, 0.3]\n" \
        + "\n[overrides.ppo.hparams]\nmax_grad_norm = [0.5, 1.0]\n"
    experiment = sweep.parse_experiment(text)
    # Order: task, algorithm, lag model (as listed), then epochs x minibatches.
    assert [g.name for g in experiment.groups] == [
        "toy_reach-ppo-uniform-e1m2", "toy_reach-ppo-uniform-e2m2",
        "toy_reach-ppo-in_flight-e1m2", "toy_reach-ppo-in_flight-e2m2",
        "toy_reach-vaco-uniform-e1m2", "toy_reach-vaco-uniform-e2m2",
        "toy_reach-vaco-in_flight-e1m2", "toy_reach-vaco-in_flight-e2m2"]
    uniform, in_flight = experiment.group(UNIFORM), experiment.group(IN_FLIGHT)
    assert (uniform.config.lag_model, in_flight.config.lag_model) == (Uniform(), InFlight())
    assert uniform.config.replace(lag_model=InFlight()) == in_flight.config
    assert [(r.run_id, r.lag, r.hparams["tv_delta"], r.seed) for r in in_flight.runs] == [
        (f"{IN_FLIGHT}-r{i}", 3.0, tv_delta, seed)
        for i, (tv_delta, seed) in enumerate([(0.1, 0), (0.1, 1), (0.3, 0), (0.3, 1)])]
    assert [r.lag for r in uniform.runs] == [0.0] * 4 + [2.0] * 4
    assert experiment.num_runs == 2 * 2 * (8 + 4)
    assert len({r.run_id for g in experiment.groups for r in g.runs}) == experiment.num_runs


def test_one_table_and_an_array_of_one_table_give_the_same_groups():
    single = sweep.parse_experiment(TOY)
    array = sweep.parse_experiment(with_lag(SINGLE.replace("[lag]", "[[lag]]")))
    assert [g.name for g in single.groups] == ["toy_reach-vaco-e2m2"]
    assert array.groups == single.groups


def test_a_single_lag_table_keeps_the_names_and_ids_of_earlier_sweeps():
    """`quick.toml` as it expanded before experiments could list several lag models."""
    quick = sweep.load_experiment(EXPERIMENTS / "quick.toml")
    names = ["inverted_pendulum-ppo-e4m4", "inverted_pendulum-ppo_recompute-e4m4",
             "inverted_pendulum-vaco-e4m4"]
    assert [g.name for g in quick.groups] == names
    for group, name in zip(quick.groups, names):
        assert group.config.lag_model == Fixed()
        assert [(r.run_id, r.lag, r.seed) for r in group.runs] == [
            (f"{name}-r{i}", lag, seed)
            for i, (lag, seed) in enumerate((lag, seed) for lag in (0.0, 4.0) for seed in range(10))]


@pytest.mark.parametrize("lag_tables, message", [
    (SEVERAL + '\n[[lag]]\nmodel = "uniform"\nlevels = [1]\n',
     r"\[lag\]: each lag model may appear once \(list all its levels in one entry; a preset "
     r"counts as its model\), got 'uniform' in entries \[0, 2\]"),
    (SEVERAL.replace('"in_flight"', '"poisson"'),
     r"\[lag\]\[1\]: model: unknown value\(s\) \['poisson'\]; allowed: fixed, uniform"),
    (SEVERAL.replace("levels = [3]\n", ""), r"\[lag\]\[1\]: needs both \['model', 'levels'\]"),
    (SEVERAL.replace("levels = [3]", "levels = [3]\ncolour = 1"),
     r"\[lag\]\[1\]: unknown key\(s\) \['colour'\]; allowed: \['model', 'preset', 'levels'\]"),
    (SEVERAL.replace("levels = [3]", "levels = [3, 3]"), r"\[lag\]\[1\]: levels lists a value twice"),
    (SEVERAL.replace('model = "in_flight"', 'model = ["in_flight"]'),
     r"\[lag\]\[1\]: model must be one lag model name, got \['in_flight'\]"),
    (SEVERAL.replace("levels = [3]", "levels = [4]"),
     r"group toy_reach-vaco-in_flight-e2m2: lag for lag_model='in_flight' must be an integer "
     r"in \[0, 3\]"),
    ("lag = []\n", r"\[lag\] must be a table \(\[lag\]\) or a non-empty array of tables"),
    ("lag = [1, 2]\n",
     r"\[lag\]\[0\]: must be a table with keys \['model', 'preset', 'levels'\], got 1"),
    (SINGLE.replace('"uniform"', '"poisson"'), r"\[lag\]: model: unknown value\(s\) \['poisson'\]"),
])
def test_bad_lag_entries_are_refused_naming_the_entry(monkeypatch, lag_tables, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    with pytest.raises(ValueError, match=r"^experiment 'toy': " + message):
        sweep.parse_experiment(with_lag(lag_tables))


def test_lag_probabilities_go_to_the_empirical_model_only():
    empirical = '\n[[lag]]\nmodel = "empirical"\nlevels = [0]\n'
    text = with_lag(SEVERAL + empirical).replace("[config]",
                                                 "[config]\nlag_probabilities = [0.5, 0.5]")
    experiment = sweep.parse_experiment(text)
    assert {g.config.lag_model for g in experiment.groups} == {
        Uniform(), InFlight(), Empirical((0.5, 0.5))}
    # Without an empirical entry, a histogram is still refused as unused.
    with pytest.raises(ValueError, match="lag_probabilities is only used with "
                                         "lag_model='empirical'"):
        sweep.parse_experiment(text.replace(empirical, ""))


# ---------------------------------------------------------------- plan, parts, merge, report


@pytest.fixture(scope="module")
def models_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("experiment") / "toy.toml"
    path.write_text(TOY_MODELS)
    return path


def test_plan_lists_a_group_per_lag_model(models_file, capsys):
    assert cli.main(["sweep", str(models_file), "--plan", "--max-runs-per-batch", "4"]) == 0
    printed = capsys.readouterr().out
    assert [line.split()[:4] for line in printed.splitlines()
            if line.startswith("toy_reach-")] == [[UNIFORM, "8", "0.000", "2"],
                                                  [IN_FLIGHT, "4", "0.000", "1"]]
    assert cli.main(["sweep", str(models_file), "--plan", "--part", "2/2"]) == 0
    printed = capsys.readouterr().out
    assert "part 2/2: 1 of 2 groups" in printed and IN_FLIGHT in printed and UNIFORM not in printed


@pytest.fixture(scope="module")
def parts(tmp_path_factory, models_file):
    """The two-model toy experiment run whole, and as parts 1/2 and 2/2."""
    return whole_and_parts(tmp_path_factory.mktemp("parts"), models_file)


def test_parts_of_several_lag_models_split_resume_and_merge(parts, tmp_path, capsys):
    whole, (part1, part2) = parts
    assert [g.name for g in sweep.load_sweep_to_resume(whole).groups] == [UNIFORM, IN_FLIGHT]
    # The larger uniform group is part 1, the in-flight group part 2.
    for folder, group in ((part1, UNIFORM), (part2, IN_FLIGHT)):
        saved = json.loads((folder / sweep.PLAN_FILE).read_text())
        assert [g["name"] for g in saved["groups"]] == [group]
        plan = sweep.load_sweep_to_resume(folder, sweep.load_experiment(folder / "experiment.toml"))
        assert [g.name for g in plan.groups] == [group]
    out = tmp_path / "merged"
    assert cli.main(["report", str(out), "--parts", str(part2), str(part1)]) == 0
    assert "toy: tiny toy sweep: 12 runs (0 diverged)" in capsys.readouterr().out
    merged = pd.read_parquet(out / "runs.parquet")
    pd.testing.assert_frame_equal(merged, pd.read_parquet(whole / "runs.parquet"),
                                  check_exact=True)
    per_run = merged.drop_duplicates("run_id")
    assert per_run.groupby(["lag_model", "lag"]).size().to_dict() == {
        ("in_flight", 3.0): 4, ("uniform", 0.0): 4, ("uniform", 2.0): 4}
    groups = per_run["lag_model"].map({"uniform": UNIFORM, "in_flight": IN_FLIGHT})
    assert all(run.startswith(f"{group}-r") for run, group in zip(per_run["run_id"], groups))


def test_report_of_several_lag_models_names_them_in_the_variants(parts):
    whole, _ = parts
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["run"]["lag_models"] == ["in_flight", "uniform"]
    assert {(c["variant"], c["lag"]) for c in summary["cells"]} == {
        (f"vaco[lag_model={model},tv_delta={tv}]", lag)
        for model, lag in (("in_flight", 3.0), ("uniform", 0.0), ("uniform", 2.0))
        for tv in (0.1, 0.3)}
    assert not any("skipped" in figure for name, figure in summary["figures"].items()
                   if name not in ("fig_probability_of_improvement", "fig_forward_lag",
                                   "fig_kept_gain_vs_tv"))
    # The toy runs lose return in their few updates: no synchronous gain, no kept gain to plot.
    assert summary["figures"]["fig_kept_gain_vs_tv"]["skipped"] == figures_kept_tv.NO_KEPT
    # The control trainer logs its version gap, so runs compare at equal measured staleness.
    assert "version_gap_mean" in summary["off_policy_metrics"]


def test_tokens_in_flight_compares_lag_models_at_equal_mean_staleness():
    experiment = sweep.load_experiment(EXPERIMENTS / "tokens_in_flight.toml")
    levels: dict[str, set[float]] = {}
    for group in experiment.groups:
        model = group.config.lag_model.name
        levels.setdefault(model, set()).update(r.lag for r in group.runs)
        assert all(len({r.seed for r in group.runs if r.lag == lag}) == 10
                   for lag in levels[model])
    assert levels == {"fixed": {0.0, 8.0}, "uniform": {16.0}, "in_flight": {23.0}}
    assert {g.config.algo for g in experiment.groups} == {"grpo", "tis", "vcpo"}
    config = experiment.groups[0].config
    assert config.in_flight_cache == "per_snapshot"  # as its committed results ran
    # The version gap is measured over a well-formed response's tokens, up to its EOS.
    length, valid = config.response_length, config.task_spec.answer_length
    staleness = [Fixed().mean_lag(8, length), Uniform().mean_lag(16, length),
                 InFlight().mean_lag(23, length, valid)]
    assert max(staleness) - min(staleness) < 0.1
    assert max(r.lag for g in experiment.groups for r in g.runs) < config.buffer_capacity
