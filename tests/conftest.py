"""Test-session settings: faster XLA compilation and a shared compilation cache.

The suite compiles many small programs and runs each briefly, so compile time dominates:
backend optimisation level 0 roughly halves it, and a persistent cache shared by the pytest
workers compiles identical programs once.
"""

import os
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import jax  # noqa: E402  (must follow the XLA_FLAGS default above)

jax.config.update("jax_compilation_cache_dir",
                  os.environ.get("VACO_JAX_TEST_CACHE",
                                 os.path.join(tempfile.gettempdir(), "vaco_jax_test_xla_cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
