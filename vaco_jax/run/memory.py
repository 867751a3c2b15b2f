"""Memory estimates of runs and the budgets they must fit, checked before anything is allocated.

A run's estimate comes from the abstract shapes of its train state and of one update's rollout
(`jax.eval_shape`: traced, never allocated nor compiled), so a run far too large for the
machine (say `num_envs = 100_000_000`) is refused in well under a second, before its folder is
written, rather than failing, or swapping the machine, once its arrays are allocated.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax import testbeds
from vaco_jax.core.config import Config

SAFETY_FACTOR = 4.0
"""Estimated run memory = (train state + one update's rollout) x this: it covers the input and
output state of a chunk, the phase batch with its shuffled minibatch copies, activations and
gradients."""
DEVICE_MEMORY_FRACTION = 0.9
HOST_MEMORY_FRACTION = 0.5
"""The share of the available host memory runs may hold: the rest is left to the transient
copies of what they hold (the metrics table written after each chunk, a checkpoint's
serialisation) and to the other processes of the machine."""
METRIC_BYTES = np.dtype(np.float32).itemsize
"""Bytes of one metric value the driver keeps on the host (its metrics arrays are float32)."""
SIZE_FIELDS = {
    "control": ("num_envs", "rollout_length", "buffer_capacity", "actor_hidden",
                "critic_hidden"),
    "tokens": ("prompts", "group_size", "context", "width", "layers", "buffer_capacity"),
}
"""Per testbed, the config fields a run's memory grows with, which a refusal names."""
LENGTH_FIELDS = {"control": "total_steps", "tokens": "num_updates"}
"""Per testbed, the config field a run's length is set by: its metrics on the host grow with it."""


@dataclasses.dataclass(frozen=True)
class RunMemory:
    """One run's estimated bytes: `device`, while it trains; `host`, what the driver keeps of
    it on the host (its metrics and a train state copied for checkpoints)."""

    device: int
    host: int


def _nbytes(tree: Any) -> int:
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def run_memory(config: Config, hparams: Any) -> RunMemory:
    """Estimated memory of one run (`hparams` unbatched), from abstract shapes only: the
    device holds the train state and one update's collected data (times `SAFETY_FACTOR`); the
    host, a copy of the state and one float32 row of `num_updates + 1` values per metric. The
    trainer's `state_shapes` traces without its initial parameters, so a token run's warm start
    is neither trained nor read."""
    testbed = testbeds.named(config.testbed)
    trainer = testbed.trainer(config)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    state = trainer.state_shapes(key, hparams)
    _, data = jax.eval_shape(trainer.collect, state, key, hparams)
    metrics = len(testbed.metrics) * (config.num_updates + 1) * METRIC_BYTES
    return RunMemory(device=int(SAFETY_FACTOR * (_nbytes(state) + _nbytes(data))),
                     host=_nbytes(state) + metrics)


def _available_host_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_memory_budget(device: jax.Device) -> int:
    """Bytes one device may give to runs: `DEVICE_MEMORY_FRACTION` of an accelerator's free
    memory pool; on CPU, `HOST_MEMORY_FRACTION` of the available host memory, shared by the
    local CPU devices."""
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(DEVICE_MEMORY_FRACTION * (stats["bytes_limit"] - stats.get("bytes_in_use", 0)))
    return int(HOST_MEMORY_FRACTION * _available_host_bytes() / jax.local_device_count())


def host_memory_budget() -> int:
    """Bytes the runs may keep on the host: `HOST_MEMORY_FRACTION` of its available memory."""
    return int(HOST_MEMORY_FRACTION * _available_host_bytes())


def runs_per_device(num_runs: int, num_devices: int) -> int:
    """The runs each device trains: the driver shards them over the largest number of the
    `num_devices` that divides `num_runs`, so an odd count of runs may land on one device."""
    used = max(d for d in range(1, min(num_devices, num_runs) + 1) if num_runs % d == 0)
    return num_runs // used


def size_advice(config: Config) -> str:
    """How to shrink a run of `config`: the fields its memory grows with."""
    return f"lower the run's size ({', '.join(SIZE_FIELDS[config.testbed])})"


def _size(num_bytes: int) -> str:
    """Bytes in the largest binary unit of which there is at least one."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes} B"


def _need(runs: str, count: int, each: int, memory: str) -> str:
    if count == 1:
        return f"one run needs about {_size(each)} of {memory}"
    return f"{count:,} {runs} need about {_size(count * each)} of {memory} ({_size(each)} each)"


def device_refusal(count: int, run_bytes: int, budget_bytes: int, advice: str) -> str:
    """Why `count` runs of `run_bytes` each do not fit one device's budget, and what to do."""
    return (f"{_need('runs per device', count, run_bytes, 'device memory')}, more than the "
            f"budget of {_size(budget_bytes)} per device; {advice}, or raise --memory-budget")


def host_refusal(count: int, run_bytes: int, budget_bytes: int, advice: str) -> str:
    """Why `count` runs keeping `run_bytes` each on the host do not fit its budget, and what
    to do."""
    return (f"{_need('runs', count, run_bytes, 'host memory')} for their metrics and "
            f"checkpoints, more than the host budget of {_size(budget_bytes)} "
            f"({HOST_MEMORY_FRACTION:.0%} of the available host memory); {advice}")


def check_memory(config: Config, hparams: Any, num_runs: int, *, budget_bytes: int | None = None,
                 devices: Sequence[jax.Device] | None = None) -> None:
    """Refuses `num_runs` runs of `config` with `hparams` (one run's, unbatched) that the
    driver could not hold: on each of `devices` (default `jax.devices()`) against
    `budget_bytes` (default `device_memory_budget`), and on the host against
    `host_memory_budget`. Raises `ValueError` with the estimate and the budget in one line."""
    if num_runs < 1:
        raise ValueError(f"num_runs must be a positive integer, got {num_runs}")
    devices = list(jax.devices() if devices is None else devices)
    budget = device_memory_budget(devices[0]) if budget_bytes is None else budget_bytes
    advice = f"{size_advice(config)} or the number of runs (--seeds)"
    estimate = run_memory(config, hparams)
    per_device = runs_per_device(num_runs, len(devices))
    if per_device * estimate.device > budget:
        raise ValueError(device_refusal(per_device, estimate.device, budget, advice))
    host_budget = host_memory_budget()
    if num_runs * estimate.host > host_budget:
        length = LENGTH_FIELDS[config.testbed]
        raise ValueError(host_refusal(
            num_runs, estimate.host, host_budget,
            f"shorten the run ({length}: {config.num_updates:,} updates keep a row of metrics "
            f"each), {advice}"))
