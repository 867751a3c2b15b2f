"""Sweeps in parts: the balanced split of groups, `--part K/N`, `--plan`, and merging part
folders into the report of the whole experiment (`vaco-jax report OUT --parts ...`)."""

import json
import logging
import re
import shutil
from pathlib import Path

import jax
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_configs import TOY_EXPERIMENT as TOY
from test_sweep import BATCH
from vaco_jax import cli
from vaco_jax import experiment as sweep
from vaco_jax.cli import sweep as sweep_cli
from vaco_jax.experiment import execute, spec
from vaco_jax.experiment import folder as sweep_folder

pytestmark = pytest.mark.slow  # whole sweeps run as parts and merged

# vaco alone, then with ppo (2 groups of 8 runs), sweeping a knob both read.
TOY1 = TOY.replace("tv_delta = [0.1, 0.3]", "max_grad_norm = [0.5, 1.0]")
TOY2 = TOY1.replace('algos = ["vaco"]', 'algos = ["ppo", "vaco"]')
PPO, VACO = "toy_reach-ppo-e2m2", "toy_reach-vaco-e2m2"


@pytest.fixture(scope="module")
def toy2_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("experiment") / "toy.toml"
    path.write_text(TOY2)
    return path


# ---------------------------------------------------------------- the split


def test_balanced_parts_by_hand():
    # Decreasing weight, each to the lightest part so far: 5->0, 3->1, 3->1, 2->0, 1->1.
    assert sweep.balanced_parts([5, 3, 3, 2, 1], 2) == [0, 1, 1, 0, 1]
    assert sweep.balanced_parts([1, 1, 1, 1, 1], 2) == [0, 1, 0, 1, 0]  # round-robin
    assert sweep.balanced_parts([1, 9, 1], 3) == [1, 0, 2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=12), st.data())
def test_balanced_parts_cover_every_item_once_and_balance(weights, data):
    count = data.draw(st.integers(1, len(weights)))
    owners = sweep.balanced_parts(weights, count)
    assert len(owners) == len(weights) and set(owners) == set(range(count))  # none empty
    loads = [sum(w for w, o in zip(weights, owners) if o == p) for p in range(count)]
    assert max(loads) - min(loads) <= max(weights)


@pytest.mark.parametrize("text, part", [("2/3", (2, 3)), ("1/1", (1, 1)), (" 3 / 3 ", (3, 3))])
def test_part_parses(text, part):
    assert sweep.Part.parse(text) == sweep.Part(*part)
    assert str(sweep.Part(*part)) == f"{part[0]}/{part[1]}"


@pytest.mark.parametrize("text", ["0/3", "4/3", "x/y", "3", "1/0", "-1/3", "1/3/5", "", "1.5/3"])
def test_bad_parts_are_refused_naming_the_form(text):
    with pytest.raises(ValueError, match=r"--part must be K/N with integers 1 <= K <= N"):
        sweep.Part.parse(text)


def test_parts_split_groups_by_environment_steps():
    text = TOY2.replace('tasks = ["toy_reach"]', 'tasks = ["toy_reach", "inverted_pendulum"]') \
        .replace("epochs = 2", "epochs = [1, 2]") \
        + "\n[overrides.ppo.hparams]\nmax_grad_norm = 0.5\n"
    experiment = sweep.parse_experiment(text)
    # ppo groups: 2 lags x 2 seeds; vaco groups: also 2 gradient-norm bounds; 512 steps per run.
    assert [(g.name, sweep.group_steps(g)) for g in experiment.groups] == [
        (f"{task}-{algo}-e{epochs}m2", runs * 512)
        for task in ("toy_reach", "inverted_pendulum") for algo, runs in (("ppo", 4), ("vaco", 8))
        for epochs in (1, 2)]

    def names(part):
        return [g.name.replace("inverted_pendulum", "ip").replace("toy_reach", "toy")
                for g in sweep.Part.parse(part).groups(experiment)]

    # The vaco groups first, one per part in turn, then the ppo groups to the lightest parts.
    assert names("1/2") == ["toy-ppo-e1m2", "toy-vaco-e1m2", "ip-ppo-e1m2", "ip-vaco-e1m2"]
    assert names("2/2") == ["toy-ppo-e2m2", "toy-vaco-e2m2", "ip-ppo-e2m2", "ip-vaco-e2m2"]
    assert names("1/3") == ["toy-vaco-e1m2", "ip-vaco-e2m2"]
    assert names("2/3") == ["toy-ppo-e1m2", "toy-vaco-e2m2", "ip-ppo-e1m2"]
    assert names("3/3") == ["toy-ppo-e2m2", "ip-ppo-e2m2", "ip-vaco-e1m2"]
    assert sweep.Part(1, 1).groups(experiment) == experiment.groups
    with pytest.raises(ValueError, match=r"--part 1/9: experiment 'toy' has 8 group\(s\), "
                                         r"so N must lie in 1..8"):
        names("1/9")



