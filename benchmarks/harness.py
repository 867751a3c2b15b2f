"""Measurement machinery shared by the sub-benchmarks: machine description, CPU load,
compile and steady-state timing of jitted programs, compile counting, host and device memory.

Timing rules, applied to every program alike:
- compilation is measured apart (`lower` = tracing + lowering, `compile` = XLA backend) and
  never counted in a throughput;
- one warm-up call of the compiled program follows; every timed call then starts from the state
  the warm-up reached and blocks on its whole output. Repeated calls thus do the same work: the
  cost of MJX physics depends on the state (constraint solver iterations, resets), and a state
  carried on from call to call would drift as the policy learns;
- programs that are compared are timed in alternating calls, so that both see the same spells
  of load from other processes on a shared machine;
- throughput uses the fastest timed call (the least disturbed); the median is recorded beside it;
- a comparison of two programs is the median over rounds of the ratio of their two rates in that
  round (`paired_rate_ratio`): adjacent calls share a spell of load, so the ratio of a round
  cancels most of it, where the ratio of two fastest calls may pair a quiet spell with a busy one.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import re
import resource
import statistics
import sys
import time
from importlib import metadata
from typing import Any, Callable

import jax

from vaco_jax.infra import io

_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_PACKAGES = ("jax", "jaxlib", "brax", "mujoco", "mujoco-mjx", "flax", "optax", "numpy")


# ----------------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    """Device, versions and host facts, recorded in every results file."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    devices = jax.devices()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind,
        "host": {"platform": platform.platform(), "processor": platform.processor(),
                 "cpu_count": os.cpu_count()},
        "versions": versions,
        "environment": {k: os.environ.get(k) for k in ("XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE",
                                                        "XLA_PYTHON_CLIENT_MEM_FRACTION",
                                                        "XLA_PYTHON_CLIENT_ALLOCATOR",
                                                        "TF_GPU_ALLOCATOR", "JAX_PLATFORMS")},
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }


# ----------------------------------------------------------------------------------- load
def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies over all cores from /proc/stat, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(interval_s: float = 0.5) -> float | None:
    """Cores kept busy by other processes over `interval_s` (this one is idle meanwhile)."""
    before = _cpu_times()
    time.sleep(interval_s)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def wait_for_quiet(max_wait_s: float, max_busy_cores: float = 0.5) -> dict[str, Any]:
    """Waits (at most `max_wait_s`) until other processes leave the CPU nearly idle, so timings
    are not shared with them; returns the load it measured at, which is recorded."""
    start = time.monotonic()
    while True:
        busy = busy_cores()
        waited = time.monotonic() - start
        if busy is None or busy <= max_busy_cores or waited >= max_wait_s:
            return {"loadavg_1min": round(os.getloadavg()[0], 2),
                    "busy_cores": None if busy is None else round(busy, 2),
                    "waited_s": round(waited, 1)}
        time.sleep(min(5.0, max(0.0, max_wait_s - waited)))


# ----------------------------------------------------------------------------------- memory
def proc_memory_mb(pid: int | str = "self") -> dict[str, float]:
    """The memory fields (`Vm...`, reported in KiB) of Linux's /proc/PID/status in MB, all from
    one read so that they describe one moment; empty off Linux, once the process has exited, or
    for a zombie (its memory fields are gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return {name: int(value.split()[0]) / 1024
                    for name, value in (line.split(":", 1) for line in f if ":" in line)
                    if name.startswith("Vm") and value.strip().endswith("kB")}
    except OSError:
        return {}


def rss_mb() -> float:
    """Current resident set size of this process."""
    return proc_memory_mb().get("VmRSS", float("nan"))


def peak_rss_mb() -> float:
    """Peak resident set size of this process image. Linux's `VmHWM` starts afresh at `exec`,
    whereas `getrusage`'s `ru_maxrss` keeps the high-water mark of the forking parent, so a
    child process started beside a large one would report the parent's peak."""
    peak = proc_memory_mb().get("VmHWM")
    if peak is not None:
        return peak
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max_rss / 1024 ** 2 if sys.platform == "darwin" else max_rss / 1024


