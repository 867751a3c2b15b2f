"""The persistent cache of compiled programs that the `vaco-jax` commands share.

MuJoCo's physics makes a training program slow to compile (about 40 s for a small MJX task on
a CPU), and the same program is compiled again by a resumed run, by the next part of a sweep on
the same machine and by the same settings run again. With JAX's persistent compilation cache
each compiles it once: later ones load the executable. The folder is the user's
(`$XDG_CACHE_HOME/vaco_jax/xla`), or `$VACO_JAX_COMPILATION_CACHE`; `off` there leaves JAX as it
is, and so does a cache JAX already has (the user's own `JAX_COMPILATION_CACHE_DIR`). The
folder is kept under `MAX_BYTES` (JAX evicts the least recently used programs) unless the user
sets a size (`JAX_COMPILATION_CACHE_MAX_SIZE`, -1 for none): a sweep adds a few MB per group,
and a user cache that only grows is one nobody asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path

import jax

from vaco_jax.infra.user_cache import user_cache_dir

ENVIRONMENT_VARIABLE = "VACO_JAX_COMPILATION_CACHE"
OFF = "off"
MAX_BYTES = 2 * 2**30
# JAX's file names for a cached program and for its access time (8 bytes, little-endian
# nanoseconds), which its least-recently-used eviction reads (`jax._src.lru_cache`).
_PROGRAM, _ACCESS_TIME = "-cache", "-atime"


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
    # JAX's default is no limit, which the user may also ask for (-1). A limit needs `filelock`,
    # without which (an install without its dependencies) JAX would read and write no entry.
    unset = ("JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ
             and jax.config.jax_compilation_cache_max_size == -1)
    if unset and importlib.util.find_spec("filelock"):
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
        _give_access_times(folder)
    return folder


def _give_access_times(folder: Path) -> None:
    """Gives each program cached without a limit (by an earlier version, or another process)
    the access time a limited cache keeps beside it, its file's modification time: JAX's
    eviction reads one for every program and, finding one missing, fails every write."""
    for program in folder.glob(f"*{_PROGRAM}"):
        access_time = program.with_name(program.name.removesuffix(_PROGRAM) + _ACCESS_TIME)
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile by another process
            if not access_time.exists():
                access_time.write_bytes(program.stat().st_mtime_ns.to_bytes(8, "little"))
