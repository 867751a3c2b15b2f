"""The experiments index (``experiments/INDEX.md``): every experiment file and committed study
in one table, from the study tags (``tags.py``) and each study's ``summary.json``: its testbed,
tag, whether its committed cell rule holds, how many runs it holds, and its one-line verdict.

Written by ``vaco-jax leaderboard --index experiments/INDEX.md``; a test holds the committed
file to what this module writes from the committed studies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from vaco_jax.infra import records
from vaco_jax.leaderboard.studies import (EXPERIMENT_FILE, SUMMARY_FILE, read_summary,
                                          regular_file, study_incomplete)
from vaco_jax.leaderboard.tags import TAGS, StudyTag
from vaco_jax.report.summary import Summary

HEADER = ("study", "testbed", "cell rule", "runs", "verdict")


def unindexed(experiments: Path, results: Path,
              tags: Mapping[str, StudyTag]) -> dict[str, list[str]]:
    """What the tags and the folders disagree on: experiment files and study folders without
    a tag, tags of neither, and study folders without their experiment file (but analyses)."""
    files = {p.stem for p in experiments.glob("*.toml")}
    studies = {p.name for p in results.iterdir() if p.is_dir() and not p.is_symlink()}
    return {"untagged": sorted((files | studies) - set(tags)),
            "tagged, but neither a file nor a study": sorted(set(tags) - files - studies),
            "a study without its experiment file": sorted(
                name for name in studies - files if tags.get(name) is None
                or tags[name].tag != "analysis")}


def _cell_rule(summary: Summary | None, ran: bool) -> str:
    if summary is None:
        return "-" if ran else "not run"
    verdict = summary.cell_rule
    if verdict is None:
        return "none committed"
    holding = [task for task in verdict.tasks if verdict.passing.get(task)]
    if not holding:
        return "fails on every task"
    return f"holds on {', '.join(holding)}" + (
        "" if len(holding) == len(verdict.tasks) else f" ({len(holding)} of "
                                                      f"{len(verdict.tasks)} tasks)")


def _summary(folder: Path) -> tuple[Summary | None, str | None]:
    """The study's summary (None where it has none), or why it cannot be read: a results
    folder is untrusted input, and a damaged study is a row saying so, as on the board."""
    if not regular_file(folder / SUMMARY_FILE):
        return None, None
    try:
        return read_summary(folder / SUMMARY_FILE), None
    except ValueError as error:
        return None, f"unreadable ({records.shown(error, 120)})"


def _testbed(experiment: Path) -> str:
    if not regular_file(experiment):
        return "-"
    try:
        testbed = records.load_toml(experiment, records.EXPERIMENT).get("testbed")
        return "control" if testbed is None else testbed.name()
    except ValueError as error:
        return f"unreadable ({records.shown(error, 80)})"


def index_markdown(experiments: Path, results: Path, tags: Mapping[str, StudyTag]) -> str:
    """The index's Markdown: a table per tag, in ``TAGS`` order, its studies by name."""
    lines = ["# Experiments index", "",
             "Every experiment file of this folder and every committed study in `results/`, by "
             "tag (`results/studies.toml`, which the leaderboard reads too): `main` studies "
             "compare methods under lag and the claims rest on them, `ablation` studies isolate one "
             "mechanism or setting, `calibration` studies choose cells or rates on the baseline "
             "alone, `superseded` ones were replaced by a later study, `example` ones "
             "demonstrate the commands, an `analysis` is a report over other studies' runs. "
             "The cell rule column is the study's own committed `[cell_rule]`, judged on its "
             "runs; runs counts the runs of its report (tuning runs apart). Written by "
             "`vaco-jax leaderboard --index experiments/INDEX.md`; do not edit by hand.", ""]
    for tag in TAGS:
        names = sorted(name for name, entry in tags.items() if entry.tag == tag)
        if not names:
            continue
        lines += [f"## {tag}", "", "| " + " | ".join(HEADER) + " |",
                  "|" + "---|" * len(HEADER)]
        for name in names:
            experiment = experiments / f"{name}.toml"
            folder = results / name
            summary, damaged = _summary(folder)
            runs = "-" if summary is None else f"{summary.run.num_runs:,}"
            try:
                incomplete = None if damaged else study_incomplete(folder)
            except ValueError as error:  # a damaged parts.json: the row says so
                damaged, incomplete = f"unreadable ({records.shown(error, 120)})", None
            there = Path(os.path.relpath(folder, experiments)).as_posix()
            study = (f"[{name}]({name}.toml)" if regular_file(experiment) else name) + (
                f" ([results]({there}/))" if folder.is_dir() else "")
            if regular_file(folder / EXPERIMENT_FILE) and not regular_file(experiment):
                study += " (its file is in its results folder)"
            lines.append("| " + " | ".join([
                study, _testbed(experiment if regular_file(experiment)
                                else folder / EXPERIMENT_FILE),
                damaged or _cell_rule(summary, folder.is_dir()),
                runs + (" (incomplete)" if incomplete else ""),
                tags[name].verdict.replace("|", "\\|")]) + " |")
        lines.append("")
    return "\n".join(lines)
