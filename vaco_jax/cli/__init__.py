"""Command line: `vaco-jax train | tokens | sweep | report`.

Thin: each command parses its flags, then calls the layers below (a testbed's config and
hyper-parameters, the driver, the experiment runner, the report writer).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from vaco_jax.cli import common
from vaco_jax.cli import sweep as sweep_cli
from vaco_jax.cli import tokens as tokens_cli
from vaco_jax.cli import train as train_cli
from vaco_jax.run.driver import Interrupted

TRAINING_COMMANDS = {
    "train": (train_cli, "train one algorithm on one task over vmapped seeds"),
    "tokens": (tokens_cli, "RL on a verifiable token task (token testbed)"),
}
"""Command -> (the module of its testbed's flags, its help): `add_arguments`, `build`, `OUT`."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaco-jax", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command, (module, text) in TRAINING_COMMANDS.items():
        p = subparsers.add_parser(command, help=text,
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(p)
        common.add_run_arguments(p, out=module.OUT)
    sweep_cli.add_parsers(subparsers)
    return parser


def _run(args) -> int:
    if args.command in TRAINING_COMMANDS:
        return common.run_driver(args, *TRAINING_COMMANDS[args.command][0].build(args))
    return {"sweep": sweep_cli.run_sweep, "report": sweep_cli.run_report}[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
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
