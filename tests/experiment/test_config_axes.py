"""Config axes (`Config.axes`): the token testbed's sampler/trainer numeric mismatch,
`bf16_behaviour`, swept as an axis of its own beside the lag. A list in `[config]` gives each
value its own groups, named by its label, crossed with the lag levels; the runs table carries
the value (`cfg_*`), so the report tells the variants apart and pairs each with its own
synchronous runs."""

import numpy as np
import pandas as pd
import pytest

from vaco_jax import experiment as sweep
from vaco_jax import report
from vaco_jax.core.lag_models import Bounded, Uniform
from vaco_jax.core.lag_presets import AREAL
from vaco_jax.infra import run_folder
from vaco_jax.report.kept_gain import synchronous_variants

TOKENS = """\
testbed = "tokens"
tasks = ["add"]
algos = ["grpo"]
seeds = 2

[lag]
model = "uniform"
levels = [0, 2]

[config]
bf16_behaviour = [false, true]
num_updates = 4
eval_every = 2
"""
FP32, BF16 = "add-grpo-fp32-e1m1", "add-grpo-bf16-e1m1"


def test_the_mismatch_crosses_the_lag_levels_into_groups_named_by_it():
    experiment = sweep.parse_experiment(TOKENS)
    assert [(g.name, g.config.bf16_behaviour, g.axes) for g in experiment.groups] == [
        (FP32, False, {"bf16_behaviour": False}), (BF16, True, {"bf16_behaviour": True})]
    for group in experiment.groups:
        assert group.config.lag_model == Uniform()
        assert [(r.run_id, r.lag, r.seed) for r in group.runs] == [
            (f"{group.name}-r{i}", lag, seed)
            for i, (lag, seed) in enumerate([(0.0, 0), (0.0, 1), (2.0, 0), (2.0, 1)])]
    fp32, bf16 = experiment.groups
    assert fp32.config.replace(bf16_behaviour=True) == bf16.config  # nothing else differs
    assert experiment.swept_config == ("bf16_behaviour",)
    assert experiment.num_runs == 2 * 2 * 2


def test_the_axis_is_named_after_the_lag_entry_and_before_the_forward_setting():
    text = TOKENS.replace('[lag]\nmodel = "uniform"\nlevels = [0, 2]\n',
                          '[[lag]]\nmodel = "uniform"\nlevels = [0, 2]\n\n'
                          '[[lag]]\npreset = "areal"\n') \
        .replace("eval_every = 2\n", "eval_every = 2\nbuffer_capacity = 8\n[forward]\n"
                                     "epochs = [1, 2]\n")
    experiment = sweep.parse_experiment(text)
    assert [g.name for g in experiment.groups] == [
        "add-grpo-uniform-fp32-e1m1", "add-grpo-uniform-fp32-e2m1",
        "add-grpo-uniform-bf16-e1m1", "add-grpo-uniform-bf16-e2m1",
        "add-grpo-areal-fp32-e1m1", "add-grpo-areal-fp32-e2m1",
        "add-grpo-areal-bf16-e1m1", "add-grpo-areal-bf16-e2m1"]
    areal = experiment.group("add-grpo-areal-bf16-e2m1").config
    assert (areal.lag_model, areal.lag_preset, areal.bf16_behaviour, areal.epochs) == (
        Bounded(), AREAL, True, 2)


def test_one_value_keeps_the_names_of_earlier_sweeps_and_an_override_sweeps_one_algorithm():
    one = sweep.parse_experiment(TOKENS.replace("[false, true]", "true"))
    assert [(g.name, g.config.bf16_behaviour, g.axes) for g in one.groups] == [
        ("add-grpo-e1m1", True, {})]
    assert one.swept_config == ()
    text = (TOKENS.replace('algos = ["grpo"]', 'algos = ["grpo", "tis"]')
            .replace("bf16_behaviour = [false, true]\n", "")
            + "\n[overrides.tis.config]\nbf16_behaviour = [false, true]\n")
    assert [g.name for g in sweep.parse_experiment(text).groups] == [
        "add-grpo-e1m1", "add-tis-fp32-e1m1", "add-tis-bf16-e1m1"]


def test_each_value_is_tuned_on_its_own_synchronous_runs():
    text = TOKENS + '\n[tune]\nvalues = [1e-4, 3e-4]\nrule = "best_sync_final"\nseeds = 1\n'
    experiment = sweep.parse_experiment(text)
    assert [g.name for g in experiment.tuning_groups] == [f"tune-{FP32}", f"tune-{BF16}"]
    assert [g.config.bf16_behaviour for g in experiment.tuning_groups] == [False, True]
    assert experiment.tuned_by == {FP32: f"tune-{FP32}", BF16: f"tune-{BF16}"}


@pytest.mark.parametrize("value, message", [
    ("[false, 1]", "bf16_behaviour must be one of false, true, or a list of them (groups of "
                   "their own each), got 1"),
    ('"yes"', "bf16_behaviour must be one of false, true, or a list of them"),
    ("[true, true]", "bf16_behaviour lists a value twice: [True, True]"),
    ("[]", "bf16_behaviour: the list is empty; give at least one value"),
])
def test_a_bad_axis_value_is_one_line_naming_the_field(value, message):
    with pytest.raises(ValueError) as error:
        sweep.parse_experiment(TOKENS.replace("[false, true]", value))
    assert f"[config]: {message}" in str(error.value) and "\n" not in str(error.value)


# ---------------------------------------------------------------- the runs table and report

def _finished_batch(experiment, group, folder) -> pd.DataFrame:
    """The runs table of `group` as one finished batch whose runs score their seed + lag (a
    stand-in for training: the table reads only the folder's metrics and status)."""
    runs = group.runs
    updates = np.arange(group.config.num_updates + 1)
    metrics = pd.DataFrame([
        {"run": i, "seed": r.seed, "update": int(u), "eval_accuracy": (r.seed + r.lag) / 10,
         **{m: 0.0 for m in experiment.testbed.training_metrics}}
        for i, r in enumerate(runs) for u in updates])
    folder.mkdir(parents=True)
    run_folder.write_results(folder, metrics, {
        "updates_done": group.config.num_updates, "num_updates": group.config.num_updates,
        "complete": True, "runs": [{"diverged": False, "diverged_at": -1} for _ in runs]})
    batch = sweep.Batch(name=f"{group.name}-0", group=group.name,
                        runs=tuple(range(len(runs))), size=len(runs))
    return sweep.batch_table(experiment, batch, folder)


def test_the_runs_table_carries_the_axis_and_the_report_tells_its_variants_apart(tmp_path):
    experiment = sweep.parse_experiment(TOKENS)
    table = pd.concat([_finished_batch(experiment, g, tmp_path / g.name)
                       for g in experiment.groups], ignore_index=True)
    assert "cfg_bf16_behaviour" in table.columns
    first = table.drop_duplicates("run_id").set_index("run_id")["cfg_bf16_behaviour"]
    assert first.to_dict() == {**{f"{FP32}-r{i}": False for i in range(4)},
                               **{f"{BF16}-r{i}": True for i in range(4)}}
    testbed = experiment.testbed
    report.runs_table.check_runs(table, report.Score(testbed.score, testbed.score_name,
                                                     testbed.steps_name))
    variants = report.variant_names(table)
    assert sorted(set(variants)) == ["grpo[bf16_behaviour=False]", "grpo[bf16_behaviour=True]"]
    assert synchronous_variants(table.assign(variant=variants)) == {
        "grpo[bf16_behaviour=False]": "grpo[bf16_behaviour=False]",
        "grpo[bf16_behaviour=True]": "grpo[bf16_behaviour=True]"}
