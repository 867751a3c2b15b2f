"""Test-session settings: faster XLA compilation and a shared compilation cache.

The suite compiles many small programs and runs each briefly, so compile time dominates:
backend optimisation level 0 roughly halves it; XLA's older CPU emitters (fusion emitters off)
halve it again (a toy control program 8.6 s -> 3.7 s, an MJX one 27 s -> 16 s, a token one
10.9 s -> 5.8 s, at equal run time); and a persistent cache shared by the pytest workers
compiles identical programs once. The child processes the tests start inherit the flags.

The older emitters round some sums differently in two different programs, where the default
ones (what users run) agree to the bit. A test that compares two programs bit for bit is marked
`default_emitters` and runs in a child pytest under the default emitters, the other flags kept.

The fast loop (`-m "not slow"`) also leaves out the tests `fast_loop_excluded.json` lists by
their measured time.
"""

import functools
import os
import subprocess
import sys
import tempfile

OLDER_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
IN_CHILD = "VACO_JAX_TEST_DEFAULT_EMITTERS"
"""Set in the child pytest that runs a `default_emitters` test."""

os.environ.setdefault("XLA_FLAGS", f"--xla_backend_optimization_level=0 {OLDER_EMITTERS}")

import jax  # noqa: E402  (must follow the XLA_FLAGS default above)
import pytest  # noqa: E402

import fast_loop  # noqa: E402
from vaco_jax.run import compilation_cache  # noqa: E402

TEST_CACHE = os.environ.get("VACO_JAX_TEST_CACHE",
                            os.path.join(tempfile.gettempdir(), "vaco_jax_test_xla_cache"))
# The session's cache, as the commands set theirs (size limit included); the commands the tests
# start as child processes compile into it too, not into the user's cache, under the same limit
# (also those pointed at it through JAX's own variables): a process without a limit writes no
# access times, and the eviction of every process with one then fails.
os.environ[compilation_cache.ENVIRONMENT_VARIABLE] = TEST_CACHE
compilation_cache.enable()
os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(jax.config.jax_compilation_cache_max_size)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def pytest_collection_modifyitems(items):
    fast_loop.mark_excluded(items)


@pytest.fixture(params=[False, True], ids=["plain", "jit"])
def call(request):
    """Calls `fn(*args, **kwargs)` as is or through `jax.jit` (args traced, kwargs closed over)."""

    def run(fn, *args, **kwargs):
        bound = functools.partial(fn, **kwargs)
        return jax.jit(bound)(*args) if request.param else bound(*args)

    return run


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A `default_emitters` test runs in a child pytest, its XLA flags without the older
    emitters; its result is the child's."""
    if pyfuncitem.get_closest_marker("default_emitters") is None or os.environ.get(IN_CHILD):
        return None
    flags = " ".join(f for f in os.environ["XLA_FLAGS"].split() if f != OLDER_EMITTERS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid],
        cwd=pyfuncitem.config.rootpath, capture_output=True, text=True,
        env={**os.environ, "XLA_FLAGS": flags, IN_CHILD: "1"}, timeout=900)
    if done.returncode != 0 or " passed" not in done.stdout:
        pytest.fail(f"under XLA's default CPU emitters (a child pytest):\n{done.stdout[-4000:]}"
                    f"{done.stderr[-2000:]}", pytrace=False)
    return True
