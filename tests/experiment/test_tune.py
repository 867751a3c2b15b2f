"""`[tune]`: each method at its own learning rate, chosen on its synchronous runs alone."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT as TOY
from vaco_jax import experiment as sweep
from vaco_jax.experiment import merge, tune, tune_spec
from vaco_jax.experiment.tune_report import summary as tuning_summary
from vaco_jax.report.markdown_tuning import tuning_section
from vaco_jax.report.rule_records import Tuning, TuningCandidate, TuningChoice
from vaco_jax.report.summary_fields import as_json, parsed

RATES = (1e-4, 3e-3)
TUNE = f"""
[tune]
values = {list(RATES)}
rule = "best_sync_auc"
seeds = [5, 6]
"""
# ppo alone, fixed lag 0 and 2: a tuning group and a studied group of 4 runs each.
TUNED = (TOY.replace("tv_delta = [0.1, 0.3]\n", "").replace("learning_rate = 1e-3\n", "")
         .replace('algos = ["vaco"]', 'algos = ["ppo"]').replace('"uniform"', '"fixed"')
         + TUNE)
TUNING, STUDIED = "tune-toy_reach-ppo-e2m2", "toy_reach-ppo-e2m2"


def test_tuning_groups_run_synchronously_on_their_own_seeds_first():
    experiment = sweep.parse_experiment(TUNED)
    assert [g.name for g in experiment.groups] == [TUNING, STUDIED]
    tuning = experiment.group(TUNING)
    assert tuning.swept == ("learning_rate",) and tuning.config.lag_model.name == "fixed"
    assert {(r.lag, r.seed, r.hparams["learning_rate"]) for r in tuning.runs} == {
        (0.0, seed, rate) for seed in (5, 6) for rate in RATES}
    assert experiment.tuned_by == {STUDIED: TUNING} and experiment.swept_hparams == ()
    assert experiment.tune.rule is tune_spec.RULES["best_sync_auc"]


def test_a_tuning_group_goes_with_the_groups_it_tunes():
    two = sweep.parse_experiment(TUNED.replace('algos = ["ppo"]', 'algos = ["ppo", "spo"]'))
    for index in (1, 2):
        names = [g.name for g in sweep.Part(index, 2).groups(two)]
        assert len(names) == 2 and names[0] == f"tune-{names[1]}"
    with pytest.raises(ValueError, match=r"has 2 group\(s\) to run apart, so N must lie in 1..2"):
        sweep.Part(3, 3).groups(two)
    with pytest.raises(ValueError, match=rf"from tuning group\(s\) \['{TUNING}'\]; name those"):
        sweep.NamedGroups((STUDIED,)).groups(two)


@pytest.mark.parametrize("old, new, message", [
    ('rule = "best_sync_auc"', 'rule = "best_lagged"',
     r"\[tune\]: rule: unknown value\(s\) \['best_lagged'\]; allowed: best_sync_auc, "
     r"best_sync_final"),
    ("values = [0.0001, 0.003]", "values = []", r"\[tune\]: values: the grid is empty"),
    ("values = [0.0001, 0.003]", "values = [0.001, -0.1]",
     r"\[tune\]: values must all be positive, got \[0.001, -0.1\]"),
    ("seeds = [5, 6]", "seeds = 0", r"\[tune\]: seeds must be a positive count"),
    ('rule = "best_sync_auc"', 'rule = "best_sync_auc"\nhparam = "learning_rat"',
     r"\[tune\]: unknown hyper-parameter\(s\) \['learning_rat'\]"),
    ('rule = "best_sync_auc"', 'rule = "best_sync_auc"\nsteps = 3',
     r"\[tune\]: unknown key\(s\) \['steps'\]"),
    ("seeds = [5, 6]", "seeds = 60_000", r"expands into 120,004 runs"),  # 4 studied, 2 x 60,000
    ("[hparams]", "[hparams]\nlearning_rate = 1e-3",
     r"\[tune\] hparam: learning_rate is tuned, so \[hparams\], \[overrides.toy_reach\] and "
     r"\[overrides.ppo\] may not set it"),
])
def test_bad_tune_tables_are_refused_naming_the_field(monkeypatch, old, new, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    assert old in TUNED
    with pytest.raises(ValueError, match=message):
        sweep.parse_experiment(TUNED.replace(old, new, 1))


def _curve_rows(run_id, lag, rate, level):
    """Four evaluations rising from 0 to `level`."""
    return [{"run_id": run_id, "lag": lag, "env_steps": step, "eval_return": level * step / 3}
            for step in range(4)]


@pytest.mark.parametrize("rule, iqms", [("best_sync_auc", [0.5, 1.0]),
                                         ("best_sync_final", [1.0, 2.0])])
def test_the_rule_reads_the_synchronous_tuning_runs_only(rule, iqms):
    experiment = sweep.parse_experiment(TUNED.replace("best_sync_auc", rule))
    low, high = RATES
    rows = []
    for run in experiment.group(TUNING).runs:  # the larger rate learns more synchronously
        rows += _curve_rows(run.run_id, 0.0, run.hparams["learning_rate"],
                            2.0 if run.hparams["learning_rate"] == high else 1.0)
    for run in experiment.group(STUDIED).runs:  # stale runs that would favour the smaller one
        rows += _curve_rows(run.run_id, run.lag, low, 100.0)
    made = tune.choices(experiment, pd.DataFrame(rows), "eval_return")
    assert [(c.group, c.chosen) for c in made] == [(TUNING, high)]
    assert [c.iqm for c in made[0].candidates] == pytest.approx(iqms)
    resolved = tune.resolved(experiment, {c.key: c.chosen for c in made}).group(STUDIED)
    assert {r.hparams["learning_rate"] for r in resolved.runs} == {high}
    assert resolved.swept == ("learning_rate",)


def test_equal_scores_go_to_the_smaller_value_and_diverged_ones_last():
    rule = tune_spec.RULES["best_sync_final"]
    assert rule.choose({3e-3: 1.0, 1e-3: 1.0}) == 1e-3
    assert rule.choose({1e-3: np.nan, 3e-3: -5.0}) == 3e-3


IN_CELL = TUNED.replace("best_sync_auc", "best_sync_final_in_cell") + """
[cell_rule]
baseline = "ppo"
max_final = 0.9
rising_window = 0.5

