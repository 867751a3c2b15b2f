"""The leaderboard layer lies above the report layer: it reads results, never runs anything."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_leaderboard_imports_neither_the_runner_nor_a_testbed():
    code = ("import sys, vaco_jax.leaderboard.site; print(sorted(m for m in sys.modules if "
            "m.startswith(('vaco_jax.run', 'vaco_jax.control', 'vaco_jax.tokens', "
            "'vaco_jax.testbeds', 'vaco_jax.experiment', 'brax', 'mujoco', 'gymnax'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("layer, forbidden", [
    ("report", ("vaco_jax.run",)),  # reports read results; the runner is not theirs
    ("run", ("vaco_jax.tokens", "vaco_jax.control")),  # the runner names no testbed
])
def test_a_layer_imports_nothing_above_it_or_beside_it(layer, forbidden):
    """A static read of every import of `vaco_jax/LAYER/`, loaded or not."""
    folder = Path(__file__).resolve().parents[2] / "vaco_jax" / layer
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names
                      if any(n == f or n.startswith(f + ".") for f in forbidden)]
    assert found == []