def device_memory() -> dict[str, int] | None:
    """The allocator statistics of the first device (None where the backend has none, as CPU)."""
    stats = jax.devices()[0].memory_stats()
    if not stats:
        return None
    keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
    return {k: int(stats[k]) for k in keys if k in stats}


def free_device_bytes(limit_bytes: int | None = None) -> int | None:
    """Bytes a new allocation may still take on the first device: `limit_bytes` (default: the
    allocator's limit, which JAX sets at XLA_PYTHON_CLIENT_MEM_FRACTION of the device, 75%
    unless set) less the bytes in use (the allocator's count, else the live arrays' sizes).
    None where neither a limit is given nor the backend reports one (a CPU)."""
    stats = device_memory() or {}
    limit = limit_bytes if limit_bytes is not None else stats.get("bytes_limit")
    if limit is None:
        return None
    in_use = stats.get("bytes_in_use")
    if in_use is None:
        in_use = sum(a.nbytes for a in jax.live_arrays())
    return int(limit - in_use)


def memory_analysis(executable: Any) -> dict[str, int] | None:
    """XLA's memory analysis of a compiled program: the bytes of its arguments, outputs (those
    aliased to arguments apart) and temporary buffers, and `call_bytes`, what one call allocates
    beyond its arguments (temporaries and unaliased outputs). None where the backend gives no
    analysis."""
    try:
        stats = executable.memory_analysis()
    except Exception:  # noqa: BLE001  (not every backend or version implements it)
        return None
    if stats is None:
        return None
    fields = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
              "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
              "generated_code_bytes": "generated_code_size_in_bytes"}
    out = {name: int(getattr(stats, field, 0) or 0) for name, field in fields.items()}
    out["call_bytes"] = out["temp_bytes"] + out["output_bytes"] - out["alias_bytes"]
    return out


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is the device allocator's out-of-memory (XLA's RESOURCE_EXHAUSTED)."""
    return isinstance(error, Exception) and (
        "RESOURCE_EXHAUSTED" in str(error) or "Out of memory" in str(error))


# ----------------------------------------------------------------------------------- compiles
class CompileEvents:
    """Counts and times JAX compilation events while the context is open, and counts the
    persistent compilation cache's lookups and hits (`persistent_cache`: programs looked up in
    it and programs found there)."""

    CACHE_EVENTS = {"/jax/compilation_cache/compile_requests_use_cache": "looked_up",
                    "/jax/compilation_cache/cache_hits": "found"}

    def __init__(self):
        self.durations: dict[str, list[float]] = {e: [] for e in _COMPILE_EVENTS}
        self.cache = {name: 0 for name in self.CACHE_EVENTS.values()}
        self._active = False

    def _listen(self, event: str, duration: float, **_: Any) -> None:
        if self._active and event in self.durations:
            self.durations[event].append(duration)

    def _count(self, event: str, **_: Any) -> None:
        if self._active and event in self.CACHE_EVENTS:
            self.cache[self.CACHE_EVENTS[event]] += 1

    def __enter__(self) -> "CompileEvents":
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        jax.monitoring.register_event_listener(self._count)
        self._active = True
        return self

    def __exit__(self, *exc) -> None:
        self._active = False
        jax.monitoring.unregister_event_duration_listener(self._listen)
        jax.monitoring.unregister_event_listener(self._count)

    def summary(self) -> dict[str, Any]:
        trace, lower, backend = (self.durations[e] for e in _COMPILE_EVENTS)
        return {"backend_compiles": len(backend), "trace_s": round(sum(trace), 3),
                "lower_s": round(sum(lower), 3), "backend_compile_s": round(sum(backend), 3),
                "persistent_cache": dict(self.cache)}


# ----------------------------------------------------------------------------------- timing
@dataclasses.dataclass
class Program:
    """A jitted program, its first arguments, and how one call's output feeds the next call."""

    fn: Callable  # a `jax.jit`-ed function
    args: tuple
    advance: Callable[[tuple, Any], tuple]
    steps_per_call: int  # environment steps one call performs (all seeds together)


