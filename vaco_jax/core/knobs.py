"""The hyper-parameters ("knobs") an algorithm reads, and the refusal of a setting of one it
ignores: a sweep over such a knob runs groups that differ in nothing but their names, and a
value given for it on the command line changes nothing the user meant to change.

A testbed says which knobs a configured run reads (`Testbed.knobs`): those every run of it
reads, and its algorithm's, which an algorithm entry declares (token surrogates) or which
`read_by` finds by tracing the algorithm's loss once with hyper-parameters that record each
field read (control surrogates and advantage estimators), so that nothing is listed twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax


class _Recording:
    """Hyper-parameters that answer each field with `defaults`' value and remember its name."""

    def __init__(self, defaults: Any):
        self._defaults = defaults
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._defaults, name)  # AttributeError for a field the class lacks
        self.read.add(name)
        return value


def read_by(fn: Callable[..., Any], defaults: Any, *shapes: Any) -> frozenset[str]:
    """The fields of the hyper-parameters `defaults` that `fn(*arrays, hparams)` reads, traced
    once without computing (`jax.eval_shape`) on arrays of `shapes`."""
    recording = _Recording(defaults)
    jax.eval_shape(lambda *arrays: fn(*arrays, recording), *shapes)
    return frozenset(recording.read)


def refuse_unread(names: Iterable[str], read: frozenset[str], algo: str, where: str) -> None:
    """Refuses (ValueError, naming them and `where` they were set) the `names` among the knobs
    `read` that the run of `algo` does not read."""
    ignored = [name for name in names if name not in read]
    if ignored:
        raise ValueError(f"{where}: algo={algo!r} does not read hyper-parameter(s) "
                         f"{', '.join(ignored)}, so its runs would differ in nothing; it reads "
                         f"{', '.join(sorted(read))}")
