"""`vaco-jax` in a child process, for tests that kill, stop or race whole processes."""

import os
import sys
from pathlib import Path

from vaco_jax.core.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[1]


def vaco_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaco_jax.cli", *args]


def vaco_env(cache: Path, fault: str | None = None) -> dict[str, str]:
    """The environment of a child: this checkout first on the path, the compilation cache
    `cache` shared (so only the first child compiles), and the fault `SIGNAL@POINT:STEP` to
    inject, if any."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    if fault is not None:
        env[FAULT_ENV] = fault
    return env
