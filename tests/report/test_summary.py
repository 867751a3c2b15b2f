"""The summary is typed objects written to and read from ``summary.json`` in one place: every
committed summary reads back and writes the same bytes, and its ``report.md`` comes back from
the typed summary unchanged; a summary of an earlier version reads as today's."""

import dataclasses
import json
from pathlib import Path

import pytest

from vaco_jax.report import collapse, compat, markdown, metrics
from vaco_jax.report import summary as report_summary

RESULTS = Path(__file__).parents[2] / "experiments" / "results"
SUMMARIES = sorted(RESULTS.rglob("summary.json"))


def _written_today(path: Path) -> bool:
    return "kept_gain" in json.loads(path.read_text())


@pytest.mark.parametrize("path", [p for p in SUMMARIES if _written_today(p)],
                         ids=lambda p: str(p.parent.relative_to(RESULTS)))
def test_a_committed_summary_writes_the_same_bytes_and_report(path):
    text = path.read_text()
    summary = report_summary.loads(text)
    assert report_summary.dumps(summary) == text
    assert markdown.markdown(summary) == (path.parent / "report.md").read_text()


@pytest.mark.parametrize("path", [p for p in SUMMARIES if not _written_today(p)],
                         ids=lambda p: str(p.parent.relative_to(RESULTS)))
def test_a_summary_of_an_earlier_version_reads_as_todays(path):
    summary = report_summary.loads(path.read_text())
    assert summary.kept_gain.skipped == compat.SUMMARY_BEFORE_KEPT_GAIN
    assert all(cell.raw == {} for cell in summary.cells)
    assert summary.cells and summary.cells[0].iqm.point is not None


def test_the_summary_reads_by_attribute():
    summary = report_summary.loads((RESULTS / "quick" / "summary.json").read_text())
    assert summary.run.num_runs == sum(v.num_runs for v in summary.run.variants)
    assert all(task in summary.normalisation for task in summary.run.tasks)
    assert summary.score.name and summary.figures


def test_a_key_no_version_wrote_is_refused_naming_it():
    value = json.loads((RESULTS / "quick" / "summary.json").read_text())
    value["run"]["surprise"] = 1
    with pytest.raises(ValueError, match=r"RunOverview: keys \['surprise'\]"):
        report_summary.from_json(value)


def test_a_missing_key_is_refused_naming_it():
    value = json.loads((RESULTS / "quick" / "summary.json").read_text())
    del value["cells"][0]["iqm"]
    with pytest.raises(ValueError, match=r"CellSummary: keys \['iqm'\] are missing"):
        report_summary.from_json(value)


def test_the_stabilisers_are_the_trainers_in_their_order():
    """A stabiliser a trainer starts recording needs its field, or its records are refused."""
    fields = [f.name for f in dataclasses.fields(report_summary.Stabilisers)]
    assert fields == ["variant", "lag", *metrics.MECHANISMS]


def test_every_warning_rule_has_its_field():
    for record in (report_summary.CollapseCell, report_summary.RunCollapse):
        fields = [f.name for f in dataclasses.fields(record)]
        assert fields[-len(collapse.WARNING_RULES):] == list(collapse.WARNING_RULES)
