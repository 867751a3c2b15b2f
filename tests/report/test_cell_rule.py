"""The cell rule judged on runs tables whose learning curves are set by hand: a cell that learns
and still rises passes; one that saturates, one flat over the last quarter, one where too few
seeds gain, and a lag scan whose kept gain is too high on one task fail, each for its reason."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vaco_jax.cli import sweep as sweep_cli
from vaco_jax.report import cell_rule, markdown, stats
from vaco_jax.report import summary as report_summary
from vaco_jax.report.rule_records import CellRule

STEPS = np.arange(9) * 100  # 9 evaluations: the last one is the final score (final_fraction 0.1)
REFERENCE = 100.0
SEEDS = range(10)
REPS = 200
RULE = CellRule(baseline="grpo", min_gain=0.25, min_seed_share=0.9, max_final=0.9,
                rising_window=0.25)


def curve(initial, final, flat_from=1.0):
    """From `initial` rising linearly to `final` at `flat_from` of the steps, flat after."""
    progress = np.minimum(STEPS / STEPS[-1] / flat_from, 1.0)
    return initial + (final - initial) * progress


def rows(task, algo, lag, seed, values, rate=1e-3):
    run_id = f"{task}-{algo}-lag{lag:g}-lr{rate:g}-s{seed}"
    return [{"task": task, "algo": algo, "lag_model": "uniform", "lag": float(lag), "epochs": 1,
             "minibatches": 1, "seed": seed, "run_id": run_id, "update": i,
             "env_steps": int(steps), "eval_return": float(v), "diverged": False,
             "diverged_at": -1, "hp_learning_rate": rate}
            for i, (steps, v) in enumerate(zip(STEPS, values))]


def initial(seed):
    """Each seed starts elsewhere, so a run's own scale differs from its task's."""
    return 10.0 + 2.0 * seed


def cell_rows(task, finals, lag=0, flat_from=1.0, algo="grpo", rate=1e-3):
    """A run per seed whose normalised final score (over its own initial) is `finals[seed]`."""
    out = []
    for seed, share in zip(SEEDS, finals):
        start = initial(seed)
        out += rows(task, algo, lag, seed,
                    curve(start, start + share * (REFERENCE - start), flat_from), rate)
    return out


def judged(table_rows, rule=RULE, references=None):
    return cell_rule.evaluate(pd.DataFrame(table_rows), rule,
                              reference_scores=references or {"add": REFERENCE},
                              reps=REPS)


def only_cell(verdict):
    (cell,) = verdict.cells
    return cell


def test_a_cell_that_gains_and_still_rises_passes_with_its_measured_values():
    finals = [0.5 + 0.01 * s for s in SEEDS]
    cell = only_cell(verdict := judged(cell_rows("add", finals)))
    assert cell.passed and cell.failed() == [] and cell.runs == 10
    assert (cell.gain.reaching, cell.gain.runs, cell.gain.passed) == (10, 10, True)
    assert cell.final.measured.point == pytest.approx(stats.aggregate_iqm(
        np.array(finals)[:, None]))
    # Linear to the end: a quarter of the gain comes in the last quarter.
    assert cell.rising.measured.point == pytest.approx(
        float(stats.aggregate_iqm(np.array(finals)[:, None] / 4)))
    assert cell.rising.measured.low > 0 and cell.rising.passed
    assert cell.lag is None and verdict.largest_lag is None and verdict.lag_every_task is None
    assert verdict.passing == {"add": ("grpo",)} and verdict.every_task == ("grpo",)


def test_a_saturated_cell_fails_only_as_saturated():
    cell = only_cell(judged(cell_rows("add", [0.95] * 10)))
    assert cell.final.measured.point == pytest.approx(0.95)
    assert not cell.passed and cell.failed() == ["final"] and cell.failures() == "saturated"


def test_a_cell_flat_over_the_last_quarter_is_not_rising():
    cell = only_cell(judged(cell_rows("add", [0.5] * 10, flat_from=0.5)))
    assert cell.rising.measured.point == pytest.approx(0.0, abs=1e-12)
    assert not cell.rising.passed and cell.failed() == ["rising"]
    # Still rising, though barely, over the last half of one evaluation: it counts.
    nearly = only_cell(judged(cell_rows("add", [0.5] * 10, flat_from=0.8)))
    assert nearly.rising.passed and nearly.rising.measured.point > 0


@pytest.mark.parametrize("gaining, passes", [(8, False), (9, True), (10, True)])
def test_too_few_seeds_reaching_the_gain_fail(gaining, passes):
    finals = [0.5] * gaining + [0.1] * (10 - gaining)
    cell = only_cell(judged(cell_rows("add", finals)))
    assert (cell.gain.reaching, cell.gain.passed) == (gaining, passes)  # 9 of 10 is 0.9
    assert cell.passed == passes


def test_every_setting_of_the_baseline_is_a_cell_and_others_are_ignored():
    table = (cell_rows("add", [0.5] * 10, rate=1e-3) + cell_rows("add", [0.95] * 10, rate=3e-3)
             + cell_rows("add", [0.0] * 10, algo="ppo"))
    verdict = judged(table)
    assert [(c.variant, c.passed) for c in verdict.cells] == [
        ("grpo[learning_rate=0.001]", True), ("grpo[learning_rate=0.003]", False)]
    assert verdict.passing == {"add": ("grpo[learning_rate=0.001]",)}


LAG_RULE = dataclasses.replace(RULE, max_kept_gain=0.7)


def lag_scan(kept_on_chain):
    """grpo at lags 0, 8 and 32 on two tasks: at lag 32 it keeps half of its gain on `add` and
    `kept_on_chain` of it on `chain`; lag 8 costs nothing (only the largest lag counts)."""
    finals = [0.4 + 0.02 * s for s in SEEDS]
    table = []
    for task, kept in (("add", 0.5), ("chain", kept_on_chain)):
        table += cell_rows(task, finals)
        table += cell_rows(task, finals, lag=8)
        table += cell_rows(task, [kept * f for f in finals], lag=32)
    return table


def test_a_lag_scan_keeping_too_much_on_one_task_fails_every_task():
    verdict = judged(lag_scan(0.8), LAG_RULE, {"add": REFERENCE, "chain": REFERENCE})
    assert verdict.largest_lag == 32.0
    add, chain = verdict.cells
    (add_lag,), (chain_lag,) = add.lag, chain.lag
    assert (add_lag.lag, add_lag.runs, add_lag.variant) == (32.0, 10, "grpo")
    # Each run's gain is a share of its own start's distance; kept gain is on raw gains.
    assert add_lag.kept.point == pytest.approx(0.5) and add_lag.passed and add.passed
    assert chain_lag.kept.point == pytest.approx(0.8) and not chain_lag.passed
    assert chain.failed() == ["lag"] and chain.failures() == "keeps too much under lag"
    assert verdict.passing == {"add": ("grpo",), "chain": ()}
    assert verdict.every_task == () and verdict.lag_every_task == ()
    kept = judged(lag_scan(0.6), LAG_RULE, {"add": REFERENCE, "chain": REFERENCE})
    assert kept.every_task == ("grpo",) and kept.lag_every_task == ("grpo",)


def test_a_cell_without_runs_at_the_largest_lag_fails_the_lag_criterion():
    table = [r for r in lag_scan(0.6) if not (r["task"] == "chain" and r["lag"] == 32.0)]
    verdict = judged(table, LAG_RULE, {"add": REFERENCE, "chain": REFERENCE})
    chain = verdict.cells[1]
    assert chain.lag == () and chain.failed() == ["lag"]
    assert verdict.lag_every_task == ()


def test_a_task_without_synchronous_baseline_runs_fails_every_task():
    table = cell_rows("add", [0.5] * 10) + cell_rows("chain", [0.5] * 10, algo="ppo")
    verdict = judged(table, references={"add": REFERENCE, "chain": REFERENCE})
    assert verdict.tasks == ("add", "chain") and verdict.passing["chain"] == ()
    assert verdict.every_task == ()


def test_a_table_without_any_baseline_run_judges_no_cell():
    # A part of a sweep that ran other methods only: its report still gets a verdict.
    verdict = judged(cell_rows("add", [0.5] * 10, algo="ppo", lag=0)
                     + cell_rows("add", [0.2] * 10, algo="ppo", lag=32), LAG_RULE)
    assert verdict.cells == () and verdict.passing == {"add": ()}
    # The study's largest lag is read from every method's runs, so the part's report names it.
    assert verdict.every_task == () and verdict.largest_lag == 32.0


def test_the_baseline_is_judged_at_its_own_largest_lag():
    # Another method runs to lag 128; grpo's largest lag is 32, where it is judged.
    verdict = judged(cell_rows("add", [0.5] * 10, lag=0) + cell_rows("add", [0.1] * 10, lag=32)
                     + cell_rows("add", [0.5] * 10, algo="ppo", lag=128), LAG_RULE)
    assert verdict.largest_lag == 32.0 and verdict.lag_every_task == ("grpo",)


def test_normalised_criteria_need_each_tasks_reference():
    with pytest.raises(ValueError, match=r"min_gain, max_final, rising_window are normalised "
                                         r"by each task's reference score; tasks \['chain'\]"):
        judged(cell_rows("add", [0.5] * 10) + cell_rows("chain", [0.5] * 10))
    lag_only = CellRule(baseline="grpo", max_kept_gain=0.7)  # a ratio of raw gains: none needed
    assert judged(lag_scan(0.6), lag_only).every_task == ("grpo",)


def test_a_run_starting_at_its_reference_is_refused():
    table = cell_rows("add", [0.5] * 10)
    with pytest.raises(ValueError, match=r"start at or above their task's reference"):
        judged(table, references={"add": 10.0})


def test_the_verdict_round_trips_through_the_summary_and_renders(capsys):
    verdict = judged(lag_scan(0.8), LAG_RULE, {"add": REFERENCE, "chain": REFERENCE})
    quick = Path(__file__).parents[2] / "experiments" / "results" / "quick" / "summary.json"
    summary = dataclasses.replace(report_summary.loads(quick.read_text()), cell_rule=verdict)
    text = report_summary.dumps(summary)
    again = report_summary.loads(text)
    assert again == summary and report_summary.dumps(again) == text
    report = markdown.markdown(again)
    assert "## Cell rule" in report
    assert ("| chain | grpo | 10 | 10 of 10 (pass) |" in report
            and "0.800 [" in report and "| fails: keeps too much under lag |" in report)
    assert "- Passing on add: grpo\n- Passing on chain: none\n" in report
    assert "- Passing on every task (add, chain): none" in report
    sweep_cli._print_scores(again, "out")
    out = capsys.readouterr().out
    assert "  add                              passes: grpo\n" in out
    assert "  chain                            fails: grpo (keeps too much under lag)\n" in out
    assert "  on every task                    no cell passes\n" in out


def test_a_rule_without_the_lag_criterion_renders_without_a_lag_column():
    """A calibration of synchronous runs only: no largest lag, no kept-gain column."""
    verdict = judged(cell_rows("add", [0.5] * 10))
    assert verdict.largest_lag is None
    quick = Path(__file__).parents[2] / "experiments" / "results" / "quick" / "summary.json"
    summary = dataclasses.replace(report_summary.loads(quick.read_text()), cell_rule=verdict)
    report = markdown.markdown(summary)
    assert "## Cell rule" in report and "kept gain at lag" not in report
    assert "| add | grpo | 10 | 10 of 10 (pass) |" in report
