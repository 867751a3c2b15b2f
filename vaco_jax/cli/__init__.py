"""Command line: `vaco-jax train | tokens | sweep | report | envs | algorithms | leaderboard`.

Thin: each command parses its flags, then calls the layers below (a testbed's config and
hyper-parameters, the driver, the experiment runner, the report writer).
"""

from __future__ import annotations

import argparse
import errno
import os
import platform
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Sequence

import jax

from vaco_jax import __version__

from vaco_jax.cli import algorithms as algorithms_cli
from vaco_jax.cli import common, console
from vaco_jax.cli import envs as envs_cli
from vaco_jax.cli import leaderboard as leaderboard_cli
from vaco_jax.cli import sweep as sweep_cli
from vaco_jax.cli import tokens as tokens_cli
from vaco_jax.cli import train as train_cli
from vaco_jax.experiment.plan import PLAN_FILE
from vaco_jax.infra.records import shown
from vaco_jax.run import compilation_cache, distributed, signals
from vaco_jax.run.background import background_work

def _given_flags(argv: Sequence[str]) -> set[str]:
    """The long flags written on the command line (`--flag` or `--flag=value`)."""
    return {token.split("=", 1)[0] for token in argv if token.startswith("--")}


TRAINING_COMMANDS = {
    "train": (train_cli, "train one algorithm on one task over vmapped seeds"),
    "tokens": (tokens_cli, "RL on a verifiable token task (token testbed)"),
}
"""Command -> (the module of its testbed's flags, its help): `add_arguments`, `build`, `OUT`."""


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in its help, except where the help already says what it is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Refuses bad input in one line (argparse prints the whole usage first, which buries the
    error), exit status 2; `--help` still shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vaco-jax", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version",
                        version=f"vaco-jax {__version__} (jax {jax.__version__}, Python "
                                f"{platform.python_version()})")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command, (module, text) in TRAINING_COMMANDS.items():
        # No abbreviated flags: a resume refuses the flags written out (`common.RESUME_FLAGS`).
        p = subparsers.add_parser(command, help=text, allow_abbrev=False,
                                  formatter_class=_DefaultsHelpFormatter)
        module.add_arguments(p)
        common.add_run_arguments(p, out=module.OUT)
    sweep_cli.add_parsers(subparsers)
    envs_cli.add_parser(subparsers)
    algorithms_cli.add_parser(subparsers)
    leaderboard_cli.add_parser(subparsers)
    # Each command's own parser refuses its unknown flags; a training command's defaults also
    # tell which flags a resume would ignore.
    for p in subparsers.choices.values():
        p.set_defaults(parser=p)
    return parser


def _join_run(args) -> None:
    """Joins the processes of a run over several (`vaco_jax.run.distributed`), before any other
    JAX call, where the command takes the flags; a process other than 0 then shows no progress
    and prints nothing on stdout (process 0 reports), only its errors."""
    if not hasattr(args, "coordinator"):
        return
    distributed.initialize(distributed.launch_settings(args))
    if not distributed.is_writer():
        args.no_progress = True
        console.show_progress_messages(False)
        sys.stdout = open(os.devnull, "w")


def _run(args) -> int:
    _join_run(args)
    compilation_cache.enable()
    if args.command in TRAINING_COMMANDS:
        return common.run_driver(args, *TRAINING_COMMANDS[args.command][0].build(args))
    return {"sweep": sweep_cli.run_sweep, "report": sweep_cli.run_report,
            "envs": envs_cli.run_envs, "algorithms": algorithms_cli.run_algorithms,
            "leaderboard": leaderboard_cli.run_leaderboard}[args.command](args)


def _continue_command(args) -> str | None:
    """The command that continues this command's work, if it has written any to continue."""
    if args.command == "sweep":
        out = args.out
        marker = None if out is None else Path(out) / PLAN_FILE
        command = f"vaco-jax sweep --resume --out {shlex.quote(str(out))}"
    elif args.command in TRAINING_COMMANDS:
        out = args.resume or args.out
        marker = Path(out) / "config.json"
        command = f"vaco-jax {args.command} --resume {shlex.quote(str(out))}"
    else:
        return None
    written = marker is not None and marker.is_file() and (
        args.resume or marker.stat().st_mtime >= args.started)  # not an earlier run's folder
    return command if written else None


def _stopped(args, signum: int) -> str:
    """What a command that a signal stops at once (outside a run's chunks) says."""
    follow = _continue_command(args)
    return (f"vaco-jax {args.command}: stopped by {signal.Signals(signum).name}; every file "
            f"written so far is complete (each is written atomically)"
            + (f"; continue with: {follow}" if follow else ""))


def _error_line(command: str, error: Exception) -> str:
    """The one line that says why `command` failed: its message may quote names and values of
    someone else's folder or file (a terminal escape, a newline, a megabyte-long list)."""
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG and error.filename:
        text = (f"{error.strerror}: {shown(error.filename, 100)!r}; choose a path whose "
                f"names are shorter")
    else:
        text = common.plain(error)
    return f"vaco-jax {command}: error: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a command; its exit status: 0 done, 2 refused input, 1 another error (a full disk),
    128 + the signal's number when SIGINT (130) or SIGTERM (143) stopped it."""
    started = time.time()
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.started, args.given = started, _given_flags(sys.argv[1:] if argv is None else argv)
    # Shown under --no-progress too, which hides the bars and compiling: a warm start trains
    # for minutes before the first chunk, and its messages tell that the command waits on it.
    console.show_progress_messages(True)
    with signals.exit_on_signals(lambda signum: _stopped(args, signum)):
        try:
            code = _run(args)
        except (ValueError, FileExistsError, FileNotFoundError) as error:
            print(_error_line(args.command, error), file=sys.stderr)
            return 2
        except signals.Interrupted as stop:
            follow = _continue_command(args)
            print(f"vaco-jax {args.command}: {stop}"
                  + (f"; continue with: {follow}" if follow else ""), file=sys.stderr)
            return 128 + stop.signum
        except OSError as error:  # a full disk, among others
            print(_error_line(args.command, error), file=sys.stderr)
            # A name too long for the file system is in a path the command was given (or made
            # of names it was given): refused input, not a failed write.
            return 2 if error.errno == errno.ENAMETOOLONG else 1
        signum = signals.requested()
        if signum is not None:  # it arrived when nothing was left to stop
            print(f"vaco-jax {args.command}: {signal.Signals(signum).name} arrived after the "
                  f"last chunk; the work is complete", file=sys.stderr)
            return 128 + signum
        return code


def entry() -> None:
    """The `vaco-jax` program: `main`, then an exit that a background compilation cannot turn
    into an abort (an interpreter shutting down under a running XLA compilation aborts), nor
    threads left running by a failure into tracebacks."""
    try:
        code = main()
    except BaseException:
        if not background_work():
            raise
        traceback.print_exc()
        code = 1
    if code != 0 or background_work():
        # A failed command has said why in one line; threads a failure left running (Orbax's
        # writers under a full disk) would print tracebacks as the interpreter shuts down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
