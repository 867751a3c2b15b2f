"""The fidelity card (``docs/methods/``: a folder per testbed, ``index.md`` its shared defaults
and labelled deviations, one page per method) read into one entry per method and testbed, the
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

TESTBEDS = ("control", "tokens")
CHAPTER = "index.md"
"""A testbed folder's page of what its methods share; every other page is a method's."""
# The line that opens an older variant's page, naming the method's default.
# A bullet that names shared deviations by label: "- T1." or "- C1, C2." at its start.
NAMED_LABELS = re.compile(r"^ *- (?P<labels>[A-Z]\d+(?:, [A-Z]\d+)*)\.", re.M)
OLDER_VARIANT = re.compile(r"^\*\*Older variant, kept for reproduction:\*\* the method's default "
                           r"is \[`(?P<by>\w+)`\]", re.M)
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
    # For an older variant kept for reproduction, the method whose default replaced it.
    superseded_by: str | None = None


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


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the fidelity card's page {str(path)!r} ({error}); pass "
                         f"--card docs/methods") from None


def read_card(folder: str | Path) -> dict[tuple[str, str], Entry]:
    """Every method's entry by (testbed, registry name), from ``folder/TESTBED/NAME.md``, a page
    whose first line is its title; ``ValueError`` where a page cannot be read, a page's name is
    not a registry name, or the card has no method page."""
    entries = {}
    for testbed in TESTBEDS:
        chapter = Path(folder) / testbed / CHAPTER
        shared = shared_deviations(_read(chapter)) if chapter.is_file() else {}
        for page in sorted((Path(folder) / testbed).glob("*.md")):
            if page.name == CHAPTER:
                continue
            if not page.stem.isidentifier():
                raise ValueError(f"the fidelity card's page {str(page)!r} is not named after a "
                                 f"registry name (NAME.md, NAME an identifier)")
            body = _read(page).partition("\n")[2].strip()
            labels = {label for bullet in NAMED_LABELS.finditer(body)
                      for label in bullet["labels"].split(", ")}
            named = tuple((label, text) for label, text in shared.items() if label in labels)
            older = OLDER_VARIANT.search(body)
            entries[(testbed, page.stem)] = Entry(testbed, page.stem, body, named,
                                                  older["by"] if older else None)
    if not entries:
        raise ValueError(f"the fidelity card {str(folder)!r} has no method pages "
                         f"({'/'.join(TESTBEDS)}/NAME.md); pass --card docs/methods")
    return entries


def shared_deviations(preamble: str) -> dict[str, str]:
    """The deviations a testbed's page defines once for many entries, by label: each top-level
    bullet ``- **T1, name.** ...`` with the bullets nested under it, as Markdown."""
    found: dict[str, str] = {}
    label = None
    for line in preamble.splitlines():
        start = re.match(r"^- \*\*([A-Z]\d+),", line)
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
