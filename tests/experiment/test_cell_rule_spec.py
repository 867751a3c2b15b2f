"""`[cell_rule]`: the rule an experiment commits before its runs, parsed and validated with the
experiment, and judged in the report of its sweep."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT as TOY
from vaco_jax import experiment as sweep
from vaco_jax.report import summary as report_summary
from vaco_jax.report.rule_records import CellRule

RULE = """
[cell_rule]
baseline = "ppo"
min_gain = 0.25
min_seed_share = 0.9
max_final = 0.9
rising_window = 0.25
max_kept_gain = 0.7

[reference_scores]
toy_reach = 50.0
"""
# ppo and vaco at lags 0 and 2 on toy_reach, each at two learning rates (a knob both read), a
# reference for it, and the rule.
RULED = TOY.replace('algos = ["vaco"]', 'algos = ["vaco", "ppo"]').replace(
    "learning_rate = 1e-3\ntv_delta = [0.1, 0.3]", "learning_rate = [1e-3, 3e-3]") + RULE


def test_the_rule_is_parsed_as_committed():
    rule = sweep.parse_experiment(RULED).cell_rule
    assert rule == CellRule(baseline="ppo", min_gain=0.25, min_seed_share=0.9, max_final=0.9,
                            rising_window=0.25, max_kept_gain=0.7)
    assert sweep.parse_experiment(TOY).cell_rule is None


def test_defaults_are_the_first_algorithm_and_every_seed():
    rule = sweep.parse_experiment(RULED.replace('baseline = "ppo"\n', "")
                                  .replace("min_seed_share = 0.9\n", "")).cell_rule
    assert rule.baseline == "vaco" and rule.min_seed_share == 1.0


@pytest.mark.parametrize("old, new, message", [
    ('baseline = "ppo"', 'baseline = "grpo"',
     r"\[cell_rule\]: baseline: unknown value\(s\) \['grpo'\]; allowed: vaco, ppo"),
    ('baseline = "ppo"', 'baseline = ["ppo"]',
     r"\[cell_rule\]: baseline must be one algorithm name, got \['ppo'\]"),
    ("min_gain = 0.25", "min_gain = -0.25", r"\[cell_rule\]: min_gain must lie in \(0, inf\)"),
    ("min_gain = 0.25", 'min_gain = "a quarter"',
     r"\[cell_rule\]: min_gain must be a number, got 'a quarter'"),
    ("min_seed_share = 0.9", "min_seed_share = 1.5",
     r"\[cell_rule\]: min_seed_share must lie in \(0, 1\], got 1.5"),
    ("min_gain = 0.25\n", "",
     r"\[cell_rule\]: min_seed_share is the share of runs that must reach min_gain"),
    ("rising_window = 0.25", "rising_window = 1.0",
     r"\[cell_rule\]: rising_window must lie in \(0, 1\), got 1.0"),
    ("max_final = 0.9", "max_final = true", r"\[cell_rule\]: max_final must be a number"),
    ("max_kept_gain = 0.7", "max_kept_gain = 0",
     r"\[cell_rule\]: max_kept_gain must lie in \(0, 1\], got 0"),
    ("max_kept_gain = 0.7", "max_kept_gain = 0.7\nmin_kept_gain = 0.1",
     r"\[cell_rule\]: unknown key\(s\) \['min_kept_gain'\]"),
    ("levels = [0, 2]", "levels = [2]",
     r"\[cell_rule\]: the rule judges the baseline's synchronous runs, but no \[lag\] entry has "
     r"level 0"),
    ("levels = [0, 2]", "levels = [0]",
     r"\[cell_rule\]: max_kept_gain needs a \[lag\] level above 0"),
    ("toy_reach = 50.0\n", "",
     r"\[cell_rule\]: min_gain, max_final, rising_window are normalised by "
     r"\[reference_scores\], which has no score for task\(s\) \['toy_reach'\]"),
    ('[cell_rule]\nbaseline = "ppo"\nmin_gain = 0.25\nmin_seed_share = 0.9\nmax_final = 0.9\n'
     'rising_window = 0.25\nmax_kept_gain = 0.7\n', '[cell_rule]\nbaseline = "ppo"\n',
     r"\[cell_rule\]: needs at least one criterion of \['min_gain', 'max_final', "
     r"'rising_window', 'max_kept_gain'\]"),
])
def test_bad_cell_rules_are_refused_in_one_line_naming_the_field(monkeypatch, old, new, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    assert old in RULED
    with pytest.raises(ValueError, match=message) as error:
        sweep.parse_experiment(RULED.replace(old, new, 1))
    assert "\n" not in str(error.value)


def test_a_cell_rule_that_is_not_a_table_is_refused():
    with pytest.raises(ValueError, match=r"\[cell_rule\]: must be a table \(\[cell_rule\]\), "
                                         r"got 3"):
        sweep.parse_experiment("cell_rule = 3\n" + TOY)


def test_a_lag_only_rule_needs_no_reference():
    text = TOY + '\n[cell_rule]\nmax_kept_gain = 0.7\n'
    assert sweep.parse_experiment(text).cell_rule == CellRule(baseline="vaco",
                                                              max_kept_gain=0.7)


def _runs(experiment):
    """Every run of the experiment, rising linearly from 10 to a final return set by its lag:
    38 synchronously (a normalised gain of 0.7), 24 at lag 2 (half the gain kept)."""
    steps = np.arange(5) * 128
    rows = []
    for group in experiment.groups:
        config = group.config
        for run in group.runs:
            final = 38.0 if run.lag == 0 else 24.0
            final += 0.1 * run.seed
            for update, step in enumerate(steps):
                rows.append({"task": "toy_reach", "algo": config.algo, "lag_model": "uniform",
                             "lag": run.lag, "epochs": 2, "minibatches": 2, "seed": run.seed,
                             "run_id": run.run_id, "hp_learning_rate": run.hparams["learning_rate"],
                             "update": update, "env_steps": int(step),
                             "eval_return": 10.0 + (final - 10.0) * step / steps[-1],
                             "diverged": False, "diverged_at": -1})
    return pd.DataFrame(rows)


def test_a_sweep_report_judges_its_runs_by_the_rule(tmp_path, capsys):
    # Two seeds per cell, both gaining 0.7 of the way; the two learning rates are two cells.
    experiment = sweep.parse_experiment(RULED)
    out = tmp_path / "report"
    summary = sweep.write_experiment_report(experiment, _runs(experiment), out)
    verdict = summary.cell_rule
    assert verdict.rule == experiment.cell_rule and verdict.largest_lag == 2.0
    assert [c.variant for c in verdict.cells] == ["ppo[learning_rate=0.001]", "ppo[learning_rate=0.003]"]
    assert all(c.passed for c in verdict.cells)
    (check,) = verdict.cells[0].lag
    assert check.kept.point == pytest.approx(0.5, abs=0.01)
    assert verdict.every_task == ("ppo[learning_rate=0.001]", "ppo[learning_rate=0.003]")
    written = json.loads((out / "summary.json").read_text())
    assert written["cell_rule"]["rule"]["max_kept_gain"] == 0.7
    assert report_summary.loads((out / "summary.json").read_text()) == summary
    assert "## Cell rule" in (out / "report.md").read_text()
