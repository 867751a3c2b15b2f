"""Plugins for tests: fake entry points served to `importlib.metadata`, and a plugin package
installed the way pip leaves one (a module beside its `.dist-info` with `entry_points.txt`)."""

import importlib.metadata
import shutil
import sys
import types
from pathlib import Path

from vaco_jax.control import algorithms as control
from vaco_jax.infra import entry_points as entry_points_module
from vaco_jax.tokens import algorithms as tokens

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PLUGIN = ROOT / "docs" / "examples" / "dual_clip_plugin"


def uncalled_entry_points(monkeypatch) -> None:
    """This test's registries call their entry points afresh (and none is installed)."""
    monkeypatch.setattr(entry_points_module, "_called", set())
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [])


def private_registries(monkeypatch) -> None:
    """Both testbeds' algorithm registries as this test's copies, their entry points not yet
    called."""
    for registry in (control.ALGORITHMS, tokens.ALGORITHMS):
        for field in ("_entries", "_sources"):
            monkeypatch.setattr(registry, field, dict(getattr(registry, field)))
    uncalled_entry_points(monkeypatch)


def fake_entry_points(monkeypatch, served: str, functions: dict) -> list[str]:
    """Serves entry points of group `served` calling `functions` (name -> callable) from a fake module;
    returns the log of the groups asked for."""
    uncalled_entry_points(monkeypatch)
    module = types.ModuleType("fake_vaco_plugin")
    for name, function in functions.items():
        setattr(module, name, function)
    monkeypatch.setitem(sys.modules, "fake_vaco_plugin", module)
    asked = []

    def entry_points(*, group: str):
        asked.append(group)
        if group != served:
            return []
        return [importlib.metadata.EntryPoint(name, f"fake_vaco_plugin:{name}", group)
                for name in functions]
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return asked


def install_example_plugin(site: Path) -> Path:
    """Installs the documented example plugin into the folder `site`, as pip would (put `site` on
    a child's PYTHONPATH to have it installed there); returns `site`."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE_PLUGIN / "dual_clip_plugin.py", site)
    info = site / "dual_clip_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dual-clip-plugin\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        '[vaco_jax.algorithms]\ndual_clip = dual_clip_plugin:register_all\n')
    return site
