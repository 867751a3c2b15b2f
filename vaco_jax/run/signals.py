"""Stopping a run cleanly: the first SIGTERM or SIGINT asks the driver to stop after the
current chunk and its checkpoint (`Interrupted`), a second one exits at once; and the test hook
that sends a signal at an exact point of a run (`VACO_JAX_TEST_FAULT=SIGNAL@POINT:STEP`)."""

from __future__ import annotations

import os
import signal
import sys
import threading

FAULT_ENV = "VACO_JAX_TEST_FAULT"


class Interrupted(Exception):
    """A run stopped on SIGTERM/SIGINT after checkpointing its last completed chunk."""

    def __init__(self, signum: int, updates_done: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name} after update "
                         f"{updates_done}; its checkpoint is saved")
        self.signum, self.updates_done = signum, updates_done


def fault_point(point: str, step: int) -> None:
    """Test hook: sends this process the signal `VACO_JAX_TEST_FAULT` names for this point."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, where = spec.partition("@")
    if where == f"{point}:{step}":
        os.kill(os.getpid(), signal.Signals[name])


class StopRequests:
    """Within the block, the first SIGTERM/SIGINT is recorded (`signum`) for the driver to stop
    after the current chunk; a second one exits at once. A watcher thread reads the signals
    from the wakeup file descriptor, so the second one acts even while a compiled call runs."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self) -> "StopRequests":
        self.signum = None
        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write)
        self._previous = {s: signal.signal(s, lambda *_: None) for s in self.SIGNALS}
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while data := os.read(self._read, 1):
            signum = data[0]
            if signum not in self.SIGNALS:
                continue
            if self.signum is not None:
                print(f"\n{signal.Signals(signum).name} again: stopping at once", file=sys.stderr,
                      flush=True)
                os._exit(128 + signum)
            self.signum = signum
            print(f"\n{signal.Signals(signum).name}: stopping after the current chunk and its "
                  f"checkpoint (send it again to stop at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if not self._active:
            return
        signal.set_wakeup_fd(self._previous_fd)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        os.close(self._write)
        self._watcher.join()
        os.close(self._read)
