"""The fast loop's record (`tests/fast_loop_excluded.json`): each test it leaves out exists as
written and took at least the stated threshold, so a renamed or removed test cannot linger in
it, and the rule that made it is stated beside it."""

import re
from pathlib import Path

from fast_loop import RECORD, mark_excluded

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_left_out_exists_and_took_at_least_the_threshold():
    assert RECORD["rule"] and RECORD["measured"] and RECORD["threshold_s"] > 0
    missing = []
    for node, seconds in RECORD["tests"].items():
        assert seconds >= RECORD["threshold_s"], node
        path, _, name = node.partition("::")
        function = re.sub(r"\[.*\]$", "", name).split("::")[-1]
        source = ROOT / path
        if not source.is_file() or f"def {function}(" not in source.read_text():
            missing.append(node)
    assert missing == []


def test_the_conftest_marks_the_listed_tests_slow_and_no_other():
    class Item:
        def __init__(self, nodeid):
            self.nodeid, self.markers = nodeid, []

        def add_marker(self, marker):
            self.markers.append(marker.name)

    listed, other = Item(next(iter(RECORD["tests"]))), Item("tests/test_x.py::test_not_listed")
    mark_excluded([listed, other])
    assert listed.markers == ["slow"] and other.markers == []
