"""Token testbed throughput: generation and training against the forward pass alone, the cost of
per-generator stale policies, and vmapped seeds.

    python benchmarks/tokens.py --quick      # every row, fewer timed calls and seeds
    python benchmarks/tokens.py              # sized for the backend it runs on
    python benchmarks/tokens.py --prompts 64 --group-size 16 --layers 4 --width 256 --heads 8

Rates count response tokens (P x G x response length per update or generation). `forward` is
one teacher-forced pass over every prompt+response sequence, the physical limit of both
generation (the same network once per token with a key-value cache) and training (a generation,
a phase-start pass and `epochs x minibatches` forward-backward passes). Stale rows draw lags
up to K - 1 per prompt group, per sample, or per token (`in_flight`, with every snapshot's own
cache or one shared cache); their time is compared with `fixed:0` timed in the same rounds.

On a GPU or TPU: install JAX's accelerator plugin as `docs/install.md`
says, then run the same command; the accelerator preset (add with 4 digits, P x G = 64 x 16,
4 layers of width 256, seeds 1 to 64) is chosen from `jax.default_backend()`, and every row
records the device's peak memory. The model and batch flags resize every row: to find the
largest that fits, raise them until compilation fails with RESOURCE_EXHAUSTED. A seed count
whose call needs more device memory than is free (XLA's memory analysis; `--memory-limit-gib`
sets the limit) is recorded as not fitting, and the other counts are timed.

Timing follows `benchmarks/harness.py`: compilation apart from throughput, programs compared in
alternating calls, the machine's load recorded; results go to a JSON file written atomically
after each part (never over an existing one without `--overwrite`), the tables are printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.token_programs import (BASELINE, compiled_update, flops_fields,  # noqa: E402
                                       forward_program, generate_program, release_updates,
                                       update_program)
from benchmarks.token_tables import GIB, _gib, markdown  # noqa: E402
from vaco_jax.infra import io  # noqa: E402
from vaco_jax.core.lag_models import Fixed, InFlight, Uniform  # noqa: E402
from vaco_jax.tokens import tasks  # noqa: E402
from vaco_jax.tokens.config import TokenConfig, validate  # noqa: E402
from vaco_jax.tokens.model import TokenPolicy  # noqa: E402

# (row, config changes, stale): stale rows draw lags up to K - 1, the oldest buffered version.
ACTINGS = ((BASELINE, {"lag_model": Fixed()}, False),
           ("uniform per prompt group", {"lag_model": Uniform(), "group_unit": "prompt"}, True),
           ("uniform per sample", {"lag_model": Uniform(), "group_unit": "sample"}, True),
           ("in_flight per prompt group, shared cache",
            {"lag_model": InFlight(), "group_unit": "prompt", "in_flight_cache": "shared"},
            True),
           ("in_flight per prompt group, per-snapshot caches",
            {"lag_model": InFlight(), "group_unit": "prompt", "in_flight_cache": "per_snapshot"},
            True))


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one run measures; `config` fixes task, model, batch and buffer for every row."""

    name: str
    config: TokenConfig
    batches_per_call: int  # forward passes or generations per timed call
    updates_per_call: int
    repeats: int  # timed calls of each program after its warm-up call
    seed_counts: tuple[int, ...]
    max_wait_s: float  # longest wait for other processes to leave the CPU before timing
    actings: tuple[str, ...] | None = None  # rows of ACTINGS measured (None: every row)
    capacity_s: float = 240.0  # time box of the search for the largest model and batch
    capacity_doublings: int = 6  # most doublings of width, then of prompts, in that search
    # Device memory the seed counts may use (GiB); None: the allocator's own limit where the
    # device reports one (a GPU), else (a CPU) no check.
    memory_limit_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "config": self.config.to_dict()}


