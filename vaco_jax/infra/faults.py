"""The test hook that makes a process send itself a signal at an exact point of its work:
`VACO_JAX_TEST_FAULT=SIGNAL@POINT:STEP` (e.g. `SIGKILL@checkpoint:2`). Fault-injection tests
use it to interrupt a run, a sweep or a warm start at exact points; unset, it does nothing."""

from __future__ import annotations

import os
import signal
import threading

FAULT_ENV = "VACO_JAX_TEST_FAULT"


def fault_point(point: str, step: int) -> None:
    """Sends this process the signal `VACO_JAX_TEST_FAULT` names for this point and step."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, where = spec.partition("@")
    if where == f"{point}:{step}":
        # To the main thread, as a terminal's Ctrl-C would most likely go: a signal the kernel
        # hands to another thread reaches Python's handlers late, at a moment a test cannot fix.
        signal.pthread_kill(threading.main_thread().ident, signal.Signals[name])
