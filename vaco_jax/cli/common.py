"""What every training command shares, whatever the testbed: the lag and hyper-parameter flags'
parsers, the run flags the driver serves, and running or resuming a run with its summary."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from vaco_jax.core.config import Config
from vaco_jax.core.policy_buffer import LAG_MODELS
from vaco_jax.run import driver, io, testbeds


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


def hparam_type(hparams: type) -> Any:
    """The `--hparam NAME=VALUE` parser of a testbed's hyper-parameters: any field but `lag`,
    which `--lag MODEL:PARAM` sets."""
    names = [n for n in hparams.field_names() if n != "lag"]

    def parse(text: str) -> tuple[str, float]:
        name, sep, value = text.partition("=")
        if name == "lag":
            raise argparse.ArgumentTypeError(
                "--hparam cannot set lag: set it with --lag MODEL:PARAM (e.g. --lag uniform:3)")
        if not sep or name not in names:
            raise argparse.ArgumentTypeError(
                f"--hparam must be NAME=VALUE with NAME one of {', '.join(names)}, got {text!r}")
        try:
            return name, float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--hparam {name} needs a number, got {value!r}") from None
    return parse


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
    if args.keep_checkpoints is not None and args.keep_checkpoints < 1:
        raise ValueError(f"--keep-checkpoints must be a positive integer, got "
                         f"{args.keep_checkpoints}")
    options = {"chunk_periods": args.chunk_periods, "keep_checkpoints": args.keep_checkpoints,
               "progress": not args.no_progress}
    if args.resume:
        out = args.resume
        result = driver.Driver.from_run_dir(out).run(out, resume=True, **options)
    else:
        out = args.out
        io.check_output_dir(out)  # before the driver builds its trainer (a warm start, say)
        seeds = range(args.seed_offset, args.seed_offset + args.seeds)
        runs = driver.Driver(config, hparams, seeds)
        result = runs.run(out, overwrite=args.overwrite, **options)
    print_summary(result, out)
    return 0


def print_summary(result, out: str) -> None:
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