def test_the_split_is_computed_once_per_experiment(toy2_file, tmp_path, monkeypatch):
    counts = []
    split = spec.balanced_parts

    def counted(weights, count):
        counts.append(count)
        return split(weights, count)
    monkeypatch.setattr(spec, "balanced_parts", counted)
    experiment = sweep.load_experiment(toy2_file)
    plan = sweep.start_sweep(experiment, tmp_path / "part", part=sweep.Part(2, 2),
                             max_runs_per_batch=BATCH)
    sweep.plan_text(plan)
    sweep.unfinished_groups(plan, tmp_path / "part")
    assert [g.name for g in plan.groups] == [VACO] and counts == [2]


# ---------------------------------------------------------------- the plan


def test_plan_prints_runs_steps_and_time_without_compiling(toy2_file, tmp_path, capsys, caplog):
    out = tmp_path / "never"
    base = ["sweep", str(toy2_file), "--plan", "--max-runs-per-batch", "3", "--out", str(out)]
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        assert cli.main([*base, "--steps-per-second", "1024"]) == 0
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not [m for m in compiled if any(f in m for f in ("init", "rollout", "train", "run"))]
    printed = capsys.readouterr().out
    # Each group: 8 runs in batches of at most 3 -> 3 batches of size 3 (the last padded by one).
    assert "toy, 2 groups, 6 batches in 2 compiled program(s); 1 device(s)" in printed
    for group in (PPO, VACO):
        assert [line.split() for line in printed.splitlines() if line.startswith(group)] == [
            [group, "8", "0.000", "3", "x", "3", "4,096"]]
    assert "total: 16 runs, 8,192 environment steps (9,216 executed, with batch padding)" in printed
    assert "9,216 executed steps / 1,024 steps/s = 9 s" in printed

    assert cli.main([*base, "--part", "2/2", "--steps-per-second", "512"]) == 0
    printed = capsys.readouterr().out
    assert "toy, part 2/2: 1 of 2 groups, 3 batches" in printed and PPO not in printed
    assert "total: 8 runs, 4,096 environment steps (4,608 executed" in printed
    assert "4,608 executed steps / 512 steps/s = 9 s" in printed

    assert cli.main(base) == 0
    assert "give --steps-per-second R" in capsys.readouterr().out
    assert not out.exists()


def test_plan_table_columns_line_up_under_long_group_names():
    text = TOY1.replace('algos = ["vaco"]', 'algos = ["vaco_realign_only"]').replace(
        '[lag]\nmodel = "uniform"\nlevels = [0, 2]',
        '[[lag]]\nmodel = "uniform"\nlevels = [0, 2]\n[[lag]]\nmodel = "geometric"\nlevels = [1]')
    plan = sweep.make_plan(sweep.parse_experiment(text), devices=jax.devices()[:1])
    header, *rows = sweep.plan_text(plan).splitlines()[1:2 + len(plan.groups)]
    names = [g.name for g in plan.groups]
    assert max(len(name) for name in names) > 40  # toy_reach-vaco_realign_only-geometric-e2m2
    # Each row's run count ends under the header's "runs", and its memory under "GiB/run".
    for row, name in zip(rows, names):
        count = re.match(rf"{re.escape(name)} +(\d+) +(\d+\.\d+)", row)
        assert count.end(1) == header.index("runs") + len("runs")
        assert count.end(2) == header.index("GiB/run") + len("GiB/run")


