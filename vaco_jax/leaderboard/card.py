"""The fidelity card (``docs/methods/``: a folder per testbed, ``index.md`` its shared defaults
and labelled deviations, one page per method) read into one entry per method and testbed, the
methods the board has a page for, and the card's Markdown rendered to HTML for their pages.

The pages are rendered by ``markdown.render``; a link from one method's page to another's
becomes a link between their board pages (``card_target``), any other link inside the
repository has no page on the board and is kept as its text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from pathlib import Path

from vaco_jax.leaderboard.markdown import Target, web_only

TESTBEDS = ("control", "tokens")
CHAPTER = "index.md"
"""A testbed folder's page of what its methods share; every other page is a method's."""
LABEL = r"[A-Z]\d+"
"""A shared deviation's label: `C1` on the control testbed's page, `T1` on the token one's."""
# A bullet that names shared deviations by label: "- T1." or "- C1, C2." at its start.
NAMED_LABELS = re.compile(rf"^ *- (?P<labels>{LABEL}(?:, {LABEL})*)\.", re.M)
# The paragraph that opens an older variant's page, naming the method's default.
OLDER_VARIANT = re.compile(r"\*\*Older variant, kept for reproduction:\*\* the method's default "
                           r"is \[`(?P<by>\w+)`\]")
# A card page's link to another method's page: `NAME.md` in its testbed's folder, or
# `../TESTBED/NAME.md`.
CARD_LINK = re.compile(r"(?:\.\./(?P<testbed>\w+)/)?(?P<algo>\w+)\.md")


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
    whose first line is its title (``# ...``); ``ValueError`` where a page cannot be read, its
    name is not an identifier (a registry name's form; ``tests/test_fidelity_card.py`` holds the
    committed card to the registries), it has no title, or the card has no method page."""
    entries = {}
    for testbed in TESTBEDS:
        chapter = Path(folder) / testbed / CHAPTER
        shared = shared_deviations(_read(chapter)) if chapter.is_file() else {}
        for page in sorted((Path(folder) / testbed).glob("*.md")):
            if page.name == CHAPTER:
                continue
            if not page.stem.isidentifier():
                raise ValueError(f"the fidelity card's page {str(page)!r} is not named as a "
                                 f"registry name is (NAME.md, NAME an identifier)")
            title, _, body = _read(page).partition("\n")
            if not title.startswith("# "):
                raise ValueError(f"the fidelity card's page {str(page)!r} does not open with its "
                                 f"title (# ...)")
            body = body.strip()
            labels = {label for bullet in NAMED_LABELS.finditer(body)
                      for label in bullet["labels"].split(", ")}
            named = tuple((label, text) for label, text in shared.items() if label in labels)
            older = OLDER_VARIANT.match(body)  # only as the page's opening paragraph
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
        start = re.match(rf"^- \*\*({LABEL}),", line)
        if start:
            label = start[1]
            found[label] = line
        elif label is not None and (line.startswith("  ") or not line.strip()):
            found[label] += "\n" + line
        else:
            label = None
    return {name: text.strip() for name, text in found.items()}


def card_target(method: Method, pages: Collection[str]) -> Target:
    """Where a link of ``method``'s card page points on the board: another method's page
    (``pages`` holds their slugs) beside its own, or the web; None for anything else."""
    def target(href: str) -> str | None:
        found = CARD_LINK.fullmatch(href)
        if found is None:
            return web_only(href)
        slug = f"{found['testbed'] or method.testbed}-{found['algo']}"
        return f"{slug}.html" if slug in pages else None
    return target
