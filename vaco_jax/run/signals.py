"""Stopping cleanly on SIGTERM and SIGINT.

Inside a `StopRequests` block (the driver's chunk loop) the first signal is recorded
(`requested()`) for the run to stop after its current chunk and checkpoint; a second one exits at
once. Outside such a block, while a command runs under `exit_on_signals`, a signal exits at once
with the command's message: every file is written atomically, so nothing written is lost. Either
way the process exits with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM). Used from
Python without a command, a SIGINT outside a `StopRequests` block raises `KeyboardInterrupt` in
the main thread instead, where the work can stop cleanly. A watcher thread reads the signals from the wakeup file descriptor, so
they act even while a compiled call or a compilation runs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

from vaco_jax.infra import lock

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
    """A run or sweep stopped on SIGTERM/SIGINT; `saved` says what of it is saved."""

    def __init__(self, signum: int, saved: str):
        super().__init__(f"interrupted by {signal.Signals(signum).name}: {saved}")
        self.signum, self.saved = signum, saved


class _Watcher:
    """The process's signal handling while any block needs it (counted), in the main thread."""

    users = 0
    requested: int | None = None
    stopping_blocks = 0
    exit_message: Callable[[int], str] | None = None
    interrupted: int | None = None  # a Python caller's Ctrl-C, for `raise_if_interrupted`
    _previous: dict = {}

    @classmethod
    def acquire(cls) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers can only be set from the main thread
        if cls.users == 0:
            cls._read, cls._write = os.pipe()
            os.set_blocking(cls._write, False)
            cls._previous_fd = signal.set_wakeup_fd(cls._write)
            cls._previous = {s: signal.signal(s, cls._handler) for s in SIGNALS}
            cls._thread = threading.Thread(target=cls._watch, args=(cls._read,), daemon=True,
                                           name="vaco_jax-signals")
            cls._thread.start()
        cls.users += 1
        return True

    @classmethod
    def release(cls) -> int | None:
        """Uninstalls the handling with its last user; returns a Python caller's Ctrl-C that
        no clean stopping point has raised yet."""
        cls.users -= 1
        if cls.users:
            return None
        for s, handler in cls._previous.items():  # first, so no signal meets a closed pipe
            signal.signal(s, handler)
        signal.set_wakeup_fd(cls._previous_fd)
        os.close(cls._write)
        cls._thread.join()
        os.close(cls._read)
        interrupted, cls.requested, cls.interrupted = cls.interrupted, None, None
        return interrupted

    @classmethod
    def _interrupts_python(cls, signum: int) -> bool:
        """Whether the signal is a Python caller's Ctrl-C (a script, a notebook, no command):
        a KeyboardInterrupt, which unwinds through its `finally` blocks."""
        return (signum == signal.SIGINT and cls.exit_message is None
                and not cls.stopping_blocks and cls.requested is None)

    @staticmethod
    def _handler(signum: int, frame) -> None:
        """The Python-level handler, in the main thread: it only records a Python caller's
        Ctrl-C, raised at the next point where the work can stop cleanly (raised from here, it
        could land inside JAX's machinery); the watcher thread does the rest."""
        if _Watcher._interrupts_python(signum):
            _Watcher.interrupted = signum

    @classmethod
    def _watch(cls, read: int) -> None:
        while data := os.read(read, 1):
            signum = data[0]
            if signum in SIGNALS:
                cls._on_signal(signum)

    @classmethod
    def _on_signal(cls, signum: int) -> None:
        name = signal.Signals(signum).name
        if cls.stopping_blocks and cls.requested is None:
            cls.requested = signum
            _say(f"\n{name}: stopping after the current chunk and its checkpoint (send it again "
                 f"to stop at once)")
            return
        if cls._interrupts_python(signum):
            return  # raised in the main thread by `_handler`
        again = cls.requested is not None
        cls.requested = cls.requested or signum
        try:  # a message that fails (a closed stderr) must not keep the process running
            _say(f"\n{cls.exit_message(signum)}" if cls.exit_message is not None else
                 f"\n{name}{' again' if again else ''}: stopping at once")
        finally:
            lock.disown_all()
            os._exit(128 + signum)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def raise_if_interrupted(signum: int | None = None) -> None:
    """Raises a Python caller's recorded Ctrl-C (or `signum`) as its own SIGINT handler would
    (a KeyboardInterrupt by default); called where the work can stop cleanly."""
    if signum is None:
        signum, _Watcher.interrupted = _Watcher.interrupted, None
    if signum is None:
        return
    previous = _Watcher._previous.get(signum, signal.default_int_handler)
    if callable(previous):
        previous(signum, None)
    elif previous != signal.SIG_IGN:
        raise KeyboardInterrupt


def requested() -> int | None:
    """The signal that asked this process to stop, if one did (None once no block is open)."""
    return _Watcher.requested


class StopRequests:
    """Within the block the first SIGTERM/SIGINT is recorded (`signum`) for the caller to stop
    at its next safe point; a second one exits at once. Blocks nest, and a request recorded in
    an inner one stays visible to the outer ones."""

    def __enter__(self) -> "StopRequests":
        self._active = _Watcher.acquire()
        if self._active:
            _Watcher.stopping_blocks += 1
        return self

    @property
    def signum(self) -> int | None:
        return _Watcher.requested if self._active else None

    def __exit__(self, *exc) -> None:
        if self._active:
            _Watcher.stopping_blocks -= 1
            _Watcher.release()


class exit_on_signals:
    """Within the block (a command's whole life, a sweep's batches), a signal outside any
    `StopRequests` block exits at once after printing `message(signum)` (if given; else the
    enclosing block's message), and `requested()` keeps a stop recorded by an inner block until
    the block ends."""

    def __init__(self, message: Callable[[int], str] | None = None):
        self._message = message

    def __enter__(self) -> "exit_on_signals":
        self._active = _Watcher.acquire()
        if self._active:
            self._outer = _Watcher.exit_message
            _Watcher.exit_message = self._message or self._outer
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._active:
            _Watcher.exit_message = self._outer
            interrupted = _Watcher.release()
            if exc_type is None:
                raise_if_interrupted(interrupted)  # a Ctrl-C at the very end is not lost
