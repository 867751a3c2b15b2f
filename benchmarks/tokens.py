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
import jax.numpy as jnp  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.programs import seed_keys  # noqa: E402
from benchmarks.tables import _compile, _load, _percent, _rate, _ratio, _table  # noqa: E402
from vaco_jax.infra import io  # noqa: E402
from vaco_jax.core.lag_models import Fixed, InFlight, Uniform  # noqa: E402
from vaco_jax.core.policy_buffer import push  # noqa: E402
from vaco_jax.tokens import tasks  # noqa: E402
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate  # noqa: E402
from vaco_jax.tokens.model import TokenPolicy  # noqa: E402
from vaco_jax.tokens.train import TokenTrainer  # noqa: E402

BASELINE = "fixed:0"
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
    # The accelerator sizes; `gpu` is also the GPU campaign's (`benchmarks/gpu_campaign.py`).
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


# ----------------------------------------------------------------------------------- programs
def _tokens(config: TokenConfig) -> int:
    """Response tokens of one generation or update."""
    return config.batch_size * config.response_length


def _start(config: TokenConfig, num_seeds: int) -> tuple[TokenTrainer, TokenHParams, Any]:
    """A trainer of `config` (random parameters: the cost does not depend on their values) and
    `num_seeds` initial states whose buffers hold K versions, so that no lag is capped."""
    params = TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0))
    trainer = TokenTrainer(config, params)
    lag = 0.0 if isinstance(config.lag_model, Fixed) else float(config.buffer_capacity - 1)
    hp = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_seeds,)), TokenHParams.create(lag=lag))
    state = jax.jit(jax.vmap(trainer.init))(seed_keys(num_seeds), hp)
    for _ in range(config.buffer_capacity - 1):
        state = state.replace(buffer=jax.vmap(push)(state.buffer, state.params))
    return trainer, hp, state


def forward_program(config: TokenConfig, batches: int) -> harness.Program:
    """`batches` teacher-forced passes over P x G prompt+response sequences."""
    policy = TokenPolicy(config.model_spec)
    params = policy.init(jax.random.PRNGKey(0))
    length = config.task_spec.prompt_length + config.response_length
    sequences = jax.random.randint(jax.random.PRNGKey(1), (batches, config.batch_size, length),
                                   0, tasks.VOCAB_SIZE)

    def chunk(params, sequences):  # every batch's logits returned: none is dead code
        return jax.lax.scan(lambda _, s: (None, policy.logits(params, s)), None, sequences)[1]

    return harness.Program(fn=jax.jit(chunk), args=(params, sequences),
                           advance=lambda args, out: args,
                           steps_per_call=batches * _tokens(config))


def generate_program(config: TokenConfig, batches: int) -> harness.Program:
    """`batches` generations (prompts, lags, stale sampling, rewards, advantages, phase-start
    log-probs) from the same state, each with its own key."""
    trainer, hp, state = _start(config, 1)

    def chunk(state, hp):
        keys = jax.random.split(state.key, batches)
        return jax.lax.scan(lambda _, k: (None, trainer.collect(state, k, hp)[1]), None, keys)[1]

    return harness.Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                           advance=lambda args, out: args,
                           steps_per_call=batches * _tokens(config))


def update_program(config: TokenConfig, num_seeds: int, updates: int) -> harness.Program:
    """`updates` training updates (generation and optimisation) of `num_seeds` runs per call."""
    trainer, hp, state = _start(config, num_seeds)

    def chunk(state, hp):
        return jax.lax.scan(lambda s, _: trainer.update(s, hp), state, None, length=updates)

    return harness.Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                           advance=lambda args, out: (out[0], args[1]),
                           steps_per_call=num_seeds * updates * _tokens(config))


_UPDATES: dict[tuple[TokenConfig, int, int], harness.Compiled] = {}


