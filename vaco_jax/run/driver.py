"""The chunked driver: runs vmapped seeds chunk by chunk with progress, checkpoints and outputs.

The driver serves every testbed (`vaco_jax.testbeds`), the one its config names. A
chunk is a whole number of evaluation periods executed by one compiled call of the testbed
trainer's `run`, vmapped over runs (seeds and hyper-parameter values). After each chunk the
driver scores its periods' evaluations with the program that scores the initial state, so the
evaluation compiles once, apart from the chunk program. Between chunks the driver updates the
progress bar, reports runs that diverged, writes the metrics so far and saves an Orbax
checkpoint of the complete state, so `resume=True` continues exactly where it stopped.

With `progress`, a driver that compiles says so on stderr (`compiling the training program
...`, then `compiled in S s`), and its bar counts one run's steps (per seed, named by the
testbed's `steps_name`), its rate and ETA measured from the first chunk on, compiling excluded.
A fresh run's chunk program compiles in a thread of its own, beside the compilation and run of
its initial state and update-0 evaluation (`vaco_jax.run.background`), in one process and when
no other compilation runs in the background. A Python caller interrupted meanwhile exits once
that compilation ends (the `vaco-jax` commands exit at once). JAX settings scoped with `with`
(`jax.default_matmul_precision(...)` and the like) hold in their own thread only: under one, the
run compiles its chunk program again in its own thread, with that setting, and the program
compiled beside goes unused.

Files written to the output folder:
- `config.json`: the testbed, its resolved config, each run's seed and hyper-parameters, and
  the provenance (package versions, code version, devices: `vaco_jax.infra.provenance`);
- `metrics.csv` and `metrics.parquet`: one row per run per update, plus an update-0 row holding
  the initial policy's evaluation;
- `status.json`: progress and, per run, whether and when it diverged;
- `checkpoint/`: the newest checkpoints (`vaco_jax.run.checkpoint`).

Config, status and every checkpoint carry the run's identity, a hash of its testbed, config,
seeds and hyper-parameters; `config.json` also holds the run options a resume needs (the chunk
length and the number of checkpoints kept), so `resume=True` needs nothing but the folder.
The folder's manifest (`vaco_jax.infra.manifest`) records these files, and overwriting removes
exactly them, refusing a folder that holds anything else; the process holds the folder's lock
(`vaco_jax.infra.lock`) while it runs, so no other process writes there. Resuming restores the newest intact checkpoint of this
run (skipping damaged ones with a warning), cuts the metrics back to it and shortens the last
chunk to the run's end.

The first SIGTERM or SIGINT during `run` stops it after the current chunk and its checkpoint
(`Interrupted` is raised, saying what is saved); a second one exits at once, which every write
survives since each is atomic (`vaco_jax.run.signals`). A run whose every seed diverged is
finished: it stops, and a resume trains it no further. Test hook: `VACO_JAX_TEST_FAULT=SIGNAL@POINT:STEP` (e.g. `SIGKILL@checkpoint:2`) makes
the process send itself SIGNAL at POINT, one of `compile` (before the first chunk is compiled;
STEP 0), `chunk` (after chunk STEP ran, before anything of it is written) and `checkpoint`
(inside the write of the checkpoint of period STEP, before its commit). Fault-injection tests use
it to interrupt a run at exact points.

Several accelerators: the runs axis is sharded over a 1-D mesh `("runs",)` of devices (by
default all of `jax.devices()`, the largest number of them that divides the number of runs), so
each device trains its share of the runs; on one device nothing is sharded. Several processes
(`vaco_jax.run.distributed`): `jax.devices()` lists the devices of every process, and each
process runs the same driver on the same runs (the number of runs must then be a multiple of
the global device count), supplies the shards its devices hold and gathers every run's metrics.
Only process 0 locks, reads and writes the folder: it saves the checkpoints, the state gathered
to it (so a checkpoint is the same whatever the number of processes that wrote it, and resumes
on any number), and on a resume it restores the newest one and sends it to the others. A stop
signal that reaches any process while the runs train stops all of them after the same chunk;
outside the chunks it stops that process at once, and the others fail at their next collective
(`docs/multi_process.md`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import sys
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from vaco_jax import testbeds
from vaco_jax.core.config import Config, check_seeds
from vaco_jax.infra.faults import fault_point
from vaco_jax.infra import io, manifest, run_folder
from vaco_jax.run import compat
from vaco_jax.run.background import background_work, in_background
from vaco_jax.run.distributed import (agreed_signal, from_process_0, host_copy, is_writer,
                                      several, shared_from_process_0)
from vaco_jax.run.checkpoint import Checkpoints
from vaco_jax.infra.lock import folder_lock
from vaco_jax.infra.provenance import provenance
from vaco_jax.infra.run_folder import latest_finite, warn
from vaco_jax.run.signals import Interrupted, StopRequests, raise_if_interrupted


DEFAULT_KEEP_CHECKPOINTS = 2
ZERO_AT_START = ("env_steps", "diverged")
"""Metrics the update-0 row holds as 0 (where the testbed has them): counters and flags."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock time of one `Driver.run` call."""

    # Compiling its programs, and computing the initial state and its first evaluation with
    # them (a warm start's training excluded).
    compile_seconds: float
    train_seconds: float  # its chunks, with their result files and checkpoints
    updates: int  # updates it trained (0 for a finished run resumed)