def presets(backend: str) -> dict[str, Settings]:
    """`quick` (fewer timed calls and seeds) and `full`, sized for the backend it runs on (on a
    CPU compiling their 13 or 14 programs takes most of either, 25 minutes under heavy load);
    `gpu` (the accelerator sizes on any backend) and `tiny` (the GPU campaign's dry run)."""
    quick = Settings(name="quick", config=TokenConfig(), batches_per_call=8, updates_per_call=4,
                     repeats=8, seed_counts=(1, 4), max_wait_s=0.0)
    if backend == "cpu":  # the testbed's defaults, at which the worked example learns
        full = dataclasses.replace(quick, name="full", batches_per_call=16, updates_per_call=8,
                                   repeats=15, seed_counts=(1, 4, 16), max_wait_s=30.0)
    # The accelerator sizes; `gpu` is also the GPU campaign's (`benchmarks/campaign/gpu.py`).
    gpu = dataclasses.replace(
        quick, name="gpu",
        config=TokenConfig(task_size=4, context=32, prompts=64, group_size=16, layers=4,
                           width=256, heads=8),
        batches_per_call=8, updates_per_call=4, repeats=10, seed_counts=(1, 4, 16, 64),
        max_wait_s=5.0, capacity_s=120.0)
    if backend != "cpu":
        full = dataclasses.replace(gpu, name="full", max_wait_s=60.0)
    # The campaign's dry run: every part in seconds on a CPU.
    tiny = dataclasses.replace(
        quick, name="tiny",
        config=TokenConfig(layers=1, width=16, heads=2, prompts=2, group_size=2),
        batches_per_call=1, updates_per_call=1, repeats=2, seed_counts=(1, 2),
        actings=(BASELINE, "uniform per prompt group"), capacity_s=60.0, capacity_doublings=1)
    return {"quick": quick, "full": full, "gpu": gpu, "tiny": tiny}


def throughput(settings: Settings, log) -> dict[str, Any]:
    """The forward pass, then generation and whole updates of every acting, all timed in the
    same rounds."""
    config = settings.config
    log("compiling the forward pass")
    programs = {"forward": harness.Compiled(forward_program(config, settings.batches_per_call))}
    actings = [a for a in ACTINGS if settings.actings is None or a[0] in settings.actings]
    for row, changes, _ in actings:
        acting = config.replace(**changes)
        log(f"compiling generation and update: {row}")
        programs[f"generate/{row}"] = harness.Compiled(
            generate_program(acting, settings.batches_per_call))
        programs[f"update/{row}"] = compiled_update(acting, 1, settings.updates_per_call)
        programs[f"update/{row}"].warm_up()
    log(f"timing {len(programs)} programs in {settings.repeats} rounds")
    timed = dict(zip(programs, harness.timed_rounds(list(programs.values()),
                                                    repeats=settings.repeats,
                                                    max_wait_s=settings.max_wait_s)))
    for name, summary in timed.items():
        inside = settings.updates_per_call if name.startswith("update") else \
            settings.batches_per_call
        summary.update(flops_fields(programs[name], summary, inside, name != "forward"))
    forward = timed["forward"]
    rows = {}
    for row, _, _ in actings:
        rows[row] = {}
        for part in ("generate", "update"):
            summary = timed[f"{part}/{row}"]
            rows[row][part] = {
                **summary,
                "of_forward": harness.paired_rate_ratio(summary, forward),
                "time_vs_baseline": 1 / harness.paired_rate_ratio(
                    summary, timed[f"{part}/{BASELINE}"]) - 1,
            }
    return {"forward": forward, "rows": rows}