class Compiled:
    """`program` compiled (timed) and warmed up, ready for timed calls."""

    def __init__(self, program: Program, warm_up: bool = True):
        self.program = program
        start = time.perf_counter()
        lowered = program.fn.lower(*program.args)
        lowered_at = time.perf_counter()
        self.executable = lowered.compile()
        self.lower_s = lowered_at - start
        self.compile_s = time.perf_counter() - lowered_at
        self.args = program.args
        self.warmed_up = False
        if warm_up:
            self.warm_up()

    def warm_up(self) -> None:
        """The warm-up call (once; later calls do nothing): first-call allocations and transfers
        stay out of the timings, and training programs reach a state with policy versions
        pushed, from which every timed call starts. The first arguments are then let go (the
        program keeps none), so that the device holds one state per program, not two."""
        if self.warmed_up:
            return
        self.call(carry_on=True)
        self.program = dataclasses.replace(self.program, args=())
        self.warmed_up = True

    def call(self, carry_on: bool = False) -> float:
        """Runs one call from `self.args`; `carry_on` makes its output the next call's input."""
        start = time.perf_counter()
        out = jax.block_until_ready(self.executable(*self.args))
        elapsed = time.perf_counter() - start
        if carry_on:
            self.args = self.program.advance(self.args, out)
        return elapsed


_WHILE = re.compile(r"\bwhile\(")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def xla_counts(executable: Any) -> dict[str, Any]:
    """XLA's cost analysis of a compiled program (floating-point operations, bytes accessed,
    transcendentals per call), the loops left in its optimised module and their known trip
    counts. XLA counts the body of a loop once, whatever its trip count."""
    cost = executable.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})
    text = executable.as_text()
    return {"flops": float(cost.get("flops", 0.0)),
            "bytes": float(cost.get("bytes accessed", 0.0)),
            "transcendentals": float(cost.get("transcendentals", 0.0)),
            "while_loops": len(_WHILE.findall(text)),
            "loop_trip_counts": sorted(int(n) for n in _TRIP_COUNT.findall(text))}


def timed_rounds(programs: list[Compiled], *, repeats: int,
                 max_wait_s: float) -> list[dict[str, Any]]:
    """`repeats` rounds of one call of each program in turn, so that programs compared with each
    other share the same spells of load; one summary per program."""
    load = wait_for_quiet(max_wait_s)
    calls: list[list[float]] = [[] for _ in programs]
    for _ in range(repeats):
        for program, times in zip(programs, calls):
            times.append(program.call())
    after = round(os.getloadavg()[0], 2)
    return [_summary(p, times, load, after) for p, times in zip(programs, calls)]


def paired_rate_ratio(candidate: dict[str, Any], baseline: dict[str, Any]) -> float:
    """Median over rounds of candidate steps/s over baseline steps/s, for two summaries of the
    same `timed_rounds` (whose rounds pair their calls)."""
    steps = candidate["steps_per_call"] / baseline["steps_per_call"]
    pairs = zip(candidate["calls_s"], baseline["calls_s"], strict=True)
    return statistics.median(steps * b / c for c, b in pairs)


def _summary(compiled: Compiled, calls: list[float], load: dict[str, Any],
             load_after: float) -> dict[str, Any]:
    steps = compiled.program.steps_per_call
    return {
        "lower_s": round(compiled.lower_s, 3),
        "compile_s": round(compiled.compile_s, 3),
        "calls_s": [round(c, 4) for c in calls],
        "steps_per_call": steps,
        "steps_per_s": steps / min(calls),
        "steps_per_s_median": steps / statistics.median(calls),
        "load": load,
        "load_after": load_after,
        "device_memory": device_memory(),
    }


def publish(text: str, markdown_path: str | None, out: Any, log: Callable[[str], None]) -> None:
    """Prints a benchmark's Markdown tables, also writes them to `markdown_path` if given, and
    says where the results are."""
    print("\n" + text, flush=True)
    if markdown_path:
        io.write_text(markdown_path, text)
    log(f"done; results in {out}")
