"""`vaco-jax sweep` and `vaco-jax report`: experiments, their plans, parts and reports, and the
figures of a single run."""

from __future__ import annotations

from pathlib import Path

from vaco_jax.cli.common import (add_log, add_memory_budget, add_overwrite_flags,
                                  check_keep_flags, folder, plain)
from vaco_jax.experiment import (NamedGroups, Part, load_experiment, load_sweep,
                                 load_sweep_to_resume, make_plan, merge_parts, plan_text, sweep,
                                 write_sweep_report)
from vaco_jax.report.rule_records import CellRuleVerdict
from vaco_jax.report.summary import Summary
from vaco_jax.run import distributed
from vaco_jax.infra.run_folder import CONFIG_FILE
from vaco_jax.run.trackers import Trackers


def add_parsers(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a named experiment: every group of runs in one compiled program")
    p.add_argument("experiment", nargs="?", default=None,
                   help="experiment TOML file, e.g. experiments/quick.toml (optional with --resume)")
    p.add_argument("--out", type=folder, default=None,
                   help="sweep folder (required unless --plan)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted sweep in --out, skipping finished batches")
    p.add_argument("--replan", action="store_true",
                   help="with --resume: plan the sweep again from its experiment.toml (its "
                        "sweep.json lost or damaged), each group's batch size read from its batch "
                        "folders, so finished batches are kept")
    p.add_argument("--part", metavar="K/N", default=None,
                   help="run only part K of N (1-based): the experiment's groups split into N "
                        "parts of about equal environment steps, one per machine; merge the "
                        "part folders with `vaco-jax report OUT --parts DIR ...`; auto: the "
                        "task of a SLURM job array (SLURM_ARRAY_TASK_ID of "
                        "SLURM_ARRAY_TASK_COUNT)")
    p.add_argument("--groups", metavar="GROUP[,GROUP...]", default=None,
                   help="run only these groups (names as --plan prints them), a part chosen by "
                        "hand, e.g. to run again the groups of a lost part folder; merged like "
                        "a part")
    p.add_argument("--plan", action="store_true",
                   help="print the groups, batches, runs, environment steps and estimated time, "
                        "then exit: nothing is written or trained and no training program is "
                        "compiled (the memory estimate only traces one run's shapes per group)")
    p.add_argument("--steps-per-second", type=float, default=None, metavar="R",
                   help="with --plan: environment steps per second of one batch's runs "
                        "together (measured with `python benchmarks/run.py --only seeds`); "
                        "the estimate is executed steps / R")
    add_overwrite_flags(p, "an existing sweep folder, its batches too")
    p.add_argument("--max-runs-per-batch", type=int, default=None,
                   help="most runs per compiled batch (rounded down to a multiple of the device "
                        "count); default: as many as fit the memory budget")
    add_memory_budget(p)
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars (a warm start's messages still show)")
    add_log(p, "run", "OUT/tensorboard/RUN_ID")
    distributed.add_flags(p)
    r = subparsers.add_parser("report", help="rebuild a sweep's runs table and rewrite its report, "
                                             "merge the folders of a sweep's parts into one, or "
                                             "draw a single run's figures")
    r.add_argument("out", type=folder, metavar="DIR",
                   help="sweep folder (with --parts: the merged report's), or the folder of one "
                        "run (`vaco-jax train`, `vaco-jax tokens`): its per-seed learning curves "
                        "and staleness diagnostics, as PNG files in it")
    r.add_argument("--parts", type=folder, nargs="+", metavar="PART_DIR", default=None,
                   help="merge these part folders (`vaco-jax sweep --part K/N`) of one "
                        "experiment into one report in DIR")
    r.add_argument("--experiment", metavar="FILE", default=None,
                   help="with --parts: the experiment of the merged report, when it grew after "
                        "some parts ran (a task or a method added): each part's groups must be "
                        "groups of FILE, run alike")
    r.add_argument("--allow-incomplete", action="store_true",
                   help="with --parts: report even if groups are missing or unfinished (the "
                        "report's title says so)")
    r.add_argument("--predictors", type=folder, nargs="+", metavar="STUDY_DIR", default=None,
                   help="write into DIR whether the ESS and the gradient norm, read over the "
                        "first quarter of a run, predict its failure: ROC curves over the runs "
                        "of these study folders pooled (their tuning runs left out)")
    add_overwrite_flags(r, "the merged report or the predictor analysis in an existing DIR",
                        needs="--parts or --predictors")


def run_sweep(args) -> int:
    if not args.resume and args.experiment is None:
        raise ValueError("the experiment file is required unless --resume is given")
    if args.out is None and (args.resume or not args.plan):
        raise ValueError("--out (the sweep folder) is required, unless --plan plans a new sweep")
    if args.steps_per_second is not None and (not args.plan or args.steps_per_second <= 0):
        raise ValueError(f"--steps-per-second must be a positive rate given with --plan, got "
                         f"{args.steps_per_second}")
    check_keep_flags(args)
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the sweep in --out and --overwrite replaces it: give "
                         "one of them")
    if args.replan and (args.plan or not args.resume):
        raise ValueError("--replan applies only with --resume, and not with --plan")
    if args.plan and args.log:
        raise ValueError("--log applies to a sweep that runs, not with --plan")
    if args.part is not None and args.groups is not None:
        raise ValueError("give --part or --groups, not both")
    part = (Part.parse(args.part) if args.part is not None else
            NamedGroups.parse(args.groups) if args.groups is not None else None)
    if args.max_runs_per_batch is not None and args.max_runs_per_batch <= 0:
        raise ValueError(f"--max-runs-per-batch must be a positive integer, got "
                         f"{args.max_runs_per_batch}")
    experiment = load_experiment(args.experiment) if args.experiment else None
    if part is not None and experiment is not None:
        part.groups(experiment)  # refuses a part or group the experiment does not have
    memory_budget = None if args.memory_budget is None else int(args.memory_budget * 2**30)
    if args.plan:
        plan = (load_sweep_to_resume(args.out, experiment, part) if args.resume else
                make_plan(experiment, part=part, max_runs_per_batch=args.max_runs_per_batch,
                          memory_budget=memory_budget))
        print(plan_text(plan, args.steps_per_second))
        return 0
    # The report is written after the runs, hours later for a long sweep: its code is loaded
    # now, so that an edit of the checkout meanwhile cannot mix versions in one sweep.
    import vaco_jax.report.write  # noqa: F401
    with Trackers(args.log, args.out) as trackers:
        summary = sweep(
            args.out, experiment, resume=args.resume, replan=args.replan,
            overwrite=args.overwrite, keep=args.keep, part=part,
            max_runs_per_batch=args.max_runs_per_batch, memory_budget=memory_budget,
            progress=not args.no_progress, trackers=trackers)
    _print_scores(summary, args.out)
    return 0


def run_report(args) -> int:
    if args.parts is not None and args.predictors is not None:
        raise ValueError("--parts and --predictors write different reports; give one")
    if args.predictors is not None:
        if args.allow_incomplete or args.experiment:
            raise ValueError("--experiment and --allow-incomplete apply only with --parts")
        check_keep_flags(args)
        # Imported here, as matplotlib is, only by the commands that draw.
        from vaco_jax.experiment.predictor_study import write_predictors
        analysis = write_predictors(args.predictors, args.out, overwrite=args.overwrite,
                                    keep=args.keep)
        _print_predictors(analysis, args.out)
        return 0
    if args.parts is not None:
        check_keep_flags(args)
        experiment = load_experiment(args.experiment) if args.experiment else None
        summary = merge_parts(args.parts, args.out, allow_incomplete=args.allow_incomplete,
                              overwrite=args.overwrite, keep=args.keep, experiment=experiment)
    elif args.allow_incomplete or args.overwrite or args.keep or args.experiment:
        raise ValueError("--experiment and --allow-incomplete apply only with --parts, "
                         "--overwrite and --keep with --parts or --predictors")
    elif (Path(args.out) / CONFIG_FILE).is_file():  # a run's folder, not a sweep's
        # Imported here, as matplotlib is, only by the commands that draw.
        from vaco_jax.report.run_figures import write_run_figures
        print(f"figures of the run in {plain(args.out)}:")
        for path, shows in write_run_figures(args.out).items():
            print(f"  {plain(path)}: {shows}")
        return 0
    else:
        summary = write_sweep_report(load_sweep(args.out), args.out)
    _print_scores(summary, args.out)
    return 0


def _print_predictors(analysis: dict, out: str) -> None:
    """The areas under the ROC, a line per outcome, population and predictor."""
    print(f"failure predictors over {sum(analysis['studies'].values())} runs, written to "
          f"{plain(out)}:")
    for record in analysis["curves"]:
        area = "n/a (one class empty)" if record["auc"] is None else (
            f"{record['auc']:.2f} [{record['auc_ci'][0]:.2f}, {record['auc_ci'][1]:.2f}]")
        print(f"  {record['outcome']}, {record['population']} ({record['positives']} of "
              f"{record['runs']}): {record['predictor']} area {area}")


def _print_scores(summary: Summary, out: str) -> None:
    """The report's final-score table: IQM normalised score per variant and lag."""
    print(f"\n{plain(summary.title)}: {summary.run.num_runs} runs "
          f"({summary.run.num_diverged} diverged)")
    for cell in summary.cells:
        iqm, auc = cell.iqm, cell.auc_iqm
        print(f"  {cell.variant:<32} lag {cell.lag:<5g} IQM score {iqm.point:6.3f} "
              f"[{iqm.low:.3f}, {iqm.high:.3f}]  AUC IQM {auc.point:6.3f}")
    tuning = summary.tuning
    for choice in tuning.choices if tuning else ():
        grid = ", ".join(f"{c.value:g}" for c in choice.candidates)
        edge = f"; the grid's {choice.grid_edge}" if choice.grid_edge else ""
        extended = f"; extended {choice.extension}" if choice.extended else ""
        saturated = "; saturates the task" if choice.saturated else ""
        print(f"  {choice.method:<32} {tuning.hparam} {choice.chosen:g} "
              f"({tuning.rule}, of {grid}{edge}{extended}{saturated})")
    if summary.cell_rule is not None:
        print(_cell_rule_text(summary.cell_rule))
    out = plain(out)
    print(f"report: {out}/report.md (tables in {out}/summary.json, runs in {out}/runs.parquet)")
    print("leaderboard: vaco-jax leaderboard --out board (every study committed in "
          "experiments/results, this one once it is there; then open board/index.html)")


def _cell_rule_text(verdict: CellRuleVerdict) -> str:
    """The cell rule's verdict, one line per task and one for every task."""
    lines = [f"cell rule ({verdict.rule.baseline}'s synchronous cells, report.md's \"Cell "
             f"rule\" for the numbers):"]
    for task in verdict.tasks:
        failing = [f"{c.variant} ({c.failures()})" for c in verdict.cells
                   if c.task == task and not c.passed]
        words = ([f"passes: {', '.join(verdict.passing[task])}"] if verdict.passing[task] else []
                 ) + ([f"fails: {'; '.join(failing)}"] if failing else [])
        lines.append(f"  {task:<32} {'; '.join(words) or 'no synchronous run'}")
    lines.append(f"  {'on every task':<32} {', '.join(verdict.every_task) or 'no cell passes'}")
    return "\n".join(lines)
