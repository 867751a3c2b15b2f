"""The tests the fast loop (`pytest -m "not slow"`) leaves out by their measured time, beside
those marked `slow` where they are written: `fast_loop_excluded.json` lists them, with the rule
and the measurement that made the list."""

import json
from pathlib import Path

import pytest

RECORD = json.loads((Path(__file__).parent / "fast_loop_excluded.json").read_text())
EXCLUDED = frozenset(RECORD["tests"])


def mark_excluded(items) -> None:
    """Marks each collected test the record lists `slow` (the conftest's collection hook)."""
    for item in items:
        if item.nodeid in EXCLUDED:
            item.add_marker(pytest.mark.slow)
