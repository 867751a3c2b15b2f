"""The experiment layer: a declarative experiment expanded into compiled groups of vmapped runs,
run in batches into a sweep folder, and reported.

An experiment (a TOML file, see `experiments/README.md`) expands into *groups*, one per (task,
algorithm, lag model, epochs, minibatches): everything structural is fixed within a group, so a
group is one compiled program, and each combination of lag level x hyper-parameter grid point
x seed is one *run* of it (vmapped by the `Driver`). A sweep runs the groups, or one part of
them, batch by batch into a sweep folder, resumes an interrupted one, and writes the report of
its runs table; the part folders of several machines merge into the report of the whole.

Modules, in the order a sweep uses them:
- `spec`: parsing and validating an experiment file, before anything compiles;
- `parts`: the groups a sweep runs, the whole experiment or a `Part` or `NamedGroups`;
- `plan`: the split of each group's runs into equal batches that fit memory
  (`vaco_jax.run.memory` estimates it);
- `folder`: the sweep folder's layout, its saved plan, starting and resuming;
- `execute`: running the batches, each group's program compiled once (`sweep`);
- `results`: the runs table of the finished batches and the report;
- `tune` and `tune_report`: `[tune]`, each method's learning rate chosen on its synchronous
  runs before the study's cells run at it, and the report's table of that choice;
- `merge`: the report of an experiment from the folders of its parts;
- `compat`: experiment files as earlier versions wrote them, read as today's.
"""

from vaco_jax.experiment.execute import run_sweep, sweep
from vaco_jax.experiment.folder import (EXPERIMENT_FILE, RUNS_DIR, batch_dir, batch_finished,
                                        load_sweep, load_sweep_to_resume, start_sweep)
from vaco_jax.experiment.merge import foreign_groups, merge_parts
from vaco_jax.experiment.parts import NamedGroups, Part, Selection, parse_part, selected_groups
from vaco_jax.experiment.plan import (PLAN_FILE, Batch, Plan, batch_capacity, make_plan,
                                      plan_text, split_runs)
from vaco_jax.experiment.results import (batch_table, finished_batches_table, runs_table,
                                         unfinished_groups, write_experiment_report,
                                         write_sweep_report)
from vaco_jax.experiment.groups import Group, RunSpec, balanced_parts, group_steps
from vaco_jax.experiment.spec import (Experiment, load_experiment, parse_experiment,
                                      same_experiment)

__all__ = [
    "EXPERIMENT_FILE", "PLAN_FILE", "RUNS_DIR",
    "Batch", "Experiment", "Group", "NamedGroups", "Part", "Plan", "RunSpec", "Selection",
    "balanced_parts", "batch_capacity", "batch_dir", "batch_finished", "batch_table",
    "finished_batches_table", "foreign_groups", "group_steps", "load_experiment",
    "load_sweep", "load_sweep_to_resume", "make_plan", "merge_parts", "parse_experiment",
    "parse_part", "plan_text", "run_sweep", "runs_table", "same_experiment",
    "selected_groups", "split_runs", "start_sweep", "sweep", "unfinished_groups",
    "write_experiment_report", "write_sweep_report",
]