def compiled_update(config: TokenConfig, num_seeds: int, updates: int) -> harness.Compiled:
    """`update_program` compiled (not yet warmed up: `.warm_up()`) once until `seeds` has run:
    its one-seed program is `throughput`'s `fixed:0` update. Each holds its state on the device,
    so `release_updates` lets them go after `seeds` and before `capacity`, which measures what
    fits."""
    key = (config, num_seeds, updates)
    if key not in _UPDATES:
        _UPDATES[key] = harness.Compiled(update_program(config, num_seeds, updates),
                                         warm_up=False)
    return _UPDATES[key]


def release_updates(*keys: tuple[TokenConfig, int, int]) -> None:
    """Lets the programs of `compiled_update` (those of `keys`, or every one) and their device
    state go."""
    for key in keys or list(_UPDATES):
        _UPDATES.pop(key, None)


# ----------------------------------------------------------------------------------- measurements
def flops_fields(compiled: harness.Compiled, summary: dict[str, Any], calls_inside: int,
                 decodes: bool) -> dict[str, Any]:
    """XLA's count of the program's operations per call, the rate its fastest call reached, and
    the model FLOPs utilisation against the device's published peak for fp32 matrix products
    (`benchmarks/hardware.py`; None on a device it does not know). XLA counts a loop's body
    once: the count of the scan over the call's `calls_inside` batches or updates is multiplied
    by it, and a program that `decodes` token by token keeps a loop whose body is counted once,
    so its count and utilisation are lower bounds (`loops_counted_once`)."""
    from benchmarks import hardware

    counts = harness.xla_counts(compiled.executable)
    if calls_inside > 1 and calls_inside not in counts["loop_trip_counts"]:
        # XLA unrolled or removed the scan the multiplication stands for: no count to trust.
        return {"xla_flops_per_call": None, "xla_bytes_per_call": None, "flops_per_s": None,
                "loops_counted_once": decodes, "peak_flops": None, "mfu": None,
                "note": f"no loop of {calls_inside} trips in the optimised program "
                        f"(trip counts {counts['loop_trip_counts']})"}
    flops = counts["flops"] * calls_inside
    per_s = flops * summary["steps_per_s"] / summary["steps_per_call"]
    peak = hardware.peak_for(jax.devices()[0].device_kind)
    return {"xla_flops_per_call": flops, "xla_bytes_per_call": counts["bytes"] * calls_inside,
            "flops_per_s": per_s, "loops_counted_once": decodes,
            "peak_flops": None if peak is None else peak.matrix_flops,
            "mfu": None if peak is None else per_s / peak.matrix_flops}


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


GIB = 2 ** 30


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


