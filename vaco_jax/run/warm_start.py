"""A run's warm start, resolved before its first state: read from its cache, or trained now
and saved there, and given to its trainer as parameters. A testbed's warm start (the token
testbed's `SupervisedStart`) is a `PendingStart`: it names its cache folder, gives its
parameters' shapes and trains them; this layer names no testbed.

The parameters are saved as an Orbax checkpoint in a folder named by a hash of every setting
that shapes them, and later runs with the same settings restore them instead of retraining. A
command's default cache is the user's (`default_cache_dir`), so every run of that user shares
it, wherever it is started. Each process of a run over several trains or restores it for itself
(`docs/multi_process.md` says when they get the same parameters).

What it does is logged (`logging`, logger `vaco_jax.run.warm_start`, level INFO): training,
then `warm start: N steps in S s -> FOLDER`, or `warm start: loaded from FOLDER`, after
`warm start: waiting for another run that is training it` where another thread or process
holds the folder's lock (`.FOLDER.lock` beside it), so each warm start is trained once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Protocol, TypeVar

import jax
import numpy as np
import orbax.checkpoint as ocp

from vaco_jax.core.trainer import Trainer
from vaco_jax.infra.faults import fault_point
from vaco_jax.infra.orbax_options import this_process_only
from vaco_jax.infra.user_cache import user_cache_dir

_log = logging.getLogger(__name__)

TrainerT = TypeVar("TrainerT", bound=Trainer)
Params = Any  # a pytree of arrays


class PendingStart(Protocol):
    """A warm start a trainer's `init` still needs (`Trainer.pending_warm_start`)."""

    cache_dir: str | os.PathLike | None  # its cache's folder; None: not cached

    @property
    def steps(self) -> int:
        """The training steps it takes, for the log."""

    @property
    def label(self) -> str:
        """What it trains on, for the log."""

    def cache_name(self) -> str:
        """The folder its parameters are cached in, named by every setting that shapes them."""

    def shapes(self) -> Params:
        """Its parameters' shapes and dtypes."""

    def train(self) -> Params:
        """Its parameters, trained now."""


def starting_trainer(trainer: TrainerT) -> TrainerT:
    """`trainer`, or where its `init` still needs a warm start (`pending_warm_start`), a
    trainer of its config given the warm start's parameters, resolved now."""
    start = trainer.pending_warm_start
    if start is None:
        return trainer
    return type(trainer)(trainer.config, initial_params=resolve(start))


def default_cache_dir() -> Path:
    """The user's cache of warm starts: `$XDG_CACHE_HOME/vaco_jax/warm_start`, else
    `~/.cache/vaco_jax/warm_start` (`infra.user_cache`)."""
    return user_cache_dir("warm_start")


def resolve(start: PendingStart) -> Params:
    """The warm start's parameters: restored from its cache folder when trained before with the
    same settings, else trained now (and saved there, unless it has no cache folder). Of the
    runs that need the same warm start at once (a sweep's foreground program and the one it
    prepares in the background, or two sweeps), one trains it and the others wait, then load
    it."""
    if start.cache_dir is None:
        return _train(start, None)
    folder = Path(start.cache_dir).absolute() / start.cache_name()
    with _training_lock(folder):
        if folder.exists():
            params = _restore(folder, start.shapes())
            _log.info("warm start: loaded from %s", folder)
            return params
        return _train(start, folder)


@contextlib.contextmanager
def _training_lock(folder: Path) -> Iterator[None]:
    """Holds the lock of the warm start cached in `folder`, waiting (and saying so) while
    another thread or process holds it: a lock file beside the folder, locked by `flock`, which
    threads of one process contend for too, each through its own open file."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder.parent / f".{folder.name}.lock",
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log.info("warm start: waiting for another run that is training it -> %s", folder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _train(start: PendingStart, folder: Path | None) -> Params:
    """Trains the warm start now, saving it in `folder` (None: not cached)."""
    fault_point("warm_start", 0)
    _log.info("warm start: training %d supervised steps on %s ...", start.steps, start.label)
    began = time.perf_counter()
    params = start.train()
    if folder is not None:
        _save_atomically(folder, params)
    _log.info("warm start: %d steps in %.1f s %s", start.steps, time.perf_counter() - began,
              "(not cached)" if folder is None else f"-> {folder}")
    return params


def _save_atomically(folder: Path, params: Params) -> None:
    """Saves into a temporary folder beside `folder`, then renames it into place, so a reader
    never sees a half-written checkpoint (a concurrent writer of the same settings loses the
    rename harmlessly: both wrote the same parameters)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        with ocp.StandardCheckpointer(
                multiprocessing_options=this_process_only()) as checkpointer:
            # As NumPy: of several processes, Orbax refuses one process's own device arrays.
            checkpointer.save(scratch / "params", jax.tree.map(np.asarray, params))
        os.replace(scratch, folder)
    except OSError:
        if not folder.exists():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _restore(folder: Path, like: Params) -> Params:
    # Read as NumPy, then put on this process's default device, as the trained parameters are.
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), like)
    with ocp.StandardCheckpointer(multiprocessing_options=this_process_only()) as checkpointer:
        return jax.device_put(checkpointer.restore(folder / "params", abstract))
