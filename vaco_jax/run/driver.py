"""The chunked driver: runs vmapped seeds chunk by chunk with progress, checkpoints and outputs.

The driver serves every testbed (`vaco_jax.testbeds`), the one its config names, in
three parts: its compiled programs (`vaco_jax.run.program`: jit, vmap over runs, sharding over
devices, compilation in the background), its runs' record (`vaco_jax.run.run_record`: identity,
resume, result files) and the chunk loop (`vaco_jax.run.chunks`), which the progress bar, the
divergence messages and a caller's `on_chunk` observe.

With `progress`, a driver that compiles says so on stderr (`compiling the training program
...`, then `compiled in S s`), and its bar counts one run's steps (per seed, named by the
testbed's `steps_name`), its rate and ETA measured from the first chunk on, compiling excluded.
A driver sharing another's programs (`with_runs`, a sweep's prefetched group) compiles nothing
and says nothing of it.

The folder's manifest (`vaco_jax.infra.manifest`) records the files a run writes, and overwriting
removes exactly them, refusing a folder that holds anything else; the process holds the
folder's lock (`vaco_jax.infra.lock`) while it runs, so no other process writes there. A resume
needs nothing but the folder, and shortens its last chunk to the run's end.

The first SIGTERM or SIGINT during `run` stops it after the current chunk and its checkpoint
(`Interrupted` is raised, saying what is saved); a second one exits at once, which every write
survives since each is atomic (`vaco_jax.run.signals`). Test hook:
`VACO_JAX_TEST_FAULT=SIGNAL@POINT:STEP` (e.g. `SIGKILL@checkpoint:2`) makes the process send
itself SIGNAL at POINT, one of `compile` (before the first chunk is compiled; STEP 0), `chunk`
(after chunk STEP ran, before anything of it is written) and `checkpoint` (inside the write of
the checkpoint of period STEP, before its commit). Fault-injection tests use it to interrupt a
run at exact points.

Several processes (`vaco_jax.run.distributed`): each process runs the same driver on the same
runs and gathers every run's metrics. Only process 0 locks, reads and writes the folder. A stop
signal that reaches any process while the runs train stops all of them after the same chunk;
outside the chunks it stops that process at once, and the others fail at their next collective
(`docs/multi_process.md`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from tqdm.auto import tqdm

from vaco_jax import testbeds
from vaco_jax.core.config import Config, HParamsBase, check_seeds
from vaco_jax.infra import io, run_folder
from vaco_jax.infra.faults import fault_point
from vaco_jax.core import config_compat as compat
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.run.chunks import (ChunkCallback, ChunkObserver, DivergenceMessages, ProgressBar,
                                 Session, train_chunks)
from vaco_jax.run.distributed import agreed_signal, from_process_0, is_writer
from vaco_jax.infra.lock import folder_lock
from vaco_jax.run.program import Program
from vaco_jax.run.run_record import RunRecord, Timing, TrainingResult
from vaco_jax.run.signals import Interrupted, StopRequests, raise_if_interrupted

DEFAULT_KEEP_CHECKPOINTS = 2


def _chunk_periods(num_periods: int, requested: int | None) -> int:
    """The largest divisor of `num_periods` not above the requested chunk length, so every
    chunk has the same length and the program compiles once."""
    target = requested if requested is not None else max(1, num_periods // 10)
    target = max(1, min(target, num_periods))
    return max(d for d in range(1, target + 1) if num_periods % d == 0)


class Driver:
    """Runs one config for several runs (`seeds[i]` with `hparams[i]`) in one program, on the
    testbed the config belongs to (`ControlConfig`: control, `TokenConfig`: tokens).

    `devices` are the devices the runs axis may be sharded over (default: `jax.devices()`).
    A driver holds its programs (`program`, which drivers made by `with_runs` share, the one
    owner of what they compiled) and its runs' record (`record`, immutable); running it replaces
    neither.
    """

    def __init__(self, config: Config, hparams: HParamsBase, seeds: Sequence[int],
                 devices: Sequence[jax.Device] | None = None):
        testbed = testbeds.named(config.testbed)
        self.record = _record(testbed, config, hparams, seeds)
        self.program = Program(testbed, config, len(self.record.seeds), devices)

    # What the runs are, as their record holds it.
    testbed = property(lambda self: self.record.testbed)
    config = property(lambda self: self.record.config)
    hparams = property(lambda self: self.record.hparams)
    seeds = property(lambda self: self.record.seeds)

    @property
    def num_runs(self) -> int:
        return len(self.seeds)

    def with_runs(self, hparams: HParamsBase, seeds: Sequence[int]) -> Driver:
        """A driver of other runs (as many as this one's) that shares this driver's compiled
        programs, so it starts without compiling again."""
        if len(seeds) != self.num_runs:
            raise ValueError(f"with_runs needs {self.num_runs} seeds (this driver's number of "
                             f"runs), got {len(seeds)}")
        other = copy.copy(self)  # the same program, shared on purpose
        other.record = _record(self.testbed, self.config, hparams, seeds)
        return other

    @classmethod
    def from_run_dir(cls, out_dir: str | os.PathLike) -> Driver:
        """Rebuilds the driver of the run saved in `out_dir` (from its `config.json`)."""
        saved = from_process_0(lambda: run_folder.saved_config(Path(out_dir)))
        try:
            testbed = testbeds.named(saved["testbed"])
            hparams = testbed.hparams.create(**{k: jnp.asarray(v, jnp.float32)
                                                for k, v in saved["hparams"].items()})
            return cls(compat.recorded_config(testbed.config, saved["config"]), hparams,
                       saved["seeds"])
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"cannot resume: {str(Path(out_dir) / run_folder.CONFIG_FILE)!r} does not "
                             f"describe a run ({type(error).__name__}: {error}); start the run "
                             f"again with --overwrite") from None

    def compile(self, chunk_periods: int | None = None) -> None:
        """Compiles the programs `run(chunk_periods=...)` uses ahead of time (running the
        initial state), so that `run`, also of drivers made by `with_runs`, starts without
        compiling."""
        self.program.compile(self.seeds, self.hparams,
                             _chunk_periods(self.config.num_periods, chunk_periods))

    def run(self, out_dir: str | os.PathLike | None = None, *, chunk_periods: int | None = None,
            max_chunks: int | None = None, until_updates: int | None = None,
            resume: bool = False, overwrite: bool = False,
            keep: Sequence[str] = (), keep_checkpoints: int | None = None, progress: bool = True,
            on_chunk: Callable[[TrainingResult], None] | None = None,
            on_start: Callable[[], None] | None = None) -> TrainingResult:
        """Trains every run to `config.num_updates` (or `max_chunks` chunks), writing results
        and checkpoints (the newest `keep_checkpoints`, default 2) into `out_dir` when given,
        which this process locks (`vaco_jax.infra.lock`); `overwrite` replaces a run there,
        refusing a folder that holds files vaco_jax did not write but the `keep` ones.
        `on_chunk` sees the result after each chunk (written and checkpointed), `on_start` is
        called once the folder is accepted, before compiling. A resumed run takes the chunk
        length and checkpoint count it was started with unless given. `until_updates` stops the
        runs once they reach that many updates (a slice of a longer run, continued later by a
        resume), rounded up to whole chunks."""
        out = None if out_dir is None else Path(out_dir)
        writes = out is not None and is_writer()
        with folder_lock(out) if writes else contextlib.nullcontext():
            if writes and not resume:
                io.prepare_output_dir(out, overwrite=overwrite, keep=keep,
                                      writes=run_folder.RUN_WRITES)
            return self._run_in(out, resume=resume, chunk_periods=chunk_periods,
                                max_chunks=max_chunks, until_updates=until_updates,
                                keep_checkpoints=keep_checkpoints,
                                progress=progress, on_chunk=on_chunk, on_start=on_start)

    def _run_in(self, out: Path | None, *, resume: bool, chunk_periods: int | None,
                max_chunks: int | None, until_updates: int | None,
                keep_checkpoints: int | None, progress: bool,
                on_chunk: Callable[[TrainingResult], None] | None,
                on_start: Callable[[], None] | None) -> TrainingResult:
        cfg, record, program = self.config, self.record, self.program
        options = {"chunk_periods": chunk_periods, "keep_checkpoints": keep_checkpoints}
        if out is not None and resume:
            saved = from_process_0(lambda: record.check_resumable(out))
            record = record.resumed(saved)
            options = {k: v if v is not None else saved.get("run_options", {}).get(k)
                       for k, v in options.items()}
        per_chunk = _chunk_periods(cfg.num_periods, options["chunk_periods"])
        keep = options["keep_checkpoints"] or DEFAULT_KEEP_CHECKPOINTS
        checkpoints = None
        if out is not None:
            if not resume and is_writer():
                record.start_folder(out, {"chunk_periods": per_chunk, "keep_checkpoints": keep})
            checkpoints = Checkpoints(out / run_folder.CHECKPOINT_DIR, record.identity, keep=keep,
                                      writer=is_writer())
            if resume:
                from_process_0(checkpoints.check_usable)
        if on_start is not None:
            on_start()
        # Restored and compiled before stops are deferred: nothing is trained yet that a stop
        # at once (`vaco_jax.run.signals`) loses.
        fault_point("compile", 0)
        # Before compiling starts, so that a warm start (a token run's, trained or read from
        # its cache) says so before, and does not count as, compiling.
        shapes = program.state_shapes(self.seeds, self.hparams)
        announce = progress and not program.compiled  # a sweep's prefetched group: silent
        if announce:
            _say("compiling the training program ...")
        start = time.perf_counter()
        # A resumed run's first chunk length is known once its checkpoint is read.
        chunk_compiling = (None if resume else
                           program.start_chunk_compile(shapes, self.hparams, per_chunk))
        state, metrics = program.initial(self.seeds, self.hparams)
        compile_seconds = time.perf_counter() - start
        raise_if_interrupted()
        periods_done = 0
        restored = (record.restore(checkpoints, state, metrics)
                    if resume and checkpoints is not None else None)
        if restored is not None:
            periods_done, host_state, metrics = restored
            # Placed like a fresh state, so the compiled chunk program of a fresh run serves a
            # resumed one too.
            state = program.place(host_state)
        if resume and out is not None and is_writer():
            run_folder.read_status(out)  # warns about a damaged one, rewritten below
            record.write(out, record.result(metrics, state, periods_done))
        if periods_done < cfg.num_periods:
            periods = min(per_chunk, cfg.num_periods - periods_done)
            start = time.perf_counter()
            program.compile_chunk(state, self.hparams, periods, chunk_compiling)
            compile_seconds += time.perf_counter() - start
        if announce:
            _say(f"compiled in {compile_seconds:.1f} s")
        raise_if_interrupted()
        updates_before = periods_done * cfg.updates_per_period
        if until_updates is not None:
            max_chunks = _chunks_until(until_updates, cfg.updates_per_period, periods_done,
                                       per_chunk, max_chunks)
        observers: list[ChunkObserver] = [ProgressBar(self.testbed, cfg, shown=progress),
                                          DivergenceMessages(self.seeds)]
        if on_chunk is not None:
            observers.append(ChunkCallback(on_chunk))
        with StopRequests() as stop:
            start = time.perf_counter()
            result = train_chunks(program, record, state, metrics, periods_done, Session(
                out=out, checkpoints=checkpoints, stop=stop, per_chunk=per_chunk,
                max_chunks=max_chunks), observers)
            signum = agreed_signal(stop.signum)
            if signum is not None and not result.finished:
                raise Interrupted(signum, record.saved(result, checkpoints))
        return dataclasses.replace(result, timing=Timing(
            compile_seconds, time.perf_counter() - start, result.updates_done - updates_before))


def _chunks_until(until_updates: int, updates_per_period: int, periods_done: int,
                  per_chunk: int, max_chunks: int | None) -> int:
    """The chunks that take runs at `periods_done` to `until_updates` updates (none if there
    already), no more than `max_chunks`."""
    periods_left = max(0, -(-until_updates // updates_per_period) - periods_done)
    chunks = -(-periods_left // per_chunk)
    return chunks if max_chunks is None else min(chunks, max_chunks)


def _record(testbed: testbeds.AnyTestbed, config: Config, hparams: HParamsBase,
            seeds: Sequence[int]) -> RunRecord:
    """The record of these runs, their seeds and hyper-parameters checked (`hparams` leaves
    scalars or one value per seed) before anything is compiled."""
    seeds = check_seeds(seeds)
    testbed.validate(config, None)  # the algorithm known before its knobs are asked
    # The runs hold the knobs they read, and only those: a loss reading another fails to trace.
    hparams = _broadcast_hparams(hparams.only(testbed.knobs(config)), len(seeds))
    testbed.validate(config, hparams)
    return RunRecord(testbed, config, seeds, hparams)


def _say(message: str) -> None:
    """A progress message on stderr, where the bars are (any bar under way is redrawn below)."""
    tqdm.write(message, file=sys.stderr)



def _broadcast_hparams(hparams: HParamsBase, num_runs: int) -> HParamsBase:
    def expand(x):
        x = jnp.asarray(x, jnp.float32)
        if x.ndim == 0:
            return jnp.broadcast_to(x, (num_runs,))
        if x.shape != (num_runs,):
            raise ValueError(f"hyper-parameter leaves must be scalars or have shape ({num_runs},) "
                             f"(one value per seed), got shape {x.shape}")
        return x
    return jax.tree.map(expand, hparams)


def train(config: Config, hparams: HParamsBase | None = None, seeds: Sequence[int] = (0,),
          out_dir: str | os.PathLike | None = None, **run_options) -> TrainingResult:
    """Convenience entry point: `Driver(config, hparams, seeds).run(out_dir, **run_options)`,
    the testbed's default hyper-parameters where `hparams` is None."""
    if hparams is None:
        hparams = testbeds.named(config.testbed).hparams.create()
    return Driver(config, hparams, seeds).run(out_dir, **run_options)
