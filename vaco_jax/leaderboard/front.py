"""The board's cells as data and the front page's table.

Every cell of every board (study, task, method, lag: its normalised score and kept shares with
their intervals, its runs, the method's learning rate, whether the board ranks it) is one row
of ``cells.csv`` and of ``board.json``, beside the site, so a reader can sort, filter and
recompute without the pages. The front page's table holds the cells that answer the board's
question: those of the studies tagged main, on the tasks where the study's committed cell rule
holds. Lag levels mean different shares of a run in different studies, so each study has its
own table; a click on a column's header sorts it (a few lines of script inside the page, no
file or font from elsewhere, so the board still opens offline from its folder).
"""

from __future__ import annotations

import csv
import dataclasses
import io as text_io
import json
from collections.abc import Sequence
from typing import Any

from vaco_jax.leaderboard.board import TaskBoard
from vaco_jax.leaderboard.html import escape, interval, link
from vaco_jax.report.summary_fields import Interval

CELLS_FILE, BOARD_FILE = "cells.csv", "board.json"
INTERVALS = ("score", "kept", "auc_kept")
COLUMNS = ("study", "tag", "testbed", "task", "method", "lag", "runs", "learning_rate",
           "ranked", *(f"{name}{end}" for name in INTERVALS for end in ("", "_low", "_high")))
"""The columns of ``cells.csv`` (and the keys of ``board.json``'s cells), in order."""


@dataclasses.dataclass(frozen=True)
class Cell:
    study: str
    tag: str | None
    testbed: str
    task: str
    method: str
    lag: float
    runs: int
    learning_rate: str
    ranked: bool
    score: Interval | None
    kept: Interval | None
    auc_kept: Interval | None
    page: str = ""  # the study's page on the board, relative to its root

    def record(self) -> dict[str, Any]:
        """The cell as ``COLUMNS`` name it (an undefined interval's ends None)."""
        ends = {}
        for name in INTERVALS:
            value: Interval | None = getattr(self, name)
            ends.update({name: None if value is None else value.point,
                         f"{name}_low": None if value is None else value.low,
                         f"{name}_high": None if value is None else value.high})
        return {"study": self.study, "tag": self.tag, "testbed": self.testbed,
                "task": self.task, "method": self.method, "lag": self.lag, "runs": self.runs,
                "learning_rate": self.learning_rate, "ranked": self.ranked, **ends}


def cells(boards: Sequence[TaskBoard]) -> list[Cell]:
    """Every cell of ``boards``, each board's methods in its order, then by lag."""
    made = []
    for board in boards:
        study = board.study
        for method in board.order:
            variant = next((v for v in study.summary.run.variants if v.variant == method),
                           None)
            rate = "" if variant is None else study.learning_rates(variant, board.task)
            for lag in board.lags:
                score = board.scores.get((method, lag))
                if score is None:
                    continue
                kept = board.kept.get((method, lag))
                made.append(Cell(
                    study=study.name, tag=study.tag, testbed=study.testbed, task=board.task,
                    method=method, lag=lag, runs=score.runs,
                    learning_rate=rate,
                    ranked=board.unranked is None, score=score.score,
                    kept=None if kept is None else kept.kept,
                    auc_kept=None if kept is None else kept.auc_kept,
                    page=f"studies/{study.slug}/index.html"))
    return made


def cells_csv(made: Sequence[Cell]) -> str:
    out = text_io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cell.record() for cell in made)
    return out.getvalue()


def board_json(made: Sequence[Cell], stamp_text: str) -> str:
    return json.dumps({"built": stamp_text, "columns": list(COLUMNS),
                       "cells": [cell.record() for cell in made]}, indent=1,
                      allow_nan=False) + "\n"


def _sort_key(value: Interval | None) -> str:
    """A cell's sort value: its point, an undefined one below every number."""
    return "-1e308" if value is None or value.point is None else repr(value.point)


def front_tables(made: Sequence[Cell]) -> str:
    """The front page's tables: one per main study, of its cells on the tasks where its cell
    rule holds; a sentence where no study has such a cell yet."""
    chosen = [c for c in made if c.tag == "main" and c.ranked]
    if not chosen:
        return ("<p>No study tagged main has a task where its committed cell rule holds yet: "
                "the boards below are not ranked.</p>")
    parts = []
    for study, page in dict.fromkeys((c.study, c.page) for c in chosen):
        rows = "".join(
            "<tr>" + "".join([
                f"<td>{escape(c.task)}</td>", f"<td>{escape(c.method)}</td>",
                f'<td class="number" data-sort="{c.lag!r}">{c.lag:g}</td>',
                f'<td class="number" data-sort="{_sort_key(c.score)}">{interval(c.score)}</td>',
                f'<td class="number" data-sort="{_sort_key(c.kept)}">{interval(c.kept)}</td>',
                f'<td class="number" data-sort="{_sort_key(c.auc_kept)}">'
                f"{interval(c.auc_kept)}</td>",
                f'<td class="number" data-sort="{c.runs}">{c.runs}</td>',
                f"<td>{escape(c.learning_rate)}</td>"]) + "</tr>"
            for c in chosen if c.study == study)
        head = "".join(f"<th>{escape(h)}</th>" for h in (
            "task", "method", "lag", "normalised score", "kept share: final",
            "kept share: AUC", "runs", "learning rate"))
        parts.append(f"<h3>{link(page, study)}</h3>"
                     f'<table class="sortable"><thead><tr>{head}</tr></thead>'
                     f"<tbody>{rows}</tbody></table>")
    return "".join(parts) + SORT_SCRIPT


SORT_SCRIPT = """<script>
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("th").forEach((th, column) => {
    th.title = "sort by this column";
    th.addEventListener("click", () => {
      const body = table.tBodies[0];
      const down = th.dataset.order !== "down";
      table.querySelectorAll("th").forEach(other => delete other.dataset.order);
      th.dataset.order = down ? "down" : "up";
      const value = row => {
        const cell = row.cells[column];
        return cell.dataset.sort === undefined ? cell.textContent : Number(cell.dataset.sort);
      };
      const rows = Array.from(body.rows).sort((a, b) => {
        const x = value(a), y = value(b);
        const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return down ? -order : order;
      });
      rows.forEach(row => body.appendChild(row));
    });
  });
}
</script>"""
"""Sorts a table by the column whose header is clicked, highest first, again lowest first: by
each cell's ``data-sort`` number where it has one, else its text."""