# ----------------------------------------------------------------------------------- tables
def markdown(results: dict[str, Any]) -> str:
    m, s = results["machine"], results["settings"]
    v, c = m["versions"], s["config"]
    lines = [
        f"- device: {m['device_kind']} (`{m['backend']}`, {len(m['devices'])} device(s)); host "
        f"{m['host']['cpu_count']} CPU cores; {m['date']}",
        f"- versions: jax {v['jax']}, jaxlib {v['jaxlib']}, flax {v['flax']}, optax "
        f"{v['optax']}, python {v['python']}",
        f"- command: `{m['command']}`",
        f"- settings `{s['name']}`: task {c['task']} (size {c['task_size']}), P x G = "
        f"{c['prompts']} x {c['group_size']}, {c['layers']} layers of width {c['width']} "
        f"({c['heads']} heads), K = {c['buffer_capacity']}, {c['epochs']} epoch(s) x "
        f"{c['minibatches']} minibatch(es); {s['batches_per_call']} forward passes or "
        f"generations, or {s['updates_per_call']} updates, per timed call; best of "
        f"{s['repeats']} calls after a warm-up call",
        "- load column: 1-minute load average / cores busy with other processes just before "
        "timing",
    ]
    parts = results["parts"]
    if "throughput" in parts:
        t = parts["throughput"]
        forward = t["forward"]
        table = [["forward pass alone (limit)", _rate(forward["steps_per_s"]), "1.00", "-", "-",
                  "-", "-", _compile(forward), _load(forward)]]
        for row, r in t["rows"].items():
            g, u = r["generate"], r["update"]
            table.append([row, _rate(g["steps_per_s"]), _ratio(g["of_forward"]),
                          _percent(g["time_vs_baseline"]), _rate(u["steps_per_s"]),
                          _ratio(u["of_forward"]), _percent(u["time_vs_baseline"]),
                          f"{_compile(g)} / {_compile(u)}", _load(g)])
        lines += ["", "#### Throughput (response tokens/s)", "",
                  _table(["acting", "generated tok/s (best)", "/ forward",
                          f"time vs {BASELINE}", "trained tok/s (best)", "/ forward",
                          f"time vs {BASELINE}", "compile s (generate / update)", "load"],
                         table),
                  "", "Ratios are medians over rounds of per-round ratios (programs timed in "
                  "alternating calls)."]
        if "mfu" in forward:
            mfu = [["forward pass", _tflops(forward), _mfu(forward)]]
            mfu += [[f"{part}, {row}", _tflops(r[part]), _mfu(r[part])]
                    for row, r in t["rows"].items() for part in ("generate", "update")]
            lines += ["", "#### Model FLOPs utilisation (XLA's count of each program)", "",
                      _table(["program", "TFLOP/s", "MFU"], mfu),
                      "", "`*`: the program keeps a loop (token-by-token decoding), whose body "
                      "XLA counts once: a lower bound."]
    if "capacity" in parts:
        lines += ["", "#### Largest model and batch whose update fits", ""]
        for ladder, r in parts["capacity"].items():
            if ladder == "wall_s":
                continue
            tries = ", ".join(f"{t[r['field']]}: " + (f"{_rate(t['tokens_per_s'])} tok/s"
                                                        if t["fits"] else "fails"
                                                        if t["fits"] is False else "refused")
                              for t in r["tries"])
            lines.append(f"- largest {ladder} ({r['field']}): {r['largest_fitting']} "
                         f"(stopped by {r['stopped_by']}; {tries})")
    if "seeds" in parts:
        rows = parts["seeds"]["rows"]
        table = [[n, _rate(r["steps_per_s"]), _rate(r["steps_per_s_median"]),
                  _ratio(r["of_first"]), _compile(r), _call_gib(r), _load(r)]
                 if r.get("fits", True) else
                 [n, r.get("note", "does not fit"), "-", "-",
                  _compile(r) if "compile_s" in r else "-", _call_gib(r), "-"]
                 for n, r in rows.items()]
        first = parts["seeds"].get("first_timed")
        lines += ["", f"#### Vmapped seeds ({BASELINE}, trained tokens/s of all seeds)", "",
                  _table(["seeds", "tok/s (best)", "tok/s (median)",
                          "x one seed (median of rounds)" if first in (None, 1) else
                          f"x {first} seeds (median of rounds)", "compile s",
                          "GiB a call asks (XLA)", "load"], table)]
    return "\n".join(lines)


def _call_gib(r: dict[str, Any]) -> str:
    """What one call allocates beyond its arguments, by XLA's memory analysis."""
    memory = r.get("memory")
    return "-" if not memory else _gib(memory["call_bytes"])


def _gib(n_bytes: int) -> str:
    gib = n_bytes / GIB
    return f"{gib:.1f}" if abs(gib) >= 0.1 else f"{gib:.2g}"


def _tflops(m: dict[str, Any]) -> str:
    return f"{m['flops_per_s'] / 1e12:.2f}" + ("*" if m.get("loops_counted_once") else "")


def _mfu(m: dict[str, Any]) -> str:
    return "-" if m.get("mfu") is None else f"{100 * m['mfu']:.1f}%" + (
        "*" if m.get("loops_counted_once") else "")


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
