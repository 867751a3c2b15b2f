"""Smoke test of the benchmark machinery (`benchmarks/`) on the pure-JAX toy task."""

import json
import sys
from pathlib import Path

import jax

from engine_configs import TOY

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import harness, programs, tables  # noqa: E402


def test_env_program_is_timed_in_rounds_from_its_warmed_up_state():
    compiled = harness.Compiled(programs.env_program(TOY, num_seeds=2, updates=2))
    [result] = harness.timed_rounds([compiled], repeats=2, max_wait_s=0.0)
    assert result["steps_per_call"] == 2 * 2 * TOY.steps_per_update
    assert len(result["calls_s"]) == 2 and result["steps_per_s"] > 0
    assert int(compiled.args[0].step_count.max()) > 0  # the warm-up call stepped the envs


def test_compile_events_count_only_new_compilations():
    double = jax.jit(lambda x: 2 * x)
    with harness.CompileEvents() as first:
        double(1.0)
    with harness.CompileEvents() as again:
        double(3.0)
    assert first.summary()["backend_compiles"] == 1
    assert again.summary()["backend_compiles"] == 0


def test_recorded_results_render_as_tables():
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        text = tables.markdown(json.loads(path.read_text()))
        assert "### Throughput" in text, path
