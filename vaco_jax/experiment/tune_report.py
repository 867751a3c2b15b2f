"""The report of an experiment's tuning: per method, every grid value's synchronous score with
its interval, and the value the rule chose.

It is added to the report that `report.write_report` wrote of the experiment's own runs:
`summary.json` gains `tuning`, `report.md` a section, and `runs.parquet` the tuning runs' rows,
so that a merged report folder holds them when it merges as a part.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd

from vaco_jax import report
from vaco_jax.report import markdown
from vaco_jax.report.runs_table import assignments
from vaco_jax.report.rule_records import Tuning, TuningCandidate, TuningChoice
from vaco_jax.report.summary import dumps, Summary
from vaco_jax.experiment import tune, tune_spec
from vaco_jax.experiment.spec import Experiment
from vaco_jax.infra import io


def _method(experiment: Experiment, choice: tune.Choice) -> str:
    """The tuning group (task, algorithm, epochs x minibatches) with its other grids' point."""
    name = choice.group.removeprefix(tune_spec.GROUP_PREFIX)
    return name + (f"[{assignments(list(choice.point), list(choice.point.values()))}]"
                   if choice.point else "")


def _defined(x: float) -> float | None:
    return None if x != x else x  # NaN: JSON has none


def summary(experiment: Experiment, made: list[tune.Choice]) -> Tuning:
    """`summary.json`'s `tuning`: the rule, the seeds and every choice."""
    rule = experiment.tune.rule
    extend = experiment.tune.extend
    return Tuning(
        hparam=experiment.tune.hparam, rule=rule.name, statistic=rule.statistic,
        seeds=tuple(experiment.tune.seeds), column=experiment.tune.column,
        extend=extend or None,
        choices=tuple(TuningChoice(
            method=_method(experiment, c), group=c.group, point=dict(c.point), chosen=c.chosen,
            candidates=tuple(TuningCandidate(value=k.value, iqm=_defined(k.iqm),
                                             low=_defined(k.low), high=_defined(k.high),
                                             runs=k.runs, in_cell=k.in_cell,
                                             saturated=k.saturated)
                            for k in sorted(c.candidates, key=lambda k: k.value)),
            extension=c.extension and c.extension.rsplit("-", 1)[1],
            extended=c.extended if extend else None)
            for c in made))


def add_tuning(experiment: Experiment, runs: pd.DataFrame, out_dir: str | os.PathLike,
               written: Summary) -> Summary:
    """Adds the tuning to the report `written` in `out_dir` (`runs`: the whole runs table,
    tuning rows included); returns the summary with `tuning`."""
    out = Path(out_dir)
    tuning = summary(experiment, tune.choices(experiment, runs, experiment.testbed.score))
    full = dataclasses.replace(written, tuning=tuning)
    io.write_table(out / report.RUNS_FILE, runs)
    io.write_text(out / "summary.json", dumps(full))
    io.write_text(out / "report.md", markdown.markdown(full))
    return full