@dataclasses.dataclass
class TrainingResult:
    config: Config
    seeds: list[int]
    hparams: Any  # the testbed's hyper-parameters, leaves [R]
    metrics: dict[str, np.ndarray]  # [R, num_updates + 1]; row 0 is the initial evaluation
    diverged: np.ndarray  # [R] bool
    diverged_at: np.ndarray  # [R] int, -1 where the run stayed finite
    updates_done: int
    state: Any = None  # the trainer's state, leaves [R, ...]
    timing: Timing | None = None  # set on the result `Driver.run` returns

    @property
    def complete(self) -> bool:
        return self.updates_done == self.config.num_updates

    @property
    def finished(self) -> bool:
        """Complete, or stopped early because every run diverged: nothing is left to train."""
        return self.complete or bool(self.diverged.all())

    def table(self) -> pd.DataFrame:
        """One row per run per update (update 0 = initial evaluation)."""
        num_runs, rows = len(self.seeds), self.updates_done + 1
        frame = {"run": np.repeat(np.arange(num_runs), rows),
                 "seed": np.repeat(np.asarray(self.seeds), rows),
                 "update": np.tile(np.arange(rows), num_runs)}
        for name, values in self.metrics.items():
            frame[name] = values[:, :rows].reshape(-1)
        return pd.DataFrame(frame)


