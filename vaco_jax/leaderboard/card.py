"""The fidelity card (``docs/fidelity.md``) read into one entry per method and testbed, the
methods the board has a page for, and the card's Markdown rendered to HTML for their pages.

The card uses a small part of Markdown: paragraphs, nested bullets (two spaces a level, long
items wrapped onto indented lines), ``**bold**``, `` `code` `` and links. That part is rendered
here rather than by a Markdown package, which the board would otherwise need for nothing else.
Links inside the repository (to another card entry, to the README) have no page on the board
and are kept as their text.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Collection, Mapping
from pathlib import Path

TESTBED_CHAPTERS = {"control": "## Control testbed", "tokens": "## Token testbed"}
BULLET = re.compile(r"^(?P<indent> *)- (?P<text>.*)$")
INLINE = re.compile(r"`(?P<code>[^`]+)`|\*\*(?P<bold>.+?)\*\*"
                    r"|\[(?P<label>[^\]]+)\]\((?P<target>[^)\s]+)\)")


@dataclasses.dataclass(frozen=True)
class Entry:
    """A method's section of the card: its testbed, registry name and Markdown body."""

    testbed: str
    algo: str
    markdown: str
    # The shared deviations the entry names by label ("T1."), each (label, its Markdown) as the
    # testbed's chapter defines it before its entries.
    shared: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Method:
    """A method with a page on the board: its card ``entry``, or None for an algorithm a
    study ran that the card does not describe (the card covers every built-in one, so a
    plugin's); ``plugin`` is then the entry point that registers it where it is installed."""

    testbed: str
    algo: str
    entry: Entry | None
    plugin: str | None

    @property
    def slug(self) -> str:
        return f"{self.testbed}-{self.algo}"


def methods(card: Mapping[tuple[str, str], Entry], ran: Collection[tuple[str, str]],
            plugins: Mapping[tuple[str, str], str]) -> list[Method]:
    """Every method of the card and every (testbed, algorithm) the studies ran, by testbed and
    name; ``plugins`` names the entry point that registers each installed plugin's algorithm."""
    return [Method(testbed, algo, card.get((testbed, algo)), plugins.get((testbed, algo)))
            for testbed, algo in sorted({*card, *ran})]


def _chapters(text: str) -> dict[str, str]:
    parts = re.split(r"^(## .+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2])}


def read_card(path: str | Path) -> dict[tuple[str, str], Entry]:
    """Every method's entry by (testbed, registry name); ``ValueError`` where the card cannot be
    read or has neither testbed's chapter."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the fidelity card {str(path)!r} ({error}); pass "
                         f"--card docs/fidelity.md") from None
    chapters = _chapters(text)
    entries = {}
    for testbed, heading in TESTBED_CHAPTERS.items():
        parts = re.split(r"^### `([^`]+)`[^\n]*$", chapters.get(heading, ""), flags=re.M)
        shared = shared_deviations(parts[0])
        for algo, body in zip(parts[1::2], parts[2::2]):
            named = tuple((label, text) for label, text in shared.items()
                          if re.search(rf"^ *- {label}\.", body, flags=re.M))
            entries[(testbed, algo)] = Entry(testbed, algo, body.strip(), named)
    if not entries:
        raise ValueError(f"the fidelity card {str(path)!r} has no method entries")
    return entries


def shared_deviations(preamble: str) -> dict[str, str]:
    """The deviations a chapter defines once for many entries, by label: each top-level bullet
    ``- **T1, name.** ...`` of its preamble with the bullets nested under it, as Markdown."""
    found: dict[str, str] = {}
    label = None
    for line in preamble.splitlines():
        start = re.match(r"^- \*\*(T\d+),", line)
        if start:
            label = start[1]
            found[label] = line
        elif label is not None and (line.startswith("  ") or not line.strip()):
            found[label] += "\n" + line
        else:
            label = None
    return {name: text.strip() for name, text in found.items()}


def inline_html(text: str) -> str:
    """One line of the card's Markdown as HTML, everything else escaped."""
    out, position = [], 0
    for match in INLINE.finditer(text):
        out.append(html.escape(text[position:match.start()]))
        if match["code"] is not None:
            out.append(f"<code>{html.escape(match['code'])}</code>")
        elif match["bold"] is not None:
            out.append(f"<strong>{inline_html(match['bold'])}</strong>")
        elif match["target"].startswith(("https://", "http://")):
            out.append(f'<a href="{html.escape(match["target"])}">'
                       f'{inline_html(match["label"])}</a>')
        else:
            out.append(inline_html(match["label"]))
        position = match.end()
    out.append(html.escape(text[position:]))
    return "".join(out)


def _blocks(markdown: str) -> list[tuple[int | None, str]]:
    """(bullet level, or None for a paragraph; text) of each item, wrapped lines joined."""
    blocks: list[tuple[int | None, str]] = []
    joinable = False
    for line in markdown.splitlines():
        bullet = BULLET.match(line)
        if bullet:
            blocks.append((len(bullet["indent"]) // 2, bullet["text"].strip()))
            joinable = True
        elif not line.strip():
            joinable = False
        elif joinable:
            level, text = blocks[-1]
            blocks[-1] = (level, f"{text} {line.strip()}")
        else:
            blocks.append((None, line.strip()))
            joinable = True
    return blocks


def markdown_html(markdown: str) -> str:
    """The card's Markdown as HTML: paragraphs and nested lists."""
    out: list[str] = []
    depth = 0  # lists open
    for level, text in _blocks(markdown):
        target = 0 if level is None else level + 1
        while depth > target:
            out.append("</li></ul>")
            depth -= 1
        if level is not None and depth == target:
            out.append("</li><li>")
        while depth < target:
            out.append("<ul><li>")
            depth += 1
        out.append(f"<p>{inline_html(text)}</p>" if level is None else inline_html(text))
    out.append("</li></ul>" * depth)
    return "".join(out)