def seeds(settings: Settings, log) -> dict[str, Any]:
    """Whole updates of `fixed:0` with 1, 4, ... runs vmapped, timed in the same rounds.

    Memory: each count's program keeps its state on the device between calls (89 MB a seed at
    the `gpu` preset), and each call asks besides for what XLA's memory analysis of it gives:
    its temporary buffer, which grows with the seeds (1.4 GB a seed on an H200, 83.3 GiB at 64
    seeds), and its outputs. So every count is compiled first (largest first) and its need
    checked against the device's free memory with every kept program's state on it: a count
    that does not fit is recorded as not fitting, with the bytes it needs and those free, and
    its state let go; the others are still timed. The programs are warmed up largest first, so
    that an allocator that grows its pool as programs ask (XLA_PYTHON_CLIENT_PREALLOCATE=false,
    the campaign's setting) reserves the largest temporary buffer while the pool is smallest
    and the smaller ones reuse that space. A count whose warm-up call, or a round, still runs
    out of memory (the pool's fragments) is recorded with the error and the others are timed
    (again) without it. The counts kept are timed in alternating calls, as before.
    """
    config, updates = settings.config, settings.updates_per_call
    limit = None if settings.memory_limit_gib is None else int(settings.memory_limit_gib * GIB)
    counts = sorted(set(settings.seed_counts), reverse=True)
    programs: dict[int, harness.Compiled] = {}
    rows: dict[int, dict[str, Any]] = {}
    for n in counts:
        log(f"compiling updates of {n} vmapped seed(s)")
        try:
            programs[n] = compiled_update(config, n, updates)
        except Exception as error:  # noqa: BLE001  (out of memory is the measurement)
            if not harness.is_out_of_memory(error):
                raise
            rows[n] = {"fits": False, "memory": None,
                       "note": "does not fit (out of memory making its state or compiling)",
                       "error": f"{type(error).__name__}: {str(error)[:400]}"}
            log(f"{n} seed(s): {rows[n]['error']}")
            continue
        rows[n] = {"memory": harness.memory_analysis(programs[n].executable)}

    def drop(n: int, **why: Any) -> None:
        compiled = programs.pop(n)
        release_updates((config, n, updates))
        rows[n].update(fits=False, lower_s=round(compiled.lower_s, 3),
                       compile_s=round(compiled.compile_s, 3), **why)
        log(f"{n} seed(s): {why.get('note') or why.get('error')}")

    # The largest first: a count dropped lets its state go before the next is checked.
    for n in [n for n in counts if n in programs]:
        free, memory = harness.free_device_bytes(limit), rows[n]["memory"]
        rows[n]["free_bytes"] = free
        if free is not None and memory is not None and memory["call_bytes"] > free:
            drop(n, note=f"does not fit ({_gib(memory['call_bytes'])} GiB needed, "
                         f"{_gib(free)} GiB free)")
    for n in counts:
        if n in programs:
            log(f"warming up updates of {n} vmapped seed(s)")
            try:
                programs[n].warm_up()
            except Exception as error:  # noqa: BLE001  (out of memory is the measurement)
                if not harness.is_out_of_memory(error):
                    raise
                drop(n, note="does not fit (out of memory at its first call)",
                     error=f"{type(error).__name__}: {str(error)[:400]}")
    timed: dict[int, dict[str, Any]] = {}
    while programs:
        kept = sorted(programs)
        log(f"timing {len(kept)} seed count(s) {kept} in {settings.repeats} rounds")
        try:
            timed = dict(zip(kept, harness.timed_rounds([programs[n] for n in kept],
                                                        repeats=settings.repeats,
                                                        max_wait_s=settings.max_wait_s)))
            break
        except Exception as error:  # noqa: BLE001
            if not harness.is_out_of_memory(error):
                raise
            drop(kept[-1], note="does not fit (out of memory in the timed rounds)",
                 error=f"{type(error).__name__}: {str(error)[:400]}")
    release_updates()
    first = min(timed, default=None)
    for n, summary in timed.items():
        rows[n] = {"fits": True, **summary, **rows[n],
                   "of_first": harness.paired_rate_ratio(summary, timed[first])}
    return {"first_timed": first, "rows": {str(n): rows[n] for n in sorted(rows)}}


def capacity(settings: Settings, log) -> dict[str, Any]:
    """The largest model, then the largest batch, whose whole update compiles and runs: the
    width doubled (layers and heads kept) until an update fails (out of memory, typically
    RESOURCE_EXHAUSTED), then the prompts doubled at the preset's model, each fitting size timed
    over a few calls. Time-boxed (`capacity_s`, half for each search, whose first size is always
    tried, and measured once for both): a search stopped by time says so, and its largest size
    is then only the largest tried."""
    release_updates()
    out: dict[str, Any] = {}
    measured: dict[TokenConfig, dict[str, Any]] = {}  # the preset's size heads both ladders
    for ladder, field in (("model", "width"), ("batch", "prompts")):
        # Half the time box each; the preset's own size is always tried.
        began, tries, value, stopped = time.monotonic(), [], getattr(settings.config, field), \
            "doublings"
        for _ in range(settings.capacity_doublings + 1):
            if tries and time.monotonic() - began > settings.capacity_s / 2:
                stopped = "time"
                break
            config = settings.config.replace(**{field: value})
            try:
                validate(config)
            except ValueError as error:  # a size the testbed refuses is not one that ran out
                tries.append({field: value, "fits": None, "refused": str(error)})
                stopped = "refused"
                break
            if config not in measured:
                log(f"capacity: update with {field}={value}")
                measured[config] = _fits(config)
            tries.append({field: value, **measured[config]})
            if not measured[config]["fits"]:
                stopped = "failure"
                break
            value *= 2
        fitting = [t[field] for t in tries if t["fits"]]
        out[ladder] = {"field": field, "tries": tries, "stopped_by": stopped,
                       "largest_fitting": max(fitting) if fitting else None}
    return out