[reference_scores]
toy_reach = 10.0
"""


def test_the_in_cell_rule_needs_a_cell_rule_with_a_synchronous_criterion():
    cut = IN_CELL[:IN_CELL.index("[cell_rule]")]
    for text in (cut, cut + '[cell_rule]\nbaseline = "ppo"\nmax_kept_gain = 0.7\n'):
        with pytest.raises(ValueError, match=r"\[tune\] rule: best_sync_final_in_cell chooses "
                                             r"among the values whose synchronous runs meet "
                                             r"\[cell_rule\]'s min_gain, max_final or "
                                             r"rising_window, and the experiment sets none"):
            sweep.parse_experiment(text)


def test_an_experiment_with_a_method_added_takes_the_groups_run_before():
    part = sweep.parse_experiment(IN_CELL)
    whole = sweep.parse_experiment(IN_CELL.replace('algos = ["ppo"]', 'algos = ["ppo", "spo"]'))
    assert sweep.foreign_groups(part, whole, [TUNING, STUDIED]) == {}
    added = ["tune-toy_reach-spo-e2m2", "toy_reach-spo-e2m2"]
    assert sweep.foreign_groups(whole, part, [TUNING, STUDIED, *added]) == {
        name: f"'toy' has no group {name!r}" for name in added}


@pytest.mark.parametrize("old, new, foreign", [
    ("rollout_length = 16", "rollout_length = 8", {TUNING, STUDIED}),
    ("seeds = [5, 6]", "seeds = [5, 7]", {TUNING}),  # the tuning runs alone differ
])
def test_groups_an_experiment_would_run_otherwise_are_foreign_to_it(old, new, foreign):
    part, whole = sweep.parse_experiment(IN_CELL), sweep.parse_experiment(IN_CELL.replace(old, new))
    found = sweep.foreign_groups(part, whole, [TUNING, STUDIED])
    assert set(found) == foreign and all("otherwise (" in why for why in found.values())
    assert sweep.foreign_groups(part, part, [TUNING, STUDIED]) == {}


@pytest.mark.parametrize("old, new", [
    ("best_sync_final_in_cell", "best_sync_final"),
    ("rising_window = 0.5", "rising_window = 0.25"),
    ("toy_reach = 10.0", "toy_reach = 20.0"),
])
def test_how_a_tuned_value_is_chosen_is_left_to_the_merge_to_check(old, new):
    """Another rule (or what an in-cell rule reads) runs the same runs; whether a tuned group's
    value is the one it would choose is judged on the merged tuning runs (`_owners`)."""
    part, whole = sweep.parse_experiment(IN_CELL), sweep.parse_experiment(IN_CELL.replace(old, new))
    assert sweep.foreign_groups(part, whole, [TUNING, STUDIED]) == {}


def test_a_foreign_group_names_what_differs():
    part = sweep.parse_experiment(IN_CELL)
    shorter = sweep.parse_experiment(IN_CELL.replace("rollout_length = 16", "rollout_length = 8"))
    assert sweep.foreign_groups(part, shorter, [STUDIED])[STUDIED].endswith(
        "otherwise (config.rollout_length)")
    reseeded = sweep.parse_experiment(IN_CELL.replace("seeds = [5, 6]", "seeds = [5, 7]"))
    assert sweep.foreign_groups(part, reseeded, [TUNING])[TUNING].endswith("otherwise (runs)")
    # A damaged part whose own experiment lacks a group it lists: a reason, not a crash.
    assert sweep.foreign_groups(part, part, ["lost-e2m2"]) == {
        "lost-e2m2": "the part's own experiment has no group 'lost-e2m2'"}


def _saturating_rows(run_id, rate):
    """The larger rate reaches the reference (10) by the middle and stays: the best final score,
    but saturated and flat; the smaller one climbs to 6 to the end."""
    if rate == RATES[1]:
        return [{"run_id": run_id, "lag": 0.0, "env_steps": s, "eval_return": min(10.0, 5.0 * s)}
                for s in range(5)]
    return [{"run_id": run_id, "lag": 0.0, "env_steps": s, "eval_return": 1.5 * s}
            for s in range(5)]


@pytest.mark.parametrize("rule, chosen", [("best_sync_final", RATES[1]),
                                          ("best_sync_final_in_cell", RATES[0])])
def test_the_in_cell_rule_passes_over_a_value_that_saturates(rule, chosen):
    experiment = sweep.parse_experiment(IN_CELL.replace("best_sync_final_in_cell", rule))
    rows = [row for run in experiment.group(TUNING).runs
            for row in _saturating_rows(run.run_id, run.hparams["learning_rate"])]
    [made] = tune.choices(experiment, pd.DataFrame(rows), "eval_return")
    assert made.chosen == chosen
    assert [c.iqm for c in made.candidates] == pytest.approx([6.0, 10.0])
    in_cell = rule.endswith("in_cell")
    assert [c.in_cell for c in made.candidates] == ([True, False] if in_cell else [None, None])


def test_the_in_cell_rule_chooses_among_all_values_when_none_meets_the_rule():
    experiment = sweep.parse_experiment(IN_CELL)
    rows = [row for run in experiment.group(TUNING).runs  # both flat at the reference
            for row in _saturating_rows(run.run_id, RATES[1])]
    [made] = tune.choices(experiment, pd.DataFrame(rows), "eval_return")
    assert [c.in_cell for c in made.candidates] == [False, False]
    assert made.chosen == RATES[0]  # equal finals: the smaller value
    assert tune_spec.RULES["best_sync_final_in_cell"].choose({1e-4: 1.0, 3e-3: 2.0},
                                                        frozenset({1e-4})) == 1e-4


def test_the_tuning_section_names_the_values_meeting_the_cell_rule():
    def choice(method, in_cell):
        return TuningChoice(method=method, group=f"tune-{method}", point={}, chosen=1e-4,
                            candidates=tuple(TuningCandidate(value=v, iqm=1.0, low=0.5, high=2.0,
                                                             runs=4, in_cell=k)
                                             for v, k in zip((1e-4, 3e-4), in_cell)))
    tuning = Tuning(hparam="learning_rate", rule="best_sync_final_in_cell",
                    statistic="final score", seeds=(5,), column="tuned_learning_rate",
                    choices=(choice("a", (True, False)), choice("b", (False, False))))
    text = "\n".join(tuning_section(tuning))
    assert "Only the values whose lag-0 runs meet the cell rule's" in text
    assert "| method | learning_rate | IQM final score [95% CI] | runs | meets the cell rule | |" \
        in text
    assert "| a | 0.0001 | 1 [0.5, 2] | 4 | yes | **chosen** |" in text
    assert "| a | 0.0003 | 1 [0.5, 2] | 4 | no |  |" in text
    assert "No value meets the cell rule for: b; each was chosen among all its values." in text
    for c in tuning.choices[0].candidates:  # summary.json carries it; None is left out
        assert parsed(TuningCandidate, as_json(c)) == c
    assert "in_cell" not in as_json(TuningCandidate(value=1.0, iqm=1.0, low=1.0, high=1.0,
                                                     runs=1))


def _choice(method, chosen, values=(3e-4, 1e-3, 3e-3)):
    return TuningChoice(method=method, group=f"tune-{method}", point={}, chosen=chosen,
                        candidates=tuple(TuningCandidate(value=v, iqm=1.0, low=None, high=2.0,
                                                         runs=4) for v in values))


def test_a_choice_at_an_end_of_the_grid_is_named_as_such():
    assert _choice("a", 3e-4).grid_edge == "smallest"
    assert _choice("b", 1e-3).grid_edge is None
    assert _choice("c", 3e-3).grid_edge == "largest"
    assert _choice("d", 3e-3, values=(3e-3,)).grid_edge is None  # one value: no grid to leave
    tuning = Tuning(hparam="learning_rate", rule="best_sync_auc", statistic="AUC", seeds=(5,),
                    column="tuned_learning_rate",
                    choices=(_choice("a", 3e-4), _choice("b", 1e-3), _choice("c", 3e-3)))
    text = "\n".join(tuning_section(tuning))
    assert "At an end of the grid: a (smallest), c (largest)." in text
    assert "| b | 0.001 | 1 [undefined, 2] | 4 | **chosen** |" in text


@pytest.mark.slow
def test_a_tuned_sweep_stopped_after_tuning_resumes_to_its_report(tmp_path):
    out = tmp_path / "tuned"
    plan = sweep.start_sweep(sweep.parse_experiment(TUNED), out, max_runs_per_batch=4)
    sweep.run_sweep(plan, out, progress=False, groups={TUNING})  # as if stopped there
    with pytest.raises(FileNotFoundError, match="only tuning batches have finished"):
        sweep.write_sweep_report(plan, out)
    summary = sweep.sweep(out, resume=True, progress=False)
    runs = pd.read_parquet(out / "runs.parquet")
    tuning = runs[runs["run_id"].str.startswith(tune_spec.GROUP_PREFIX)]
    studied = runs[~runs["run_id"].str.startswith(tune_spec.GROUP_PREFIX)]
    assert set(tuning["lag"]) == {0.0} and set(studied["lag"]) == {0.0, 2.0}
    # The rule's pick, recomputed here from the synchronous tuning rows alone.
    auc = tune_spec.RULES["best_sync_auc"].run_scores(tuning, "eval_return")
    rate_of = tuning.drop_duplicates("run_id").set_index("run_id")["tuned_learning_rate"]
    iqm = {rate: float(auc[rate_of == rate].mean()) for rate in RATES}  # IQM of 2: their mean
    expected = max(RATES, key=lambda r: (iqm[r], -r))
    [choice] = summary.tuning.choices
    assert choice.chosen == expected and choice.group == TUNING
    assert set(studied["tuned_learning_rate"]) == {expected}
    assert {c.value for c in choice.candidates} == set(RATES)
    assert summary.run.num_runs == 4  # the report's cells hold the studied runs only
    report = (out / "report.md").read_text()
    assert "## learning_rate chosen on synchronous runs" in report and "**chosen**" in report
    again = sweep.sweep(out, resume=True, progress=False)
    assert again.tuning == summary.tuning
    assert json.loads((out / "summary.json").read_text())["tuning"]["hparam"] == "learning_rate"
    merged = sweep.merge_parts([out], tmp_path / "merged")  # the one part of itself
    assert merged.tuning == summary.tuning
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "merged" / "runs.parquet"), runs)


EXTENDED = TUNED.replace("seeds = [5, 6]", "seeds = [5, 6]\nextend = 2")
BELOW, ABOVE = f"{TUNING}-below", f"{TUNING}-above"


def test_the_grid_extends_past_each_end_in_steps_of_its_own_ratio():
    tune_table = tune_spec.Tune(hparam="learning_rate", values=(1e-4, 3e-4, 1e-3),
                                rule=tune_spec.RULES["best_sync_final"], seeds=(0,), extend=2)
    assert tune_table.beyond("below") == (3.33e-5, 1.11e-5)
    assert tune_table.beyond("above") == (3.33e-3, 1.11e-2)
    assert [tune_table.edge(v) for v in (1e-4, 3e-4, 1e-3)] == ["below", None, "above"]
    assert tune_spec.Tune(hparam="learning_rate", values=(1e-4, 1e-3), seeds=(0,),
                          rule=tune_table.rule).edge(1e-3) is None  # no extend: no edge


def test_extension_groups_follow_their_tuning_group_and_go_with_it():
    experiment = sweep.parse_experiment(EXTENDED)
    assert [g.name for g in experiment.groups] == [TUNING, BELOW, ABOVE, STUDIED]
    assert experiment.extensions == {TUNING: {"below": BELOW, "above": ABOVE}}
    assert [g.name for g in experiment.tuning_groups] == [TUNING, BELOW, ABOVE]
    for name, values in ((BELOW, (3.33e-6, 1.11e-7)), (ABOVE, (0.09, 2.7))):
        group = experiment.group(name)
        assert group.config == experiment.group(TUNING).config
        assert [(r.seed, r.lag, r.hparams["learning_rate"]) for r in group.runs] == [
            (seed, 0.0, value) for value in values for seed in (5, 6)]
    assert experiment.units == [[0, 1, 2, 3]]
    assert [g.name for g in sweep.NamedGroups((TUNING, STUDIED)).groups(experiment)] == [
        TUNING, BELOW, ABOVE, STUDIED]


@pytest.mark.parametrize("extend, message", [
    ("3", r"\[tune\]: extend must be a whole number of grid steps from 0 to 2, got 3"),
    ("1.5", r"extend must be a whole number of grid steps from 0 to 2, got 1.5"),
    ("true", r"extend must be a whole number of grid steps from 0 to 2, got True"),
])
def test_a_bad_extension_is_refused_naming_the_field(extend, message):
    with pytest.raises(ValueError, match=message):
        sweep.parse_experiment(EXTENDED.replace("extend = 2", f"extend = {extend}"))
    with pytest.raises(ValueError, match=r"\[tune\]: extend: a grid of one value has no step"):
        sweep.parse_experiment(EXTENDED.replace("values = [0.0001, 0.003]", "values = [0.001]"))


def _peaked_rows(experiment, names, best):
    """Every run of groups `names` rising to a final score that peaks at rate `best`."""
    return pd.DataFrame([row for name in names for run in experiment.group(name).runs
                         for row in _curve_rows(run.run_id, 0.0, None, 10.0 - abs(
                             np.log10(run.hparams["learning_rate"] / best)))])


def test_a_choice_at_the_grids_end_waits_for_its_extension_then_chooses_among_all():
    experiment = sweep.parse_experiment(EXTENDED.replace("best_sync_auc", "best_sync_final"))
    grid_only = _peaked_rows(experiment, [TUNING], best=0.09)
    [waiting] = tune.choices(experiment, grid_only, "eval_return")
    assert (waiting.chosen, waiting.extension, waiting.extended, waiting.pending) == (
        RATES[1], ABOVE, False, True)
    assert tune.unneeded_extensions(experiment, [waiting]) == {BELOW}
    both = _peaked_rows(experiment, [TUNING, ABOVE], best=0.09)
    [final] = tune.choices(experiment, both, "eval_return")
    assert (final.chosen, final.extended, final.pending) == (0.09, True, False)
    assert [c.value for c in final.candidates] == [*RATES, 0.09, 2.7]
    made = tuning_summary(experiment, [final]).choices[0]
    assert (made.extension, made.extended, made.grid_edge) == ("above", True, None)
    text = "\n".join(tuning_section(tuning_summary(experiment, [final])))
    assert "extends it by 2 value(s) past that end" in text
    assert f"- {made.method}: extended above the grid to 2.7; chose 0.09." in text
    assert "| 0.09 |" in text and "| 2.7 |" in text


def test_the_extension_stops_after_its_steps_and_says_so():
    experiment = sweep.parse_experiment(EXTENDED.replace("best_sync_auc", "best_sync_final"))
    rows = _peaked_rows(experiment, [TUNING, BELOW], best=1e-9)  # better the smaller, always
    [made] = tune.choices(experiment, rows, "eval_return")
    assert (made.chosen, made.extension) == (1.11e-7, BELOW)
    text = "\n".join(tuning_section(tuning_summary(experiment, [made])))
    assert "extended below the grid to 1.11e-07; chose 1.11e-07 (the extension's end" in text


def test_a_method_whose_own_synchronous_runs_saturate_is_marked():
    experiment = sweep.parse_experiment(IN_CELL.replace("best_sync_final_in_cell",
                                                        "best_sync_final"))
    rows = [row for run in experiment.group(TUNING).runs
            for row in _saturating_rows(run.run_id, run.hparams["learning_rate"])]
    [made] = tune.choices(experiment, pd.DataFrame(rows), "eval_return")
    assert [c.saturated for c in made.candidates] == [False, True]
    assert made.chosen == RATES[1] and made.saturated
    summary = tuning_summary(experiment, [made])
    assert summary.choices[0].saturated and summary.extend is None
    text = "\n".join(tuning_section(summary))
    assert "| runs | saturates | |" in text and "| 2 | yes | **chosen** |" in text
    assert "Saturated at the chosen value" in text
    assert parsed(Tuning, as_json(summary)) == summary


class _Held:
    """A stand-in part folder holding `tables` (group -> runs table) at `folder`."""

    def __init__(self, folder, tables):
        self.folder, self.tables, self.groups = folder, tables, list(tables)

    def table(self, name):
        return self.tables.get(name)


def _ran_at(experiment, name, rate, level=1.0):
    return pd.DataFrame([{**row, "tuned_learning_rate": rate}
                         for run in experiment.group(name).runs
                         for row in _curve_rows(run.run_id, run.lag, rate, level)])


def test_a_retuned_experiment_keeps_a_method_only_where_its_rule_chooses_the_value_it_ran_at():
    experiment = sweep.parse_experiment(TUNED.replace("best_sync_auc", "best_sync_final"))
    tuning = _peaked_rows(experiment, [TUNING], best=RATES[1])  # the rule chooses 3e-3
    before = _Held("before", {TUNING: tuning, STUDIED: _ran_at(experiment, STUDIED, RATES[0])})
    again = _Held("again", {TUNING: tuning, STUDIED: _ran_at(experiment, STUDIED, RATES[1])})
    held, void = merge._owners([before], experiment), {
        name: f"group {STUDIED!r} ran at learning_rate [0.0001], where the rule chooses "
              f"[0.003] from the tuning runs beside it in 'before'" for name in (TUNING, STUDIED)}
    assert held.owners == {} and held.void == void
    held = merge._owners([before, again], experiment)  # the re-run replaces the void copy
    assert held.owners == {TUNING: again, STUDIED: again} and held.void == void
    with pytest.raises(ValueError, match=r"part folder 'again' overlaps before: both hold "
                                         r"group\(s\) \['tune-toy_reach-ppo-e2m2', "
                                         r"'toy_reach-ppo-e2m2'\]; give each part once"):
        merge._owners([_Held("before", again.tables), again], experiment)
    tuned_only = _Held("tuned", {TUNING: tuning})
    assert merge._owners([tuned_only], experiment).owners == {TUNING: tuned_only}
    # A sweep still on its way: the studied group it has not reached contradicts nothing.
    underway = _Held("underway", {TUNING: tuning, STUDIED: None})
    held = merge._owners([underway], experiment)
    assert held.owners[TUNING] is underway and held.void == {}
    # Re-tuned with an extension, the value at the grid's end waits for it: void until then.
    extended = sweep.parse_experiment(EXTENDED.replace("best_sync_auc", "best_sync_final"))
    waiting = merge._owners([again], extended)
    assert waiting.owners == {} and f"waits for the runs of ['{ABOVE}']" in waiting.void[STUDIED]
    untuned = merge._owners([_Held("lost", {STUDIED: again.tables[STUDIED]})], experiment)
    assert f"ran without the finished tuning runs of {TUNING!r}" in untuned.void[STUDIED]


@pytest.mark.slow
def test_a_tuned_sweep_runs_the_one_extension_its_choice_needs(tmp_path):
    out = tmp_path / "extended"
    experiment = sweep.parse_experiment(EXTENDED.replace("extend = 2", "extend = 1"))
    summary = sweep.sweep(out, experiment, progress=False, max_runs_per_batch=4)
    [choice] = summary.tuning.choices
    # Two values: the choice on the grid is an end, so one extension runs, the other never.
    ran = BELOW if choice.extension == "below" else ABOVE
    skipped = ABOVE if ran == BELOW else BELOW
    assert choice.extended and (out / "runs" / f"{ran}-0").is_dir()
    assert not (out / "runs" / f"{skipped}-0").exists()
    runs = pd.read_parquet(out / "runs.parquet")
    assert set(runs["run_id"]) >= {r.run_id for r in experiment.group(ran).runs}
    assert not set(runs["run_id"]) & {r.run_id for r in experiment.group(skipped).runs}
    assert "unfinished" not in (out / "report.md").read_text().split("\n", 1)[0]
    studied = runs[runs["run_id"].isin({r.run_id for r in experiment.group(STUDIED).runs})]
    assert set(studied["tuned_learning_rate"]) == {choice.chosen}
    assert sweep.sweep(out, resume=True, progress=False).tuning == summary.tuning


@pytest.mark.slow
def test_a_part_tuned_by_another_rule_is_replaced_where_its_value_is_no_longer_chosen(tmp_path):
    before = tmp_path / "before"
    sweep.sweep(before, sweep.parse_experiment(TUNED), progress=False, max_runs_per_batch=4)
    # Re-tuned with an extension: of two values every choice is an end, so it waits for one.
    retuned = sweep.parse_experiment(EXTENDED.replace("extend = 2", "extend = 1"))
    with pytest.raises(ValueError, match=rf"void: group\(s\) \['{STUDIED}'\] ran before the "
                                         rf"rule's choice, which waits for the runs of"):
        sweep.merge_parts([before], tmp_path / "refused", experiment=retuned)
    again = tmp_path / "again"
    summary = sweep.sweep(again, retuned, progress=False, max_runs_per_batch=4)
    merged = sweep.merge_parts([before, again], tmp_path / "merged", experiment=retuned)
    assert merged.tuning == summary.tuning
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "merged" / "runs.parquet"),
                                  pd.read_parquet(again / "runs.parquet"))
    record = json.loads((tmp_path / "merged" / "parts.json").read_text())
    assert record["complete"] and set(record["void_groups"]) == {TUNING, STUDIED}
    assert "unfinished" not in (tmp_path / "merged" / "report.md").read_text().split("\n", 1)[0]


def test_protocol_1_holds_every_method_to_the_one_tuning_rule():
    text = "protocol = 1\n" + EXTENDED.replace("best_sync_auc", "best_sync_final").replace(
        "seeds = [5, 6]", "seeds = [5, 6, 7, 8]")
    assert sweep.parse_experiment(text).protocol == 1
    for old, new, message in (
            ("best_sync_final", "best_sync_final_in_cell",
             r"rule = 'best_sync_final_in_cell' \(the protocol's: 'best_sync_final'\)"),
            ("extend = 2", "extend = 1", r"extend = 1 \(the protocol's: 2\)"),
            ("seeds = [5, 6, 7, 8]", "seeds = [5, 6, 7]",
             r"seeds = \[5, 6, 7\] \(the protocol's: at least 4\)"),
            ("protocol = 1", "protocol = 2", r"protocol must be 1 \(the only version so far\), "
                                             r"got 2")):
        with pytest.raises(ValueError, match=message):
            sweep.parse_experiment(text.replace(old, new))
    untuned = text[:text.index("[tune]")]  # [hparams] is the table before it
    with pytest.raises(ValueError, match=r"protocol 1 tunes every method's rate: add a \[tune\]"):
        sweep.parse_experiment(untuned)


def test_the_plan_says_its_extensions_run_only_where_needed():
    plan = sweep.make_plan(sweep.parse_experiment(EXTENDED), max_runs_per_batch=4)
    text = sweep.plan_text(plan)
    assert f"\n{BELOW} " in text and f"\n{ABOVE} " in text
    assert ("of which 2 extension groups (4,096 steps): each runs only if its method's choice "
            "is that end of the grid, so at most one of each tuning group's two") in text


def test_an_algorithms_own_setting_applies_unless_its_overrides_pin_the_field():
    text = """
name = "vcpo_setting"
testbed = "tokens"
tasks = ["add"]
algos = ["grpo", "vcpo", "vcpo_ess_only"]
seeds = 1
[lag]
model = "fixed"
levels = [0]
[config]
prompts = 8
group_size = 8
num_updates = 2
eval_every = 1
[overrides.vcpo_ess_only.config]
group_size = 8
"""
    experiment = sweep.parse_experiment(text)
    shape = {g.config.algo: (g.config.optimizer, g.config.group_size, g.config.prompts)
             for g in experiment.groups}
    # VCPO keeps the 64 samples per update in groups of 16; its ablation's pinned group stays.
    assert shape == {"grpo": ("adam", 8, 8), "vcpo": ("adamw", 16, 4),
                     "vcpo_ess_only": ("adamw", 8, 8)}
    with pytest.raises(ValueError, match=r"group add-vcpo-e1m1: vcpo runs at group_size=16 as "
                                         r"its authors do, keeping the run's samples per update, "
                                         r"but prompts x group_size = 24 is not a multiple of it"):
        sweep.parse_experiment(text.replace("prompts = 8", "prompts = 3"))
