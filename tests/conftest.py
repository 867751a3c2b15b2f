"""Test-session settings: faster XLA compilation and a shared compilation cache.

The suite compiles many small programs and runs each briefly, so compile time dominates:
backend optimisation level 0 roughly halves it, and a persistent cache shared by the pytest
workers compiles identical programs once.
"""

import functools
import os
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import jax  # noqa: E402  (must follow the XLA_FLAGS default above)
import pytest  # noqa: E402

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


@pytest.fixture(params=[False, True], ids=["plain", "jit"])
def call(request):
    """Calls `fn(*args, **kwargs)` as is or through `jax.jit` (args traced, kwargs closed over)."""

    def run(fn, *args, **kwargs):
        bound = functools.partial(fn, **kwargs)
        return jax.jit(bound)(*args) if request.param else bound(*args)

    return run
