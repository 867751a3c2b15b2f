"""The tests the fast loop (`pytest -m "not slow"`) leaves out by their measured time, beside
those marked `slow` where they are written: `fast_loop_excluded.json` lists them, with the rule
and the measurement that made the list."""

import json
import os
from pathlib import Path

import pytest

RECORD = json.loads((Path(__file__).parent / "fast_loop_excluded.json").read_text())
EXCLUDED = frozenset(RECORD["tests"])


MEASURING = "VACO_JAX_MEASURE_FAST_LOOP"
"""Set (to anything) while measuring the fast loop again, so that it runs the tests the record
lists too and the new record can keep or release each."""


COLLECTED: dict[str, pytest.Item] = {}
"""Every test this session collected, before `-m` deselects any: what the record is checked
against (`tests/test_fast_loop.py`)."""


def mark_excluded(items) -> None:
    """Marks each collected test the record lists `slow` (the conftest's collection hook),
    unless the fast loop is being measured."""
    COLLECTED.update((item.nodeid, item) for item in items)
    if os.environ.get(MEASURING):
        return
    for item in items:
        if item.nodeid in EXCLUDED:
            item.add_marker(pytest.mark.slow)
