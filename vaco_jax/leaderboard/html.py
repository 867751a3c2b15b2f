"""The board's HTML: the page frame every page shares (style sheet, navigation, version stamp),
tables, and numbers with their intervals. Static HTML and CSS only: a board opens from its
folder in any browser, with no server and no script. On a narrow screen a wide table scrolls
inside its own box, so that no page is wider than the window."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from typing import Any

from vaco_jax.report.summary_fields import Interval

STYLE_FILE = "style.css"
STYLE = """\
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 110em; padding: 0 1em;
       color: #1d1d1f; line-height: 1.45; }
nav { margin-bottom: 1em; } nav a { margin-right: 1.2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.9em;
        display: block; max-width: 100%; overflow-x: auto; }
pre { max-width: 100%; overflow-x: auto; }
h1, h2, h3, p, li, figcaption, footer { overflow-wrap: anywhere; }
th, td { border: 1px solid #ccd; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #eef0f6; } table.sortable th { cursor: pointer; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #dde; }
.status-reproduced { background: #d8f0d8; } .status-refuted { background: #f6d6d6; }
.status-mixed { background: #f7ecc8; } .status-untested { background: #e6e6e6; }
.warning { color: #8a3b00; } .stamp { color: #555; font-size: 0.85em; border-top: 1px solid #ccd;
       margin-top: 2em; padding-top: 0.6em; }
code { background: #f2f2f6; padding: 0 0.2em; }
"""


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What a board was built from, on every page so that a board can be cited: the code's
    commit (and whether its checkout was modified), the build date and the devices the
    studies' reports record."""

    commit: str
    date: str
    devices: str

    def text(self) -> str:
        return (f"Built from vaco_jax commit {self.commit} on {self.date}. The studies ran on: "
                f"{self.devices}.")


def escape(value: Any) -> str:
    return html.escape(str(value))


def link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def interval(record: Interval | None, spec: str = ".3f") -> str:
    """``point [low, high]`` under the format ``spec`` (the raw scores of a testbed's units
    read best in significant digits); an undefined record or an unbounded end says so."""
    if record is None:
        return "undefined"
    point = format(record.point, spec)
    if record.low is None or record.high is None:
        return f"{point} [unbounded]"
    return f"{point} [{format(record.low, spec)}, {format(record.high, spec)}]"


def table(header: Sequence[str], rows: Sequence[Sequence[str]],
          numeric: Sequence[int] = ()) -> str:
    """A table of cells already in HTML; the ``numeric`` columns right-aligned."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="number">{cell}</td>' if j in numeric else f"<td>{cell}</td>"
                         for j, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: str, stamp: Stamp, depth: int) -> str:
    """A whole page ``depth`` folders below the board's root."""
    root = "../" * depth
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title>"
            # No icon: without one a browser asks the server for /favicon.ico, which a board
            # does not have, and logs the miss as an error.
            '<link rel="icon" href="data:,">'
            f'<link rel="stylesheet" href="{root}{STYLE_FILE}"></head><body>'
            f'<nav>{link(root + "index.html", "Leaderboard")}'
            f'{link(root + "claims.html", "Claims")}'
            f'{link(root + "index.html#methods", "Methods")}</nav>'
            f"<h1>{escape(title)}</h1>{body}"
            f'<footer class="stamp">{escape(stamp.text())}</footer></body></html>\n')
