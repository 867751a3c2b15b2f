"""The leaderboard layer lies above the report layer: it reads results, never runs anything."""

import ast
import subprocess
import sys
from pathlib import Path


def test_the_leaderboard_imports_neither_the_runner_nor_a_testbed():
    code = ("import sys, vaco_jax.leaderboard.site; print(sorted(m for m in sys.modules if "
            "m.startswith(('vaco_jax.run', 'vaco_jax.control', 'vaco_jax.tokens', "
            "'vaco_jax.testbeds', 'vaco_jax.experiment', 'brax', 'mujoco', 'gymnax'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_report_layer_imports_nothing_of_the_runner():
    """Reports read results: the runner's modules (`vaco_jax.run`) are not theirs to import,
    loaded or not (a static read of every import in `vaco_jax/report/`)."""
    report = Path(__file__).resolve().parents[2] / "vaco_jax" / "report"
    found = []
    for path in sorted(report.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names
                      if n == "vaco_jax.run" or n.startswith("vaco_jax.run.")]
    assert found == []