@dataclasses.dataclass(frozen=True)
class _Session:
    """What one `Driver.run` call fixes for its chunks: where results go and when to stop."""

    out: Path | None
    checkpoints: Checkpoints | None
    stop: StopRequests
    per_chunk: int  # evaluation periods per compiled call
    max_chunks: int | None
    progress: bool
    on_chunk: Callable[[TrainingResult], None] | None


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
    """

    def __init__(self, config: Config, hparams: Any, seeds: Sequence[int],
                 devices: Sequence[jax.Device] | None = None):
        self.testbed = testbeds.named(config.testbed)
        self.config = config
        self._recorded_identity: str | None = None
        self._set_runs(hparams, seeds)
        self.devices = _run_devices(self.num_runs, devices)
        self._sharding = (NamedSharding(Mesh(np.asarray(self.devices), ("runs",)),
                                        PartitionSpec("runs"))
                          if len(self.devices) > 1 else None)
        placement = {} if self._sharding is None else {"out_shardings": self._sharding}
        self.trainer = self.testbed.trainer(config)
        self._init = jax.jit(jax.vmap(self.trainer.init), **placement)
        self._score = jax.jit(jax.vmap(self.trainer.evaluation_score), **placement)
        self._run = jax.jit(jax.vmap(self.trainer.run, in_axes=(0, 0, None)), static_argnums=2,
                            **placement)
        # The chunk lengths compiled, shared with the drivers of `with_runs` as the programs are.
        self._compiled_chunks: set[int] = set()

    def _set_runs(self, hparams: Any, seeds: Sequence[int]) -> None:
        seeds = check_seeds(seeds)
        hparams = _broadcast_hparams(hparams, len(seeds))
        self.testbed.validate(self.config, hparams)
        self.hparams, self.seeds = hparams, seeds

    def with_runs(self, hparams: Any, seeds: Sequence[int]) -> "Driver":
        """A driver of other runs (as many as this one's) that shares this driver's compiled
        programs, so it starts without compiling again."""
        if len(seeds) != self.num_runs:
            raise ValueError(f"with_runs needs {self.num_runs} seeds (this driver's number of "
                             f"runs), got {len(seeds)}")
        other = copy.copy(self)
        other._set_runs(hparams, seeds)
        return other

    @classmethod
    def from_run_dir(cls, out_dir: str | os.PathLike) -> "Driver":
        """Rebuilds the driver of the run saved in `out_dir` (from its `config.json`)."""
        saved = from_process_0(lambda: run_folder.saved_config(Path(out_dir)))
        try:
            testbed = testbeds.named(saved["testbed"])
            hparams = testbed.hparams(**{k: jnp.asarray(v, jnp.float32)
                                         for k, v in saved["hparams"].items()})
            return cls(testbed.config.from_dict(saved["config"]), hparams, saved["seeds"])
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"cannot resume: {str(Path(out_dir) / run_folder.CONFIG_FILE)!r} does not "
                             f"describe a run ({type(error).__name__}: {error}); start the run "
                             f"again with --overwrite") from None

    @property
    def num_runs(self) -> int:
        return len(self.seeds)

    def _keys(self, salt: int) -> jax.Array:
        return self._place(jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(s), salt))(
            jnp.asarray(self.seeds, jnp.uint32)))

    def _place(self, tree: Any) -> Any:
        """Shards the leading (runs) axis of every leaf over the devices; a no-op on one device.
        Every process holds all runs and hands over the shards of its own devices."""
        if self._sharding is None:
            return tree

        def place(x):
            host = np.asarray(x)
            return jax.make_array_from_callback(host.shape, self._sharding, lambda i: host[i])
        return jax.tree.map(place, tree)

    def initial(self) -> tuple[Any, dict[str, np.ndarray]]:
        state = self._init(self._keys(0), self._place(self.hparams))
        metrics = {name: np.full((self.num_runs, self.config.num_updates + 1), np.nan, np.float32)
                   for name in self.testbed.metrics}
        metrics[self.testbed.score][:, 0] = host_copy(
            self._score(self.trainer.evaluation_of(state, self._keys(1))))
        for name in ZERO_AT_START:
            if name in metrics:
                metrics[name][:, 0] = 0.0
        return state, metrics

    def compile(self, chunk_periods: int | None = None) -> None:
        """Compiles the programs `run(chunk_periods=...)` uses ahead of time (running `initial`),
        so that `run`, also of drivers made by `with_runs`, starts without compiling."""
        periods = _chunk_periods(self.config.num_periods, chunk_periods)
        chunk_compiling = self._start_chunk_compile(self._state_shapes(), periods)
        state, _ = self.initial()
        self._compile_chunk(state, periods, chunk_compiling)

    def _state_shapes(self) -> Any:
        """The initial state's abstract shapes (with its shardings), computing nothing."""
        return jax.eval_shape(self._init, self._keys(0), self._place(self.hparams))

    def _start_chunk_compile(self, shapes: Any, periods: int) -> futures.Future | None:
        """The compilation of the `periods`-period chunk program for states of `shapes`,
        started in a thread of its own so that it runs beside `initial`'s (which compiles and
        runs the first state and evaluation). None once it is compiled, across processes, where
        every process must compile and run its programs in the same order, and while another
        compilation runs in the background, as a sweep's next group does (the calling thread
        counts: a sweep's prefetch compiles in turn), since a third compilation at once slowed a
        sweep down."""
        if periods in self._compiled_chunks or several() or background_work():
            return None
        return in_background(self._compile_chunk, shapes, periods)

    def _compile_chunk(self, state: Any, periods: int,
                       chunk_compiling: futures.Future | None = None) -> None:
        """Compiles the `periods`-period chunk program for states like `state` (arrays or their
        abstract shapes), once `chunk_compiling` is done: JAX's caches hold the program it
        compiled from the shapes, shardings included, and serve it to the state's arrays."""
        if chunk_compiling is not None:
            chunk_compiling.result()
        self._run.lower(state, self._place(self.hparams), periods).compile()
        self._compiled_chunks.add(periods)

    def run(self, out_dir: str | os.PathLike | None = None, *, chunk_periods: int | None = None,
            max_chunks: int | None = None, resume: bool = False, overwrite: bool = False,
            keep: Sequence[str] = (), keep_checkpoints: int | None = None, progress: bool = True,
            on_chunk: Callable[[TrainingResult], None] | None = None,
            on_start: Callable[[], None] | None = None) -> TrainingResult:
        """Trains every run to `config.num_updates` (or `max_chunks` chunks), writing results
        and checkpoints (the newest `keep_checkpoints`, default 2) into `out_dir` when given,
        which this process locks (`vaco_jax.infra.lock`); `overwrite` replaces a run there,
        refusing a folder that holds files vaco_jax did not write but the `keep` ones.
        `on_chunk` sees the result after each chunk (written and checkpointed), `on_start` is
        called once the folder is accepted, before compiling. A resumed run takes the chunk
        length and checkpoint count it was started with unless given."""
        out = None if out_dir is None else Path(out_dir)
        writes = out is not None and is_writer()
        with folder_lock(out) if writes else contextlib.nullcontext():
            if writes and not resume:
                io.prepare_output_dir(out, overwrite=overwrite, keep=keep,
                                      writes=run_folder.RUN_WRITES)
            return self._run_in(out, resume=resume, chunk_periods=chunk_periods,
                                max_chunks=max_chunks, keep_checkpoints=keep_checkpoints,
                                progress=progress, on_chunk=on_chunk, on_start=on_start)

    def _run_in(self, out: Path | None, *, resume: bool, chunk_periods: int | None,
                max_chunks: int | None, keep_checkpoints: int | None, progress: bool,
                on_chunk: Callable[[TrainingResult], None] | None,
                on_start: Callable[[], None] | None) -> TrainingResult:
        cfg = self.config
        options = {"chunk_periods": chunk_periods, "keep_checkpoints": keep_checkpoints}
        if out is not None and resume:
            saved = from_process_0(lambda: self._check_resumable(out))
            # The folder's checkpoints carry the identity its run was saved with, which a
            # record older than one of today's config fields hashed without that field.
            self._recorded_identity = saved.get("run_identity")
            options = {k: v if v is not None else saved.get("run_options", {}).get(k)
                       for k, v in options.items()}
        per_chunk = _chunk_periods(cfg.num_periods, options["chunk_periods"])
        keep = options["keep_checkpoints"] or DEFAULT_KEEP_CHECKPOINTS
        checkpoints = None
        if out is not None:
            if not resume and is_writer():
                manifest.record(out, run_folder.RUN_FILES)
                io.write_json(out / run_folder.CONFIG_FILE, {
                    **self.describe(), "run_identity": self.identity,
                    "run_options": {"chunk_periods": per_chunk, "keep_checkpoints": keep},
                    "provenance": provenance()})
            checkpoints = Checkpoints(out / run_folder.CHECKPOINT_DIR, self.identity, keep=keep,
                                      writer=is_writer())
            if resume:
                from_process_0(checkpoints.check_usable)
        if on_start is not None:
            on_start()
        # Restored and compiled before stops are deferred: nothing is trained yet that a stop
        # at once (`vaco_jax.run.signals`) loses.
        fault_point("compile", 0)
        # Traced before compiling starts, so that what a trainer computes eagerly while its state
        # is first traced (a token run's warm start, trained or read from its cache) says so
        # before, and does not count as, compiling; the call below reuses the trace.
        shapes = self._state_shapes()
        announce = progress and not self._compiled_chunks  # a sweep's prefetched group: silent
        if announce:
            _say("compiling the training program ...")
        start = time.perf_counter()
        # A resumed run's first chunk length is known once its checkpoint is read.
        chunk_compiling = None if resume else self._start_chunk_compile(shapes, per_chunk)
        state, metrics = self.initial()
        compile_seconds = time.perf_counter() - start
        raise_if_interrupted()
        periods_done = 0
        restored = (_restore(checkpoints, {"state": state, "metrics": metrics})
                    if resume and checkpoints is not None else None)
        if restored is not None:
            periods_done, tree = restored
            # Placed like a fresh state, so the compiled chunk program of a fresh run serves a
            # resumed one too.
            state = self._place(tree["state"])
            # In the testbed's order of metrics (the restored tree's keys are sorted).
            metrics = _cut_back({k: np.asarray(tree["metrics"][k]) for k in metrics},
                                periods_done * cfg.updates_per_period)
        if resume and out is not None and is_writer():
            run_folder.read_status(out)  # warns about a damaged one, rewritten below
            self._write(out, self._result(metrics, state, periods_done))
        if periods_done < cfg.num_periods:
            periods = min(per_chunk, cfg.num_periods - periods_done)
            start = time.perf_counter()
            self._compile_chunk(state, periods, chunk_compiling)
            compile_seconds += time.perf_counter() - start
        if announce:
            _say(f"compiled in {compile_seconds:.1f} s")
        raise_if_interrupted()
        updates_before = periods_done * cfg.updates_per_period
        with StopRequests() as stop:
            start = time.perf_counter()
            result = self._train(state, metrics, periods_done, _Session(
                out=out, checkpoints=checkpoints, stop=stop, per_chunk=per_chunk,
                max_chunks=max_chunks, progress=progress, on_chunk=on_chunk))
            signum = agreed_signal(stop.signum)
            if signum is not None and not result.finished:
                raise Interrupted(signum, self._saved(result, checkpoints))
        return dataclasses.replace(result, timing=Timing(
            compile_seconds, time.perf_counter() - start, result.updates_done - updates_before))

    def _saved(self, result: TrainingResult, checkpoints: Checkpoints | None) -> str:
        """What an interrupted run has saved, for its message."""
        done = f"stopped after update {result.updates_done} of {self.config.num_updates}"
        if checkpoints is None:
            return f"{done}; nothing is saved (no output folder)"
        steps = checkpoints.steps()
        if not steps:
            return (f"{done}, before its first checkpoint: its config and its initial evaluation "
                    f"are saved, and resuming starts the run from the beginning")
        return (f"{done}; its results and its checkpoint at update "
                f"{steps[0] * self.config.updates_per_period} are saved")

    def _train(self, state: Any, metrics: dict[str, np.ndarray], periods_done: int,
               session: _Session) -> TrainingResult:
        cfg, out, checkpoints = self.config, session.out, session.checkpoints
        per_chunk, max_chunks = session.per_chunk, session.max_chunks
        # Counted per run (per seed), as the summary counts them: runs advance together.
        steps_per_period = cfg.updates_per_period * cfg.steps_per_update
        bar = tqdm(total=cfg.num_periods * steps_per_period,
                   initial=periods_done * steps_per_period, unit="", unit_scale=True,
                   disable=not session.progress, dynamic_ncols=True,
                   desc=f"{cfg.algo} on {self.testbed.task(cfg)}",
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} " + self.testbed.steps_name
                              + " per seed [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
        reported = set()
        chunks = 0
        hparams = self._place(self.hparams)
        score, score_name = self.testbed.score, self.testbed.score_name
        finished = self._result(metrics, state, periods_done).finished
        if finished and periods_done < cfg.num_periods:
            bar.write("every run diverged before this resume: the run is finished")
        try:
            while (not finished and (max_chunks is None or chunks < max_chunks)
                   and agreed_signal(session.stop.signum) is None):
                # The last chunk stops at the run's end (a resumed run's chunk length need not
                # divide the periods left).
                periods = min(per_chunk, cfg.num_periods - periods_done)
                state, chunk_metrics, evaluations = self._run(state, hparams, periods)
                first = periods_done * cfg.updates_per_period + 1
                for name, values in chunk_metrics.items():
                    metrics[name][:, first:first + periods * cfg.updates_per_period] = (
                        host_copy(values))
                for p in range(periods):
                    last = first + (p + 1) * cfg.updates_per_period - 1
                    metrics[score][:, last] = host_copy(
                        self._score(jax.tree.map(lambda x: x[:, p], evaluations)))
                # The chunk's collectives all come before its files: a process lost while
                # process 0 writes them is noticed at the next chunk, after its checkpoint.
                saved_state = _savable(state) if out is not None else None
                periods_done += periods
                chunks += 1
                fault_point("chunk", periods_done)
                result = self._result(metrics, state, periods_done)
                self._report_divergence(result, reported, bar)
                bar.update(periods * steps_per_period)
                bar.set_postfix({score_name: f"{np.nanmean(latest_finite(metrics[score])):.2f}"})
                if out is not None:
                    self._write(out, result)
                    step = periods_done
                    checkpoints.save(step, {"state": saved_state, "metrics": metrics},
                                     before_commit=lambda: fault_point("checkpoint", step))
                if session.on_chunk is not None:
                    session.on_chunk(result)
                finished = result.finished
                if finished and not result.complete:
                    bar.write("every run diverged: the run is finished")
        finally:
            bar.close()
            if checkpoints is not None:
                checkpoints.close()
        result = self._result(metrics, state, periods_done)
        if out is not None:
            self._write(out, result)
        return result

    # ---------------------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        """A hash of `describe()`: testbed, config, seeds and hyper-parameters, whatever fields
        they have; for a resumed run, the identity its folder recorded."""
        if self._recorded_identity is not None:
            return self._recorded_identity
        text = json.dumps(self.describe(), sort_keys=True, default=io.jsonable)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        hparams = {f.name: np.asarray(getattr(self.hparams, f.name)).tolist()
                   for f in dataclasses.fields(self.hparams)}
        return {"testbed": self.testbed.name, "config": cfg.to_dict(), "seeds": self.seeds,
                "hparams": hparams, "num_updates": cfg.num_updates,
                "steps_per_update": cfg.steps_per_update,
                "updates_per_period": cfg.updates_per_period}

    def _check_resumable(self, out: Path) -> dict[str, Any]:
        """The saved `config.json`, if it describes this run. Its config is compared as
        `from_dict` reads it today (`compat.config_as_now`)."""
        run_folder.check_to_resume(out)
        saved = run_folder.saved_config(out)
        current = json.loads(json.dumps(self.describe(), default=io.jsonable))
        recorded = {k: saved.get(k) for k in current}
        recorded["config"] = compat.config_as_now(type(self.config), recorded["config"])
        if recorded != current:
            raise ValueError(f"cannot resume {str(out)!r}: its config.json describes a different run")
        return saved

    def _result(self, metrics, state, periods_done) -> TrainingResult:
        updates_done = periods_done * self.config.updates_per_period
        diverged, diverged_at = _divergence(metrics, updates_done)
        return TrainingResult(config=self.config, seeds=self.seeds, hparams=self.hparams,
                              metrics=metrics, diverged=diverged, diverged_at=diverged_at,
                              updates_done=updates_done, state=state)

    def _report_divergence(self, result: TrainingResult, reported: set, bar) -> None:
        for run in np.flatnonzero(result.diverged):
            if run not in reported:
                reported.add(run)
                bar.write(f"run {run} (seed {self.seeds[run]}) diverged: non-finite loss or "
                          f"parameters at update {result.diverged_at[run]}; it is stopped, the "
                          f"other runs continue")

    def _write(self, out: Path, result: TrainingResult) -> None:
        if not is_writer():
            return
        score = self.testbed.score
        run_folder.write_results(out, result.table(), {
            "run_identity": self.identity, "updates_done": result.updates_done,
            "num_updates": self.config.num_updates, "complete": result.complete,
            "finished": result.finished,
            "runs": [{"run": i, "seed": s, "diverged": bool(result.diverged[i]),
                      "diverged_at": int(result.diverged_at[i]),
                      f"final_{score}": float(latest_finite(result.metrics[score])[i])}
                     for i, s in enumerate(self.seeds)]})


def _say(message: str) -> None:
    """A progress message on stderr, where the bars are (any bar under way is redrawn below)."""
    tqdm.write(message, file=sys.stderr)


def _divergence(metrics: dict[str, np.ndarray],
                updates_done: int) -> tuple[np.ndarray, np.ndarray]:
    """Per run, whether it diverged by `updates_done` and the (1-based) update at which it did
    (-1 if not), read from the per-update `diverged` metric; a testbed without it marks none."""
    num_runs = next(iter(metrics.values())).shape[0]
    if "diverged" not in metrics:
        return np.zeros(num_runs, bool), np.full(num_runs, -1)
    flags = metrics["diverged"][:, :updates_done + 1] == 1  # row 0, the initial policy: never
    diverged = flags.any(axis=1)
    return diverged, np.where(diverged, np.argmax(flags, axis=1), -1)


def _cut_back(metrics: dict[str, np.ndarray], updates_done: int) -> dict[str, np.ndarray]:
    """The metrics with every update after `updates_done` blanked (NaN)."""
    for values in metrics.values():
        values[:, updates_done + 1:] = np.nan
    return metrics


def _run_devices(num_runs: int, devices: Sequence[jax.Device] | None) -> list[jax.Device]:
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


def _savable(state: Any) -> Any:
    """The state as process 0 saves it: across processes gathered to it (every process takes
    part), else as it is (Orbax saves sharded arrays of one process itself)."""
    return jax.tree.map(host_copy, state) if several() else state


def _restore(checkpoints: Checkpoints, like: dict[str, Any]) -> tuple[int, Any] | None:
    """The newest readable checkpoint as `(periods done, tree)` of NumPy arrays shaped like
    `like`, restored by process 0 (which warns about the damaged ones it skips) and sent to the
    others; None if there is none."""
    host = {"state": jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), like["state"]),
            "metrics": like["metrics"]}
    found: list[tuple[int, Any] | None] = []

    def newest() -> int | None:
        found.append(checkpoints.restore_latest(host, warn))
        return None if found[0] is None else found[0][0]
    step = from_process_0(newest)
    if step is None:
        return None
    tree = found[0][1] if found else host
    return step, shared_from_process_0(jax.tree.map(np.asarray, tree))


def _broadcast_hparams(hparams: Any, num_runs: int) -> Any:
    def expand(x):
        x = jnp.asarray(x, jnp.float32)
        if x.ndim == 0:
            return jnp.broadcast_to(x, (num_runs,))
        if x.shape != (num_runs,):
            raise ValueError(f"hyper-parameter leaves must be scalars or have shape ({num_runs},) "
                             f"(one value per seed), got shape {x.shape}")
        return x
    return jax.tree.map(expand, hparams)


def train(config: Config, hparams: Any = None, seeds: Sequence[int] = (0,),
          out_dir: str | os.PathLike | None = None, **run_options) -> TrainingResult:
    """Convenience entry point: `Driver(config, hparams, seeds).run(out_dir, **run_options)`,
    the testbed's default hyper-parameters where `hparams` is None."""
    if hparams is None:
        hparams = testbeds.named(config.testbed).hparams.create()
    return Driver(config, hparams, seeds).run(out_dir, **run_options)
