"""The user's cache folder, shared by every run of that user wherever it writes its results."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(name: str) -> Path:
    """`$XDG_CACHE_HOME/vaco_jax/NAME`, else `~/.cache/vaco_jax/NAME` (a relative
    `XDG_CACHE_HOME` is ignored, as the XDG base directory specification asks)."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    cache = Path(root) if os.path.isabs(root) else Path.home() / ".cache"
    return cache / "vaco_jax" / name
