"""The committed studies a board is built from: found in a results folder, read, and checked.

A study is a folder holding a report's ``summary.json`` beside its ``runs.parquet`` and the
``experiment.toml`` it ran (a sweep folder, or a folder of committed results). Every number the
board shows comes from ``summary.json``, which the report layer computed from ``runs.parquet``
and which is read through its typed API (``report.summary``); the board recomputes nothing, so
that it and the study's ``report.md`` never disagree.

A results folder is untrusted input: the search never follows a link, a link is never read,
and a study whose files are missing, damaged or not what a report writes is skipped with one
line naming it (``Skipped``), never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vaco_jax.infra import records
from vaco_jax.report import summary as report_summary
from vaco_jax.report.runs_table import RUNS_FILE
from vaco_jax.report.summary import KeptGain, Summary, Variant

SUMMARY_FILE = "summary.json"
EXPERIMENT_FILE = "experiment.toml"
PARTS_FILE = "parts.json"
"""A merged report's record of the parts it merged (``vaco-jax report --parts``): whether
every group of its experiment has run."""
REPORT_FILE = "report.md"
README_FILE = "README.md"
"""What the study's authors wrote of it (its verdict, what it does not settle), where it has one."""
MOST_TEXT_BYTES = 4 * 2**20
"""A README or report the board renders is at most this large."""
COPIED_FILES = (REPORT_FILE, SUMMARY_FILE, RUNS_FILE, EXPERIMENT_FILE)
"""The files of a study the board carries, so that its links work wherever the board is moved."""
FIGURE_PATTERN = re.compile(r"fig_[A-Za-z0-9_]+\.png")
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A study's folder names: they become file names and links of the board."""
MOST_BYTES = 256 * 2**20
"""A larger file in a results folder is not a study's (and would fill the board)."""


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A folder that looked like a study and was left out, and why."""

    name: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Study:
    """One study as the board shows it.

    ``name`` is its folder relative to the results folder (``tokens_staleness_cpu`` or
    ``tokens_staleness_cpu/two_learning_rates``) and ``slug`` the same as one file name;
    ``summary`` is its ``summary.json`` (one an earlier version wrote read as today's);
    ``experiment`` its ``experiment.toml`` (the settings the runs table does not hold, such as
    a learning rate set once for every run); ``figures`` the names of its committed PNG
    figures.
    """

    name: str
    folder: Path
    summary: Summary
    experiment: Mapping[str, Any]
    figures: tuple[str, ...]
    incomplete: str | None = None  # what has not run, for a merge of part of the experiment
    files: tuple[str, ...] = COPIED_FILES  # the study's files the board carries and links
    tag: str | None = None  # its tag and verdict (`tags.py`), where the tags file has it
    verdict: str | None = None
    report: str = ""  # its report.md and README.md, as Markdown
    readme: str | None = None

    @property
    def tag_name(self) -> str:
        """The name the study tags file knows it by: its top folder."""
        return self.name.split("/")[0]

    @property
    def slug(self) -> str:
        return self.name.replace("/", "--")

    @property
    def testbed(self) -> str:
        return self.experiment.get("testbed", "control")

    @property
    def title(self) -> str:
        return self.summary.title

    @property
    def tasks(self) -> list[str]:
        return list(self.summary.run.tasks)

    @property
    def lags(self) -> list[float]:
        return [float(lag) for lag in self.summary.run.lags]

    @property
    def kept_gain(self) -> KeptGain:
        return self.summary.kept_gain

    def devices(self) -> str:
        """The devices its report's process ran on, as its provenance records them."""
        provenance = self.summary.provenance or {}
        devices = provenance.get("devices") or {}
        if not devices:
            return "not recorded"
        return (f"{devices.get('count', '?')} x {devices.get('kind', '?')} "
                f"({provenance.get('backend', '?')} backend)")

    def packages(self) -> str:
        """The package versions and Python its report's process ran, as its provenance
        records them."""
        provenance = self.summary.provenance or {}
        packages = provenance.get("packages") or {}
        named = [f"{name} {version}" for name, version in sorted(packages.items())]
        if provenance.get("python"):
            named.append(f"Python {provenance['python']}")
        return ", ".join(named) or "not recorded"

    @property
    def modified(self) -> bool:
        """Whether its report was written from a checkout with uncommitted changes."""
        return bool(((self.summary.provenance or {}).get("code") or {}).get("modified"))

    def commit(self) -> str:
        """The commit its report was written from, marked where the checkout was modified."""
        code = (self.summary.provenance or {}).get("code") or {}
        if not code.get("commit"):
            return "not recorded"
        return str(code["commit"])[:10] + (" (modified)" if self.modified else "")

    def learning_rates(self, variant: Variant, task: str | None = None) -> str:
        """The learning rate a variant's runs ran at: in a study that tuned it (`[tune]`), the
        value each task's tuning chose (on `task`, or on every task, named); else its own where
        the study swept it, else the one the experiment sets for its algorithm or for every
        run, else the testbed's default (which the fidelity card states)."""
        tuned = self._tuned_rates(variant)
        if tuned:
            if task is not None:
                return (f"{', '.join(f'{v:g}' for v in tuned[task])}, tuned" if task in tuned
                        else "not tuned on this task")
            return "tuned: " + "; ".join(f"{', '.join(f'{v:g}' for v in values)} on {name}"
                                         for name, values in tuned.items())
        for assignment in variant.hyperparameters.split(","):
            name, _, value = assignment.partition("=")
            if name == "learning_rate":
                return value
        algo_hparams = (self.experiment.get("overrides", {}).get(variant.algo, {})
                        .get("hparams", {}))
        for hparams in (algo_hparams, self.experiment.get("hparams", {})):
            if "learning_rate" in hparams:
                values = hparams["learning_rate"]
                return ", ".join(f"{float(v):g}" for v in
                                 (values if isinstance(values, list) else [values]))
        return "testbed default"

    def _tuned_rates(self, variant: Variant) -> dict[str, list[float]]:
        """Task -> the learning rates the study's tuning chose for `variant` there (its
        tuning groups: `tune-TASK-ALGO-...-eEmM`, at the point of its swept values); empty
        where the study tuned none."""
        tuning = self.summary.tuning
        if tuning is None or tuning.hparam != "learning_rate":
            return {}
        swept = dict(a.partition("=")[::2] for a in variant.hyperparameters.split(",") if a)
        tuned: dict[str, list[float]] = {}
        for task in self.tasks:
            for choice in tuning.choices:
                ours = (choice.group.startswith(f"tune-{task}-{variant.algo}-")
                        and choice.group.endswith(f"-e{variant.epochs}m{variant.minibatches}")
                        and all(name in swept
                                and math.isclose(float(swept[name]), value, rel_tol=1e-5)
                                for name, value in choice.point.items()))
                if ours and choice.chosen not in tuned.setdefault(task, []):
                    tuned[task].append(choice.chosen)
        return {task: values for task, values in tuned.items() if values}


def regular_file(path: Path) -> bool:
    """Whether ``path`` is a plain file of a readable size (not a link, not a folder)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MOST_BYTES


def _study_folders(results: Path) -> Iterator[Path]:
    """The folders under ``results`` holding a ``summary.json``, in name order; links to
    folders are not entered (``os.walk`` lists them but does not descend)."""
    for folder, subfolders, files in os.walk(results, followlinks=False):
        subfolders.sort()
        if SUMMARY_FILE in files:
            yield Path(folder)


def read_summary(path: Path) -> Summary:
    """The report's summary (``report.summary.load``); ``ValueError`` naming the file where
    it is not one a report writes."""
    if not regular_file(path):
        raise ValueError(f"{path.name} is not a plain file")
    try:
        return report_summary.load(path)
    except (ValueError, TypeError, AttributeError) as error:
        # The typed reading refuses damaged JSON with whatever its parts raise.
        raise ValueError(f"{SUMMARY_FILE}: {error}") from None


def read_markdown(path: Path) -> str:
    """A Markdown file of the study: a plain file of at most `MOST_TEXT_BYTES`, UTF-8."""
    if not regular_file(path) or path.stat().st_size > MOST_TEXT_BYTES:
        raise ValueError(f"{path.name} is not a plain file of at most {MOST_TEXT_BYTES} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text") from None


def _read_experiment(path: Path) -> dict[str, Any]:
    if not regular_file(path):
        raise ValueError(f"{path.name} is missing or not a plain file")
    return dict(records.load_toml(path, records.EXPERIMENT).table())


def study_incomplete(folder: Path) -> str | None:
    """What a merged report's ``parts.json`` in ``folder`` says has not run; None for a complete
    merge or a study that is no merge (it has no such file)."""
    path = folder / PARTS_FILE
    if not path.exists() and not path.is_symlink():
        return None
    if not regular_file(path):
        raise ValueError(f"{path.name} is not a plain file")
    saved = records.load_json(path, records.PARTS)
    if saved["complete"].boolean():
        return None
    missing = len(saved["missing_groups"].items())
    unfinished = sum(len(names.items()) for _, names in saved["unfinished_groups"].entries())
    return (f"{missing + unfinished} of its experiment's groups have not run or not finished "
            f"(its {PARTS_FILE} names them)")


def read_study(results: Path, folder: Path) -> Study:
    """The study in ``folder``; ``ValueError`` (saying why) where it cannot be shown."""
    name = folder.relative_to(results).as_posix()
    if not all(SAFE_NAME.fullmatch(part) for part in name.split("/")):
        raise ValueError("its folder name is not a plain name (letters, digits, _ . -)")
    for file in (RUNS_FILE, REPORT_FILE):
        if not regular_file(folder / file):
            raise ValueError(f"{file} is missing or not a plain file")
    readme = folder / README_FILE
    study = Study(name=name, folder=folder, summary=read_summary(folder / SUMMARY_FILE),
                  experiment=_read_experiment(folder / EXPERIMENT_FILE),
                  figures=tuple(sorted(p.name for p in folder.iterdir()
                                       if FIGURE_PATTERN.fullmatch(p.name)
                                       and regular_file(p))),
                  incomplete=study_incomplete(folder),
                  files=COPIED_FILES + ((PARTS_FILE,) if regular_file(folder / PARTS_FILE)
                                        else ()),
                  report=read_markdown(folder / REPORT_FILE),
                  readme=(read_markdown(readme) if readme.exists() or readme.is_symlink()
                          else None))
    _check_readable(study)
    return study


def _check_readable(study: Study) -> None:
    """Reads every field the pages read, so that a damaged study fails here, not mid-page."""
    for read in (lambda: study.lags, study.devices, study.commit, study.packages):
        read()
    variants = study.summary.run.variants
    # Each becomes a file name of the board: a figure's, a method page's.
    for kind, names in (("testbed", [study.testbed]), ("task", study.tasks),
                        ("algorithm", [variant.algo for variant in variants])):
        for name in names:
            if not (isinstance(name, str) and SAFE_NAME.fullmatch(name)):
                raise ValueError(f"its {kind} name {name!r} is not a plain name "
                                 f"(letters, digits, _ . -)")
    for variant in variants:
        study.learning_rates(variant)


def read_studies(results: str | os.PathLike[str]) -> tuple[list[Study], list[Skipped]]:
    """Every study under ``results`` and those skipped, each in name order."""
    root = Path(results)
    if not root.is_dir() or root.is_symlink():
        raise ValueError(f"results folder {str(root)!r} is not a folder; pass --results DIR")
    studies, skipped = [], []
    for folder in _study_folders(root):
        try:
            studies.append(read_study(root, folder))
        except (ValueError, KeyError, TypeError, AttributeError, OSError, UnicodeDecodeError,
                RecursionError) as error:
            skipped.append(Skipped(folder.relative_to(root).as_posix(),
                                   f"{type(error).__name__}: {error}"))
    return studies, skipped
