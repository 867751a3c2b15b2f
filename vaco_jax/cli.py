"""Command line: `vaco-jax train | sweep | report | tokens`."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from vaco_jax.config import Config, HParams, TrainConfig
from vaco_jax.policy_buffer import LAG_MODELS


def parse_lag(text: str) -> tuple[str, float, tuple[float, ...]]:
    """`MODEL:PARAM`, e.g. `fixed:0` (synchronous), `uniform:3`, `geometric:0.5`, `bounded:4`;
    `empirical:P0,P1,...` gives the probabilities of lags 0, 1, ... (`lag` unused, 0).

    Returns `(lag_model, lag, lag_probabilities)`.
    """
    model, sep, param = text.partition(":")
    if not sep or model not in LAG_MODELS:
        raise argparse.ArgumentTypeError(
            f"--lag must be MODEL:PARAM with MODEL one of {', '.join(LAG_MODELS)} (e.g. fixed:0, "
            f"uniform:3, geometric:0.5, bounded:4, empirical:0.5,0.3,0.2), got {text!r}")
    try:
        if model == "empirical":
            return model, 0.0, tuple(float(p) for p in param.split(","))
        return model, float(param), ()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--lag parameter must be a number (a comma-separated list of probabilities for "
            f"empirical), got {param!r}") from None


def parse_hparam(text: str) -> tuple[str, float]:
    """`NAME=VALUE` for any hyper-parameter but `lag`, which `--lag MODEL:PARAM` sets."""
    name, sep, value = text.partition("=")
    names = [n for n in HParams.field_names() if n != "lag"]
    if name == "lag":
        raise argparse.ArgumentTypeError(
            "--hparam cannot set lag: set it with --lag MODEL:PARAM (e.g. --lag uniform:3)")
    if not sep or name not in names:
        raise argparse.ArgumentTypeError(
            f"--hparam must be NAME=VALUE with NAME one of {', '.join(names)}, got {text!r}")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hparam {name} needs a number, got {value!r}") from None


def _int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _add_train_parser(subparsers) -> None:
    defaults = TrainConfig()
    p = subparsers.add_parser("train", help="train one algorithm on one task over vmapped seeds",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--env", default=defaults.env, help="task name")
    p.add_argument("--backend", default=None, help="physics backend (default: the task's, mjx)")
    p.add_argument("--algo", default=defaults.algo, help="algorithm from the registry")
    p.add_argument("--lag", type=parse_lag, default=("fixed", 0.0, ()),
                   help="backward lag MODEL:PARAM; fixed:0 is synchronous")
    p.add_argument("--lag-warmup", default=defaults.lag_warmup,
                   help="lags beyond the versions pushed so far: clip (to the oldest version) or "
                        "redraw (from the lag model restricted to the existing versions)")
    p.add_argument("--total-steps", type=int, default=defaults.total_steps,
                   help="environment steps per run")
    p.add_argument("--num-envs", type=int, default=defaults.num_envs)
    p.add_argument("--rollout-length", type=int, default=defaults.rollout_length)
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--minibatches", type=int, default=defaults.minibatches)
    p.add_argument("--buffer-capacity", type=int, default=defaults.buffer_capacity,
                   help="policy buffer size K")
    p.add_argument("--episode-length", type=int, default=defaults.episode_length)
    p.add_argument("--eval-every", type=int, default=defaults.eval_every,
                   help="updates between evaluations")
    p.add_argument("--num-eval-envs", type=int, default=defaults.num_eval_envs)
    p.add_argument("--actor-hidden", type=_int_tuple, default=defaults.actor_hidden)
    p.add_argument("--critic-hidden", type=_int_tuple, default=defaults.critic_hidden)
    p.add_argument("--tv-reference", default=defaults.tv_reference)
    p.add_argument("--tv-scope", default=defaults.tv_scope)
    p.add_argument("--tv-estimator", default=defaults.tv_estimator)
    p.add_argument("--filter-normalization", default=defaults.filter_normalization,
                   help="VACO's filtered mean divides by all samples (all) or the kept ones (kept)")
    p.add_argument("--acting", default=defaults.acting,
                   help="per-environment policy strategy: gather or select")
    p.add_argument("--reward-scaling", default=defaults.reward_scaling,
                   help="learner's reward scaling: return_std or none")
    p.add_argument("--grad-clip", default=defaults.grad_clip,
                   help="max_grad_norm over both networks (global) or each (per_network)")
    p.add_argument("--advantage-normalization", default=defaults.advantage_normalization,
                   help="minibatch advantages: scale, standardize or none")
    p.add_argument("--hparam", type=parse_hparam, action="append", default=[],
                   metavar="NAME=VALUE", help="numeric hyper-parameter, repeatable")
    add_run_arguments(p, out="runs/train")


def add_run_arguments(p: argparse.ArgumentParser, out: str) -> None:
    """The flags of a training command that the driver serves, whatever the testbed: seeds,
    output folder, checkpoints, resume and progress."""
    p.add_argument("--seeds", type=int, default=2,
                   help="number of vmapped seeds (from --seed-offset on)")
    p.add_argument("--seed-offset", type=int, default=0, help="first seed")
    p.add_argument("--chunk-periods", type=int, default=None,
                   help="evaluation periods per compiled chunk (checkpoint interval)")
    p.add_argument("--keep-checkpoints", type=int, default=None,
                   help="newest checkpoints kept (default 2; a resumed run keeps its own)")
    p.add_argument("--out", default=out, help="output folder")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in an existing output folder (other files are kept)")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the interrupted run in DIR from its newest intact checkpoint, "
                        "with the settings saved there (any testbed's run)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_driver(args, config: Config, hparams: Any) -> int:
    """Trains `config` with `hparams` over the seeds of `args` (the flags of
    `add_run_arguments`) with the driver, or resumes the run of `--resume DIR` with the settings
    saved there (`config` and `hparams` unused), then prints a summary."""
    from vaco_jax import io
    from vaco_jax.driver import Driver

    if args.keep_checkpoints is not None and args.keep_checkpoints < 1:
        raise ValueError(f"--keep-checkpoints must be a positive integer, got "
                         f"{args.keep_checkpoints}")
    options = {"chunk_periods": args.chunk_periods, "keep_checkpoints": args.keep_checkpoints,
               "progress": not args.no_progress}
    if args.resume:
        out = args.resume
        result = Driver.from_run_dir(out).run(out, resume=True, **options)
    else:
        out = args.out
        io.check_output_dir(out)  # before the driver builds its trainer (a warm start, say)
        driver = Driver(config, hparams, range(args.seed_offset, args.seed_offset + args.seeds))
        result = driver.run(out, overwrite=args.overwrite, **options)
    _print_summary(result, out)
    return 0


def _train(args) -> int:
    lag_model, lag, lag_probabilities = args.lag
    config = TrainConfig(
        env=args.env, backend=args.backend, algo=args.algo, num_envs=args.num_envs,
        rollout_length=args.rollout_length, total_steps=args.total_steps, epochs=args.epochs,
        minibatches=args.minibatches, buffer_capacity=args.buffer_capacity,
        lag_model=lag_model, lag_probabilities=lag_probabilities, lag_warmup=args.lag_warmup,
        episode_length=args.episode_length, eval_every=args.eval_every,
        num_eval_envs=args.num_eval_envs, actor_hidden=args.actor_hidden,
        critic_hidden=args.critic_hidden, tv_reference=args.tv_reference,
        tv_scope=args.tv_scope, tv_estimator=args.tv_estimator,
        filter_normalization=args.filter_normalization, acting=args.acting,
        reward_scaling=args.reward_scaling,
        advantage_normalization=args.advantage_normalization, grad_clip=args.grad_clip)
    return run_driver(args, config, HParams.create(lag=lag, **dict(args.hparam)))


def _print_summary(result, out: str) -> None:
    import numpy as np

    from vaco_jax import testbeds

    testbed, cfg = testbeds.of_config(result.config), result.config
    final = result.table().groupby("seed")[testbed.score].agg(
        lambda s: s.dropna().iloc[-1] if s.notna().any() else np.nan)
    initial = result.metrics[testbed.score][:, 0]
    print(f"\n{cfg.algo} on {testbed.task(cfg)}: {result.updates_done} updates, "
          f"{result.updates_done * cfg.steps_per_update:,} {testbed.steps_name} per seed")
    for (seed, value), start, diverged, at in zip(final.items(), initial, result.diverged,
                                                  result.diverged_at):
        note = f"  DIVERGED at update {at}" if diverged else ""
        print(f"  seed {seed}: {testbed.score_name} {start:.3f} -> {value:.3f}{note}")
    print(f"results: {out}/metrics.csv, {out}/metrics.parquet, {out}/config.json, "
          f"{out}/status.json, checkpoint in {out}/checkpoint/")


def _add_sweep_parsers(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a named experiment: every group of runs in one compiled program")
    p.add_argument("experiment", nargs="?", default=None,
                   help="experiment TOML file, e.g. experiments/quick.toml (optional with --resume)")
    p.add_argument("--out", default=None, help="sweep folder (required unless --plan)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted sweep in --out, skipping finished batches")
    p.add_argument("--part", metavar="K/N", default=None,
                   help="run only part K of N (1-based): the experiment's groups split into N "
                        "parts of about equal environment steps, one per machine; merge the "
                        "part folders with `vaco-jax report OUT --parts DIR ...`")
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
    p.add_argument("--overwrite", action="store_true", help="replace an existing sweep folder")
    p.add_argument("--max-runs-per-batch", type=int, default=None,
                   help="most runs per compiled batch (rounded down to a multiple of the device "
                        "count); default: as many as fit the memory budget")
    p.add_argument("--memory-budget", type=float, default=None, metavar="GIB",
                   help="device memory per device for runs, GiB; default: 90%% of an "
                        "accelerator's free memory, or half the available host memory on CPU")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    r = subparsers.add_parser("report", help="rebuild a sweep's runs table and rewrite its report, "
                                             "or merge the folders of a sweep's parts into one")
    r.add_argument("out", metavar="DIR", help="sweep folder (with --parts: the merged report's)")
    r.add_argument("--parts", nargs="+", metavar="PART_DIR", default=None,
                   help="merge these part folders (`vaco-jax sweep --part K/N`) of one "
                        "experiment into one report in DIR")
    r.add_argument("--allow-incomplete", action="store_true",
                   help="with --parts: report even if groups are missing or unfinished (the "
                        "report's title says so)")
    r.add_argument("--overwrite", action="store_true",
                   help="with --parts: replace the merged report in an existing DIR")


def _sweep(args) -> int:
    from vaco_jax import sweep

    if not args.resume and args.experiment is None:
        raise ValueError("the experiment file is required unless --resume is given")
    if args.out is None and (args.resume or not args.plan):
        raise ValueError("--out (the sweep folder) is required, unless --plan plans a new sweep")
    if args.steps_per_second is not None and (not args.plan or args.steps_per_second <= 0):
        raise ValueError(f"--steps-per-second must be a positive rate given with --plan, got "
                         f"{args.steps_per_second}")
    if args.part is not None and args.groups is not None:
        raise ValueError("give --part or --groups, not both")
    part = (sweep.Part.parse(args.part) if args.part is not None else
            sweep.NamedGroups.parse(args.groups) if args.groups is not None else None)
    if args.max_runs_per_batch is not None and args.max_runs_per_batch <= 0:
        raise ValueError(f"--max-runs-per-batch must be a positive integer, got "
                         f"{args.max_runs_per_batch}")
    if args.memory_budget is not None and args.memory_budget <= 0:
        raise ValueError(f"--memory-budget must be positive, got {args.memory_budget}")
    experiment = sweep.load_experiment(args.experiment) if args.experiment else None
    if part is not None and experiment is not None:
        part.groups(experiment)  # refuses a part or group the experiment does not have
    memory_budget = None if args.memory_budget is None else int(args.memory_budget * 2**30)
    if args.plan:
        plan = (sweep.load_sweep_to_resume(args.out, experiment, part) if args.resume else
                sweep.make_plan(experiment, part=part, max_runs_per_batch=args.max_runs_per_batch,
                                memory_budget=memory_budget))
        print(sweep.plan_text(plan, args.steps_per_second))
        return 0
    summary = sweep.sweep(
        args.out, experiment, resume=args.resume, overwrite=args.overwrite, part=part,
        max_runs_per_batch=args.max_runs_per_batch, memory_budget=memory_budget,
        progress=not args.no_progress)
    _print_scores(summary, args.out)
    return 0


def _report(args) -> int:
    from vaco_jax import sweep, sweep_merge

    if args.parts is not None:
        summary = sweep_merge.merge_parts(args.parts, args.out,
                                          allow_incomplete=args.allow_incomplete,
                                          overwrite=args.overwrite)
    elif args.allow_incomplete or args.overwrite:
        raise ValueError("--allow-incomplete and --overwrite apply only with --parts")
    else:
        summary = sweep.write_sweep_report(sweep.load_sweep(args.out), args.out)
    _print_scores(summary, args.out)
    return 0


def _print_scores(summary: dict, out: str) -> None:
    """The report's final-score table: IQM normalised score per variant and lag."""
    print(f"\n{summary['title']}: {summary['run']['num_runs']} runs "
          f"({summary['run']['num_diverged']} diverged)")
    for cell in summary["cells"]:
        iqm, auc = cell["iqm"], cell["auc_iqm"]
        print(f"  {cell['variant']:<32} lag {cell['lag']:<5g} IQM score {iqm['point']:6.3f} "
              f"[{iqm['low']:.3f}, {iqm['high']:.3f}]  AUC IQM {auc['point']:6.3f}")
    print(f"report: {out}/report.md (tables in {out}/summary.json, runs in {out}/runs.parquet)")


def main(argv: Sequence[str] | None = None) -> int:
    from vaco_jax.tokens import cli as token_cli  # here: it imports this module's run flags

    parser = argparse.ArgumentParser(prog="vaco-jax", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(subparsers)
    _add_sweep_parsers(subparsers)
    token_cli.add_parser(subparsers)
    args = parser.parse_args(argv)
    from vaco_jax.driver import Interrupted

    try:
        return {"train": _train, "sweep": _sweep, "report": _report,
                "tokens": token_cli.run}[args.command](args)
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        print(f"vaco-jax {args.command}: error: {error}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        resume = (f"vaco-jax sweep --resume --out {args.out}" if args.command == "sweep"
                  else f"vaco-jax {args.command} --resume {args.resume or args.out}")
        print(f"vaco-jax {args.command}: {stop}; continue with: {resume}", file=sys.stderr)
        return 128 + stop.signum
    except OSError as error:  # a full disk, among others
        print(f"vaco-jax {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
