"""Orbax checkpoints of the complete training state between chunks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpoints:
    """Keeps the newest checkpoints of a run folder; every save is atomic (Orbax commits a
    finished temporary folder by renaming it)."""

    def __init__(self, directory: str | os.PathLike, max_to_keep: int = 2):
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                               enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(Path(directory).absolute(), options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, tree: Any) -> None:
        self._manager.save(step, args=ocp.args.StandardSave(_without_empty(tree)))
        self._manager.wait_until_finished()

    def restore(self, step: int, like: Any) -> Any:
        """Restores `step` into the structure, shapes and dtypes of `like` (arrays)."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _without_empty(like))
        restored = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
        return jax.tree.map(lambda empty, x: empty if x is None else x, like, restored)

    def close(self) -> None:
        self._manager.close()


def _without_empty(tree: Any) -> Any:
    """`tree` with zero-size arrays (MJX states hold some) replaced by None: Orbax cannot save
    them, and they carry no data; `restore` puts them back from its `like` tree."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)
