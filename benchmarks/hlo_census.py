"""What a whole-run program is made of: its optimised HLO's operations counted by kind and by
the source line that produced them (see README.md, "At PureJaxRL's own episode semantics").

Compile time grows with the program XLA optimises, so a feature that compiles slowly shows up
as many operations from few lines. The program is one of `speed_split.COMPILED_PROGRAMS` at the
parity settings (with `--config` overrides), lowered and compiled on this machine, never run.
Each operation is charged to the innermost source line of its stack frame; a fused computation's
operations count once per fused copy, so a small computation that XLA copies into many fusions
counts as often as it was copied.

    PYTHONPATH=$PWD python -m benchmarks.hlo_census --program vaco_jax_without_evaluation \\
        --config '{"restart_from": "first", "buffer_capacity": 1}' --out FILE.json
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path
from typing import Any, Sequence

from benchmarks import harness
from benchmarks.speed_split import COMPILED_PROGRAMS, parity_config, whole_run_program
from vaco_jax.infra import io

ROOT = Path(__file__).resolve().parent.parent
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_OPERATION = re.compile(r"^\s*(?:ROOT )?%\S+ = \S+ ([\w-]+)\(")
_FIELDS = re.compile(r"(\w+)=(\d+)")
_FRAME = re.compile(r"stack_frame_id=(\d+)")


def source_lines(hlo: str) -> dict[int, str]:
    """Each stack frame id of `hlo`'s trailing tables as `file:line function` of its innermost
    location (paths relative to this checkout, or to the environment's package folder)."""
    tables: dict[str, dict[int, str]] = {}
    section = None
    for line in hlo.splitlines():
        stripped = line.strip()
        if stripped in _SECTIONS:
            section, tables[stripped] = stripped, {}
        elif section and stripped[:1].isdigit():
            number, rest = stripped.split(None, 1)
            tables[section][int(number)] = rest
        elif stripped:
            section = None
    if set(tables) != set(_SECTIONS):
        return {}
    names = {i: v.strip('"').split("site-packages/")[-1].removeprefix(f"{ROOT}/")
             for i, v in tables["FileNames"].items()}
    functions = {i: v.strip('"') for i, v in tables["FunctionNames"].items()}
    locations = {i: dict(_FIELDS.findall(v)) for i, v in tables["FileLocations"].items()}
    lines = {}
    for frame, fields in tables["StackFrames"].items():
        where = locations[int(dict(_FIELDS.findall(fields))["file_location_id"])]
        lines[frame] = (f"{names[int(where['file_name_id'])]}:{where['line']} "
                        f"{functions[int(where['function_name_id'])]}")
    return lines


def census(hlo: str, top: int = 25) -> dict[str, Any]:
    """Operations of an optimised HLO module's text (`compiled.as_text()`): how many, of which
    kinds, and the `top` source lines that produced the most."""
    lines = source_lines(hlo)
    kinds: collections.Counter = collections.Counter()
    by_line: collections.Counter = collections.Counter()
    for text in hlo.splitlines():
        match = _OPERATION.match(text)
        if not match:
            continue
        kinds[match.group(1)] += 1
        frame = _FRAME.search(text)
        by_line[lines.get(int(frame.group(1)), "(unknown)") if frame else "(none)"] += 1
    return {"operations": sum(kinds.values()), "fusions": kinds["fusion"],
            "kinds": dict(kinds.most_common()),
            "source_lines": [{"line": k, "operations": v} for k, v in by_line.most_common(top)]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", choices=COMPILED_PROGRAMS, default="vaco_jax")
    p.add_argument("--env", default="inverted_double_pendulum")
    p.add_argument("--config", default="{}",
                   help="JSON ControlConfig overrides of the parity settings")
    p.add_argument("--checkout", type=Path, default=None,
                   help="a clone of PureJaxRL (for --program purejaxrl)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--top", type=int, default=25, help="source lines to list")
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.program == "purejaxrl" and args.checkout is None:
        p.error("--program purejaxrl needs --checkout")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        p.error(f"{out} exists; pass --overwrite to replace it")
    config = parity_config(args.env, args.config)
    print(f"compiling {args.program} (not running it) ...", flush=True)
    compiled = harness.Compiled(whole_run_program(args.program, config, args.seeds,
                                                  args.checkout), warm_up=False)
    result = {"machine": harness.machine(), "program": args.program, "config": config.to_dict(),
              "seeds": args.seeds, "lower_s": compiled.lower_s, "compile_s": compiled.compile_s,
              **census(compiled.executable.as_text(), args.top)}
    io.write_json(out, result)
    print(f"{result['operations']:,} operations, {result['fusions']:,} fusions; "
          f"lowered in {compiled.lower_s:.1f} s, compiled in {compiled.compile_s:.1f} s")
    for row in result["source_lines"]:
        print(f"{row['operations']:8,d}  {row['line']}")
    return result


if __name__ == "__main__":
    main()
