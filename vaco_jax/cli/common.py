"""What every training command shares, whatever the testbed: the lag and hyper-parameter flags'
parsers, the run flags the driver serves, and running or resuming a run with its summary."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

import jax

from vaco_jax import losses, testbeds
from vaco_jax.cli import console
from vaco_jax.core import knobs
from vaco_jax.core.config import MAX_SEED, Config, HParamsBase
from vaco_jax.core.lag_models import LAG_MODELS
from vaco_jax.core.lag_presets import LAG_PRESETS, LagChoice
from vaco_jax.infra import io, manifest
from vaco_jax.infra.records import MAX_NAME, shown
from vaco_jax.run import distributed, driver, memory
from vaco_jax.run.trackers import TRACKERS, Trackers, seed_runs


MESSAGE_LIMIT = 2000
"""The most characters of a line that a command prints of a message, name or path: one that
quotes a huge value of someone else's file is cut there."""


def plain(text: object) -> str:
    """`text` as a command prints it, one line of printable characters (`records.shown`): a
    name or path from someone else's folder or file may hold a terminal escape or a newline."""
    return shown(text, MESSAGE_LIMIT)


LAG_HELP = (f"backward lag MODEL:PARAM, MODEL one of {', '.join(LAG_MODELS)} (e.g. uniform:4; "
            f"empirical:P0,P1,...; docs/training.md); fixed:0 is synchronous; or a production "
            f"system's setting PRESET[:LEVEL], PRESET one of {', '.join(LAG_PRESETS)} (e.g. "
            f"areal is bounded:4)")
"""The help of `--lag`, whose values `parse_lag` reads."""


def parse_lag(text: str) -> LagChoice:
    """`MODEL:PARAM`, e.g. `fixed:0` (synchronous), `uniform:3`, `geometric:0.5`, `bounded:4`;
    `empirical:P0,P1,...` gives the probabilities of lags 0, 1, ... (`lag` unused, 0); or
    `PRESET[:LEVEL]`, a `lag_presets` preset at its own level or at `LEVEL`, e.g. `areal`
    (`bounded:4`) or `areal:8`.

    Returns the model, the value of the lag hyper-parameter and the preset, if any.
    """
    name, sep, param = text.partition(":")
    if name in LAG_PRESETS:
        return _preset_choice(name, param if sep else None)
    if not sep or name not in LAG_MODELS:
        raise argparse.ArgumentTypeError(
            f"must be MODEL:PARAM with MODEL one of {', '.join(LAG_MODELS)} (e.g. fixed:0, "
            f"uniform:3, geometric:0.5, bounded:4, empirical:0.5,0.3,0.2), or PRESET[:LEVEL] "
            f"with PRESET one of {', '.join(LAG_PRESETS)}, got {text!r}")
    try:
        return LagChoice(*LAG_MODELS[name].from_parameter(param))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"PARAM must be a number (a comma-separated list of probabilities for "
            f"empirical), got {param!r}") from None


def _preset_choice(name: str, level: str | None) -> LagChoice:
    """The preset `name` at its own level (`level` None) or at the number `level`."""
    try:
        value = None if level is None else float(level)
    except ValueError:
        raise argparse.ArgumentTypeError(f"LEVEL must be a number, got {level!r}") from None
    try:
        return LAG_PRESETS[name].choice(value)
    except ValueError as error:  # a preset without a level of its own, given none
        raise argparse.ArgumentTypeError(str(error)) from None


HPARAM_HELP = (
    "numeric hyper-parameter, repeatable (each name once). tv_delta is VACO's TV budget: the "
    "filter acts once 0.5 mean |ratio - 1| exceeds tv_delta / 2 (--tv-delta-convention budget, "
    "the authors' code) or tv_delta (tv); it also takes the authors' budgets by name: "
    + ", ".join(f"{name}={value:g}" for name, value in losses.TV_BUDGETS.items()))


def add_hparam_flag(p: argparse.ArgumentParser, hparams: type) -> None:
    """`--hparam NAME=VALUE`, repeatable, of a testbed's hyper-parameters (`hparam_type`)."""
    p.add_argument("--hparam", type=hparam_type(hparams), action=_EachNameOnce, default=[],
                   metavar="NAME=VALUE", help=HPARAM_HELP)


class _EachNameOnce(argparse.Action):
    """Collects `--hparam` values, refusing a name given twice: the later value would silently
    replace the earlier one."""

    def __call__(self, parser, namespace, values, option_string=None):
        name, _ = values
        given = getattr(namespace, self.dest)
        if any(name == earlier for earlier, _ in given):
            raise argparse.ArgumentError(self, f"{name} is given twice; give each "
                                               f"hyper-parameter once")
        setattr(namespace, self.dest, [*given, values])  # a new list: never the default's


