"""The fast loop's record (`tests/fast_loop_excluded.json`): each test it leaves out exists as
written and took at least the stated threshold, so a renamed or removed test cannot linger in
it, and the rule that made it is stated beside it."""

import os
from pathlib import Path

from fast_loop import COLLECTED, MEASURING, RECORD, mark_excluded

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_left_out_is_collected_and_marked_slow():
    """Each listed test of a file this session collected is one of its tests (a renamed test or
    parameter would linger otherwise) and carries `slow`, so `-m "not slow"` leaves it out."""
    assert RECORD["rule"] and RECORD["measured"] and RECORD["threshold_s"] > 0
    files = {node.partition("::")[0] for node in COLLECTED}
    listed = [node for node in RECORD["tests"] if node.partition("::")[0] in files]
    assert [node for node in listed if node not in COLLECTED] == []
    if not os.environ.get(MEASURING):
        assert [node for node in listed
                if COLLECTED[node].get_closest_marker("slow") is None] == []
    assert all(seconds >= RECORD["threshold_s"] for seconds in RECORD["tests"].values())


def test_every_listed_file_exists():
    assert sorted({node.partition("::")[0] for node in RECORD["tests"]
                   if not (ROOT / node.partition("::")[0]).is_file()}) == []


def test_the_conftest_marks_the_listed_tests_slow_and_no_other(monkeypatch):
    import fast_loop

    monkeypatch.setattr(fast_loop, "COLLECTED", {})  # the session's own stays as collected

    class Item:
        def __init__(self, nodeid):
            self.nodeid, self.markers = nodeid, []

        def add_marker(self, marker):
            self.markers.append(marker.name)

    listed, other = Item(next(iter(RECORD["tests"]))), Item("tests/test_x.py::test_not_listed")
    mark_excluded([listed, other])
    assert listed.markers == ["slow"] and other.markers == []
    # While the fast loop is measured again, nothing is left out.
    monkeypatch.setenv(MEASURING, "1")
    again = Item(listed.nodeid)
    mark_excluded([again])
    assert again.markers == []
