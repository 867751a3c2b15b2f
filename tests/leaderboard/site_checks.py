"""What every built board must satisfy, whatever its studies: each page parses, every image
and local link points at a file of the board, and each board cell holds the numbers its
study's runs table gives."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd

from vaco_jax.leaderboard.board import TaskBoard
from vaco_jax.report import kept_gain, scoring, stats
from vaco_jax.report.runs_table import RUNS_FILE
from vaco_jax.report.summary import Summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
CLAIMS = RESULTS / "claims.toml"
CARD = ROOT / "docs" / "methods"
TAGS = ROOT / "experiments" / "results" / "studies.toml"
"""The committed studies, their claims, the fidelity card and the studies' tags."""


class _Links(HTMLParser):
    """The ``src`` of each image and the ``href`` of each link and style sheet of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        wanted = {"img": "src", "a": "href", "link": "href"}.get(tag)
        self.targets += [value for name, value in attrs if name == wanted and value]


def page_links(page: Path) -> list[str]:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    parser.close()
    assert parser.tags[:1] == ["html"] and "body" in parser.tags, page
    return parser.targets


def broken_links(root: Path) -> dict[str, list[str]]:
    """Per page (relative to ``root``), its local targets that are not files of the board."""
    broken = {}
    for page in sorted(root.rglob("*.html")):
        missing = []
        for target in page_links(page):
            parsed = urlparse(target)
            if parsed.scheme in ("http", "https", "data") or not parsed.path:
                continue  # an outside link, inline data, or an anchor of the same page
            local = (page.parent / unquote(parsed.path)).resolve()
            if not local.is_file() or root.resolve() not in local.parents:
                missing.append(target)
        if missing:
            broken[page.relative_to(root).as_posix()] = missing
    return broken


def run_table(folder: Path, summary: Summary) -> pd.DataFrame:
    """The study's runs, one row per run, scored from its runs table alone as the report
    does: its final fraction, its score column and its tasks' references."""
    table = scoring.prepared(pd.read_parquet(folder / RUNS_FILE), summary.score)
    final = scoring.final_scores(table, summary.final_fraction)
    references = {task: n.reference for task, n in summary.normalisation.items()
                  if n.source == "given"}
    normalisation = scoring.normalisation(table, final, references)
    return scoring.run_table(scoring.with_scores(table, normalisation, summary.score), final,
                             normalisation)


def check_board_numbers(board: TaskBoard, runs: pd.DataFrame) -> int:
    """Asserts that each cell's normalised score and kept share are the IQMs of its runs;
    returns the cells checked."""
    runs = runs[runs["task"] == board.task]
    sync_variants = kept_gain.synchronous_variants(runs)
    checked = 0
    for (variant, lag), record in board.scores.items():
        cell = runs[(runs["variant"] == variant) & (runs["lag"] == lag)]
        assert np.isclose(record.score.point,
                          stats.aggregate_iqm(cell[["final_score"]].to_numpy())), (variant, lag)
        kept = board.kept.get((variant, lag))
        if kept is not None and kept.kept is not None:
            sync = runs[(runs["variant"] == sync_variants[variant]) & (runs["lag"] == 0.0)]
            expected = stats.kept_gain(cell[["gain"]].to_numpy(), sync[["gain"]].to_numpy())
            assert np.isclose(kept.kept.point, expected), (variant, lag)
        checked += 1
    return checked