def _fits(config: TokenConfig) -> dict[str, Any]:
    """Whether one update of `config` compiles and runs; if it does, its rate over a few calls,
    compile time, size and memory, else the error."""
    try:
        compiled = harness.Compiled(update_program(config, 1, 1))
        [summary] = harness.timed_rounds([compiled], repeats=2, max_wait_s=0.0)
        return {"fits": True, "tokens_per_s": summary["steps_per_s"],
                "compile_s": compiled.lower_s + compiled.compile_s,
                "params": _param_count(config), "device_memory": summary["device_memory"]}
    except Exception as error:  # noqa: BLE001  (the failure is the measurement)
        return {"fits": False, "error": f"{type(error).__name__}: {str(error)[:400]}"}
    finally:
        jax.clear_caches()


def _param_count(config: TokenConfig) -> int:
    shapes = jax.eval_shape(TokenPolicy(config.model_spec).init, jax.random.PRNGKey(0))
    return int(sum(x.size for x in jax.tree.leaves(shapes)))


PARTS = {"throughput": throughput, "seeds": seeds, "capacity": capacity}


# ----------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="every row, with fewer timed calls and seeds 1 and 4")
    p.add_argument("--preset", default=None, choices=("quick", "full", "gpu", "tiny"),
                   help="settings preset (default: full, or quick with --quick)")
    p.add_argument("--only", default="throughput,seeds",
                   help=f"comma-separated parts to run, of {', '.join(PARTS)} (capacity: the "
                        f"largest model and batch that fit, for accelerators)")
    p.add_argument("--out", default=None, help="results JSON (default "
                   "benchmarks/results/tokens/<backend>-<date>[-quick].json)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--markdown", default=None, help="also write the tables to this file")
    for flag in ("prompts", "group_size", "layers", "width", "heads", "task_size", "context",
                 "buffer_capacity"):
        p.add_argument(f"--{flag.replace('_', '-')}", type=int, default=None,
                       help=f"TokenConfig.{flag} (default: the preset's)")
    p.add_argument("--task", default=None, choices=tasks.TASKS)
    p.add_argument("--seeds", default=None, help="comma-separated seed counts, e.g. 1,4,16")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per program")
    p.add_argument("--max-wait", type=float, default=None,
                   help="seconds to wait for other processes to leave the CPU before timing")
    p.add_argument("--memory-limit-gib", type=float, default=None,
                   help="device memory the seed counts may use; a count whose call needs more "
                        "(XLA's memory analysis) is recorded as not fitting (default: the "
                        "allocator's limit on a GPU, no check on a CPU)")
    args = p.parse_args(argv)
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        p.error(f"unknown part(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    settings = presets(jax.default_backend())[preset_name(args)]
    changes = {f: getattr(args, f) for f in ("prompts", "group_size", "layers", "width", "heads",
                                             "task_size", "context", "buffer_capacity", "task")
               if getattr(args, f) is not None}
    config = settings.config.replace(**changes)
    own: dict[str, Any] = {"config": config}
    if args.seeds is not None:
        own["seed_counts"] = tuple(int(n) for n in args.seeds.split(","))
    if args.repeats is not None:
        own["repeats"] = args.repeats
    if args.max_wait is not None:
        own["max_wait_s"] = args.max_wait
    if args.memory_limit_gib is not None:
        own["memory_limit_gib"] = args.memory_limit_gib
    return dataclasses.replace(settings, **own)


def preset_name(args: argparse.Namespace) -> str:
    return args.preset or ("quick" if args.quick else "full")


def default_out(preset: str) -> Path:
    name = f"{jax.default_backend()}-{datetime.date.today().isoformat()}"
    return (Path(__file__).resolve().parent / "results" / "tokens"
            / f"{name}{'' if preset == 'full' else '-' + preset}.json")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    settings = settings_from(args)
    validate(settings.config)
    out = Path(args.out) if args.out else default_out(preset_name(args))
    if not args.overwrite:
        existing = [str(p) for p in (out, args.markdown) if p is not None and Path(p).exists()]
        if existing:
            raise SystemExit(f"{', '.join(existing)} exists; pass --overwrite to replace it, "
                             f"or another --out")
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {message}", flush=True)

    results = {"machine": harness.machine(), "settings": settings.to_dict(), "parts": {}}
    log(f"{results['machine']['device_kind']} ({jax.default_backend()}); settings "
        f"{settings.name}; results -> {out}")
    for name in args.only.split(","):
        began = time.perf_counter()
        results["parts"][name] = PARTS[name](settings, log)
        results["parts"][name]["wall_s"] = round(time.perf_counter() - began, 1)
        io.write_json(out, results)
    harness.publish(markdown(results), args.markdown, out, log)
    return results


if __name__ == "__main__":
    main()
