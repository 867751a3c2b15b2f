"""Compilations in threads of their own, and whether one still runs.

XLA releases Python's lock while it compiles, and one compilation leaves part of a machine's
cores idle (1.4 to 1.7 of 2 busy on the CPU measured), so a compilation beside other work
(another compilation, a batch training) shortens the wait. The threads are not daemons: an
interpreter that shuts down under a running XLA compilation aborts, so a Python caller's exit
waits for them (the `vaco-jax` program leaves through `os._exit` instead, when
`background_work` says one still runs).
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, Callable

BACKGROUND_THREAD = "vaco_jax-compile"


def in_background(function: Callable[..., Any], *args: Any) -> futures.Future:
    """Calls `function(*args)` in a thread of its own; the future holds its result or error."""
    future: futures.Future = futures.Future()

    def work() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)
    threading.Thread(target=work, daemon=False, name=BACKGROUND_THREAD).start()
    return future


def background_work() -> bool:
    """Whether a background compilation still runs (a program that must stop now then leaves
    through `os._exit`)."""
    return any(t.name == BACKGROUND_THREAD and t.is_alive() for t in threading.enumerate())
