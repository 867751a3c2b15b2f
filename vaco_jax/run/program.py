"""The compiled programs of a driver's runs: the testbed trainer's `init`, `run` and evaluation,
each jitted and vmapped over runs, the runs axis sharded over the devices.

A chunk is a whole number of evaluation periods executed by one compiled call of the trainer's
`run`, vmapped over runs (seeds and hyper-parameter values). Each period's evaluation is scored
with the program that scores the initial state, so the evaluation compiles once, apart from the
chunk program.

A fresh run's chunk program compiles in a thread of its own, beside the compilation and run of
its initial state and update-0 evaluation (`vaco_jax.run.background`), in one process and when
no other compilation runs in the background. A Python caller interrupted meanwhile exits once
that compilation ends (the `vaco-jax` commands exit at once). JAX settings scoped with `with`
(`jax.default_matmul_precision(...)` and the like) hold in their own thread only: under one, the
run compiles its chunk program again in its own thread, with that setting, and the program
compiled beside goes unused.

Several accelerators: the runs axis is sharded over a 1-D mesh `("runs",)` of devices (by
default all of `jax.devices()`, the largest number of them that divides the number of runs), so
each device trains its share of the runs; on one device nothing is sharded. Across processes
(`vaco_jax.run.distributed`) `jax.devices()` lists the devices of every process, the number of
runs must be a multiple of the global device count, and each process supplies the shards its
devices hold.

A `Program[Config, HParams, State, Policy]` carries its testbed's types (`vaco_jax.testbeds`):
its hyper-parameters and states are the testbed's, each leaf with a leading runs axis.

One `Program` serves every driver of runs of its config and number (`Driver.with_runs`),
and it alone holds what it has compiled: the chunk lengths, and the initial-state program, built
once the warm start it starts from is resolved (`vaco_jax.run.warm_start`).
"""

from __future__ import annotations

from concurrent import futures
from typing import Any, Callable, Generic, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vaco_jax.core.trainer import ConfigT, HParamsT, PolicyT, StateT
from vaco_jax.run.background import background_work, in_background
from vaco_jax.run.distributed import host_copy, several
from vaco_jax.testbeds import Testbed
from vaco_jax.run.warm_start import starting_trainer

ZERO_AT_START = ("env_steps", "diverged")
"""Metrics the update-0 row holds as 0 (where the testbed has them): counters and flags."""

TreeT = TypeVar("TreeT")


