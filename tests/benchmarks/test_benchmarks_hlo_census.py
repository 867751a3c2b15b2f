"""The operation census of a compiled program (`benchmarks/hlo_census.py`): kinds and source
lines counted on a small program whose make-up is known."""

import inspect
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import hlo_census  # noqa: E402


def _program(x, y):
    product = jnp.dot(x, y)
    return jnp.sort(product, axis=-1), jnp.isfinite(product).all()


def test_census_counts_kinds_and_charges_operations_to_their_source_lines():
    args = (jnp.ones((8, 8)), jnp.ones((8, 8)))
    hlo = jax.jit(_program).lower(*args).compile().as_text()
    result = hlo_census.census(hlo, top=50)
    assert result["kinds"]["sort"] == 1
    assert result["operations"] == sum(result["kinds"].values())
    assert result["fusions"] == result["kinds"].get("fusion", 0)
    first = inspect.getsourcelines(_program)[1]
    here = {row["line"]: row["operations"] for row in result["source_lines"]}
    this_file = "tests/benchmarks/test_benchmarks_hlo_census.py"
    assert here.get(f"{this_file}:{first + 1} _program", 0) >= 1  # the dot
    assert here.get(f"{this_file}:{first + 2} _program", 0) >= 2  # sort, is-finite, reduce
    assert sum(here.values()) <= result["operations"]


def test_a_module_without_stack_frame_tables_is_charged_to_no_line():
    hlo = "ENTRY %main {\n  ROOT %add.1 = f32[] add(f32[] %a, f32[] %b)\n}\n"
    result = hlo_census.census(hlo)
    assert result["kinds"] == {"add": 1}
    assert result["source_lines"] == [{"line": "(none)", "operations": 1}]
