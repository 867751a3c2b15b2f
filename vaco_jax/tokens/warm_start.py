"""Supervised warm start on demonstrations, some of them deliberately wrong, cached on disk.

RL on language models starts from a pretrained policy of intermediate accuracy; here that policy
is trained by teacher forcing on the task's correct answers, except that a fraction
`corrupt_fraction` of the answers has one digit changed. The result is saved as an Orbax
checkpoint in a folder named by a hash of every setting that shapes it, and later runs with the
same settings restore it instead of retraining. A command's default cache is the user's
(`default_cache_dir`), so every run of that user shares it, wherever it is started.

What it does is logged (`logging`, logger `vaco_jax.tokens.warm_start`, level INFO): training,
then `warm start: N steps in S s -> FOLDER`, or `warm start: loaded from FOLDER`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp

from vaco_jax.core.faults import fault_point
from vaco_jax.tokens import tasks
from vaco_jax.tokens.model import ModelSpec, TokenPolicy

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WarmStart:
    steps: int = 250
    batch: int = 64
    learning_rate: float = 3e-3
    corrupt_fraction: float = 0.3
    seed: int = 0


def corrupt(key: jax.Array, answer: jax.Array, fraction: float) -> jax.Array:
    """`answer` `[B, A]` with one digit (never the EOS) changed in a `fraction` of the rows."""
    pick_key, position_key, shift_key = jax.random.split(key, 3)
    batch, length = answer.shape
    rows = jnp.arange(batch)
    position = jax.random.randint(position_key, (batch,), 0, length - 1)
    shift = jax.random.randint(shift_key, (batch,), 1, 10)
    changed = answer.at[rows, position].set((answer[rows, position] + shift) % 10)
    return jnp.where(jax.random.uniform(pick_key, (batch, 1)) < fraction, changed, answer)


def supervised_train(task: tasks.Task, spec: ModelSpec, settings: WarmStart):
    """Parameters after `settings.steps` Adam steps of teacher forcing (one `lax.scan`)."""
    policy = TokenPolicy(spec)
    init_key, data_key = jax.random.split(jax.random.PRNGKey(settings.seed))
    params = policy.init(init_key)
    optimizer = optax.adam(settings.learning_rate)
    one = jnp.asarray(1.0)

    def loss(params, prompt, answer):
        return -policy.response_log_probs(params, prompt, answer, one)[0].sum(axis=1).mean()

    def step(carry, key):
        params, opt_state = carry
        sample_key, corrupt_key = jax.random.split(key)
        prompt, answer = tasks.sample(task, sample_key, settings.batch)
        answer = corrupt(corrupt_key, answer, settings.corrupt_fraction)
        value, grads = jax.value_and_grad(loss)(params, prompt, answer)
        updates, opt_state = optimizer.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), value

    (params, _), losses = jax.jit(lambda p: jax.lax.scan(
        step, (p, optimizer.init(p)), jax.random.split(data_key, settings.steps)))(params)
    return params, losses


def settings_hash(task: tasks.Task, spec: ModelSpec, settings: WarmStart) -> str:
    described = {"task": dataclasses.asdict(task), "model": dataclasses.asdict(spec),
                 "warm_start": dataclasses.asdict(settings)}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    """The user's cache of warm starts: `$XDG_CACHE_HOME/vaco_jax/warm_start`, else
    `~/.cache/vaco_jax/warm_start` (a relative `XDG_CACHE_HOME` is ignored, as the XDG base
    directory specification asks)."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    cache = Path(root) if os.path.isabs(root) else Path.home() / ".cache"
    return cache / "vaco_jax" / "warm_start"


def warm_start(task: tasks.Task, spec: ModelSpec, settings: WarmStart,
               cache_dir: str | os.PathLike | None):
    """The warm-start parameters: restored from `cache_dir` when trained before with the same
    settings, else trained now (and saved there, unless `cache_dir` is None)."""
    folder = (None if cache_dir is None else
              Path(cache_dir).absolute() / f"{task.name}-{settings_hash(task, spec, settings)}")
    if folder is not None and folder.exists():
        params = _restore(folder, TokenPolicy(spec).init(jax.random.PRNGKey(0)))
        _log.info("warm start: loaded from %s", folder)
        return params
    fault_point("warm_start", 0)
    _log.info("warm start: training %d supervised steps on %s ...", settings.steps, task.name)
    start = time.perf_counter()
    params = supervised_train(task, spec, settings)[0]
    if folder is not None:
        _save_atomically(folder, params)
    _log.info("warm start: %d steps in %.1f s %s", settings.steps, time.perf_counter() - start,
              "(not cached)" if folder is None else f"-> {folder}")
    return params


def _save_atomically(folder: Path, params) -> None:
    """Saves into a temporary folder beside `folder`, then renames it into place, so a reader
    never sees a half-written checkpoint (a concurrent writer of the same settings loses the
    rename harmlessly: both wrote the same parameters)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(scratch / "params", params)
        os.replace(scratch, folder)
    except OSError:
        if not folder.exists():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _restore(folder: Path, like):
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(folder / "params", abstract)