class Program(Generic[ConfigT, HParamsT, StateT, PolicyT]):
    """The programs of `config` for `num_runs` runs, sharded over `devices` (default
    `jax.devices()`; `run_devices`)."""

    def __init__(self, testbed: Testbed[ConfigT, HParamsT, StateT, PolicyT], config: ConfigT,
                 num_runs: int,
                 devices: Sequence[jax.Device] | None = None):
        self.testbed, self.config = testbed, config
        self.devices = run_devices(num_runs, devices)
        self._sharding = (NamedSharding(Mesh(np.asarray(self.devices), ("runs",)),
                                        PartitionSpec("runs"))
                          if len(self.devices) > 1 else None)
        self._placement = {} if self._sharding is None else {"out_shardings": self._sharding}
        # Its `init` may still need a warm start, resolved by the first `_init_program`.
        self.trainer = testbed.trainer(config)
        self._score = jax.jit(jax.vmap(self.trainer.evaluation_score), **self._placement)
        self._run = jax.jit(jax.vmap(self.trainer.run, in_axes=(0, 0, None)), static_argnums=2,
                            **self._placement)
        # One period's `[R, ...]` tree of a chunk's evaluations `[R, periods, ...]`, the period
        # traced: one program, compiled with the chunk's (sliced eagerly, each period would
        # compile a program of its own in the foreground while the runs wait), and one period's
        # copy at a time.
        self._period = jax.jit(_period, **self._placement)
        self._init: Callable[[jax.Array, HParamsT], StateT] | None = None
        self._compiled_chunks: set[int] = set()

    @property
    def compiled(self) -> bool:
        """Whether it has compiled a chunk program: a driver sharing it compiles nothing."""
        return bool(self._compiled_chunks)

    def place(self, tree: TreeT) -> TreeT:
        """Shards the leading (runs) axis of every leaf over the devices; a no-op on one device.
        Every process holds all runs and hands over the shards of its own devices."""
        if self._sharding is None:
            return tree

        def place(x):
            host = np.asarray(x)
            return jax.make_array_from_callback(host.shape, self._sharding, lambda i: host[i])
        return jax.tree.map(place, tree)

    def _keys(self, seeds: Sequence[int], salt: int) -> jax.Array:
        return self.place(jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(s), salt))(
            jnp.asarray(seeds, jnp.uint32)))

    def _init_program(self) -> Callable[[jax.Array, HParamsT], StateT]:
        """The initial-state program. Its first call resolves the trainer's warm start (a token
        run's, read from its cache or trained now), which then says so before compiling starts
        and does not count as compiling."""
        if self._init is None:
            self._init = jax.jit(jax.vmap(starting_trainer(self.trainer).init),
                                 **self._placement)
        return self._init

    def state_shapes(self, seeds: Sequence[int], hparams: HParamsT) -> StateT:
        """The initial state's abstract shapes (with its shardings), computing nothing."""
        return jax.eval_shape(self._init_program(), self._keys(seeds, 0), self.place(hparams))

    def initial(self, seeds: Sequence[int],
                hparams: HParamsT) -> tuple[StateT, dict[str, np.ndarray]]:
        """The runs' initial state, and their metrics: NaN but the update-0 row, the initial
        evaluation."""
        state = self._init_program()(self._keys(seeds, 0), self.place(hparams))
        metrics = {name: np.full((len(seeds), self.config.num_updates + 1), np.nan, np.float32)
                   for name in self.testbed.metrics}
        metrics[self.testbed.score][:, 0] = host_copy(
            self._score(self.trainer.evaluation_of(state, self._keys(seeds, 1))))
        for name in ZERO_AT_START:
            if name in metrics:
                metrics[name][:, 0] = 0.0
        return state, metrics

    def compile(self, seeds: Sequence[int], hparams: HParamsT, periods: int) -> None:
        """Compiles the programs of `periods`-period chunks ahead of time (running `initial`)."""
        chunk_compiling = self.start_chunk_compile(self.state_shapes(seeds, hparams), hparams,
                                                   periods)
        state, _ = self.initial(seeds, hparams)
        self.compile_chunk(state, hparams, periods, chunk_compiling)

    def start_chunk_compile(self, shapes: StateT, hparams: HParamsT,
                            periods: int) -> futures.Future | None:
        """The compilation of the `periods`-period chunk program for states of `shapes`,
        started in a thread of its own so that it runs beside `initial`'s (which compiles and
        runs the first state and evaluation). None once it is compiled, across processes, where
        every process must compile and run its programs in the same order, and while another
        compilation runs in the background, as a sweep's next group does (the calling thread
        counts: a sweep's prefetch compiles in turn), since a third compilation at once slowed a
        sweep down."""
        if periods in self._compiled_chunks or several() or background_work():
            return None
        return in_background(self.compile_chunk, shapes, hparams, periods)

    def compile_chunk(self, state: StateT, hparams: HParamsT, periods: int,
                      chunk_compiling: futures.Future | None = None) -> None:
        """Compiles the `periods`-period chunk program for states like `state` (arrays or their
        abstract shapes), once `chunk_compiling` is done: JAX's caches hold the program it
        compiled from the shapes, shardings included, and serve it to the state's arrays."""
        if chunk_compiling is not None:
            chunk_compiling.result()
        lowered = self._run.lower(state, self.place(hparams), periods)
        lowered.compile()
        _, _, evaluations = lowered.out_info  # their shapes and shardings, traced once
        self._period.lower(evaluations, jax.ShapeDtypeStruct((), jnp.int32)).compile()
        self._compiled_chunks.add(periods)

    def run_chunk(self, state: StateT, placed_hparams: HParamsT,
                  periods: int) -> tuple[StateT, dict[str, np.ndarray], list[np.ndarray]]:
        """`periods` periods of every run from `state`, with `placed_hparams` (`place`d): the
        state, the per-update metrics `[R, periods x updates_per_period]` and each period's
        scores `[R]`, on the host."""
        state, metrics, evaluations = self._run(state, placed_hparams, periods)
        metrics = {name: host_copy(values) for name, values in metrics.items()}
        scores = [host_copy(self._score(self._period(evaluations, np.int32(p))))
                  for p in range(periods)]
        return state, metrics, scores


def _period(evaluations: Any, period: jax.Array) -> Any:
    """Period `period` of `evaluations` (leaves `[R, periods, ...]`): leaves `[R, ...]`."""
    return jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, period, 1, keepdims=False),
                        evaluations)


def run_devices(num_runs: int, devices: Sequence[jax.Device] | None) -> list[jax.Device]:
    """The first `d` of `devices` (default `jax.devices()`), `d` the largest count that divides
    `num_runs`, so every device trains the same number of runs."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must name at least one device")
    if jax.process_count() > 1 and num_runs % len(devices):
        raise ValueError(f"across {jax.process_count()} processes the number of runs "
                         f"({num_runs}) must be a multiple of the device count ({len(devices)})")
    count = max(d for d in range(1, min(len(devices), num_runs) + 1) if num_runs % d == 0)
    return devices[:count]
