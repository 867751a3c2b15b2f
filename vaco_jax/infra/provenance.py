"""Where a result came from: package versions, the code's version, the machine's devices; saved
beside the results (`config.json`, `sweep.json`, `summary.json`) so that a number can be traced
to what produced it."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

import jax

PACKAGES = ("vaco-jax", "jax", "jaxlib", "flax", "optax", "chex", "brax", "mujoco", "mujoco-mjx",
            "orbax-checkpoint", "numpy")
"""The packages whose versions shape a result."""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def code_version() -> dict[str, Any] | None:
    """The commit of the checkout the package runs from and whether tracked files differ from
    it; None when it is not run from a git checkout (an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None
    changes = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "modified": bool(changes)}


def provenance() -> dict[str, Any]:
    """Package versions, the code's version, Python, and this process's JAX backend and
    devices."""
    devices = jax.devices()
    return {"packages": {name: _version(name) for name in PACKAGES},
            "code": code_version(),
            "python": platform.python_version(),
            "backend": jax.default_backend(),
            "devices": {"count": len(devices), "kind": devices[0].device_kind,
                        "processes": jax.process_count()}}
