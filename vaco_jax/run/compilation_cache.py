"""The persistent cache of compiled programs that the `vaco-jax` commands share.

MuJoCo's physics makes a training program slow to compile (about 40 s for a small MJX task on
a CPU), and the same program is compiled again by a resumed run, by the next part of a sweep on
the same machine and by the same settings run again. With JAX's persistent compilation cache
each compiles it once: later ones load the executable. The folder is the user's
(`$XDG_CACHE_HOME/vaco_jax/xla`), or `$VACO_JAX_COMPILATION_CACHE`; `off` there leaves JAX as it
is, and so does a cache JAX already has (the user's own `JAX_COMPILATION_CACHE_DIR`). The
folder is kept under `MAX_BYTES` (JAX evicts the least recently used programs), a size the user
may set too (`JAX_COMPILATION_CACHE_MAX_SIZE`): a sweep adds a few MB per group, and a user
cache that only grows is one nobody asked for.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jax

from vaco_jax.core.user_cache import user_cache_dir

ENVIRONMENT_VARIABLE = "VACO_JAX_COMPILATION_CACHE"
OFF = "off"
MAX_BYTES = 2 * 2**30


def enable() -> Path | None:
    """Points JAX's persistent compilation cache at the commands' folder, unless JAX has one
    already or the environment turns it off; the folder in use, None if none."""
    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    chosen = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if chosen == OFF:
        return None
    folder = Path(chosen) if chosen else user_cache_dir("xla")
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # JAX's default is no limit; one needs `filelock`, without which (an install without its
    # dependencies) JAX would read and write no entry at all.
    if jax.config.jax_compilation_cache_max_size == -1 and importlib.util.find_spec("filelock"):
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return folder
