"""A sweep folder's plan (`sweep.json`) and experiment (`experiment.toml`), and a merged
report's `parts.json`, are untrusted input: a plan whose batch names, run indices or sizes are
not those its experiment derives, parts naming groups their experiment lacks, or a record past
its bounds, is refused in one line (exit 2) by every command that reads it, and nothing outside
the folder written, nor inside the folder read, changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_configs import TINY_SWEEP
from folder_snapshots import contents, finished_sweep, refused, snapshot
from vaco_jax import cli
from vaco_jax.experiment import merge

@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 4-run sweep (one batch of one group)."""
    return finished_sweep(tmp_path_factory.mktemp("finished"),
                          TINY_SWEEP.replace("seeds = 1", "seeds = 4"))


@pytest.fixture
def place(tmp_path, finished) -> dict[str, Path]:
    """A sandbox: the sweep under test, and beside it `outside/merged`, a folder vaco_jax wrote
    (a copy of the sweep) that a forged batch name points at."""
    shutil.copytree(finished, tmp_path / "sweep", symlinks=True)
    shutil.copytree(finished, tmp_path / "outside" / "merged", symlinks=True)
    return {"root": tmp_path, "sweep": tmp_path / "sweep"}


def _forge(sweep: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = sweep / "sweep.json"
    plan = json.loads(path.read_text())
    change(plan)
    path.write_text(json.dumps(plan))


def _batch(plan: dict[str, Any]) -> dict[str, Any]:
    return plan["groups"][0]["batches"][0]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda plan: _batch(plan).__setitem__(key, value)


FORGERIES = {
    # The critical reproduction and its variants: a name leading out of the folder.
    "parent": (_set("name", "../../outside/merged"), "batches[0].name"),
    "absolute": (lambda plan: _batch(plan).__setitem__("name", plan["abs"]), "batches[0].name"),
    "new folder": (_set("name", "../../outside/new"), "batches[0].name"),
    "plain but not derived": (_set("name", "toy_reach-ppo-e4m4-7"), "batches[0].name"),
    "forged run index": (_set("runs", [0, 1, 2, 99]), "batches[0].runs"),
    "size 0": (_set("size", 0), "batches[0].size"),
    "size not a number": (_set("size", "4"), "batches[0].size"),
    "no batch": (lambda plan: plan["groups"][0].__setitem__("batches", []), "batches"),
    "group renamed": (lambda plan: plan["groups"][0].__setitem__("name", "../x"),
                      "groups[0].name"),
    "no device": (lambda plan: plan.__setitem__("num_devices", 0), "num_devices"),
}
COMMANDS = {"resume": lambda sweep: ["sweep", "--resume", "--out", str(sweep), "--no-progress"],
            "report": lambda sweep: ["report", str(sweep)]}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_plan_is_refused_in_one_line_and_nothing_changes(place, capsys, forgery,
                                                                  command):
    change, field = FORGERIES[forgery]
    absolute = str(place["root"] / "outside" / "merged")
    _forge(place["sweep"], lambda plan: (plan.__setitem__("abs", absolute), change(plan),
                                         plan.pop("abs")))
    before = snapshot(place["root"])
    line = refused(capsys, COMMANDS[command](place["sweep"]))
    assert "sweep.json" in line and field in line, line
    assert snapshot(place["root"]) == before


def test_a_number_json_cannot_hold_exactly_is_refused(place, capsys):
    path = place["sweep"] / "sweep.json"
    path.write_text(path.read_text().replace('"size": 4', '"size": 1e400'))
    before = snapshot(place["root"])
    line = refused(capsys, COMMANDS["resume"](place["sweep"]))
    assert "batches[0].size" in line and "integer" in line, line
    assert snapshot(place["root"]) == before


def test_a_key_written_twice_is_refused(place, capsys):
    path = place["sweep"] / "sweep.json"
    path.write_text(path.read_text().replace('"num_devices": 1', '"num_devices": 1, '
                                             '"num_devices": 1'))
    line = refused(capsys, COMMANDS["resume"](place["sweep"]))
    assert "sweep.json" in line and "twice" in line, line


@pytest.mark.parametrize("command", ["resume", "report", "parts"])
def test_an_experiment_nested_too_deep_is_refused_in_one_line(place, capsys, command):
    (place["sweep"] / "experiment.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    argv = (["report", str(place["root"] / "merged2"), "--parts", str(place["sweep"])]
            if command == "parts" else COMMANDS[command](place["sweep"]))
    before = snapshot(place["root"])
    line = refused(capsys, argv)
    assert "experiment.toml" in line and "nested deeper" in line, line
    # Folders compared by their entries (the refused output folder may be made and removed).
    assert contents(snapshot(place["root"]), set()) == contents(before, set())


HOSTILE_NAMES = st.sampled_from(["..", ".", "", "/", "/tmp", "../../outside/merged", "a/b",
                                 "toy_reach-ppo-e4m4-0/..", "\x1b[31m", "x\n", "\0"])
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=True), st.text(max_size=8),
                   st.lists(st.integers(-5, 10), max_size=6))


