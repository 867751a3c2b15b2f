"""The leaderboard layer lies above the report layer: it reads results, never runs anything."""

import subprocess
import sys


def test_the_leaderboard_imports_neither_the_runner_nor_a_testbed():
    code = ("import sys, vaco_jax.leaderboard.site; print(sorted(m for m in sys.modules if "
            "m.startswith(('vaco_jax.run', 'vaco_jax.control', 'vaco_jax.tokens', "
            "'vaco_jax.testbeds', 'vaco_jax.experiment', 'brax', 'mujoco', 'gymnax'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