def hparam_type(hparams: type) -> Any:
    """The `--hparam NAME=VALUE` parser of a testbed's hyper-parameters: any field but `lag`,
    which `--lag MODEL:PARAM` sets."""
    names = [n for n in hparams.field_names() if n != "lag"]

    def parse(text: str) -> tuple[str, float]:
        name, sep, value = text.partition("=")
        if name == "lag":
            raise argparse.ArgumentTypeError(
                "cannot set lag: set it with --lag MODEL:PARAM (e.g. --lag uniform:3)")
        if not sep or name not in names:
            raise argparse.ArgumentTypeError(
                f"must be NAME=VALUE with NAME one of {', '.join(names)}, got {text!r}")
        try:
            return name, hparams.value_of(name, value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def folder(text: str) -> str:
    """A folder flag's value (`--out DIR`, ...), refused before anything is written where it is
    empty, which would name the current folder, or holds a name longer than file systems allow
    (the write would fail only later, quoting the whole path)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a folder, got '' (write . for the current "
                                         "folder)")
    for name in Path(text).parts:
        if len(os.fsencode(name)) > MAX_NAME:
            raise argparse.ArgumentTypeError(f"the name {shown(name, 40)!r} in it is longer "
                                             f"than the {MAX_NAME} bytes file systems allow")
    return text


def memory_budget_gib(text: str) -> float:
    """`--memory-budget GIB`: a positive, finite number of GiB (a budget of 0 fits nothing)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of GiB, got {text!r}")
    return value


def add_memory_budget(p: argparse.ArgumentParser) -> None:
    """`--memory-budget GIB`, shared by the training commands and `sweep`."""
    p.add_argument("--memory-budget", type=memory_budget_gib, default=None, metavar="GIB",
                   help="device memory per device for runs, GiB (default: 90%% of an "
                        "accelerator's free memory, or half the available host memory on CPU)")


def add_overwrite_flags(p: argparse.ArgumentParser, what: str, needs: str = "") -> None:
    """`--overwrite` (of `what`) and `--keep PATH`, the files it must leave (`io.prepare_output_dir`);
    `needs` names a flag both further need."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"{f'with {needs}: ' if needs else ''}replace {what}: removes exactly "
                        f"what vaco-jax wrote there, refusing a folder that holds other files")
    p.add_argument("--keep", metavar="PATH", action="append", default=[],
                   help=f"with {f'{needs} and ' if needs else ''}--overwrite: a file or folder "
                        f"that vaco-jax did not write there, left in place (repeatable)")


def add_run_arguments(p: argparse.ArgumentParser, out: str) -> None:
    """The flags of a training command that the driver serves, whatever the testbed: seeds,
    output folder, checkpoints, resume, progress and the memory budget a new run must fit."""
    p.add_argument("--seeds", type=int, default=2,
                   help="number of vmapped seeds (from --seed-offset on)")
    p.add_argument("--seed-offset", type=int, default=0, help="first seed")
    p.add_argument("--chunk-periods", type=int, default=None,
                   help="evaluation periods per compiled chunk, the checkpoint interval "
                        "(default: about a tenth of the run, a divisor of its periods)")
    p.add_argument("--keep-checkpoints", type=int, default=None,
                   help="newest checkpoints kept (default: 2; a resumed run keeps its own)")
    p.add_argument("--out", type=folder, default=out, help="output folder")
    add_overwrite_flags(p, "the run in an existing output folder")
    p.add_argument("--resume", type=folder, metavar="DIR", default=None,
                   help="continue the interrupted run in DIR from its newest intact checkpoint, "
                        "with the settings saved there (any testbed's run; only "
                        "--chunk-periods, --keep-checkpoints and --no-progress may be given "
                        "with it); a finished run's results are rewritten from its checkpoint "
                        "(default: a new run)")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bar and compiling messages (a warm start's messages "
                        "still show)")
    add_memory_budget(p)
    add_log(p, "seed", "OUT/tensorboard/seed=S")
    distributed.add_flags(p)


def add_log(p: argparse.ArgumentParser, each: str, folders: str) -> None:
    """`--log TOOL`, repeatable: the trackers (`vaco_jax.run.trackers`) that log every
    per-update metric of every `each` (in `folders` for TensorBoard) between compiled chunks."""
    p.add_argument("--log", choices=tuple(TRACKERS), action="append", default=[],
                   help=f"also log every per-update metric of every {each} to this tool, "
                        f"between compiled chunks; repeatable (tensorboard: {folders}; wandb: "
                        f"one W&B run per {each}, needs vaco-jax[wandb], WANDB_MODE=offline "
                        f"works without an account)")


RESUME_FLAGS = ("chunk_periods", "keep_checkpoints", "no_progress", "memory_budget", "log",
                *distributed.FLAGS)
"""The run flags a resumed run applies; it takes every other setting from its folder."""


def _parsed_default(action: argparse.Action) -> Any:
    """A flag's default as parsed (argparse converts a string default with the flag's type)."""
    if isinstance(action.default, str) and action.type is not None:
        return action.type(action.default)
    return action.default


def _check_run_flags(args) -> None:
    """Refuses, before anything is built or written, run flags out of range and flags that a
    resume would ignore."""
    for flag, value in (("--seeds", args.seeds), ("--chunk-periods", args.chunk_periods),
                        ("--keep-checkpoints", args.keep_checkpoints)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be a positive integer, got {value}")
    if not 0 <= args.seed_offset <= MAX_SEED - args.seeds + 1:
        raise ValueError(f"--seed-offset must lie in 0..{MAX_SEED - args.seeds + 1} (seeds "
                         f"are unsigned 32-bit integers), got {args.seed_offset}")
    check_keep_flags(args)
    if args.resume:
        ignored = [action.option_strings[-1] for action in args.parser._actions
                   if action.option_strings and action.dest not in (*RESUME_FLAGS, "resume", "help")
                   and (getattr(args, action.dest) != _parsed_default(action)
                        or args.given.intersection(action.option_strings))]
        if ignored:
            raise ValueError(f"--resume continues the run with the settings saved in "
                             f"{args.resume!r}; {', '.join(ignored)} cannot change them (leave "
                             f"{'it' if len(ignored) == 1 else 'them'} out; only "
                             f"--chunk-periods, --keep-checkpoints, --no-progress, "
                             f"--memory-budget and --log apply, and those of several "
                             f"processes)")


def check_keep_flags(args) -> None:
    """Refuses `--keep` without `--overwrite`, and a kept path outside the output folder."""
    if args.keep and not args.overwrite:
        raise ValueError("--keep applies only with --overwrite")
    manifest.check_keep(args.keep)


def run_driver(args, config: Config, hparams: HParamsBase) -> int:
    """Trains `config` with `hparams` over the seeds of `args` (the flags of
    `add_run_arguments`) with the driver, or resumes the run of `--resume DIR` with the settings
    saved there (`config` and `hparams` unused), then prints a summary."""
    _check_run_flags(args)
    options = {"chunk_periods": args.chunk_periods, "keep_checkpoints": args.keep_checkpoints,
               "progress": not args.no_progress}
    budget = None if args.memory_budget is None else int(args.memory_budget * 2**30)
    out = args.resume or args.out
    trackers = Trackers(args.log, out)  # refuses a missing optional package before any work
    # Checked by process 0, which writes the folder, and refused on every process alike.
    if args.resume:
        runs = driver.Driver.from_run_dir(out)
        distributed.from_process_0(lambda: memory.check_memory(
            runs.config, jax.tree.map(lambda x: x[0], runs.hparams), runs.num_runs,
            budget_bytes=budget))  # this machine may be smaller
        overwrite, keep = False, ()
    else:
        testbed = testbeds.named(config.testbed)
        testbed.validate(config, None)  # the algorithm known before its knobs are asked
        knobs.refuse_unread((name for name, _ in args.hparam), testbed.knobs(config),
                            config.algo, "--hparam")

        def refuse_unfit() -> None:  # before the driver builds its trainer (a warm start, say)
            io.check_output_dir(out)
            memory.check_memory(config, hparams, args.seeds, budget_bytes=budget)
        distributed.from_process_0(refuse_unfit)
        seeds = range(args.seed_offset, args.seed_offset + args.seeds)
        runs = driver.Driver(config, hparams, seeds)
        overwrite, keep = args.overwrite, args.keep
    logged = seed_runs(runs, group=Path(out).resolve().name)
    with trackers:  # the header once the folder is accepted: a refusal prints its line alone
        result = runs.run(out, resume=bool(args.resume), overwrite=overwrite, keep=keep,
                          on_chunk=lambda chunk: trackers.log(logged, chunk),
                          on_start=lambda: print(console.header(runs, out,
                                                                resume=bool(args.resume)),
                                                 flush=True), **options)
    print(console.summary(result, out))
    if not result.diverged.all():
        print(console.next_steps(result, out))
    return 0