@settings(max_examples=25, deadline=None, database=None)
@given(name=st.one_of(HOSTILE_NAMES, st.text(max_size=12)), runs=VALUES, size=VALUES,
       devices=VALUES)
def test_no_generated_plan_reaches_outside(finished, tmp_path_factory, name, runs, size,
                                           devices):
    root = tmp_path_factory.mktemp("generated")
    shutil.copytree(finished, root / "sweep", symlinks=True)
    shutil.copytree(finished, root / "outside" / "merged", symlinks=True)

    def change(plan: dict[str, Any]) -> None:
        _batch(plan).update(name=name, runs=runs, size=size)
        plan["num_devices"] = devices
    _forge(root / "sweep", change)
    before = snapshot(root)
    code = cli.main(COMMANDS["resume"](root / "sweep"))
    assert code == 2  # no generated plan is the one the experiment derives
    assert snapshot(root) == before


# ---------------------------------------------------------------- a merged report's parts.json


@pytest.fixture(scope="module")
def merged(finished, tmp_path_factory) -> Path:
    """A merged report of the finished sweep (`report --parts`), itself a part to merge."""
    folder = tmp_path_factory.mktemp("merged") / "merged"
    assert cli.main(["report", str(folder), "--parts", str(finished)]) == 0
    return folder


PART_NAMES = st.one_of(HOSTILE_NAMES, st.text(max_size=12), VALUES,
                       st.just("toy_reach-ppo-e4m4"))


@settings(max_examples=25, deadline=None, database=None)
@given(groups=st.lists(PART_NAMES, max_size=3), unfinished=st.dictionaries(
    st.text(max_size=4), st.lists(PART_NAMES, max_size=2), max_size=2), experiment=PART_NAMES)
def test_no_generated_parts_record_reaches_outside(merged, tmp_path_factory, groups, unfinished,
                                                   experiment):
    root = tmp_path_factory.mktemp("parts")
    part = root / "part"
    shutil.copytree(merged, part, symlinks=True)
    saved = json.loads((part / "parts.json").read_text())
    saved["parts"][0]["groups"] = groups
    saved.update(unfinished_groups=unfinished, experiment=experiment)
    (part / "parts.json").write_text(json.dumps(saved))
    before = snapshot(root)
    code = cli.main(["report", str(root / "out"), "--parts", str(part)])
    assert code in (0, 2)  # merged, or refused as bad input: never a crash
    after = snapshot(root)
    # The part is read, never written; a record it could merge writes only the new report.
    assert {k: v for k, v in after.items() if k.startswith("part")} == {
        k: v for k, v in before.items() if k.startswith("part")}
    assert code == 0 or not (root / "out").exists() or not any((root / "out").iterdir())
    assert set(after) - set(before) <= {"", "out"} | {k for k in after if k.startswith("out/")}


def test_a_parts_record_naming_a_group_its_experiment_lacks_is_refused(merged, tmp_path,
                                                                       capsys):
    part = tmp_path / "part"
    shutil.copytree(merged, part, symlinks=True)
    saved = json.loads((part / "parts.json").read_text())
    saved["parts"][0]["groups"] = ["../../x"]
    (part / "parts.json").write_text(json.dumps(saved))
    line = refused(capsys, ["report", str(tmp_path / "out"), "--parts", str(part)])
    assert "parts.json" in line and "parts[0].groups[0]" in line and "not a group" in line, line


@pytest.mark.parametrize("study", sorted(p.parent.name for p in Path(__file__).resolve().parents[2]
                                         .glob("experiments/results/*/parts.json")))
def test_every_committed_merged_report_reads_as_a_part(study):
    """A merge of merged reports nests each earlier record (`control_long_lag`'s is 19 levels
    deep): the reader's bounds admit every record vaco_jax has written."""
    folder = Path(__file__).resolve().parents[2] / "experiments" / "results" / study
    assert merge._MergedReport(folder).groups