def test_plan_text_estimates_days():
    plan = sweep.make_plan(sweep.parse_experiment(TOY2), max_runs_per_batch=3,
                           devices=jax.devices()[:1])
    assert sweep.plan_text(plan, steps_per_second=0.1).endswith(
        "9,216 executed steps / 0 steps/s = 1.1 d, plus compilation (one per program, each but "
        "the first overlapping the previous group's training)")


# ---------------------------------------------------------------- refusals before compiling


@pytest.fixture
def no_compilation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("reached planning or training before refusing")
    monkeypatch.setattr(sweep_cli, "make_plan", refuse)
    monkeypatch.setattr(sweep_folder, "make_plan", refuse)
    monkeypatch.setattr(execute, "run_sweep", refuse)


FORM = "--part must be K/N with integers 1 <= K <= N (e.g. 2/3)"


@pytest.mark.parametrize("part, message", [
    ("0/2", FORM), ("3/2", FORM), ("x/y", FORM), ("2", FORM),
    ("3/3", "--part 3/3: experiment 'toy' has 2 group(s), so N must lie in 1..2"),
])
def test_cli_refuses_bad_parts_in_one_line(toy2_file, tmp_path, capsys, no_compilation, part,
                                           message):
    out = tmp_path / "sweep"
    for plan in ([], ["--plan"]):
        assert cli.main(["sweep", str(toy2_file), "--part", part, "--out", str(out),
                         "--no-progress", *plan]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_refuses_steps_per_second_without_plan(toy2_file, tmp_path, capsys, no_compilation):
    assert cli.main(["sweep", str(toy2_file), "--out", str(tmp_path / "s"),
                     "--steps-per-second", "100"]) == 2
    assert "--steps-per-second must be a positive rate given with --plan" in capsys.readouterr().err


def test_the_part_is_saved_and_resume_keeps_it(toy2_file, tmp_path, capsys, monkeypatch):
    experiment = sweep.load_experiment(toy2_file)
    out, whole = tmp_path / "part", tmp_path / "whole"
    sweep.start_sweep(experiment, out, part=sweep.Part(1, 2), max_runs_per_batch=BATCH)
    sweep.start_sweep(experiment, whole, max_runs_per_batch=BATCH)
    assert json.loads((out / "sweep.json").read_text())["part"] == "1/2"
    plan = sweep.load_sweep(out)
    assert plan.part == sweep.Part(1, 2) and [g.name for g in plan.groups] == [PPO]
    assert {b.group for b in plan.batches} == {PPO}
    assert sweep.load_sweep_to_resume(out).part == sweep.Part(1, 2)

    def refuse(*args, **kwargs):
        raise AssertionError("ran before refusing")
    monkeypatch.setattr(execute, "run_sweep", refuse)
    for folder, part, saved in [(out, "2/2", "part 1/2"), (out, "1/3", "part 1/2"),
                                (whole, "1/2", "the whole experiment, no part")]:
        assert cli.main(["sweep", "--out", str(folder), "--resume", "--part", part,
                         "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"part {part} disagrees with the sweep saved in {str(folder)!r} ({saved}); " \
               f"leave --part and --groups out to resume it" in err
        assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- running parts and merging


def whole_and_parts(root: Path, experiment_file: Path) -> tuple[Path, list[Path]]:
    """The experiment run whole in `root/whole`, and as parts 1/2 and 2/2 in `root/part1` and
    `root/part2`."""
    whole = root / "whole"
    sweep.sweep(whole, sweep.load_experiment(experiment_file), max_runs_per_batch=BATCH,
                progress=False)
    folders = [root / "part1", root / "part2"]
    for index, folder in enumerate(folders, 1):
        assert cli.main(["sweep", str(experiment_file), "--part", f"{index}/2", "--out",
                         str(folder), "--max-runs-per-batch", str(BATCH), "--no-progress"]) == 0
    return whole, folders


@pytest.fixture(scope="module")
def parts(tmp_path_factory, toy2_file):
    """The toy experiment run whole in one folder, and as parts 1/2 and 2/2 in two others."""
    return whole_and_parts(tmp_path_factory.mktemp("parts"), toy2_file)


def runs(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "runs.parquet")


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_each_part_reports_its_groups_only(parts):
    whole, folders = parts
    for folder, algo in zip(folders, ("ppo", "vaco")):
        table = runs(folder)
        assert set(table["algo"]) == {algo} and table["run_id"].nunique() == 8
        assert sorted(p.name for p in (folder / "runs").iterdir()) == [
            f"toy_reach-{algo}-e2m2-0", f"toy_reach-{algo}-e2m2-1"]
        assert summary(folder)["title"].endswith(f"(part {folders.index(folder) + 1}/2)")
    assert set(runs(whole)["algo"]) == {"ppo", "vaco"}


def test_merged_parts_equal_the_whole_sweep(parts, tmp_path, capsys):
    whole, (part1, part2) = parts
    out = tmp_path / "merged"
    # Given in reverse: the merge follows the experiment's group order, not the folders'.
    assert cli.main(["report", str(out), "--parts", str(part2), str(part1)]) == 0
    assert "toy: tiny toy sweep: 16 runs (0 diverged)" in capsys.readouterr().out
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)
    assert summary(out) == summary(whole)
    assert (out / "experiment.toml").read_text() == TOY2
    record = json.loads((out / "parts.json").read_text())
    assert record == {"experiment": "toy", "complete": True,
                      "parts": [{"folder": str(part2.resolve()), "part": "2/2", "groups": [VACO]},
                                {"folder": str(part1.resolve()), "part": "1/2", "groups": [PPO]}],
                      "missing_groups": [], "void_groups": {}, "unfinished_groups": {}}

    assert cli.main(["report", str(out), "--parts", str(part1), str(part2)]) == 2
    assert "already exists and is not empty; pass --overwrite" in capsys.readouterr().err
    assert cli.main(["report", str(out), "--parts", str(part1), str(part2), "--overwrite"]) == 0
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)


def test_a_merged_report_inside_a_part_folder_is_refused_naming_the_part(tmp_path, capsys):
    part = tmp_path / "part"
    part.mkdir()
    out = part / "merged"
    assert cli.main(["report", str(out), "--parts", str(part)]) == 2
    assert capsys.readouterr().err == (
        f"vaco-jax report: error: the merged report's folder {str(out)!r} lies in the part "
        f"folder {str(part)!r}; choose a folder outside it\n")
    assert list(part.iterdir()) == []


def test_a_whole_sweep_merges_as_its_own_single_part(parts, tmp_path):
    whole, _ = parts
    assert cli.main(["report", str(tmp_path / "merged"), "--parts", str(whole)]) == 0
    pd.testing.assert_frame_equal(runs(tmp_path / "merged"), runs(whole), check_exact=True)


def test_incomplete_merge_only_when_allowed_and_marked(parts, tmp_path, capsys):
    whole, (part1, _) = parts
    out = tmp_path / "merged"
    assert cli.main(["report", str(out), "--parts", str(part1)]) == 2
    err = capsys.readouterr().err
    assert f"no part holds group(s) ['{VACO}']" in err and "--allow-incomplete" in err
    assert not out.exists()
    assert cli.main(["report", str(out), "--parts", str(part1), "--allow-incomplete"]) == 0
    assert summary(out)["title"] == ("toy: tiny toy sweep (incomplete merge: 1 of 2 groups "
                                     "missing or unfinished, see parts.json)")
    expected = runs(whole)[lambda t: t["algo"] == "ppo"].reset_index(drop=True)
    pd.testing.assert_frame_equal(runs(out), expected, check_exact=True)
    record = json.loads((out / "parts.json").read_text())
    assert not record["complete"] and record["missing_groups"] == [VACO]



def test_a_report_of_some_tasks_keeps_only_their_reference_returns(parts, tmp_path):
    whole, _ = parts
    two_tasks = sweep.parse_experiment(
        TOY2.replace('tasks = ["toy_reach"]', 'tasks = ["toy_reach", "inverted_pendulum"]')
        + "\n[reference_returns]\ntoy_reach = 50.0\ninverted_pendulum = 1000.0\n")
    summary = sweep.write_experiment_report(two_tasks, runs(whole), tmp_path / "report")
    assert summary.normalisation["toy_reach"].reference == 50.0
    assert set(summary.normalisation) == {"toy_reach"}

def test_unfinished_part_is_named(parts, tmp_path, capsys):
    _, (part1, part2) = parts
    copy = tmp_path / "part2"
    shutil.copytree(part2, copy)
    (copy / "runs" / f"{VACO}-1" / "status.json").unlink()
    assert cli.main(["report", str(tmp_path / "merged"), "--parts", str(part1), str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{str(copy)!r} has not finished group(s) ['{VACO}'] (resume it with vaco-jax " \
           f"sweep --resume --out {copy})" in err


def interrupt_halfway(folder: Path, batch: str) -> set:
    """Marks the finished `batch` of `folder` as stopped halfway, its results kept: the state
    of a sweep interrupted there. Returns the run ids of the batch."""
    status_file = folder / "runs" / batch / "status.json"
    status = json.loads(status_file.read_text())
    status.update(complete=False, updates_done=status["num_updates"] // 2)
    status_file.write_text(json.dumps(status))
    experiment = sweep.load_sweep(folder).experiment
    (found,) = [b for b in sweep.load_sweep(folder).batches if b.name == batch]
    return set(sweep.batch_table(experiment, found, folder / "runs" / batch)["run_id"])


def test_an_unfinished_batch_stays_out_of_every_report(parts, tmp_path):
    whole, (part1, part2) = parts
    expected = runs(whole)
    for source in (whole, part2):
        shutil.copytree(source, tmp_path / source.name)
    halfway = interrupt_halfway(tmp_path / part2.name, f"{VACO}-1")
    assert interrupt_halfway(tmp_path / whole.name, f"{VACO}-1") == halfway
    assert len(halfway) == BATCH and halfway < set(expected["run_id"])
    kept = expected[~expected["run_id"].isin(halfway)].reset_index(drop=True)

    merged = tmp_path / "merged"
    assert cli.main(["report", str(merged), "--parts", str(part1), str(tmp_path / part2.name),
                     "--allow-incomplete"]) == 0
    pd.testing.assert_frame_equal(runs(merged), kept, check_exact=True)
    assert summary(merged)["title"].endswith("(incomplete merge: 1 of 2 groups missing or "
                                             "unfinished, see parts.json)")

    assert cli.main(["report", str(tmp_path / whole.name)]) == 0
    pd.testing.assert_frame_equal(runs(tmp_path / whole.name), kept, check_exact=True)
    assert summary(tmp_path / whole.name)["title"].endswith(
        "(unfinished: 1 of 2 groups not finished, their unfinished batches left out)")


@pytest.mark.parametrize("case", ["overlap", "other experiment", "out is a part",
                                  "not a sweep folder"])
def test_bad_merges_are_refused_naming_the_folder(parts, tmp_path, capsys, case):
    _, (part1, part2) = parts
    out, folders, message = tmp_path / "merged", [part1, part2], None
    if case == "overlap":
        folders, message = [part1, part2, part1], (
            f"part folder {str(part1)!r} overlaps {part1}: both hold group(s) ['{PPO}']")
    elif case == "other experiment":
        other = tmp_path / "other"
        shutil.copytree(part2, other)
        (other / "experiment.toml").write_text(TOY2.replace("learning_rate = 1e-3",
                                                            "learning_rate = 3e-4"))
        folders, message = [part1, other], (
            f"part folder {str(other)!r} holds another experiment ('toy') than {str(part1)!r}")
    elif case == "out is a part":
        out, message = part2, f"the merged report's folder {str(part2)!r} is one of the parts"
    else:
        plain = tmp_path / "plain"  # beside the merged folder: one inside a part is refused first
        plain.mkdir()
        folders, message = [part1, plain], f"{str(plain)!r} is not a sweep folder"
    assert cli.main(["report", str(out), "--parts", *map(str, folders)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "merged").exists()


def test_a_part_run_before_the_experiment_grew_merges_into_it(parts, tmp_path, capsys):
    """`vaco` run alone, under the experiment before `ppo` joined it, merges with part 1/2 of the
    grown experiment when that is named, into the report of the grown experiment run whole."""
    whole, (part1, _) = parts
    before = tmp_path / "before.toml"
    before.write_text(TOY1)
    vaco_before = tmp_path / "vaco_before"
    assert cli.main(["sweep", str(before), "--out", str(vaco_before),
                     "--max-runs-per-batch", str(BATCH), "--no-progress"]) == 0
    out, grown = tmp_path / "merged", str(tmp_path / "toy2.toml")
    Path(grown).write_text(TOY2)
    assert cli.main(["report", str(out), "--parts", str(part1), str(vaco_before)]) == 2
    assert "or name the experiment that extends them (--experiment)" in capsys.readouterr().err
    assert cli.main(["report", str(out), "--parts", str(part1), str(vaco_before),
                     "--experiment", grown]) == 0
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)
    assert summary(out) == summary(whole) and (out / "experiment.toml").read_text() == TOY2

    changed = tmp_path / "changed.toml"
    changed.write_text(TOY2.replace("learning_rate = 1e-3", "learning_rate = 3e-4"))
    assert cli.main(["report", str(tmp_path / "refused"), "--parts", str(part1),
                     str(vaco_before), "--experiment", str(changed)]) == 2
    err = capsys.readouterr().err
    assert f"part folder {str(part1)!r} holds groups that 'toy' does not run alike: 'toy' runs " \
           f"group '{PPO}' otherwise" in err and not (tmp_path / "refused").exists()


def test_merge_options_need_parts(parts, capsys):
    whole, _ = parts
    assert cli.main(["report", str(whole), "--overwrite"]) == 2
    assert "--overwrite and --keep with --parts or --predictors" in capsys.readouterr().err
    assert cli.main(["report", str(whole), "--experiment", "toy.toml"]) == 2
    assert "--experiment and --allow-incomplete apply only with --parts" \
        in capsys.readouterr().err
    assert cli.main(["report", str(whole), "--parts", str(whole), "--predictors",
                     str(whole)]) == 2
    assert "give one" in capsys.readouterr().err
    assert cli.main(["report", str(whole), "--predictors", str(whole), "--allow-incomplete"]) == 2
    assert "--allow-incomplete apply only with --parts" in capsys.readouterr().err


# ---------------------------------------------------------------- named groups


def test_named_groups_parse_sorted_and_unique():
    named = sweep.NamedGroups.parse(f" {VACO},{PPO}, {VACO},")
    assert named == sweep.NamedGroups((PPO, VACO)) and str(named) == f"{PPO},{VACO}"
    assert named.label == f"groups {PPO}, {VACO}"
    assert sweep.parse_part(str(named)) == named and sweep.parse_part("1/2") == sweep.Part(1, 2)
    experiment = sweep.parse_experiment(TOY2)
    assert [g.name for g in sweep.NamedGroups((VACO,)).groups(experiment)] == [VACO]
    assert sweep.NamedGroups((VACO, PPO)).groups(experiment) == experiment.groups


@pytest.mark.parametrize("groups, message", [
    (" , ", "--groups must name at least one group (comma-separated, as --plan prints them)"),
    (f"{PPO},toy_reach-spo-e2m2", f"--groups: experiment 'toy' has no group(s) "
                                  f"['toy_reach-spo-e2m2']; its groups are ['{PPO}', '{VACO}']"),
])
def test_cli_refuses_bad_group_names_in_one_line(toy2_file, tmp_path, capsys, no_compilation,
                                                 groups, message):
    out = tmp_path / "sweep"
    for plan in ([], ["--plan"]):
        assert cli.main(["sweep", str(toy2_file), "--groups", groups, "--out", str(out),
                         "--no-progress", *plan]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert cli.main(["sweep", str(toy2_file), "--groups", VACO, "--part", "1/2", "--out",
                     str(out)]) == 2
    assert "give --part or --groups, not both" in capsys.readouterr().err
    assert not out.exists()


def test_named_groups_plan_and_resume(toy2_file, tmp_path, capsys, monkeypatch):
    assert cli.main(["sweep", str(toy2_file), "--plan", "--groups", VACO,
                     "--max-runs-per-batch", "3"]) == 0
    assert f"toy, groups {VACO}: 1 of 2 groups, 3 batches" in capsys.readouterr().out
    out = tmp_path / "named"
    sweep.start_sweep(sweep.load_experiment(toy2_file), out, part=sweep.NamedGroups((VACO,)),
                      max_runs_per_batch=BATCH)
    assert json.loads((out / "sweep.json").read_text())["part"] == VACO
    assert sweep.load_sweep_to_resume(out).part == sweep.NamedGroups((VACO,))

    def refuse(*args, **kwargs):
        raise AssertionError("ran before refusing")
    monkeypatch.setattr(execute, "run_sweep", refuse)
    assert cli.main(["sweep", "--out", str(out), "--resume", "--groups", PPO]) == 2
    assert f"groups {PPO} disagrees with the sweep saved in {str(out)!r} (groups {VACO})" \
        in capsys.readouterr().err


@pytest.fixture(scope="module")
def vaco_again(parts, toy2_file, tmp_path_factory):
    """The vaco group run again on its own with `--groups`, as if part 2/2 had been lost."""
    folder = tmp_path_factory.mktemp("named") / "vaco"
    assert cli.main(["sweep", str(toy2_file), "--groups", VACO, "--out", str(folder),
                     "--max-runs-per-batch", str(BATCH), "--no-progress"]) == 0
    return folder


def test_named_groups_merge_like_a_part(parts, vaco_again, tmp_path):
    whole, (part1, _) = parts
    assert summary(vaco_again)["title"].endswith(f"(groups {VACO})")
    out = tmp_path / "merged"
    assert cli.main(["report", str(out), "--parts", str(part1), str(vaco_again)]) == 0
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)
    assert json.loads((out / "parts.json").read_text())["parts"][1] == {
        "folder": str(vaco_again.resolve()), "part": VACO, "groups": [VACO]}


def test_an_incomplete_merge_is_completed_without_its_part_folders(parts, vaco_again, tmp_path):
    whole, (part1, _) = parts
    lost = tmp_path / "part1"
    shutil.copytree(part1, lost)
    interim = tmp_path / "interim"
    assert cli.main(["report", str(interim), "--parts", str(lost), "--allow-incomplete"]) == 0
    shutil.rmtree(lost)  # the part folder, checkpoints and all, is gone; its merged report stays
    out = tmp_path / "merged"
    assert cli.main(["report", str(out), "--parts", str(vaco_again), str(interim)]) == 0
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)
    assert summary(out) == summary(whole)
    record = json.loads((out / "parts.json").read_text())
    assert record["complete"] and record["parts"][1] == {
        "folder": str(interim.resolve()), "part": None, "groups": [PPO],
        "merged_from": {"parts": [{"folder": str(lost.resolve()), "part": "1/2", "groups": [PPO]}],
                        "missing_groups": [VACO], "unfinished_groups": {}}}

    assert cli.main(["report", str(tmp_path / "again"), "--parts", str(interim), str(part1)]) == 2
    assert cli.main(["report", str(tmp_path / "twice"), "--parts", str(out), str(vaco_again)]) == 2


def test_a_merged_report_holds_only_the_groups_it_finished(parts, tmp_path, capsys):
    whole, (part1, part2) = parts
    unfinished = tmp_path / "part2"
    shutil.copytree(part2, unfinished)
    interrupt_halfway(unfinished, f"{VACO}-1")
    interim = tmp_path / "interim"
    assert cli.main(["report", str(interim), "--parts", str(part1), str(unfinished),
                     "--allow-incomplete"]) == 0
    assert set(runs(interim)["algo"]) == {"ppo", "vaco"}  # the finished vaco batch is reported
    assert cli.main(["report", str(tmp_path / "out"), "--parts", str(interim)]) == 2
    assert f"no part holds group(s) ['{VACO}']" in capsys.readouterr().err
    out = tmp_path / "completed"
    assert cli.main(["report", str(out), "--parts", str(interim), str(part2)]) == 0
    pd.testing.assert_frame_equal(runs(out), runs(whole), check_exact=True)


def test_a_merged_report_of_another_version_is_refused(parts, vaco_again, tmp_path, capsys):
    _, (part1, _) = parts
    interim = tmp_path / "interim"
    assert cli.main(["report", str(interim), "--parts", str(part1), "--allow-incomplete"]) == 0
    runs(interim).drop(columns="entropy").to_parquet(interim / "runs.parquet")
    out = tmp_path / "merged"
    assert cli.main(["report", str(out), "--parts", str(interim), str(vaco_again)]) == 2
    err = capsys.readouterr().err
    assert f"the runs table of {str(interim)!r} has columns" in err
    assert "merge parts written by one version of vaco_jax" in err and not out.exists()


def test_a_setting_column_only_the_grown_parts_hold_is_added_empty_to_the_others(monkeypatch):
    """A method added with a grid of its own (`hp_tv_delta`) leaves the parts run before it
    without that column: they merge with it empty, and any other difference is refused."""
    from types import SimpleNamespace

    from vaco_jax.experiment import merge

    class Folder(SimpleNamespace):
        def table(self, group):
            return self.rows

    monkeypatch.setattr(merge, "_SweepFolder", Folder)
    old = Folder(folder=Path("old"), rows=pd.DataFrame(
        {"run_id": ["a"], "algo": ["ppo"], "hp_lr": [1.0], "score": [0.5]}))
    grown = Folder(folder=Path("grown"), rows=pd.DataFrame(
        {"run_id": ["b"], "algo": ["vaco"], "hp_lr": [1.0], "hp_tv_delta": [0.1],
         "score": [0.7]}))
    experiment = SimpleNamespace(groups=[SimpleNamespace(name="g1"), SimpleNamespace(name="g2")])
    table = merge._merged_table(experiment, {"g1": old, "g2": grown})
    assert list(table.columns) == ["run_id", "algo", "hp_lr", "hp_tv_delta", "score"]
    assert table["hp_tv_delta"].isna().tolist() == [True, False]
    # A merged report holding the wider table sets the columns as well as a sweep folder.
    assert merge._merged_table(experiment, {"g1": old, "g2": SimpleNamespace(
        folder=Path("merged"), table=lambda group: grown.rows)}).equals(table)
    # Old runs of a method the grown part sweeps the column for ran at a value the merge
    # cannot name: refused.
    old_vaco = Folder(folder=Path("old_vaco"), rows=old.rows.assign(algo="vaco"))
    with pytest.raises(ValueError, match=r"the runs of \['vaco'\] in 'old_vaco' have no "
                                         r"hp_tv_delta, which other parts set for them"):
        merge._merged_table(experiment, {"g1": old_vaco, "g2": grown})
    other = Folder(folder=Path("other"), rows=old.rows.rename(columns={"score": "accuracy"}))
    with pytest.raises(ValueError, match="the runs table of 'other' has columns"):
        merge._merged_table(experiment, {"g1": other, "g2": grown})
